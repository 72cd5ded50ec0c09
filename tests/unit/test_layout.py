"""The package's folders are the boxes of the narrow waist, and imports only go one way.

Two checks per rule: every ``import`` statement in a folder's source (also those
inside functions, which a run would only load on some paths), read with `ast`;
and a fresh interpreter that imports every module of the folder and then
looks at `sys.modules`, which also catches what the imported libraries pull in.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "slurm_gavel"
BOXES = ("core", "policies", "estimator", "slurm", "sim", "job")

# folder -> what it must never import (subpackages of slurm_gavel, or top-level libraries)
FORBIDDEN = {
    "core": {"slurm_gavel.policies", "slurm_gavel.estimator", "slurm_gavel.slurm",
             "slurm_gavel.sim", "slurm_gavel.job", "slurm_gavel.cli", "cvxpy"},
    "policies": {"slurm_gavel.estimator", "slurm_gavel.slurm", "slurm_gavel.sim",
                 "slurm_gavel.job", "slurm_gavel.cli"},
    "sim": {"slurm_gavel.slurm", "slurm_gavel.job", "slurm_gavel.cli"},
    "job": {"slurm_gavel.core", "slurm_gavel.policies", "slurm_gavel.estimator",
            "slurm_gavel.slurm", "slurm_gavel.sim", "slurm_gavel.cli", "cvxpy", "scipy",
            "highspy"},
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package: Path = PACKAGE) -> set[str]:
    """Absolute names of every module `path` imports, relative imports resolved."""
    name = module_name(path, package)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            # `from . import x` imports the module x
            found.update(f"{target}.{a.name}" for a in node.names)
    return found


def violates(name: str, forbidden: set[str]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


def modules_of(box: str) -> list[Path]:
    return sorted(p for p in (PACKAGE / box).rglob("*.py") if p.name != "__main__.py")


def test_the_folders_are_the_boxes():
    listing = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert listing == set(BOXES)
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    # the command, and the two documented aliases of job-side entry points
    assert top == ["__init__.py", "__main__.py", "cli.py", "iterator.py", "templates.py"]
    for box in BOXES:
        doc = ast.get_docstring(ast.parse((PACKAGE / box / "__init__.py").read_text()))
        assert doc and "import" in doc, f"{box}/__init__.py must say what it owns and may import"


@pytest.mark.parametrize("box", sorted(FORBIDDEN))
def test_import_statements_follow_the_rules(box):
    bad = [f"{module_name(p)} imports {m}"
           for p in modules_of(box) for m in sorted(imported_modules(p))
           if violates(m, FORBIDDEN[box])]
    assert bad == []


def test_the_static_check_sees_a_violation(tmp_path):
    # the rule is only worth something if it would fail: core/engine.py with one
    # lazy import from the Slurm side added
    fake = tmp_path / "slurm_gavel" / "core" / "engine.py"
    fake.parent.mkdir(parents=True)
    fake.write_text((PACKAGE / "core" / "engine.py").read_text()
                    + "\n\ndef _later():\n    from ..slurm.daemon import Daemon\n")
    names = imported_modules(fake, tmp_path / "slurm_gavel")
    assert "slurm_gavel.slurm.daemon" in names
    assert any(violates(m, FORBIDDEN["core"]) for m in names)
    assert not any(violates(m, FORBIDDEN["core"])
                   for m in imported_modules(PACKAGE / "core" / "engine.py"))


_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("box", sorted(FORBIDDEN))
def test_a_fresh_interpreter_loads_nothing_forbidden(box):
    names = [module_name(p) for p in modules_of(box)]
    if box == "job":
        # the training code needs torch; the rule is about what *we* pull in
        pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", _PROBE, *names], capture_output=True,
                          text=True, cwd=PACKAGE.parent, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if violates(m, FORBIDDEN[box])] == []


def test_the_job_side_loads_without_numpy_heavy_scheduler_code():
    # what a training script imports: the documented alias, then the iterator
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys; from slurm_gavel.iterator import GavelIterator;"
                               " print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "slurm_gavel.job.iterator" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("numpy", "cvxpy", "torch")}
    assert not {m for m in loaded if violates(m, FORBIDDEN["job"])}

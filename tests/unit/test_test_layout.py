"""The tests' own layout: every test module in its tier's folder, helpers only from tests/support.

tests/unit needs no Slurm; tests/integration needs none either but runs whole processes for
minutes (training, venvs); tests/cluster needs a real local cluster (its fixtures are in
tests/cluster/conftest.py). A test module imports helpers from tests.support, never from
another test module or a conftest: those imports made a module's tests depend on which other
modules pytest had collected, and hid the helpers' owners.
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
TIERS = ("unit", "integration", "cluster")
# What only a real cluster gives: a unit test that names one belongs in tests/cluster.
CLUSTER_ONLY = ("running_cluster", "require_slurm", "slurm_cluster", "slurm_shard_cluster",
                "slurm_accounting_cluster", "DevCluster")


def all_test_modules():
    return sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in PATH, at any depth (imports inside functions too)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
    return sorted(out)


def forbidden_imports(path: Path) -> list[str]:
    """Imports of a test module or a conftest: what tests.support is for."""
    bad = []
    for line, module in imported_modules(path):
        parts = module.split(".")
        if parts[0] == "tests":
            parts = parts[1:]
            if parts and parts[0] in TIERS:
                parts = parts[1:]
        if parts and (parts[0].startswith("test_") or parts[0] in ("conftest", "helpers")):
            bad.append(f"{path.name}:{line}: imports {module}")
    return bad


def test_every_test_module_is_in_a_tier_folder():
    stray = [str(p.relative_to(TESTS)) for p in all_test_modules() if p.parent.name not in TIERS
             or p.parent.parent != TESTS]
    assert not stray, f"test modules outside the tier folders {TIERS}: {stray}"
    names = [p.name for p in all_test_modules()]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"one module name in two tiers (pytest imports them by name): {twice}"


def test_no_test_module_imports_another_or_a_conftest():
    modules = all_test_modules() + sorted((TESTS / "support").glob("*.py")) + sorted(TESTS.rglob("conftest.py"))
    bad = [b for p in modules for b in forbidden_imports(p)]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_forbidden_import(tmp_path):
    (tmp_path / "test_a.py").write_text("def f():\n    from test_b import helper\n"
                                        "from tests.cluster.test_c import x\nfrom conftest import y\n"
                                        "from tests.support.daemon import queue\n")
    found = forbidden_imports(tmp_path / "test_a.py")
    assert [b.split(": ", 1)[1] for b in found] == ["imports test_b", "imports tests.cluster.test_c",
                                                     "imports conftest"]


def cluster_names(path: Path) -> set[str]:
    """The names of CLUSTER_ONLY that PATH's code uses (as a name or a parameter)."""
    tree = ast.parse(path.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    return names & set(CLUSTER_ONLY)


def test_a_unit_or_integration_module_asks_for_no_cluster():
    found = {p.name: sorted(cluster_names(p))
             for p in sorted([*(TESTS / "unit").glob("test_*.py"), *(TESTS / "integration").glob("test_*.py")])
             if p != Path(__file__).resolve()}
    assert not {k: v for k, v in found.items() if v}, "these belong in tests/cluster"

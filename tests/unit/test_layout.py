"""The package's folders are the boxes of the narrow waist, and imports only go one way.

Two checks per rule: every ``import`` statement in a folder's source (also those
inside functions, which a run would only load on some paths), read with `ast`;
and a fresh interpreter that imports every module of the folder and then
looks at `sys.modules`, which also catches what the imported libraries pull in.
Then the whole import graph, module by module: no cycle, and every arrow between
folders points the way `ROOMS` allows (inward).  And who may print.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "slurm_gavel"
BOXES = ("core", "policies", "estimator", "slurm", "sim", "job", "daemon", "cli", "devcluster")
_DRIVER = {"slurm_gavel.slurm", "slurm_gavel.daemon", "slurm_gavel.devcluster", "slurm_gavel.cli"}

# folder -> what it must never import (subpackages of slurm_gavel, or top-level libraries).
# Nothing imports `cli` (the commands sit on top of everything).
FORBIDDEN = {
    "core": {"slurm_gavel.policies", "slurm_gavel.estimator", "slurm_gavel.sim", "slurm_gavel.job",
             "cvxpy"} | _DRIVER,
    "policies": {"slurm_gavel.estimator", "slurm_gavel.sim", "slurm_gavel.job"} | _DRIVER,
    "estimator": {"slurm_gavel.sim", "slurm_gavel.job"} | _DRIVER,
    "sim": {"slurm_gavel.job"} | _DRIVER,
    "job": {"slurm_gavel.core", "slurm_gavel.policies", "slurm_gavel.estimator",
            "slurm_gavel.sim", "cvxpy", "scipy", "highspy"} | _DRIVER,
    # the driver talks to Slurm: it never reaches up into the daemon, the commands, the
    # simulator or the test cluster
    "slurm": {"slurm_gavel.daemon", "slurm_gavel.cli", "slurm_gavel.sim", "slurm_gavel.devcluster"},
    # the daemon runs on a production cluster: no command code, no test cluster, no simulator
    # (the job side's record format reaches it through the driver, `job.progress`)
    "daemon": {"slurm_gavel.cli", "slurm_gavel.devcluster", "slurm_gavel.sim"},
    "devcluster": {"slurm_gavel.daemon", "slurm_gavel.cli", "slurm_gavel.sim", "slurm_gavel.job",
                   "slurm_gavel.policies", "slurm_gavel.estimator"},
}

# folder -> the folders it may import (besides itself): the arrows of the picture, inward.
# `job.progress` is the record format the jobs write, which the driver reads.
ROOMS = {
    "core": set(),
    "policies": {"core"},
    "estimator": {"core", "policies"},
    "sim": {"core", "policies", "estimator"},
    "job": set(),
    "slurm": {"core", "policies", "estimator", "job"},
    "daemon": {"core", "policies", "estimator", "slurm"},
    "devcluster": {"core", "slurm"},
    # cli -> job: `slurm-gavel run` is the job-side launcher
    "cli": {"core", "policies", "estimator", "sim", "slurm", "daemon", "devcluster", "job"},
    # the package's own top-level modules: `python -m slurm_gavel` (cli) and the two
    # documented aliases of job-side entry points
    "": {"cli", "job"},
}
# who may call print(): the commands (their output is the product), and the job side,
# which runs inside the user's job (its stdout is the user's log).
PRINTING = {"cli", "job"}

def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (never run: annotations only)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING") or
                (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imported_modules(path: Path, package: Path = PACKAGE, runtime_only: bool = False) -> set[str]:
    """Absolute names of every module `path` imports, relative imports resolved;
    `runtime_only`: without the imports under `if TYPE_CHECKING:`."""
    name = module_name(path, package)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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
    # `python -m slurm_gavel`, and the two documented aliases of job-side entry points
    assert top == ["__init__.py", "__main__.py", "iterator.py", "templates.py"]
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
                    + "\n\ndef _later():\n    from ..daemon.daemon import Daemon\n")
    names = imported_modules(fake, tmp_path / "slurm_gavel")
    assert "slurm_gavel.daemon.daemon" in names
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


# -- the import graph, module by module -----------------------------------------------
def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def room(module: str) -> str:
    """The folder of a module of the package ("" for its top-level modules)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in BOXES) else ""


def import_graph(modules: dict[str, Path], package: Path = PACKAGE,
                 runtime_only: bool = False) -> dict[str, set[str]]:
    """module -> the package's modules it imports (`from X import name`: X.name when that
    is a module, else X).  A package's own `__init__` importing its modules is not an arrow
    back from them: Python loads a module's parent package first anyway."""
    graph = {}
    for name, path in modules.items():
        deps = set()
        for m in imported_modules(path, package, runtime_only):
            while m and m not in modules:
                m = m.rpartition(".")[0]          # `from pkg.mod import func` -> pkg.mod
            if m and m != name and not name.startswith(m + ".") and m != package.name:
                deps.add(m)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def back_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                  if room(b) != room(a) and room(b) not in ROOMS[room(a)])


def test_no_import_cycle_between_modules():
    # A cycle through annotations only (`if TYPE_CHECKING:`) is not one: it never runs.
    assert cycles(import_graph(all_modules(), runtime_only=True)) == []


def test_every_arrow_between_folders_points_inward():
    graph = import_graph(all_modules())
    assert set(ROOMS) == set(BOXES) | {""}
    assert back_arrows(graph) == []
    # and the folders' own picture has no cycle either
    rooms = {r: set(deps) for r, deps in ROOMS.items()}
    assert cycles(rooms) == []


def test_nothing_imports_the_commands():
    graph = import_graph(all_modules())
    users = sorted({a for a, deps in graph.items() for b in deps
                    if room(b) == "cli" and room(a) != "cli"})
    assert users == ["slurm_gavel.__main__"]      # `python -m slurm_gavel` is the command


def test_the_graph_check_sees_a_cycle_and_a_back_arrow(tmp_path):
    # the checks are only worth something if they would fail: slurm/records.py importing
    # the daemon's store, which imports core, and a store that imports records back
    pkg = tmp_path / "slurm_gavel"
    for folder, text in (("slurm", "def f():\n    from ..daemon.store import SqliteStore\n"),
                         ("daemon", "from ..slurm.records import parse_nodes\n")):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "slurm" / "records.py").write_text("def f():\n    from ..daemon.store import SqliteStore\n")
    (pkg / "daemon" / "store.py").write_text("from ..slurm.records import parse_nodes\n")
    modules = {module_name(p, pkg): p for p in pkg.rglob("*.py")}
    graph = import_graph(modules, pkg)
    assert cycles(graph) == [["slurm_gavel.daemon.store", "slurm_gavel.slurm.records"]]
    assert back_arrows(graph) == ["slurm_gavel.slurm.records -> slurm_gavel.daemon.store"]


# -- printing ---------------------------------------------------------------------------
def prints(path: Path) -> list[int]:
    """Lines that call print() (also `print` passed on as a value: `map(print, ...)`)."""
    return [n.lineno for n in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(n, ast.Name) and n.id == "print" and isinstance(n.ctx, ast.Load)]


def test_only_the_commands_and_the_job_side_print():
    # everything else logs (the daemon's log is escaped for the admin's terminal) or
    # returns text for a command to print
    bad = [f"{name}:{line}" for name, path in all_modules().items()
           if room(name) not in PRINTING for line in prints(path)]
    assert bad == []


def test_the_print_check_sees_a_print(tmp_path):
    fake = tmp_path / "m.py"
    fake.write_text("def f(x):\n    if x:\n        print(x)\n    return fingerprint(x)\n")
    assert prints(fake) == [3]

"""Imports only go down: entry scripts (sweeps/*.py) -> sweeps.engine -> analysis, trainables; no import circle.

Every import counts, also one inside a function (the scripts import Ray lazily, after their flags).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sweeps", "trainables", "analysis")
# (importer's layer, imported layer) pairs that point up or sideways into sweeps/.
FORBIDDEN = {
    ("engine", "entry"),
    ("analysis", "entry"),
    ("analysis", "engine"),
    ("trainables", "entry"),
    ("trainables", "engine"),
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py of `PACKAGES` under `root` (a package is its __init__)."""
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from a import b` counts as a.b when that is a module)."""
    mods = modules(root)

    def project_module(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {project_module(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {project_module(f"{node.module}.{a.name}") for a in node.names}
        graph[name] = targets - {None, name}
    return graph


def layer(module: str) -> str:
    """entry (sweeps/*.py and the sweeps package), engine (sweeps.engine.*), analysis or trainables."""
    if module == "sweeps.engine" or module.startswith("sweeps.engine."):
        return "engine"
    return "entry" if module.split(".")[0] == "sweeps" else module.split(".")[0]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, 1972)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                on_stack.discard(w)
                component.append(w)
            on_stack.discard(v)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_imports_only_go_down():
    graph = import_graph()
    assert {"sweeps.noise_grid", "sweeps.engine.run.launch", "analysis", "trainables.trial"} <= set(graph)
    upward = [
        f"{m} -> {t}"
        for m, targets in sorted(graph.items())
        for t in sorted(targets)
        if (layer(m), layer(t)) in FORBIDDEN
    ]
    assert upward == []


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path):
    (tmp_path / "sweeps" / "engine").mkdir(parents=True)
    for package in PACKAGES[1:]:
        (tmp_path / package).mkdir()
    for package in PACKAGES:
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "sweeps" / "engine" / "__init__.py").write_text("")
    (tmp_path / "sweeps" / "grid_script.py").write_text("from sweeps.engine import launch\n")
    (tmp_path / "sweeps" / "engine" / "launch.py").write_text("def f():\n    from sweeps import grid_script\n")
    (tmp_path / "trainables" / "a.py").write_text("import trainables.b\n")
    (tmp_path / "trainables" / "b.py").write_text("from trainables import a\n")
    graph = import_graph(tmp_path)
    assert graph["sweeps.engine.launch"] == {"sweeps.grid_script"}
    assert (layer("sweeps.engine.launch"), layer("sweeps.grid_script")) in FORBIDDEN
    assert circles(graph) == [["sweeps.engine.launch", "sweeps.grid_script"], ["trainables.a", "trainables.b"]]

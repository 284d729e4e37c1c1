"""The suite's layout (tests/README.md): a test module imports helpers (tests/helpers/), never another test
module; tests/unit/ asks for no Ray fixture and holds no `slow` test (tests/conftest.py refuses both at
collection), and every test outside it is marked `slow`."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

from tests.conftest import TESTS, UNIT, end_to_end, unit_lane_errors


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (`tests.<folder>.test_*`) that the module at `path` imports, in the order written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests"):
            last = node.module.rsplit(".", 1)[-1]
            modules = [node.module] if last.startswith("test_") else [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [m for m in modules if m.startswith("tests.") and m.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_imported_test_modules_finds_each_form_and_nothing_else(tmp_path):
    (tmp_path / "a.py").write_text(
        "from tests.unit.test_x import helper, other\nfrom tests.sweeps import test_y\nimport tests.commands.test_z\n"
        "from tests.helpers.command_sweeps import run_sweep\nfrom tests import conftest\nimport pytest\n"
    )
    assert imported_test_modules(tmp_path / "a.py") == [
        "tests.unit.test_x",
        "tests.sweeps.test_y",
        "tests.commands.test_z",
    ]


def test_no_module_of_the_suite_imports_a_test_module():
    """What two test modules share lives in tests/helpers/ (or a folder's conftest.py), never in one of them."""
    found = {
        path.relative_to(TESTS).as_posix(): modules
        for path in sorted(TESTS.rglob("*.py"))
        if "scripts" not in path.relative_to(TESTS).parts and (modules := imported_test_modules(path))
    }
    assert found == {}, f"move what these import into tests/helpers/: {found}"


def item(path: Path, *fixtures: str, slow: bool = False) -> types.SimpleNamespace:
    """A stand-in for a collected test: its file, the fixtures it asks for, its `slow` mark."""
    return types.SimpleNamespace(
        path=path,
        nodeid=f"{path.relative_to(TESTS).as_posix()}::test",
        fixturenames=["request", *fixtures],
        get_closest_marker=lambda name: pytest.mark.slow.mark if slow and name == "slow" else None,
    )


def test_the_unit_lane_refuses_a_ray_fixture_and_a_slow_mark_and_nothing_outside_it():
    items = [
        item(UNIT / "test_a.py", "tmp_path"),
        item(UNIT / "test_b.py", "sweep_env", "ray_gpus"),
        item(UNIT / "test_c.py", slow=True),
        item(TESTS / "sweeps" / "test_d.py", "sweep_env", slow=True),
    ]
    assert unit_lane_errors(items) == [
        "unit/test_b.py::test: asks for ray_gpus, sweep_env",
        "unit/test_c.py::test: marked slow",
    ]


def test_every_test_outside_the_unit_lane_is_end_to_end(tmp_path):
    assert end_to_end(TESTS / "sweeps" / "test_x.py") and end_to_end(TESTS / "clusters" / "test_y.py")
    assert not end_to_end(UNIT / "test_x.py") and not end_to_end(tmp_path / "test_x.py")
    assert not end_to_end(Path(__file__))

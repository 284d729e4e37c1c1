"""Code shape (developers' guide): no file over 400 lines; no function over 100 lines (except `train_epochs`).

About 60 lines a function is a guideline, not a cap: a function that reads top to bottom beats two halves
made to pass a line count. The check here is a backstop far above it, for the function that grew without
anyone reading it again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 100  # a backstop: the guideline is about 60
MAX_FILE_LINES = 400
EXEMPT = {"train_epochs"}  # the training loop reads top to bottom in one function (nanoGPT's style)


def too_long(folder: str, root: Path = ROOT) -> list[str]:
    """`path: N lines` per file over MAX_FILE_LINES, `path:line name: N lines` per function over
    MAX_FUNCTION_LINES (its `def` line to its last line, docstring included), under `root/folder`."""
    found = []
    for path in sorted((root / folder).rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(root).as_posix()
        if (lines := len(source.splitlines())) > MAX_FILE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in EXEMPT:
                if (length := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_too_long_finds_long_functions_and_files(tmp_path):
    (tmp_path / "pkg").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "pkg" / "a.py").write_text(f"def long():\n{body}\n\n\ndef train_epochs():\n{body}\n")
    (tmp_path / "pkg" / "b.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    assert too_long("pkg", root=tmp_path) == [
        f"pkg/a.py:1 long: {MAX_FUNCTION_LINES + 1} lines",
        f"pkg/b.py: {MAX_FILE_LINES + 1} lines",
    ]


@pytest.mark.parametrize("folder", ["sweeps", "trainables", "analysis"])
def test_functions_and_files_are_short(folder):
    assert too_long(folder) == []

"""Code shape (developers' guide): no file over 400 lines; no function over 100 lines (except `train_epochs`).

About 60 lines a function is a guideline, not a cap: a function that reads top to bottom beats two halves
made to pass a line count. The check here is a backstop far above it, for the function that grew without
anyone reading it again."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


# --- the objective travels whole, and each default is written once (issue 39, item 1) -----------------------

PRODUCT = ("sweeps", "trainables", "analysis")
PAIRS = ({"metric", "mode"}, {"val_metric", "val_mode"})  # a metric and its mode, apart
GENERIC = {"k", "alpha"}  # as parameter names, other things: top_trials' k counts trials, holm's alpha is any level


def product_files(root: Path = ROOT) -> list[Path]:
    return sorted(path for folder in PRODUCT for path in (root / folder).rglob("*.py"))


def loose_objectives(root: Path = ROOT) -> list[str]:
    """`path:line name` of each function taking a metric and its mode as two parameters."""
    found = []
    for path in product_files(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = {arg.arg for arg in a.posonlyargs + a.args + a.kwonlyargs}
                if any(pair <= names for pair in PAIRS):
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name}")
    return found


def owned_defaults() -> dict[str, tuple[str, object]]:
    """Field name -> (its dataclass, its default) of the dataclasses whose fields hold the defaults."""
    from analysis.statistics.seed_rule import SeedRule
    from sweeps.engine.run_flags import RunOptions
    from trainables.experiment.objective import Objective

    owned = {}
    for cls in (Objective, RunOptions, SeedRule):
        for field in dataclasses.fields(cls):
            if isinstance(field.default, (str, int, float)) and not isinstance(field.default, bool):
                owned[field.name] = (f"{cls.__module__}.{cls.__name__}", field.default)
    return owned


def defaults_written_again(root: Path = ROOT, owned: dict | None = None) -> list[str]:
    """`path:line field=value` of each literal that repeats a dataclass field's default outside the module
    declaring it: a parameter default or a flag's `default=` of the same name (but `GENERIC` ones), or
    `args.<field> or value`; and any literal default or assignment equal to one of the objective's metric names."""
    owned = owned_defaults() if owned is None else owned
    metric_names = {v for name, (owner, v) in owned.items() if owner.endswith("Objective") and "metric" in name}
    found = []

    def repeats(name: str | None, node: ast.AST, module: str) -> bool:
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool) or name in GENERIC:
            return False
        owner, value = owned.get(name.removesuffix(" or") if name else None, (None, None))
        same = owner is not None and not owner.startswith(module + ".") and node.value == value
        return same or (isinstance(node.value, str) and node.value in metric_names and "objective" not in module)

    for path in product_files(root):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            pairs = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                positional = a.posonlyargs + a.args
                pairs += zip([arg.arg for arg in positional[len(positional) - len(a.defaults) :]], a.defaults)
                pairs += [(arg.arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args:
                flag = node.args[0].value if isinstance(node.args[0], ast.Constant) else ""
                pairs += [
                    (str(flag).lstrip("-").replace("-", "_"), k.value) for k in node.keywords if k.arg == "default"
                ]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:  # METRIC = "val/acc"
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                pairs += [("an assignment", value) for value in values]
            elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2:
                left, right = node.values
                pairs += [(f"{getattr(left, 'attr', None)} or", right)]
            found += [
                f"{path.relative_to(root).as_posix()}:{value.lineno} {name}={value.value!r}"
                for name, value in pairs
                if repeats(name, value, module)
            ]
    return sorted(found, key=lambda line: (line.split(":")[0], int(line.split(":")[1].split()[0])))


def test_the_checks_find_a_loose_objective_and_a_default_written_twice(tmp_path):
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "a.py").write_text(
        "def table(df, metric, mode='max'):\n    pass\n\n\n"
        "def ok(df, objective, progress_every=args.progress_every):\n    return args.max_seeds or 10\n\n\n"
        "parser.add_argument('--progress-every', default=15.0)\n"
        "METRIC, MODE = 'val/acc', 'max'\n"
        "def old(df, val_metric='val/acc'):\n    pass\n"
    )
    owned = {
        "max_seeds": ("analysis.statistics.seed_rule.SeedRule", 10),
        "progress_every": ("sweeps.engine.run_flags.RunOptions", 15.0),
        "metric": ("trainables.experiment.objective.Objective", "val/acc"),
        "mode": ("trainables.experiment.objective.Objective", "max"),
    }
    assert loose_objectives(tmp_path) == ["analysis/a.py:1 table"]
    assert defaults_written_again(tmp_path, owned) == [
        "analysis/a.py:1 mode='max'",
        "analysis/a.py:6 max_seeds or=10",
        "analysis/a.py:9 progress_every=15.0",
        "analysis/a.py:10 an assignment='val/acc'",
        "analysis/a.py:11 val_metric='val/acc'",
    ]


def test_no_function_takes_a_metric_and_its_mode_apart():
    """`trainables/experiment/objective.py:Objective` is passed whole (Tune gets its metric and mode)."""
    assert loose_objectives() == []


def test_each_default_is_written_once_where_its_field_is_declared():
    assert defaults_written_again() == []


# --- honest size and names (issue 39, items 5 and 6) --------------------------------------------------------

MAX_MODULES_PER_FOLDER = 20  # a folder is one concern a newcomer can name


def private_cross_imports(root: Path = ROOT) -> list[str]:
    """`path:line module.name` of each `_name` imported from another module of the product."""
    found = []
    for path in product_files(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PRODUCT:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.module}.{alias.name}")
    return found


def module_names_used_twice(root: Path = ROOT) -> dict[str, list[str]]:
    """Module name -> its files, for names that more than one module of the product has (packages'
    `__init__` and `__main__` aside): a traceback naming one must say which."""
    files: dict[str, list[str]] = {}
    for path in product_files(root):
        if path.name not in ("__init__.py", "__main__.py"):
            files.setdefault(path.stem, []).append(path.relative_to(root).as_posix())
    return {name: paths for name, paths in files.items() if len(paths) > 1}


def crowded_folders(root: Path = ROOT) -> dict[str, int]:
    """Folder -> its modules (`__init__` aside), for folders of more than MAX_MODULES_PER_FOLDER."""
    counts: dict[str, int] = {}
    for path in product_files(root):
        if path.name != "__init__.py":
            folder = path.parent.relative_to(root).as_posix()
            counts[folder] = counts.get(folder, 0) + 1
    return {folder: n for folder, n in counts.items() if n > MAX_MODULES_PER_FOLDER}


def test_the_checks_find_private_imports_twice_used_names_and_crowded_folders(tmp_path):
    for folder, files in {"trainables": ["a", "report"], "analysis": ["report"], "analysis/many": range(21)}.items():
        (tmp_path / folder).mkdir(parents=True)
        for name in files:
            (tmp_path / folder / f"m{name}.py" if isinstance(name, int) else tmp_path / folder / f"{name}.py").touch()
    (tmp_path / "trainables" / "a.py").write_text("from analysis.report import _helper, __version__, public\n")
    assert private_cross_imports(tmp_path) == ["trainables/a.py:1 analysis.report._helper"]
    assert module_names_used_twice(tmp_path) == {"report": ["analysis/report.py", "trainables/report.py"]}
    assert crowded_folders(tmp_path) == {"analysis/many": 21}


def test_no_private_name_is_imported_across_modules():
    assert private_cross_imports() == []


def test_no_module_name_is_used_twice():
    assert module_names_used_twice() == {}


def test_each_folder_holds_at_most_about_twenty_modules():
    assert crowded_folders() == {}


# --- one fit path ---------------------------------------------------------------------------------------


def test_one_fit_path_and_each_script_shows_its_own_tuner():
    """Every entry script runs through `Sweep.fit` (resume included) and builds its own `Tuner(...)`."""
    for script in ("noise_grid", "lr_search", "pbt", "run_command"):
        source = (ROOT / "sweeps" / f"{script}.py").read_text()
        assert source.count("Tuner(") == 1 and ".restore(" not in source and "options.resume" not in source, script

"""One owner of the experiment folder (`trainables/experiment/records.py`): no record file name or direct file write
elsewhere, every record read back after a write, and a torn record skipped with a warning naming it, by
the readers, by `--resume`'s planning and by `python -m analysis`."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.helpers.analysis_fixtures import noise_grid
from trainables.experiment import records

ROOT = Path(__file__).resolve().parents[2]
OWNERS = {ROOT / "trainables" / "experiment" / "records.py", ROOT / "trainables" / "experiment" / "storage.py"}
FILE_NAMES = [
    records.SETTINGS_FILE,
    records.DRIVER_FILE,
    records.DRIVER_LOCK,
    records.WRITE_PROBE,
    records.SEEDS_TABLE,
    records.CODE_MANIFEST,
    records.TRIAL_CONFIG_FILE,
    records.NOISE_FILE,
    records.CONFUSION_FILE,
    records.DIVERGENCE_FILE,
    records.OOM_MARKER,
    records.COMMAND_STEP_FILE,
]
FOLDER_NAMES = [records.WORK_DIR, records.PROVENANCE_PREFIX]
# (reader, writer) of each JSON record, and the file the writer makes in the folder given.
JSON_RECORDS = [
    (records.read_settings, records.write_settings),
    (records.read_driver, records.write_driver),
    (records.read_code_manifest, records.write_code_manifest),
    (records.read_trial_config, records.write_trial_config),
    (records.read_noise, records.write_noise),
    (records.read_confusion, records.write_confusion),
    (records.read_divergence, records.write_divergence),
    (records.read_oom_marker, records.write_oom_marker),
    (records.read_command_step, lambda folder, record: records.write_command_step(folder, record["step"])),
    (records.read_provenance, lambda folder, record: records.write_provenance(folder, "20261124T000000.000", record)),
]


def _product_files(*packages: str) -> list[Path]:
    return [p for package in packages for p in sorted((ROOT / package).rglob("*.py")) if p not in OWNERS]


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """Every str constant but docstrings, of modules, functions and attributes (prose may name a record)."""
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_record_file_name_outside_the_owner():
    found = []
    for path in _product_files("sweeps", "trainables", "analysis"):
        for node in _strings(ast.parse(path.read_text())):
            names = [n for n in FILE_NAMES if n in node.value] + [n for n in FOLDER_NAMES if node.value == n]
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n!r}" for n in names]
    assert not found, "record file names belong in trainables/experiment/records.py:\n" + "\n".join(found)


def _direct_write(call: ast.Call) -> str | None:
    """What `call` writes to a file directly, or None. No record: an append-only log (readers skip a torn
    last line), os.devnull, a checkpoint's `torch.save` into the temporary folder Tune then copies."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
    if name in ("write_text", "write_bytes") and owner != "storage":
        return name
    if name in ("dump", "to_csv", "to_json", "savez", "save") and owner in ("json", "pickle", "np", "numpy"):
        return f"{owner}.{name}"
    if name == "open" and owner in ("", "io"):
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        devnull = call.args and ast.unparse(call.args[0]) == "os.devnull"
        if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wx+") and not devnull:
            return f"open(..., {mode.value!r})"
    return None


# Files that are no record, by (file, function): the command's own stdout and stderr, which the script
# itself writes as a log (tailed; a torn last line is read when it is whole).
NOT_RECORDS = {("trainables/command/process.py", "start_command")}


def test_no_direct_file_writes_in_sweeps_and_trainables():
    found = []
    for path in _product_files("sweeps", "trainables"):
        tree = ast.parse(path.read_text())
        exempt = {
            id(call)
            for func in ast.walk(tree)
            if isinstance(func, ast.FunctionDef) and (str(path.relative_to(ROOT)), func.name) in NOT_RECORDS
            for call in ast.walk(func)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and id(node) not in exempt and (what := _direct_write(node)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {what}")
    assert not found, "write through trainables/experiment/records.py (atomic):\n" + "\n".join(found)


def test_the_write_check_sees_a_direct_write():
    code = "Path('x').write_text('a'); json.dump({}, f); open(p, 'w'); open(p, 'a'); storage.write_bytes(p, b'')"
    tree = ast.parse(code)
    assert [_direct_write(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and _direct_write(n)] == [
        "write_text",
        "json.dump",
        "open(..., 'w')",
    ]


@pytest.mark.parametrize("reader, writer", JSON_RECORDS, ids=lambda f: getattr(f, "__name__", "w"))
def test_each_record_reads_back_and_a_torn_one_is_skipped_by_name(tmp_path, reader, writer):
    record = {"step": 3, "code": {}, "metric": "val/acc"}
    path = Path(writer(tmp_path, dict(record)))
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    read = reader(path if reader is records.read_provenance else tmp_path)
    assert read is not None and read["step"] == 3

    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # torn: half written
    with pytest.warns(records.TornRecord, match=path.name):
        assert reader(path if reader is records.read_provenance else tmp_path) is None
    path.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing record is no warning
        assert reader(path if reader is records.read_provenance else tmp_path) is None


def test_seeds_table_reads_back(tmp_path):
    assert records.read_seeds_table(tmp_path) is None
    records.write_seeds_table(tmp_path, "cell,decision\na,stop\n")
    assert records.read_seeds_table(tmp_path) == "cell,decision\na,stop\n"


def test_trial_confusion_survives_a_torn_file(tmp_path):
    from trainables import trial

    (tmp_path / records.CONFUSION_FILE).write_text('{"best-val": {"val/acc": 0.')
    with pytest.warns(records.TornRecord, match=records.CONFUSION_FILE):
        assert trial._best_val_so_far(tmp_path) == float("-inf")
    with pytest.warns(records.TornRecord, match=records.CONFUSION_FILE):
        trial.write_confusion(tmp_path, [[1, 0], [0, 1]], {"epoch": 2, "val/acc": 0.5}, best=True, last=False)
    assert records.read_confusion(tmp_path)["best-val"] == {"epoch": 2, "val/acc": 0.5, "test": [[1, 0], [0, 1]]}
    assert trial._best_val_so_far(tmp_path) == 0.5


def test_resume_plan_skips_a_torn_trial_config(tmp_path):
    from sweeps.engine.run import resume
    from trainables.config import config_hash

    experiment = noise_grid(tmp_path, seeds=(0,), rates=(0.0,))  # two trials, epochs 0..4 of 5
    whole, torn = sorted(p for p in experiment.iterdir() if p.is_dir())
    records.write_trial_config(whole, {"config_hash": "whole", "config": {"epochs": 4}})  # finished at 4
    (torn / records.TRIAL_CONFIG_FILE).write_text('{"config_hash": "torn", "config": {"epo')
    with pytest.warns(records.TornRecord, match=f"{torn.name}/{records.TRIAL_CONFIG_FILE}"):
        finished = resume.finished_trials(experiment)
    assert finished == {
        config_hash({"epochs": 4}): str(whole)
    }  # the torn one: from Tune's config (5 epochs: unfinished)


def test_analysis_loads_an_experiment_with_torn_records(tmp_path):
    experiment = noise_grid(tmp_path, seeds=(0,), rates=(0.0, 0.2))
    torn = [experiment / records.SETTINGS_FILE]
    provenance = Path(records.provenance_dir(experiment))
    provenance.mkdir()
    torn.append(provenance / records.provenance_name("20261124T000000.000"))
    torn.append(experiment / records.DRIVER_FILE)
    for path in torn:
        path.write_text(json.dumps({"metric": "val/acc", "mode": "max", "code": {}, "pid": 1})[:20])
    for flags, named in (([], torn[:2]), (["--status"], torn[::2])):
        done = subprocess.run(
            [sys.executable, "-m", "analysis", str(experiment), *flags],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert "sym" in done.stdout  # the trials are still listed
        for path in named:
            assert f"skipped {path}" in done.stderr

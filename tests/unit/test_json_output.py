"""`--status --json` and `--json` (issue 28): documents that validate against their shipped JSON Schemas."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from analysis.status import read_status, watch
from analysis.tables.json_output import STATUS_SCHEMA, SUMMARY_SCHEMA, dumps, schema, status_document
from tests.helpers.analysis_fixtures import T0, paper_grid, trial_spec, write_experiment
from tests.helpers.sweep_status import record, small_sweep
from trainables.experiment import records

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def analysis_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "analysis", *map(str, args)],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def validate(document: dict, version: str) -> None:
    jsonschema.Draft202012Validator(schema(version)).validate(document)


def test_status_json_validates_and_holds_counts_running_trials_best_eta_and_driver(tmp_path):
    experiment = small_sweep(tmp_path, record(os.getpid()))
    running_folder = next(experiment.glob("train_abcde_00004_*"))
    where = {"val/acc": {"source": "csv", "file": "logs/csv/version_0/metrics.csv", "column": "val/acc"}}
    records.write_metric_sources(running_folder, where)  # a command trial's (trainables/command/key_sources.py)
    result = analysis_cli(experiment, "--status", "--json")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1  # one document, nothing else on stdout
    document = json.loads(result.stdout)
    validate(document, STATUS_SCHEMA)
    assert document["schema"] == "raysweep.status/2"
    assert document["raysweep"] is None  # a sweep launched before 0.8.0 recorded no release
    validate({**document, "raysweep": {"version": "0.8.0", "commit": "abc1234"}}, STATUS_SCHEMA)
    assert document["counts"] == {
        **{"total": 8, "running": 1, "pending": 3, "finished": 2, "pruned": 0, "errored": 1, "diverged": 1},
        **{"no_metric": 0, "interrupted": 0, "not_run": 0},  # the driver is alive: nothing stopped yet
    }
    [running] = document["running"]
    assert (running["name"], running["gpu_ids"], running["step"], running["steps_planned"]) == (
        "sym_0.2_seed4",
        [1],
        2,
        5,
    )
    assert running["metric"] == pytest.approx(0.97) and running["log_line"].endswith("Epoch [2/5] | Loss 0.5")
    assert running["metric_sources"] == where
    assert document["best"] == {"value": pytest.approx(0.97), "trial": "sym_0.2_seed4"}
    # 5 + 5 + 3 (diverged) + 1 (errored) + 2 (running) epochs done; 2 trials not created count 5 each
    assert document["epochs"] == {"done": 16, "planned": 34}
    # the text block's ETA, by --estimate's model: epochs of 1 s (the fixture's), the running trial's 3 left,
    # then on its one slot the pending trial's 5 and the two not created yet, 5 each
    assert document["eta_s"] == pytest.approx(3 + 5 + 5 + 5)
    assert document["driver"]["state"] == "alive" and document["driver"]["pid"] == os.getpid()
    assert document["resume_command"] == "python sweeps/noise_grid.py --seeds 8 --resume"  # plain: no Markdown
    assert (document["left"], document["exit_code"], document["duplicates"]) == (4, 0, [])


def test_status_json_of_a_gone_driver_and_of_no_driver_record(tmp_path):
    gone = status_document(read_status(small_sweep(tmp_path / "a", record(0, host="elsewhere", heartbeat=T0))))
    validate(gone, STATUS_SCHEMA)
    assert gone["driver"]["state"] == "gone" and gone["exit_code"] == 1
    unknown = status_document(read_status(small_sweep(tmp_path / "b", None)))
    validate(unknown, STATUS_SCHEMA)
    assert unknown["driver"] == {"state": "unknown"}


def test_watch_json_prints_one_document_per_line_until_the_driver_ends(tmp_path):
    experiment = small_sweep(tmp_path, record(os.getpid(), ended=time.time(), exit_code=0))
    stream = io.StringIO()
    assert watch(experiment, 0.1, stream, as_json=True) == 1  # ended with trials left
    [line] = stream.getvalue().splitlines()
    assert json.loads(line)["driver"]["state"] == "finished"


def test_summary_json_validates_with_cells_n_mean_std_and_the_rule(tmp_path):
    """One seed per cell: std and ci95 do not exist and are null, never NaN (not JSON)."""
    experiment = paper_grid(tmp_path, seeds=(0,), status={("ce", "sym", 0.4, 0): "ERROR"})
    trial = sorted(experiment.glob("train_*"))[0]
    where = {"val/acc": {"source": "stdout", "line": "Epoch [<n>/<n>] | Val Acc <n>"}}
    records.write_metric_sources(trial, where)
    result = analysis_cli(experiment, "--json")
    assert result.returncode == 0, result.stderr
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    document = json.loads(result.stdout)
    validate(document, SUMMARY_SCHEMA)
    assert document["schema"] == "raysweep.summary/2"
    assert list(document["metric_sources"].values()) == [where]  # only the trial that recorded one
    with pytest.raises(jsonschema.ValidationError):  # each origin names its source
        validate({**document, "metric_sources": {"t": {"val/acc": {"file": "x.csv"}}}}, SUMMARY_SCHEMA)
    validate({**document, "raysweep": [None, {"version": "0.8.0", "commit": "abc1234"}]}, SUMMARY_SCHEMA)
    assert document["selection"] == {
        "rule": "best-val",
        "k": None,
        "description": "test/acc at the epoch of best val/acc (ties: earliest)",
    }
    assert (document["metric"], document["val_metric"], document["val_mode"]) == ("test/acc", "val/acc", "max")
    assert (document["rows"], document["columns"]) == (["loss"], ["noise_type", "noise_rate"])
    cells = {(c["key"]["loss"], c["key"]["noise_type"], c["key"]["noise_rate"]): c for c in document["cells"]}
    assert len(cells) == 8
    assert cells[("gce", "sym", 0.2)] == {
        "key": {"loss": "gce", "noise_type": "sym", "noise_rate": 0.2},
        "n": 1,
        "n_failed": 0,
        "n_diverged": 0,
        **{"n_no_metric": 0, "n_interrupted": 0, "n_not_run": 0, "why": None},
        "mean": pytest.approx(0.9 - 0.1 + 0.03 + 0.01),  # base + the test bump at the val peak
        "std": None,
        "ci95": None,
    }
    errored = cells[("ce", "sym", 0.4)]
    assert (errored["n"], errored["mean"], errored["n_failed"], errored["why"]) == (0, None, 1, "errored")
    assert document["best"]["key"] == {"loss": "gce", "noise_type": "sym", "noise_rate": 0.2}
    assert document["best"]["test"]["mean"] == pytest.approx(0.84)
    assert document["trials"] == {
        **{"total": 8, "errored": 1, "diverged": 0, "finished": 7, "pruned": 0},
        **{"running": 0, "pending": 0, "no_metric": 0, "interrupted": 0, "not_run": 0},
    }
    assert not (experiment / "report").exists()  # --json writes nothing


def test_summary_json_of_three_seeds_has_std_and_the_last_k_rule(tmp_path):
    experiment = paper_grid(tmp_path)
    document = json.loads(analysis_cli(experiment, "--json", "--select", "last-k", "--k", "2").stdout)
    validate(document, SUMMARY_SCHEMA)
    assert document["selection"]["rule"] == "last-k" and document["selection"]["k"] == 2
    cell = next(c for c in document["cells"] if c["key"] == {"loss": "ce", "noise_type": "asym", "noise_rate": 0.4})
    assert cell["n"] == 3 and cell["std"] == pytest.approx(0.01) and cell["ci95"] > 0


def test_human_output_is_unchanged_without_json(tmp_path):
    experiment = paper_grid(tmp_path, seeds=(0,))
    result = analysis_cli(experiment)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("test/acc (%): test/acc at the epoch of best val/acc")
    assert "81.00 (1)" in result.stdout and result.stdout.rstrip().endswith("report.md")


def test_json_with_paper_is_a_usage_error(tmp_path):
    result = analysis_cli(paper_grid(tmp_path, seeds=(0,)), "--json", "--paper")
    assert (
        result.returncode == 2 and result.stderr == "error: --json prints the summary table; use it without --paper\n"
    )


def test_no_nan_in_json_and_the_schemas_refuse_what_they_do_not_describe(tmp_path):
    assert dumps({"mean": math.nan, "std": [math.inf, 1.0]}) == '{"mean": null, "std": [null, 1.0]}'
    document = status_document(read_status(small_sweep(tmp_path, None)))
    for broken in ({**document, "schema": "raysweep.status/1"}, {**document, "eta_s": "soon"}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken, STATUS_SCHEMA)
    counts = {**document["counts"], "finished": -1}
    with pytest.raises(jsonschema.ValidationError):
        validate({**document, "counts": counts}, STATUS_SCHEMA)


def test_the_schemas_ship_with_the_package():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '[tool.setuptools.package-data]\nanalysis = ["schemas/*.json"]' in pyproject
    for version in (STATUS_SCHEMA, SUMMARY_SCHEMA):
        jsonschema.Draft202012Validator.check_schema(schema(version))
        assert schema(version)["title"] == version


def test_status_json_imports_no_pandas():
    """`--status --json` stays as light as `--status` (it must answer in well under 2 s)."""
    code = (
        "import sys; from analysis.tables.json_output import status_document; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'matplotlib', 'scipy', 'ray', 'torch'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


def test_json_of_a_sweep_where_every_trial_errored_is_still_printed_and_exits_1(tmp_path):
    specs = [trial_spec(f"t{k}", {"lr": k}, [], status="ERROR", error="RuntimeError: boom") for k in (1, 2)]
    result = analysis_cli(write_experiment(tmp_path, "command", specs, metric="val_acc"), "--json")
    assert result.returncode == 1, result.stderr  # no value usable: 1, never a usage error without its JSON
    document = json.loads(result.stdout)
    validate(document, SUMMARY_SCHEMA)
    assert document["cells"] == [] and document["problem"] == "no trial reported 'val_acc': nothing to summarise"
    assert (document["trials"]["errored"], document["trials"]["finished"]) == (2, 0)

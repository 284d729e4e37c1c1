"""Real training output: every epoch's value in a trial's history is the one the script logged, at its own
epoch, with nothing extra (issue 38).

`tests/recorded/` holds what unmodified public scripts printed and wrote, run on CPU with tiny data for 2
epochs: pytorch/examples `word_language_model/main.py` (stdout), timm `train.py --device cpu` (stderr,
stdout, `summary.csv`), Lightning 2.6.6 `examples/pytorch/basics/backbone_image_classifier.py` (a
console excerpt, stderr, CSVLogger's `metrics.csv`, the default TensorBoard logger's event files). The
values expected are those of the scripts' own files and lines. `tests/scripts/lightning_style.py` runs
the real `lightning` package.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers.command_sweeps import PY, ROOT, run_sweep
from tests.helpers.recorded import console, file_rows
from tests.helpers.trial_results import history, trials
from trainables.command.trackers import TrackerResults
from trainables.experiment import records
from trainables.experiment.objective import Objective
from trainables.experiment.records import JOINS_STEP_METRIC


@pytest.mark.slow
def test_real_lightning_csv_and_tensorboard_loggers_hold_the_epochs_the_module_computed(tmp_path):
    """~10 s: the real package, both loggers at once; each read alone equals the epoch means the module took."""
    proc = subprocess.run(
        [PY, ROOT / "tests" / "scripts" / "lightning_style.py", "--lr", "0.1", "--logger", "csv,tensorboard"]
        + ["--truth", "truth.json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # both streams in the order printed, as a trial reads them
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert "`Trainer.fit` stopped: `max_epochs=2` reached." in proc.stdout
    printed = console(proc.stdout.splitlines(), "valid_loss_epoch")
    assert printed == []  # the bar's `v_num=0_1` and "`Trainer.fit` stopped: `max_epochs=2` reached." are not rows
    for source in ("csv", "tensorboard"):
        reader = TrackerResults(
            tmp_path, "epoch", (source,), objective=Objective("valid_loss_epoch", test_metric=None)
        )  # every record
        rows = reader.close()
        assert [r["epoch"] for r in rows] == [0, 1], source  # one row per epoch
        for column in ("valid_loss_epoch", "train_loss_epoch"):
            assert [r[column] for r in rows] == pytest.approx([truth[column][e] for e in "01"], rel=1e-6)
        assert "test_loss" not in rows[0] and rows[1]["test_loss"] == pytest.approx(truth["test_loss"], rel=1e-6)
    [metrics] = tmp_path.glob("lightning_logs/*/metrics.csv")
    assert [r["valid_loss_epoch"] for r in rows[:2]] == list(file_rows(metrics, "valid_loss_epoch").values())


@pytest.mark.slow
def test_sweep_of_a_lightning_script_reads_its_logger_with_no_flag(tmp_path, sweep_env):
    """~60 s: `--metric valid_loss_epoch --mode min` and the axes, nothing else; one trial per logger."""
    proc = run_sweep(
        tmp_path,
        *("--axis", "logger=csv,tensorboard", "--axis", "lr=0.1", "--metric", "valid_loss_epoch", "--mode", "min"),
        *("--", PY, "tests/scripts/lightning_style.py", "--lr", "{lr}", "--logger", "{logger}"),
        *("--truth", "{trial_dir}/truth.json"),
        env=sweep_env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = trials(tmp_path / "runs" / "command")
    assert len(found) == 2, sorted(found)
    for name, trial in found.items():
        truth = json.loads(next(trial.glob("**/truth.json")).read_text())
        rows = history(trial)
        # result.json: each epoch once (no validation step, no test epoch), test_loss on the last epoch's row
        assert rows["epoch"].tolist() == [0, 1] and JOINS_STEP_METRIC not in rows, name
        valid = rows["valid_loss_epoch"].tolist()
        assert valid == pytest.approx([truth["valid_loss_epoch"][e] for e in "01"])
        assert rows["test_loss"].tolist()[1] == pytest.approx(truth["test_loss"]) and rows["test_loss"][:1].isna().all()
        source = "csv" if name.startswith("csv") else "tensorboard"
        assert f"metrics from {source} records: lightning_logs/version_0/" in (trial / "stdout").read_text()
        origin = records.read_metric_sources(trial)["valid_loss_epoch"]  # where it was read (issue 54 item 5)
        if source == "csv":
            assert origin == {
                "source": "csv",
                "file": "lightning_logs/version_0/metrics.csv",
                "column": "valid_loss_epoch",
            }
        else:
            assert origin == {"source": "tensorboard", "run": "lightning_logs/version_0", "tag": "valid_loss_epoch"}

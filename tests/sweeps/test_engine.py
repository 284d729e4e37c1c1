"""G1, one engine: flags generated from TrainConfig, any field a grid axis, one launcher and one
trial runtime shared by the grid, the searches and PBT."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import analysis
from sweeps import lr_search, pbt

ROOT = Path(__file__).resolve().parents[2]
DIVERGING = ["--grad-clip", "0", "--momentum", "0.99"]  # with lr 9-10: NaN within two epochs on digits


def results_of(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line.strip()]


def trial_dirs(experiment: Path) -> list[Path]:
    return sorted(p for p in experiment.iterdir() if (p / "params.json").exists())


# --- with Ray -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_axis_grid_subprocess_runs_every_cell_and_tables_by_every_axis(tmp_path, sweep_env):
    """--loss x --lr x noise rate x seeds: 2 x 2 x 2 x 2 = 16 trials (CI-sized; the 72-trial form
    differs only in length)."""
    proc = subprocess.run(
        [
            sys.executable,
            "sweeps/noise_grid.py",
            "--loss",
            "ce,gce",
            "--lr",
            "0.01,0.1",
            "--noise-types",
            "sym",
            "--noise-rates",
            "0.2,0.4",
            "--seeds",
            "2",
            "--smoke-test",
            "--epochs",
            "1",
            "--quiet",
            "--no-report",
            "--storage-path",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=sweep_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0] == "16 trials in the grid"
    names = [p.name for p in trial_dirs(tmp_path / "noise_grid")]
    expected = sorted(
        f"{loss}_lr{lr}_sym_{rate}_seed{seed}"
        for loss in ("ce", "gce")
        for lr in ("0.01", "0.1")
        for rate in ("0.2", "0.4")
        for seed in (0, 1)
    )
    assert names == expected
    for trial in trial_dirs(tmp_path / "noise_grid"):
        config = json.loads((trial / "params.json").read_text())
        assert trial.name.startswith(f"{config['loss']}_lr{config['lr']:g}_")
        assert results_of(trial)[-1]["epoch"] == 1
    header = next(line for line in proc.stdout.splitlines() if line.split()[:3] == ["loss", "lr", "noise_rate"])
    rows = proc.stdout.splitlines()[proc.stdout.splitlines().index(header) + 1 :][:8]
    assert [row.split()[:3] for row in rows] == [
        [loss, lr, rate] for loss in ("ce", "gce") for lr in ("0.01", "0.1") for rate in ("0.2", "0.4")
    ]
    assert all(row.split()[-1] == "(2)" for row in rows)  # two seeds per cell
    # --no-report: the table above, no report folder, and the command that writes it
    assert not (tmp_path / "noise_grid" / "report").exists()
    assert f"report: not written (--no-report); python -m analysis {tmp_path / 'noise_grid'} writes it" in proc.stdout


@pytest.mark.slow
def test_diverging_seed_in_a_search_ends_the_trial_diverged_not_errored(ray_gpus, tmp_path, monkeypatch, capsys):
    """Seed 1 of each --repeat 2 trial gets a NaN loss in epoch 2 (injected into the loss, so the runtime's
    own per-step check finds it): each trial ends diverged, naming seed 1 and epoch 2, writes
    divergence.json, and is neither an error nor retried. The search also takes --gpus-per-trial auto."""

    def nan_in_seed_1(config, data=None, seeds=None):
        import trainables.train as train
        import trainables.trial as trial

        real = train.build_loss

        def build_loss(cfg):
            loss_fn, calls = real(cfg), [0]

            def loss(logits, y):
                calls[0] += 1  # 5 steps per epoch (1221 samples, batch 256): call 8 is in epoch 2
                return loss_fn(logits, y) * (float("nan") if cfg.seed == 1 and calls[0] >= 8 else 1.0)

            return loss

        train.build_loss = build_loss
        try:
            trial.train_classifier(config, data, seeds)
        finally:
            train.build_loss = real

    monkeypatch.setattr("trainables.trial.train_classifier", nan_in_seed_1)
    code = lr_search.main(
        [
            "--repeat",
            "2",
            "--num-samples",
            "2",
            "--epochs",
            "3",
            "--grace-period",
            "3",
            "--losses",
            "ce",
            "--batch-sizes",
            "256",
            "--gpus-per-trial",
            "auto",
            "--cpus-per-trial",
            "1",
            "--no-report",
            "--storage-path",
            str(tmp_path),
            "--name",
            "nan",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1  # a diverged trial is reported in the exit code, as in the grid
    assert "--gpus-per-trial auto: 0.25 GPU per trial" in out  # logical GPUs: the probe saw no CUDA device
    trials = trial_dirs(tmp_path / "nan")
    assert len(trials) == 2
    state = json.loads(next((tmp_path / "nan").glob("experiment_state-*.json")).read_text())
    assert "ERROR" not in json.dumps(state["trial_data"])  # no trial errored (nor was retried)
    for trial in trials:
        rows = results_of(trial)
        assert [r["epoch"] for r in rows] == [1, 2]
        last = rows[-1]
        assert last["diverged"] is True and last["diverged/seed"] == 1 and "val/acc" not in last
        dump = json.loads((trial / "divergence.json").read_text())
        assert dump["seed"] == 1 and dump["num_seeds"] == 2 and dump["epoch"] == 2 and dump["step"] == 8
        assert f"diverged (not ranked): {trial.name} at epoch 2, step 8, seed 1" in out
        assert not (trial / "error.txt").exists()
    assert "sweep finished: 2 trials" in out and "2 diverged" in out  # the grid's progress block


@pytest.mark.slow
def test_pbt_prints_the_progress_block_and_writes_trial_logs(ray_gpus, tmp_path, capsys):
    """4 members on 2 CPUs, a perturbation every epoch: members are paused and restarted from checkpoints (their
    own or a better member's), where Tune's own JSON logger dropped rows (issue 45); every row is kept and read.
    Two epochs: the first pair is paused at epoch 1 while the second pair runs, then restarted (issue 53)."""
    code = pbt.main(
        [
            "--num-samples",
            "4",
            "--epochs",
            "2",
            "--perturbation-interval",
            "1",
            "--batch-size",
            "256",
            "--gpus-per-trial",
            "0",
            "--cpus-per-trial",
            "1",
            "--storage-path",
            str(tmp_path),
            "--name",
            "pbt",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "sweep finished: 4 trials: 0 running, 0 pending, 4 finished, 0 errored, 0 diverged" in out
    trials = trial_dirs(tmp_path / "pbt")
    assert len(trials) == 4 and all(re.fullmatch(r"pbt_\d{5}", t.name) for t in trials)
    # Whole histories: result.json and the tables hold every row of each member's progress.csv, in order.
    _, history = analysis.load_experiment(tmp_path / "pbt")
    names = dict(zip(*analysis.load_trials(tmp_path / "pbt")[["trial_id", "trial_name"]].to_numpy().T))
    logged = {t.name: pd.read_csv(t / "progress.csv") for t in trials}
    for trial in trials:
        rows = [(r["training_iteration"], r["val/acc"]) for r in results_of(trial)]
        assert rows == list(zip(logged[trial.name]["training_iteration"], logged[trial.name]["val/acc"])), trial.name
    for trial_id, member in history.groupby("trial_id", sort=False):
        csv = logged[names[trial_id]]
        assert list(member["training_iteration"]) == list(csv["training_iteration"]), names[trial_id]
        assert list(member["val/acc"]) == list(csv["val/acc"]), names[trial_id]
    # The printed best is the best val/acc any member logged, with the member that logged it.
    best = max(logged, key=lambda name: logged[name]["val/acc"].max())
    line = next(x for x in out.splitlines() if x.startswith("best configuration by best val/acc over epochs"))
    assert f"member={best}," in line and f"val/acc {100 * logged[best]['val/acc'].max():.2f} (1)" in line, line
    for trial in trials:
        log = (trial / "stdout").read_text()
        assert f"{trial.name}:INFO | [CPU | pid " in log and "Epoch [2/2]" in log
        assert len(set(re.findall(r"\| pid (\d+)\]", log))) >= 2, log  # paused at epoch 1, restarted in a new actor
        assert (trial / "trial_config.json").exists() and (trial / "noise.json").exists()
    # Its report draws the population's schedule (issue 42), known from raysweep.json's scheduler.
    assert json.loads((tmp_path / "pbt" / "raysweep.json").read_text())["scheduler"] == "PopulationBasedTraining"
    report = (tmp_path / "pbt" / "report" / "report.md").read_text()
    assert "![PBT schedule](pbt_schedule.png)" in report and (tmp_path / "pbt" / "report" / "pbt_schedule.png").exists()

"""`--seeds auto` end to end: `sweeps/run_command.py` on a scripted command, and the built-in trainable's pairing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter

import pandas as pd
import pytest

from tests.helpers.command_sweeps import PY, ROOT, SWEEP_TIMEOUT_S, run_sweep
from tests.helpers.processes import wait_until

AXES = ["--axis", "cell=gap,same", "--axis", "method=A,B", "--seeds", "auto"]
# two slots for four open methods: with as many slots as open methods a free slot gets a seed run ahead (never
# left idle), and a clear cell can end one seed past its decision
# no futility stop: the identical cell runs to the cap, the rule's own check of "undecided at the cap"
COMPARE = ["--compare", "method", "--name", "auto", "--max-concurrent", "2", "--futility", "0"]
COMMAND = ["--", PY, "tests/scripts/seeded_methods.py", "--cell", "{cell}", "--method", "{method}", "--seed", "{seed}"]
COMMAND += ["--sleep", "1"]  # 1 s a trial: a sweep slow enough to kill


def _finished(experiment) -> list[tuple]:
    """(cell, method, seed) of every trial folder whose command reported its val_acc. While the sweep runs, a
    params.json that Tune is writing in place raises (`wait_until` polls again); after it, that is an error."""
    done = []
    for trial in experiment.glob("*/result.json"):
        rows = [json.loads(line) for line in trial.read_text().splitlines() if line.strip().endswith("}")]
        if any("val_acc" in r for r in rows):
            config = json.loads(trial.with_name("params.json").read_text())
            done.append((config["cell"], config["method"], config["seed"]))
    return done


@pytest.mark.slow
def test_an_auto_sweep_killed_then_resumed_stops_the_clear_cell_early_and_a_higher_cap_reopens_the_identical_one(
    tmp_path, sweep_env
):
    """`--seeds auto --max-seeds 6`, its driver SIGKILLed once 4 trials have finished and resumed: nothing runs
    twice, the clear cell stops early and the identical one runs to the cap; a cap of 8 later reopens only the
    undecided cell, the finished trials reused."""
    experiment = tmp_path / "runs" / "auto"
    argv = [*AXES, "--max-seeds", "6", *COMPARE, *COMMAND]
    flags = ["--storage-path", str(tmp_path / "runs"), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5", "--quiet"]
    env = sweep_env  # the session's shared Ray: the killed driver's trials end with its job
    killed_log = tmp_path / "killed_driver.log"  # what the killed driver printed, for a failure's message
    with open(killed_log, "w") as log:
        driver = subprocess.Popen(
            [PY, "sweeps/run_command.py", *flags, *argv],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_until(lambda: len(_finished(experiment)) >= 4 or driver.poll() is not None, 300, every_s=0.05)
    assert driver.poll() is None, "the sweep ended before it could be killed"
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    before = set(_finished(experiment))
    proc = subprocess.run(
        [PY, "sweeps/run_command.py", *flags, "--resume", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SWEEP_TIMEOUT_S,
    )
    both = "killed driver:\n" + killed_log.read_text()[-3000:] + "\nresumed driver:\n" + proc.stdout[-3000:]
    both += proc.stderr[-3000:]
    assert proc.returncode == 0, both
    done = Counter(_finished(experiment))
    assert before <= set(done) and max(done.values()) == 1, f"{done}\n{both}"  # nothing finished twice
    table = pd.read_csv(experiment / "report" / "seeds.csv").set_index(["cell", "method"])
    said = f"{table.to_string()}\n{both}"
    assert table.loc[("gap", "A"), "decision"] == "best" and table.loc[("gap", "B"), "decision"] == "worse", said
    assert table.loc["gap", "n"].max() <= 5, said  # decided at 4 seeds of these values, and at most one run ahead
    assert (table.loc["same", "n"] == 6).all(), said
    assert set(table.loc["same", "decision"]) == {"best", "undecided"}, said
    ran = len(done)
    assert ran < 2 * 2 * 6
    assert f"--seeds auto: {ran} trials run vs {2 * 2 * 6} in the fixed 6-seed grid" in proc.stdout

    # a higher cap later reopens the undecided cell; the finished trials are reused. The clear cell is decided
    # again on the cap-8 boundary: at 4 seeds its t-test's 3 degrees of freedom cannot reach that boundary's
    # z >= 1.3 (8/4)^0.3 c (round 4), so a cell that stopped at 4 of 6 gets its 5th seed (and one run ahead)
    proc = run_sweep(tmp_path, *AXES, "--max-seeds", "8", *COMPARE, *COMMAND, env=sweep_env, report=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    again = pd.read_csv(experiment / "report" / "seeds.csv").set_index(["cell", "method"])
    assert (again.loc["gap", "n"] >= table.loc["gap", "n"]).all() and (again.loc["gap", "n"] <= 6).all()
    assert again.loc[("gap", "B"), "decision"] == "worse" and (again.loc["same", "n"] == 8).all()
    assert f"{ran} finished trial(s) reused" in proc.stdout


@pytest.mark.slow
def test_four_losses_on_two_noise_rates_mark_every_significant_pair_with_holm_over_the_cell(tmp_path, sweep_env):
    """The built-in grid with --seeds auto: 2 cells x 4 losses x 3-4 seeds of 3 epochs (24-32 small trials)."""
    from analysis import load_trials
    from analysis.statistics.seed_rule import SeedRule
    from analysis.statistics.seeds import decide

    losses = ["ce", "label_smoothing", "gce", "sce"]
    argv = [
        *("--loss", ",".join(losses), "--noise-types", "sym", "--noise-rates", "0.2,0.6", "--epochs", "3"),
        *("--seeds", "auto", "--min-seeds", "3", "--max-seeds", "4", "--name", "auto4", "--quiet"),
        *("--storage-path", str(tmp_path / "runs"), "--gpus-per-trial", "0", "--cpus-per-trial", "0.5"),
    ]
    proc = subprocess.run(
        [PY, "sweeps/noise_grid.py", *argv], cwd=ROOT, env=sweep_env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    experiment = tmp_path / "runs" / "auto4"
    table = pd.read_csv(experiment / "report" / "seeds.csv", keep_default_na=False)
    assert sorted(table["method"]) == sorted(losses * 2) and set(table["noise_rate"]) == {0.2, 0.6}
    assert "Holm-corrected over the 6 pairs of methods of each cell" in table["rule"].iloc[0]

    # the marks are Holm over each cell's 6 pairs of the finished trials' values: decide them again here
    trials = load_trials(str(experiment))
    rule = SeedRule(min_seeds=3, max_seeds=4)
    results = {}
    for _, t in trials.iterrows():
        cell = results.setdefault(t["config/noise_rate"], {})
        cell.setdefault(t["config/loss"], {})[int(t["config/seed"])] = t["last/val/acc"]
    again = {(r["cell"], r["method"]): r for r in decide(results, rule)}
    marked = 0
    for _, row in table.iterrows():
        beats = [m for m in row["beats"].split("; ") if m]
        assert sorted(beats) == sorted(again[row["noise_rate"], row["method"]]["beats"]), row.to_dict()
        assert row["decision"] == again[row["noise_rate"], row["method"]]["decision"]
        marked += len(beats)
    assert marked >= 2  # at 3 epochs gce and sce are far behind ce: some pairs are significant
    summary = (experiment / "report" / "summary.txt").read_text()
    for _, row in table[table["beats"] != ""].iterrows():
        assert f"{row['decision']}; > {row['beats'].replace('; ', ', ')}" in summary

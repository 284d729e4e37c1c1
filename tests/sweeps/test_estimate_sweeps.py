"""`--estimate` on the sweeps it estimates (issue 41): what it counts, what it times and what it keeps for the
launch. How close its wall time comes to the run is a speed figure, measured by `benchmarks/estimate_error.py`
(same-run figures, load stated, docs/performance.md), not asserted here: on a loaded 2-core machine it was off
by -35 % (load 2.6) and +93 % (load 8) with nothing wrong in the code, so a timed assertion here failed CI by
chance both ways (issue 53)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from analysis.progress import format_duration
from analysis.wall_time import sweep_seconds
from benchmarks.estimate_error import ROOT, SCRIPT, SHAPES


@pytest.mark.slow
def test_a_command_of_known_epoch_times_with_an_epochs_axis_on_two_slots(tmp_path, sweep_env):
    """--axis epochs=4,8,16 x 2 seeds, start-up 1 s, epochs of 1.5 s (6 trials on 2 slots): the first cell's epoch
    time is measured, each trial's {epochs} counted, and the wall time is the model's (longest trials first on the
    two slots, plus the fixed costs) from those figures."""
    shutil.copy(SCRIPT, tmp_path / SCRIPT.name)
    argv = [sys.executable, str(ROOT / SHAPES["epochs_axis"][0]), *SHAPES["epochs_axis"][1:]]
    split = argv.index("--")
    made = subprocess.run(
        [*argv[:split], "--storage-path", str(tmp_path / "runs"), "--estimate", "--json", *argv[split:]],
        cwd=tmp_path, env=sweep_env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    estimate = json.loads(made.stdout.strip().splitlines()[-1])["estimate"]
    assert (estimate["trials"], estimate["epochs"], estimate["slots"]) == (6, 56, 2)
    basis = estimate["basis"]
    assert basis["epochs_from"] == "each trial's {epochs}"
    cell = basis["first_cell"]
    assert cell["epoch_s"] == pytest.approx(1.5, abs=0.5)  # sleeps of 1.5 s: load only lengthens them a little
    trials = [cell["startup_s"] + cell["epoch_s"] * e for e in (16, 16, 8, 8, 4, 4)]
    assert estimate["wall_s"] == pytest.approx(sweep_seconds(trials, 2, basis["fixed_s"], basis["per_trial_s"]))
    assert not list((tmp_path / "runs").glob("*/raysweep.json"))  # nothing run: only the estimate kept beside it
    assert list((tmp_path / "runs").glob(".*.estimate.json"))


@pytest.mark.slow
def test_the_smoke_grid_estimate_and_the_run_it_was_kept_for(smoke_grid):
    """The README's smoke grid (conftest's `smoke_grid`), estimated with --estimate just before it ran: the
    run keeps that estimate at launch, records its own wall time beside it and sets the two side by side in its
    final line."""
    assert smoke_grid.estimated.returncode == 0, smoke_grid.estimated.stderr[-3000:]
    assert smoke_grid.proc.returncode == 0, smoke_grid.proc.stderr[-3000:]
    document = json.loads(smoke_grid.estimated.stdout)  # one JSON document, nothing else on stdout
    made = document["estimate"]
    assert (made["trials"], made["epochs"], made["slots"]) == (12, 24, os.cpu_count())
    assert made["wall_s"] > made["basis"]["fixed_s"] > 0
    kept = json.loads((smoke_grid.experiment / "raysweep.json").read_text())["estimate"]
    assert kept["wall_s"] == pytest.approx(made["wall_s"])  # kept at launch, with the wall time measured
    # the run's own wall time, process start to its final line: within the time the test saw it run
    assert smoke_grid.elapsed_s / 2 < kept["actual_wall_s"] <= smoke_grid.elapsed_s + 0.5
    assert not list((smoke_grid.folder / "runs").glob(".*.estimate.json"))  # taken by the launch
    final = smoke_grid.proc.stdout.strip().splitlines()[-1]
    error = 100 * (made["wall_s"] - kept["actual_wall_s"]) / kept["actual_wall_s"]
    assert f"estimated {format_duration(made['wall_s'])} ({error:+.0f} %)" in final, final
    print(f"smoke grid: estimate {made['wall_s']:.1f} s, run {kept['actual_wall_s']:.1f} s, load {os.getloadavg()}")

"""Time `python -m analysis EXP --status` on a synthetic 1,000-trial experiment (goal: < 2 s).

Run:
    python benchmarks/status_speed.py                 # 1,000 trials x 50 results, 8 running, 5 runs
    python benchmarks/status_speed.py --quick         # 100 trials x 20 results, 1 run
    python benchmarks/status_speed.py --json out.json

The experiment is `benchmarks/analysis_load.py:write_experiment`'s (Tune 2.x's files made from
real `Trial` objects), with its last 8 trials turned RUNNING (a `stdout` log, one epoch to go), a
`raysweep.json` giving the grid's size and a live `driver.json`. Each run is the whole command
in a fresh process (interpreter start-up and imports included), as a user types it. It reports;
it does not assert.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.analysis_load import parse_size_args, write_experiment  # noqa: E402

RUNNING = 8


def make_running(experiment: Path, n_trials: int) -> None:
    """Mark the last RUNNING trials as running in the state file; add their logs, raysweep.json and driver.json."""
    state_file = next(experiment.glob("experiment_state-*.json"))
    state = json.loads(state_file.read_text())
    for entry in state["trial_data"][-RUNNING:]:
        info = json.loads(entry[0])
        info["status"] = "RUNNING"
        entry[0] = json.dumps(info)
        folder = experiment / info["relative_logdir"]
        (folder / "stdout").write_text("trial:INFO | [GPU 0 | pid 1] Epoch [49/50]\n" * 200)
        results = (folder / "result.json").read_text().splitlines()
        (folder / "result.json").write_text("\n".join(results[:-1]) + "\n")  # its last epoch is still to come
    state_file.write_text(json.dumps(state))
    (experiment / "raysweep.json").write_text(
        json.dumps({"metric": "val/acc", "mode": "max", "total_trials": n_trials, "argv": ["sweeps/noise_grid.py"]})
    )
    (experiment / "driver.json").write_text(
        json.dumps(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "since": "",
                "heartbeat": time.time(),
                "ended": None,
                "exit_code": None,
            }
        )
    )


def main(argv: list[str] | None = None) -> dict:
    args = parse_size_args(argv, __doc__.split("\n\n")[0], repeat=5, repeat_help="fresh-process runs")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="raysweep-bench-") as tmp:
        experiment = write_experiment(Path(tmp), args.trials, args.iterations)
        make_running(experiment, args.trials)
        times, out = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "analysis", str(experiment), "--status"],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            times.append(time.perf_counter() - t0)
            if out.returncode != 0:
                raise SystemExit(f"--status failed ({out.returncode}):\n{out.stderr[-3000:]}")
    print(out.stdout.splitlines()[0])
    print(
        f"--status on {args.trials} trials x {args.iterations} results ({RUNNING} running): "
        f"median {statistics.median(times):.2f} s, range {min(times):.2f}-{max(times):.2f} s over {args.repeat} runs"
    )
    report = {
        "trials": args.trials,
        "iterations": args.iterations,
        "running": RUNNING,
        "seconds": times,
        "median_s": statistics.median(times),
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()

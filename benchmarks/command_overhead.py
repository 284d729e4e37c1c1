"""What does the command trainable cost a trial? A user's script run by `train_command` in Tune vs run bare.

Run:
    python benchmarks/command_overhead.py            # 10 epochs of ~0.3 s, 3 repetitions
    python benchmarks/command_overhead.py --quick    # 3 epochs, 1 repetition (CI)
    python benchmarks/command_overhead.py --json out.json

The script is tests/scripts/train_script.py (NumPy since 2026-11-29, PyTorch before; knows nothing of
Ray; `--sleep` pads each epoch to ~0.3 s). "bare": `subprocess.run` of the script, start to exit. "command": the
wall time of `train_command` inside a 1-CPU Tune trial, from its call to its return: rendering the template,
starting the command and the watchdog, copying every output line into the trial's log files,
parsing, one `tune.report` + step checkpoint per epoch (each waits for the driver to take it), and
ending the process group. Ray start-up and the worker's own start are outside both figures.
ratio = command / bare; each measurement in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCRIPT = [sys.executable, str(ROOT / "tests" / "scripts" / "train_script.py")]


def bare(epochs: int, sleep: float) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        subprocess.run(
            [*SCRIPT, "--epochs", str(epochs), "--sleep", str(sleep), "--out", out],
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return time.perf_counter() - started


def in_tune(epochs: int, sleep: float) -> float:
    import ray
    from ray import tune
    from ray.tune import CheckpointConfig, TuneConfig

    from sweeps.engine.run.launch import sweep_run_config, sweep_tune_config
    from trainables.command.runner import train_command

    def timed(config, *, elapsed_file, **kwargs):  # train_command, timed from inside the trial
        started = time.perf_counter()
        train_command(config, **kwargs)
        Path(elapsed_file).write_text(str(time.perf_counter() - started))

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as storage:
        template = [*SCRIPT, "--epochs", str(epochs), "--sleep", str(sleep), "--seed", "{seed}", "--out", "{trial_dir}"]
        elapsed_file = Path(storage) / "elapsed"
        trainable = tune.with_resources(
            tune.with_parameters(timed, template=template, elapsed_file=str(elapsed_file)), {"cpu": 1}
        )
        results = tune.Tuner(
            trainable,
            param_space={"seed": 0},
            tune_config=sweep_tune_config(TuneConfig(metric="val_acc", mode="max")),
            run_config=sweep_run_config(
                "command_overhead", storage, max_failures=0, checkpoint_config=CheckpointConfig(num_to_keep=2)
            ),
        ).fit()
        assert not results.errors and results[0].metrics["epoch"] == epochs, results.errors
        seconds = float(elapsed_file.read_text())
    ray.shutdown()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", nargs=3, default=None, help=argparse.SUPPRESS)  # internal: MODE EPOCHS SLEEP
    args = parser.parse_args()
    if args.one:
        mode, epochs, sleep = args.one[0], int(args.one[1]), float(args.one[2])
        print("RESULT", (bare if mode == "bare" else in_tune)(epochs, sleep))
        return
    repeats = args.repeats or (1 if args.quick else 3)
    epochs, sleep = (3 if args.quick else 10), 0.3
    load = [os.getloadavg()[0]]  # a busy shared machine: the spread of "bare" says how much noise there is
    times = {"bare": [], "command": []}
    for _ in range(repeats):
        for mode in times:
            out = subprocess.run(
                [sys.executable, __file__, "--one", mode, str(epochs), str(sleep)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            times[mode].append(float(out.split("RESULT", 1)[1]))
    load.append(os.getloadavg()[0])
    ratios = [c / b for c, b in zip(times["command"], times["bare"])]
    fmt = lambda v: f"{statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]"  # noqa: E731
    print(
        f"train_script.py, {epochs} epochs of ~{sleep} s; median [min, max] of {repeats} fresh processes; "
        f"{os.cpu_count()} CPUs, load average {load[0]:.1f} -> {load[1]:.1f}"
    )
    print(f"{'bare s':>22}{'command s':>22}{'ratio':>22}{'extra s':>12}")
    extra = statistics.median(c - b for c, b in zip(times["command"], times["bare"]))
    print(f"{fmt(times['bare']):>22}{fmt(times['command']):>22}{fmt(ratios):>22}{extra:>12.2f}")
    if args.json:
        report = {
            "epochs": epochs,
            "epoch_sleep_s": sleep,
            "repeats": repeats,
            "bare_s": times["bare"],
            "command_s": times["command"],
            "ratio": statistics.median(ratios),
            "extra_s": extra,
            "cpus": os.cpu_count(),
            "load_average": load,
        }
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

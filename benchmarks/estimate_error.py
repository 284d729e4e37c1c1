"""How close does `--estimate` come to the sweep it estimates? Sweeps of a few shapes, each estimated and then run.

Run:
    python benchmarks/estimate_error.py                    # the three shapes, local Ray, 1 repetition
    python benchmarks/estimate_error.py --join             # joining a `ray start --head` this run starts
    python benchmarks/estimate_error.py --shapes command_8x2 --repeats 3 --json out.json

For each shape, in a fresh scratch folder: `SWEEP --estimate --json` (the first cell timed, this
machine's speed probed), then `SWEEP` itself as a fresh process, timed from its start to its exit
(Ray's start-up or join, the imports, the report included). error = (estimate - measured) / measured.
`implied_units` is what the run says the fixed costs were, in units of the probe (`import ray.tune`):
(measured - the estimate's trial part - Ray - what the estimate timed) / probe_s: the figure that
`sweeps/engine/estimate/prediction.py:FIXED_COSTS` (launch + end) is set from. The machine's load average is
recorded before and after each run: the estimate is right for the load it saw.
Shapes:
    command_8x2   tests/scripts/timed_epochs.py: start-up 1 s, 8 epochs of 1.5 s; 8 trials on 2 slots
    smoke_grid    sweeps/noise_grid.py --smoke-test: 12 trials of 2 digits epochs on 2 slots
    epochs_axis   timed_epochs.py with --axis epochs=4,8,16 x 2 seeds: start-up 1 s, epochs of 1.5 s
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
SCRIPT = ROOT / "tests" / "scripts" / "timed_epochs.py"
CPU_TRIALS = ["--gpus-per-trial", "0", "--cpus-per-trial", "1"]
SHAPES = {
    "command_8x2": [
        "sweeps/run_command.py", "--axis", "seed=" + ",".join(map(str, range(8))), *CPU_TRIALS, "--",
        PY, "timed_epochs.py", "--startup", "1", "--epochs", "8", "--epoch-s", "1.5", "--seed", "{seed}",
    ],
    "smoke_grid": ["sweeps/noise_grid.py", "--smoke-test", *CPU_TRIALS],
    "epochs_axis": [
        "sweeps/run_command.py", "--axis", "epochs=4,8,16", "--axis", "seed=0,1", *CPU_TRIALS, "--",
        PY, "timed_epochs.py", "--startup", "1", "--epochs", "{epochs}", "--epoch-s", "1.5", "--seed", "{seed}",
    ],
}  # fmt: skip


def measure(argv: list[str], folder: Path, env: dict) -> dict:
    """Estimate `argv` (a sweep script and its flags, relative to the repository) in `folder`, then run it.

    Returns:
        {"estimate_s", "measured_s", "error" (estimate / measured - 1), "implied_units", "probe_s",
        "load" ([load average before the estimate, before the run, after it]), "estimate" (the
        document), "final_line" (the sweep's last line: its own estimate vs wall time)}.
    Raises:
        AssertionError: the estimate or the sweep failed (their output quoted).
    """
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    command = [PY, str(ROOT / argv[0]), *argv[1:]]
    split = command.index("--") if "--" in command else len(command)
    storage = ["--storage-path", str(folder / "runs")]
    load = [os.getloadavg()[0]]
    made = subprocess.run(
        [*command[:split], *storage, "--estimate", "--json", *command[split:]],
        cwd=folder, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    document = json.loads(made.stdout.strip().splitlines()[-1])["estimate"]
    load.append(os.getloadavg()[0])
    started = time.monotonic()
    run = subprocess.run(
        [*command[:split], *storage, "--quiet", *command[split:]], cwd=folder, env=env, capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    measured = time.monotonic() - started
    load.append(os.getloadavg()[0])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    basis = document["basis"]
    trials_s = document["wall_s"] - basis["fixed_s"]
    implied = (measured - trials_s - basis["ray_s"] - basis["measured_s"]) / basis["probe_s"]
    return {
        "estimate_s": document["wall_s"],
        "measured_s": measured,
        "error": document["wall_s"] / measured - 1,
        "implied_units": implied,
        "probe_s": basis["probe_s"],
        "load": load,
        "estimate": document,
        "final_line": run.stdout.strip().splitlines()[-1],
    }


@contextlib.contextmanager
def sweep_environment(join: bool, folder: Path):
    """The environment the sweeps run in: a private local Ray each (`--address` unset, RAY_ADDRESS
    empty), or, with `join`, a `ray start --head` started here (tests/helpers/ray_cluster.py) that each joins."""
    base = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "RAYSWEEP_LOGICAL_GPUS": ""}
    if not join:
        yield {**base, "RAY_ADDRESS": ""}
        return
    from tests.helpers.ray_cluster import shared_head

    with shared_head(folder / "head") as env:
        yield {**env, "PYTHONUNBUFFERED": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)} (default: all)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--join", action="store_true", help="join a `ray start --head` instead of a local Ray each")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="estimate-error-") as scratch:
        with sweep_environment(args.join, Path(scratch)) as env:
            for repeat in range(args.repeats):
                for shape in args.shapes.split(","):
                    try:
                        figures = measure(SHAPES[shape], Path(scratch) / f"{shape}_{repeat}", env)
                    except AssertionError as e:  # e.g. Ray's start timing out on an overloaded machine
                        lines = str(e).strip().splitlines()
                        print(f"{shape:<12} failed at load {os.getloadavg()[0]:.1f}: {lines[-1] if lines else e}")
                        results.append({"shape": shape, "repeat": repeat, "failed": str(e)[-2000:]})
                        continue
                    results.append({"shape": shape, "repeat": repeat, **figures})
                    print(
                        f"{shape:<12} estimate {figures['estimate_s']:6.1f} s measured {figures['measured_s']:6.1f} s  "
                        f"error {100 * figures['error']:+5.1f} %  implied units {figures['implied_units']:5.2f}  "
                        f"probe {figures['probe_s']:.2f} s  load {' -> '.join(f'{x:.1f}' for x in figures['load'])}",
                        flush=True,
                    )
    if args.json:
        meta = {"cpus": os.cpu_count(), "ray": "joined" if args.join else "local start", "date": time.strftime("%F")}
        Path(args.json).write_text(json.dumps({**meta, "runs": results}, indent=1))


if __name__ == "__main__":
    main()

"""How long do slots idle at the start of a command sweep? The first command's start to every slot busy, 8 slots.

Run:
    python benchmarks/slots_busy.py                 # the survival window (15 s) and the old wait for a metric
    python benchmarks/slots_busy.py --repeats 3 --json out.json

A `ray start --head` with 8 logical CPUs and 4 logical GPUs (tests/helpers/ray_cluster.py) takes 8 trials at 0.5 GPU
and 1 CPU each. Each trial runs tests/scripts/timed_epochs.py: one epoch of `--epoch-s` (40) seconds, its
start stamped in a file. Two gates, in one run, interleaved: `window` (`--survival-window-s 15`, today's)
and `metric` (`--survival-window-s 1e9`: the gate opens only at the first metric, as before issue 41).
Figure: seconds from the first start to the 8th (every slot busy); the driver is stopped (SIGINT) once all
8 have started, or `--epoch-s` + 60 s after the first. The load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
SCRIPT = ROOT / "tests" / "scripts" / "timed_epochs.py"
GATES = {"window": "15", "metric": "1e9"}


def time_to_busy(folder: Path, env: dict, window: str, epoch_s: float) -> dict:
    """Run the 8-trial sweep with `--survival-window-s window` in `folder`; returns {"busy_s": seconds
    from the first start to the 8th (None when fewer started), "starts": offsets of each start, "load"}."""
    folder.mkdir(parents=True)
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    stamps = folder / "starts.txt"
    argv = [
        PY, str(ROOT / "sweeps" / "run_command.py"), "--axis", "seed=" + ",".join(map(str, range(8))),
        "--gpus-per-trial", "0.5", "--cpus-per-trial", "1", "--survival-window-s", window, "--quiet",
        "--storage-path", str(folder / "runs"), "--", PY, SCRIPT.name, "--startup", "0", "--epochs", "1",
        "--epoch-s", str(epoch_s), "--seed", "{seed}", "--started", str(stamps),
    ]  # fmt: skip
    load = [os.getloadavg()[0]]
    driver = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    read = lambda: sorted(float(x) for x in stamps.read_text().split()) if stamps.exists() else []  # noqa: E731
    try:
        while not read() and driver.poll() is None:
            time.sleep(0.2)
        first = (read() or [time.time()])[0]
        while len(read()) < 8 and driver.poll() is None and time.time() < first + epoch_s + 60:
            time.sleep(0.2)
    finally:
        if driver.poll() is None:
            driver.send_signal(signal.SIGINT)
        try:
            driver.wait(timeout=300)
        except subprocess.TimeoutExpired:
            driver.kill()
    load.append(os.getloadavg()[0])
    starts = read()
    return {
        "busy_s": starts[7] - starts[0] if len(starts) >= 8 else None,
        "starts": [t - starts[0] for t in starts],
        "load": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--epoch-s", type=float, default=40.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    from tests.helpers.ray_cluster import shared_head

    results = []
    with (
        tempfile.TemporaryDirectory(prefix="slots-busy-") as scratch,
        shared_head(Path(scratch) / "head", num_cpus=8, num_gpus=4) as env,
    ):
        for repeat in range(args.repeats):
            for gate, window in GATES.items():
                figures = time_to_busy(Path(scratch) / f"{gate}_{repeat}", env, window, args.epoch_s)
                results.append({"gate": gate, "repeat": repeat, **figures})
                busy = f"{figures['busy_s']:.1f} s" if figures["busy_s"] is not None else "never (fewer than 8 started)"
                print(
                    f"{gate:<7} every slot busy {busy} after the first start; starts at "
                    f"+{', +'.join(f'{t:.1f}' for t in figures['starts'])} s; load "
                    f"{' -> '.join(f'{x:.1f}' for x in figures['load'])}",
                    flush=True,
                )
    if args.json:
        meta = {"cpus": os.cpu_count(), "slots": 8, "epoch_s": args.epoch_s, "date": time.strftime("%F")}
        Path(args.json).write_text(json.dumps({**meta, "runs": results}, indent=1))


if __name__ == "__main__":
    main()

"""Where does a sweep's wall clock go? Milestones of `sweeps/noise_grid.py` from process start to exit, beside
the same 12 trials in a plain Ray Tune script (`benchmarks/bare_tune.py`) in the same run.

Run:
    python benchmarks/startup.py             # default 12-trial grid and --smoke-test, each beside the bare
                                             # Tune script, 3 fresh processes each, interleaved
    python benchmarks/startup.py --quick     # --smoke-test beside the bare script (3 pairs) and --help (CI)
    python benchmarks/startup.py --json out.json
    python benchmarks/startup.py --baseline /tmp/old/sweeps/noise_grid.py   # and another checkout's, interleaved

When a form's ratios after the first pairs pass a limit of `benchmarks/gate.py`, as many pairs again are timed
(every form, interleaved) and the fastest of all decides (`over_the_gate`): on a loaded machine one program's
fastest of 3 came out 20 % under the other's by chance (issue 53); a build that is slower stays over.

Each sweep runs as a fresh process (`PYTHONUNBUFFERED=1`, storage in a new temporary folder, so
nothing is reused); this process reads its stdout line by line and stamps each milestone, in
seconds since the child was started:
    args        "N trials in the grid"           flags parsed and checked (no Ray, torch, pandas yet)
    data        "data: ..."                      Ray, Tune, torch, analysis imported; data loaded once
    ray         "started a local Ray with ..."   local Ray up, dashboard URL printed (older checkouts: "Ray started in")
    first_trial the first trial's `trial_config.json` appears: the trainable runs (written by
                `trainables/trial.py:start_trial` first thing, into the trial's folder on storage
                (`trainables/experiment/storage.py`); older checkouts wrote it into the trial's working folder under
                Ray's session, also watched; polled every 50 ms; each run gets its own --name).
    last_trial  "sweep finished: ..."            every trial done (the progress line of `SweepProgress`)
    table       "best configuration by ..."      the final table printed
    report      "report: ..."                    report.md and its plots written
    exit        the process has exited (Ray shut down)
`--help` is timed from start to exit of `python sweeps/noise_grid.py --help`. The bare script has the
milestones args, data, ray, first_trial (its trial's `started/<trial id>` file), last_trial and exit.
`versus_bare` in the JSON (what `benchmarks/gate.py` checks): per form, the ratios grid / bare of the
fastest run's time to the first trial (`startup_ratio`) and to exit (`wall_ratio`); see `versus_bare`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import gate  # noqa: E402  (the limits the quick form is judged by)

SWEEP = [sys.executable, str(ROOT / "sweeps" / "noise_grid.py")]
BARE = [sys.executable, str(ROOT / "benchmarks" / "bare_tune.py")]
BARE_MILESTONES = ("args", "data", "ray", "first_trial", "last_trial", "exit")  # no table, no report
GRID_STARTED = "*/trial_config.json"  # under <storage>/<name>: the grid's trial has started
BARE_STARTED = "started/*"  # the bare script's
RAY_START_FAILED = "The current node timed out during startup"  # Ray's error when its raylet missed 30 s
MILESTONES = {  # name -> how the line starts (None: not a stdout line)
    "args": None,
    "data": "data: ",
    "ray": ("started a local Ray with", "Ray started in"),
    "first_trial": None,
    "last_trial": None,
    "table": "best configuration by",
    "report": "report: ",
    "exit": None,
}
FORMS = {"default": [], "smoke": ["--smoke-test"]}
RUN_NUMBER = itertools.count()


def milestone_of(line: str) -> str | None:
    """The milestone a line of the sweep's stdout marks, or None."""
    if line.rstrip().endswith("trials in the grid"):
        return "args"
    if "sweep finished:" in line:
        return "last_trial"
    return next((name for name, start in MILESTONES.items() if start and line.startswith(start)), None)  # str or tuple


def trial_started(name: str, since: float, storage: str, pattern: str = GRID_STARTED) -> bool:
    """Whether a trial of experiment `name` has started: a file matching `pattern` under `storage/name`,
    or (older checkouts) `trial_config.json` in its working folder in a Ray session started after `since`
    (seconds since the epoch)."""
    try:
        if any(Path(storage, name).glob(pattern)):
            return True
        ray_tmp = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir()), "ray")
        sessions = [s for s in ray_tmp.glob("session_2*") if s.stat().st_mtime >= since]
        return any(any(s.glob(f"artifacts/*/{name}/*/*/trial_config.json")) for s in sessions)
    except (FileNotFoundError, NotADirectoryError):  # a folder made and removed meanwhile (the sweep's storage
        return False  # probe makes one before it starts): not yet, as the tests' poll (tests/helpers/processes.py)


def time_sweep(
    flags: list[str], sweep: list[str] = SWEEP, milestones=tuple(MILESTONES), started: str = GRID_STARTED
) -> dict[str, float]:
    """Run one sweep in a fresh process; return milestone -> seconds since it started.

    Args:
        milestones: those the program passes (the bare script's: `BARE_MILESTONES`).
        started: the file pattern under the experiment folder that marks the first trial's start.
    Raises:
        RuntimeError: the sweep exited non-zero or a milestone never came (its output is included).
    """
    lines: queue.Queue = queue.Queue()
    with tempfile.TemporaryDirectory() as storage:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        t0, started_at = time.perf_counter(), time.time() - 1
        experiment = f"startup_{os.getpid()}_{next(RUN_NUMBER)}"
        proc = subprocess.Popen(
            sweep + flags + ["--storage-path", storage, "--name", experiment],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=Path(sweep[-1]).parents[1],
        )
        reader = threading.Thread(
            target=lambda: [lines.put((time.perf_counter(), s)) for s in proc.stdout], daemon=True
        )
        reader.start()
        stamps, cpu, output = {}, {}, []
        while proc.poll() is None or reader.is_alive() or not lines.empty():
            try:
                when, line = lines.get(timeout=0.05)
                output.append(line)
                if (name := milestone_of(line)) and name not in stamps:
                    stamps[name], cpu[name] = when - t0, driver_cpu_s(proc.pid)
            except queue.Empty:
                pass
            if "first_trial" not in stamps and trial_started(experiment, started_at, storage, started):
                stamps["first_trial"], cpu["first_trial"] = time.perf_counter() - t0, driver_cpu_s(proc.pid)
        stamps["exit"] = time.perf_counter() - t0
    missing = [name for name in milestones if name not in stamps]
    if proc.returncode != 0 or missing:
        raise RuntimeError(
            f"sweep {' '.join(flags)} exited {proc.returncode}, missing {missing}:\n{''.join(output[-40:])}"
        )
    return {name: stamps[name] for name in milestones} | {
        f"cpu_{name}": cpu[name] for name in milestones if cpu.get(name) is not None
    }


def driver_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) the process `pid` has used so far, its own threads only (Ray's processes
    are counted apart): the work its start-up did, which the machine's load does not stretch as it stretches
    the wall clock. None once it has exited."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def time_sweep_again(*args, tries: int = 3) -> dict[str, float]:
    """`time_sweep`, run again (up to `tries` times) when the local Ray itself did not start: Ray waits a
    fixed 30 s for its raylet, which a loaded machine misses now and then (`RAY_START_FAILED`)."""
    for attempt in range(1, tries + 1):
        try:
            return time_sweep(*args)
        except RuntimeError as e:
            if RAY_START_FAILED not in str(e) or attempt == tries:
                raise
            print(f"the local Ray did not start (a loaded machine): run {attempt} of {tries} is run again", flush=True)


def time_help(sweep: list[str] = SWEEP) -> float:
    """Seconds from start to exit of `noise_grid.py --help` in a fresh process."""
    t0 = time.perf_counter()
    subprocess.run(sweep + ["--help"], stdout=subprocess.DEVNULL, check=True, cwd=Path(sweep[-1]).parents[1])
    return time.perf_counter() - t0


def median_range(values: list[float]) -> list[float]:
    """[median, min, max] of `values`."""
    return [statistics.median(values), min(values), max(values)]


def format_table(report: dict) -> str:
    """The milestone table of a report: rows are milestones, columns per form the time since
    start and the phase before it (since the previous milestone), median [min, max]; a milestone a
    program does not have (the bare script's table and report) is `-`."""
    forms = list(report["forms"])
    cell = lambda m: f"{m[0]:.2f} [{m[1]:.2f}, {m[2]:.2f}]"  # noqa: E731
    head = f"{'milestone':<12}" + "".join(f"{f + ' at':>24}{f + ' phase':>24}" for f in forms)
    rows = [head]
    for name in MILESTONES:
        row = f"{name:<12}"
        for form in forms:
            runs = report["forms"][form]["runs"]
            if name not in runs[0]:
                row += f"{'-':>24}{'-':>24}"
                continue
            at = median_range([r[name] for r in runs])
            before = [m for m in list(MILESTONES)[: list(MILESTONES).index(name)] if m in runs[0]]
            phase = median_range([r[name] - (r[before[-1]] if before else 0.0) for r in runs])
            row += f"{cell(at):>24}{cell(phase):>24}"
        rows.append(row)
    if report.get("help_s"):
        rows.append(f"{'--help':<12}{cell(report['help_s']):>24}")
    return "\n".join(rows)


def versus_bare(grid_runs: list[dict], bare_runs: list[dict]) -> dict:
    """The grid against the bare Tune script, their runs interleaved: the ratios grid / bare of the fastest
    run's time to the first trial (`startup_ratio`) and to exit (`wall_ratio`): a load spike only ever adds
    time, so the fastest of each is the one the machine disturbed least (as `timeit` takes the minimum).
    Also the medians of the paired ratios, the seconds, and the driver's own CPU seconds to its first trial
    (work done, which the load stretches far less than the wall clock)."""
    pairs = list(zip(grid_runs, bare_runs))
    fastest = lambda runs, key: min(r[key] for r in runs)  # noqa: E731
    cpu = lambda runs: statistics.median(r.get("cpu_first_trial", math.nan) for r in runs)  # noqa: E731
    return {
        "startup_ratio": fastest(grid_runs, "first_trial") / fastest(bare_runs, "first_trial"),
        "wall_ratio": fastest(grid_runs, "exit") / fastest(bare_runs, "exit"),
        "startup_ratio_paired_median": statistics.median(g["first_trial"] / b["first_trial"] for g, b in pairs),
        "wall_ratio_paired_median": statistics.median(g["exit"] / b["exit"] for g, b in pairs),
        "grid_first_trial_s": fastest(grid_runs, "first_trial"),
        "bare_first_trial_s": fastest(bare_runs, "first_trial"),
        "grid_exit_s": fastest(grid_runs, "exit"),
        "bare_exit_s": fastest(bare_runs, "exit"),
        "grid_driver_cpu_to_first_trial_s": cpu(grid_runs),
        "bare_driver_cpu_to_first_trial_s": cpu(bare_runs),
        "pairs": len(pairs),
    }


def summarise(sweep: str, helps: list[float], runs: dict[str, list[dict]], forms: dict) -> dict:
    """The JSON report of one program: --help times (none for the bare script) and each form's runs and medians."""
    return {
        "sweep": sweep,
        "help_s": median_range(helps) if helps else None,
        "help_runs": helps,
        "forms": {
            form: {
                "flags": forms[form],
                "runs": runs[form],
                "median": {
                    name: statistics.median(r[name] for r in runs[form])
                    for name in runs[form][0]
                    if all(name in r for r in runs[form])
                },
            }
            for form in forms
        },
    }


def time_interleaved(
    programs: dict[str, list[str]],
    forms: dict[str, list[str]],
    repeats: int,
    runs: dict[str, dict[str, list[dict]]],
    helps: dict[str, list[float]],
) -> None:
    """Time `repeats` rounds, each a fresh run of every program (`--help`, then each form), appending to `runs`
    (program -> form -> milestone dicts) and `helps` (program -> seconds; none for the bare script).
    Interleaved: drifts of the shared machine hit every form and program alike."""
    for _ in range(repeats):
        for who, sweep in programs.items():
            if who != "bare":
                helps[who].append(time_help(sweep))
            for form, flags in forms.items():
                if who == "bare":
                    runs[who][form].append(time_sweep_again(flags, sweep, BARE_MILESTONES, BARE_STARTED))
                else:
                    runs[who][form].append(time_sweep_again(flags, sweep))


def over_the_gate(runs: dict[str, dict[str, list[dict]]], forms: dict) -> list[str]:
    """The forms whose grid / bare ratios (`versus_bare`) pass a limit of `benchmarks/gate.py`, so far."""
    limits = {"startup_ratio": gate.LIMITS["startup"], "wall_ratio": gate.LIMITS["grid_wall"]}
    figures = {form: versus_bare(runs["this"][form], runs["bare"][form]) for form in forms}
    return [form for form in forms if any(figures[form][key] > limit for key, limit in limits.items())]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="--smoke-test only (beside the bare script)")
    parser.add_argument("--repeats", type=int, default=None, help="fresh processes per form and program (default 3)")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    parser.add_argument(
        "--baseline",
        default=None,
        help="another checkout's sweeps/noise_grid.py, timed in the same run, interleaved (before/after)",
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or 3
    forms = {"smoke": FORMS["smoke"]} if args.quick else FORMS
    sweeps = {"this": SWEEP} | (
        {"baseline": [sys.executable, str(Path(args.baseline).resolve())]} if args.baseline else {}
    )
    programs = sweeps | {"bare": BARE}
    runs = {who: {form: [] for form in forms} for who in programs}
    helps: dict[str, list[float]] = {who: [] for who in programs}
    time_interleaved(programs, forms, repeats, runs, helps)
    if over := over_the_gate(runs, forms):
        print(
            f"{', '.join(over)}: over the gate's limit after {repeats} pair(s): {repeats} more, interleaved, and the "
            f"fastest of {2 * repeats} each decides (a slower build stays over; a draw of the load rarely repeats)",
            flush=True,
        )
        time_interleaved(programs, forms, repeats, runs, helps)
    repeats = len(helps["this"])
    reports = {who: summarise(sweep[-1], helps[who], runs[who], forms) for who, sweep in programs.items()}
    report = reports["this"] | {"repeats": repeats, "cpus": os.cpu_count(), "load_average_after": os.getloadavg()}
    for who in reports:
        print(
            f"{reports[who]['sweep']}: milestones, seconds since process start; {repeats} fresh process(es) each; "
            "median [min, max]"
        )
        print(format_table(reports[who]))
    report["bare"] = reports["bare"]
    report["versus_bare"] = {form: versus_bare(runs["this"][form], runs["bare"][form]) for form in forms}
    for form, figures in report["versus_bare"].items():
        print(
            f"{form}: grid / bare Tune (fastest of {figures['pairs']} runs each): to the first trial "
            f"{figures['startup_ratio']:.2f} ({figures['grid_first_trial_s']:.1f} vs "
            f"{figures['bare_first_trial_s']:.1f} s), "
            f"to exit {figures['wall_ratio']:.2f} ({figures['grid_exit_s']:.1f} vs {figures['bare_exit_s']:.1f} s); "
            f"the driver's CPU to the first trial {figures['grid_driver_cpu_to_first_trial_s']:.2f} vs "
            f"{figures['bare_driver_cpu_to_first_trial_s']:.2f} s"
        )
    if "baseline" in reports:
        report["baseline"] = reports["baseline"]
        ratios = {
            form: statistics.median(a["exit"] / b["exit"] for a, b in zip(runs["this"][form], runs["baseline"][form]))
            for form in forms
        }
        report["exit_ratio_vs_baseline"] = ratios
        print(
            "wall time to exit, this / baseline (median of paired runs): "
            + ", ".join(f"{form} {ratio:.2f}" for form, ratio in ratios.items())
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""How a sweep process leaves: one line for a user mistake, the driver record, then `os._exit`."""

from __future__ import annotations

import os
import sys

from sweeps.engine.flags import DiskFull, UsageError


def run_main(main, argv: list[str] | None = None) -> None:
    """Run a sweep's `main(argv) -> int` (`argv`: default the command line's) and exit with its code;
    user mistakes print one line.

    When `main` returns, the sweep is over: Tune has synced the experiment to storage before
    `fit()` returned, the report is written, a Ray the sweep started is stopped. The process then
    leaves with `os._exit(code)` after flushing stdout, stderr and logging, skipping the
    interpreter's teardown (1-2 s of freeing torch, Ray and pandas objects and running their
    atexit hooks; benchmarks/startup.py, "exit"). A Ray it joined (a cluster, `--address`) is
    disconnected first with `ray.shutdown()`, as Ray's own atexit hook would. An exception other
    than a usage error or Ctrl-C takes Python's normal way out (traceback, exit code 1).
    """
    try:
        code = main(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        code = 2
    except DiskFull as e:  # the driver record holds its end already
        print(f"error: {e}", file=sys.stderr, flush=True)
        code = 1
        _notify_stopped(e)
    except KeyboardInterrupt:
        print("interrupted: resume with the same command and --resume", file=sys.stderr)
        code = 130
        _notify_stopped("interrupted (Ctrl-C)")
    except Exception as e:  # a crash: --notify URLs hear of it, then Python's traceback and exit code 1
        _notify_stopped(e)
        raise
    if (
        "sweeps.engine.sweep_records.driver_lock" in sys.modules
    ):  # the sweep held its experiment folder: record how it ended
        sys.modules["sweeps.engine.sweep_records.driver_lock"].release_all(code)
    exit_now(code)


def _notify_stopped(why) -> None:
    """Tell the sweep's --notify URLs that it stopped (`sweeps.engine.run.notify`, if it got that far)."""
    if "sweeps.engine.run.notify" in sys.modules:
        sys.modules["sweeps.engine.run.notify"].sweep_stopped(why)


def exit_now(code: int) -> None:
    """Flush the console and logging, disconnect from Ray if still connected, and `os._exit(code)`."""
    import logging

    ray = sys.modules.get("ray")  # loaded only if the sweep got that far
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be written anyway
            pass
    os._exit(code if isinstance(code, int) else int(code is not None))  # as sys.exit: None is 0

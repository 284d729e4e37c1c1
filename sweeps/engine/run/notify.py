"""--notify: one message through apprise's URLs when a sweep ends, and one when it stops on an error."""

from __future__ import annotations

import logging
import sys
import time

from trainables.experiment.objective import Objective
from trainables.experiment.rules import show_value

_WATCHED: dict = {}  # the sweep this process tells about: {"urls", "name", "started"}; emptied once told


def watch(urls: tuple[str, ...], name: str) -> None:
    """Tell `urls` about the sweep `name` when it ends (`sweep_ended`) or stops (`sweep_stopped`)."""
    from sweeps.engine.sweep_records.provenance_capture import process_start_time

    _WATCHED.clear()
    if urls:
        _WATCHED.update(urls=urls, name=name, started=process_start_time())


def sweep_ended(code: int, rounds: list, objective: Objective, reused: dict | None = None) -> None:
    """Send the end message: the sweep's name, exit code, outcome counts (finished, errored, reused),
    the best configuration by `objective` and the wall time (seconds since the process started)."""
    if not _WATCHED:
        return
    finished = sum(r.num_terminated for r in rounds)
    # each trial of an OOM re-queue round (`launch.rerun_oom_trials`) re-runs an error of the round before
    errored = sum(r.num_errors for r in rounds) - sum(len(r) for r in rounds[1:])
    counts = f"{finished} finished, {errored} errored" + (f", {len(reused)} reused" if reused else "")
    title = f"sweep {_WATCHED['name']} " + ("finished" if code == 0 else f"ended with errors (exit code {code})")
    body = f"{counts}\n{best_line(rounds[0], objective)}\nwall time: {wall_time()}"
    send(title, body, "success" if code == 0 else "warning")


def sweep_stopped(why: BaseException | str) -> None:
    """Send the stop message (the exception, or e.g. "interrupted (Ctrl-C)") unless one was sent."""
    if not _WATCHED:
        return
    what = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
    send(f"sweep {_WATCHED['name']} stopped", f"{what}\nwall time: {wall_time()}", "failure")


def send(title: str, body: str, kind: str) -> bool:
    """Send one message to every watched URL, once; a failure is one warning line on stderr, never
    an exception (apprise's own log lines are silenced). Returns whether every URL took it."""
    import apprise

    urls = _WATCHED.get("urls", ())
    _WATCHED.clear()  # one message per sweep: an error after the end message is not told again
    sender = apprise.Apprise()
    for url in urls:
        sender.add(url)
    log = logging.getLogger("apprise")
    was_disabled, log.disabled = log.disabled, True
    try:
        delivered = bool(sender.notify(body=body, title=title, notify_type=kind))
    except Exception:  # a plugin's own bug must not fail the sweep
        delivered = False
    finally:
        log.disabled = was_disabled
    if not delivered:
        print(f"warning: --notify: the message '{title}' could not be delivered to {', '.join(urls)}", file=sys.stderr)
    return delivered


def best_line(results, objective: Objective) -> str:
    """`best: key=value ... (metric value)` of a `ResultGrid`, best by `objective`: the keys that vary
    between its trials (all when one trial); "best: none" when no trial reported its metric."""
    metric = objective.metric
    try:
        best = results.get_best_result(metric, objective.mode, scope="all", filter_nan_and_inf=True)
    except (RuntimeError, ValueError, KeyError):
        return f"best: none (no trial reported {metric})"
    configs = [r.config or {} for r in results]
    keys = [k for k in best.config if len({repr(c.get(k)) for c in configs}) > 1] or list(best.config)
    value = best.metrics.get(metric) if best.metrics else None
    shown = " ".join(f"{k}={best.config[k]}" for k in keys)
    return f"best: {shown}" + (f" ({metric} {show_value(metric, value)})" if isinstance(value, (int, float)) else "")


def wall_time() -> str:
    """Time since the watched sweep's process started, as `1h02m03s`."""
    seconds = int(time.time() - _WATCHED.get("started", time.time()))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"

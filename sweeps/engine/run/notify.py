"""--notify: one message through apprise's URLs when a sweep ends, and one when it stops on an error."""

from __future__ import annotations

import logging
import math
import sys
import time

from trainables.experiment.objective import Objective
from trainables.experiment.outcome import CTRL_C, FAILURE_GATE, LEFT_OUT, SIGTERM, TIME_BUDGET
from trainables.experiment.redaction import redact_url
from trainables.experiment.rules import show_value

_WATCHED: dict = {}  # the sweep this process tells about: {"urls", "name", "started"}; emptied once told


def watch(urls: tuple[str, ...], name: str) -> None:
    """Tell `urls` about the sweep `name` when it ends (`sweep_ended`) or stops (`sweep_stopped`)."""
    from sweeps.engine.sweep_records.provenance_capture import process_start_time

    _WATCHED.clear()
    if urls:
        _WATCHED.update(urls=urls, name=name, started=process_start_time())


def sweep_ended(code: int, ending, rounds: list, objective: Objective, reused: int = 0) -> None:
    """Send the end message: the sweep's name, how it ended (`ending.ended_by`) and its exit code; its
    trials counted as the final line, `--status` and the report count them (`sweep_end.Ending.counts`,
    `reused` finished trials of earlier runs among the finished); what stopped it when it was cut short; the
    first error's line; the best configuration by `objective`; and the wall time since the process started.

    Args:
        ending: the first fit's `sweep_end.Ending` (its OOM re-queue rounds counted in).
        rounds: the `ResultGrid`s: the sweep's, then its OOM re-queue rounds.
    """
    if not _WATCHED:
        return
    from analysis.progress import describe_counts
    from sweeps.engine.run.resume import first_error

    name = _WATCHED["name"]
    if ending.ended_by in (CTRL_C, SIGTERM):
        title = f"sweep {name} interrupted ({ending.ended_by}, exit code {code})"
    elif ending.ended_by == TIME_BUDGET:
        title = f"sweep {name} stopped by its time budget (exit code {code})"
    elif ending.ended_by == FAILURE_GATE:
        title = f"sweep {name} stopped by its failure gate (exit code {code})"
    else:
        title = f"sweep {name} " + ("finished" if code == 0 else f"ended with errors (exit code {code})")
    counts = describe_counts(ending.counts(reused), shown=("finished", "errored"))
    lines = [counts + (f" ({reused} reused)" if reused else "")]
    if ending.cut():
        lines.append(f"stopped early: {ending.why}")
    error = first_error(rounds, ending)
    if error:
        lines.append(f"first error: {error}")
    lines += [best_line(rounds[0], objective, ending.outcomes, ending.starts), f"wall time: {wall_time()}"]
    send(title, "\n".join(lines), "success" if code == 0 else "warning")


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
        where = ", ".join(redact_url(url) for url in urls)
        print(f"warning: --notify: the message '{title}' could not be delivered to {where}", file=sys.stderr)
    return delivered


def best_line(results, objective: Objective, outcomes: dict | None = None, starts: dict | None = None) -> str:
    """`best: key=value ... (metric value)` of a `ResultGrid`: the trial with the best value of the objective's
    metric over its epochs (the report's default rule, best-val), among those the tables rank (`outcomes`: trial
    path -> outcome; an errored, diverged, interrupted or not-run trial's value is no result); equal values: the
    earliest started (`starts`: trial path -> Unix seconds; `analysis.progress.best_index`, the rule of the console,
    `status` and `--json`); its keys that vary between the trials (all when one trial); "best: none" when no such
    trial reported the metric."""
    from analysis.progress import best_index

    metric, pick = objective.metric, max if objective.mode == "max" else min
    ranked = [
        (result, pick(values))
        for result in results
        if (outcomes or {}).get(result.path) not in LEFT_OUT and (values := _values(result, metric))
    ]
    index = best_index([(value, (starts or {}).get(r.path, math.inf)) for r, value in ranked], objective.mode)
    if index is None:
        return f"best: none (no trial reported {metric})"
    best, value = ranked[index]
    configs = [r.config or {} for r in results]
    keys = [k for k in best.config if len({repr(c.get(k)) for c in configs}) > 1] or list(best.config)
    shown = " ".join(f"{k}={best.config[k]}" for k in keys)
    return f"best: {shown} ({metric} {show_value(metric, value)})"


def _values(result, metric: str) -> list[float]:
    """The finite values of `metric` a `Result` reported, each epoch's (its history), else its last one."""
    frame = result.metrics_dataframe
    values = list(frame[metric]) if frame is not None and metric in frame else [(result.metrics or {}).get(metric)]
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def wall_time() -> str:
    """Time since the watched sweep's process started, as `1h02m03s`."""
    seconds = int(time.time() - _WATCHED.get("started", time.time()))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"

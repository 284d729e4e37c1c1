"""The sweep's progress block, shared by the driver's console and `python -m analysis EXP --status`.

    [0:01:30] 12 trials: 4 running, 6 pending, 2 finished, 0 errored, 0 diverged | best val/acc 0.9120 (sym_0.125_seed0)
      | epochs 20/360 | ETA 0:12:30   (one line on the console)
      sym_0.25_seed0   epoch 5/30  val/acc 0.8800  train/loss 0.4120  GPU 0
      ...

`sweep_status` counts Tune trials (or anything shaped like them: the status command builds them
from the experiment folder) and `format_progress` lays the block out. No Ray, pandas or torch:
the status command imports this module alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from analysis.wall_time import TrialCost, makespan
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import (
    COUNTS,
    ENDED,
    LEFT_OUT,
    PENDING,
    RUNNING,
    count_outcomes,
    planned_epochs,
    trial_outcome,
)
from trainables.experiment.records import JOINS_STEP_METRIC
from trainables.experiment.rules import show_value

RUNNING_LINES = 8  # running trials listed under each block; the rest are counted


def sweep_status(
    trials: list,
    total_trials: int | None,
    objective: Objective = Objective(),
    *,
    over=False,
    stopped=(),
    scheduler_stops: Mapping[str, int] | None = None,
) -> dict:
    """Count trials by how they ended (`trainables.experiment.outcome.trial_outcome`) and add up epochs
    done and planned.

    Args:
        trials: Tune `Trial`s (anything with `status`, `config`, `last_result`, `metric_analysis`, a
            `str()` name, and `trial_id` for `stopped`); the searcher may not have created all of them yet.
        total_trials: trials the sweep will run in all (Tune's `total_num_samples`), or None.
        objective: what "best" means (its metric and mode).
        over: the sweep has ended (its driver finished or is gone): running trials were interrupted,
            pending ones never ran. stopped: ids of the trials the driver stopped before they ended.
        scheduler_stops: trial id -> the iteration its scheduler stopped it at (`driver.json`): pruned trials.
    Returns:
        dict with the `count_outcomes` counts (`running`, `pending` (waiting or paused, or not created
        yet), `finished`, `pruned`, `errored` (`no_metric` among them), `diverged`, `interrupted`,
        `not_run`), `total`, `best` (`_best`), `epochs_done`, `epochs_planned` (trials that ended count the
        epochs they ran; the others, interrupted and not run included, their planned epochs, as
        `_add_unplanned` says; None when unknown), `running_trials`: (name, last result, planned epochs or
        None) per running trial, best first, `slots` (trials running now) and `time_left`: the seconds each
        unfinished trial needs (`_left`), or None.
    """
    stops = scheduler_stops or {}
    outcomes = [
        trial_outcome(
            t.status,
            t.last_result,
            over=over,
            stopped=getattr(t, "trial_id", None) in stopped,
            stop_at=stops.get(getattr(t, "trial_id", None)),
            planned=planned_epochs(t.config),
        )
        for t in trials
    ]
    epochs_done, epochs_planned, planned_per_trial, running, unknown, ran = 0, 0, [], [], [], []
    timed, left_running, left_pending = [], [], []
    for trial, outcome in zip(trials, outcomes):
        result = trial.last_result or {}
        epochs = _epochs_done(result)
        planned = planned_epochs(trial.config)
        finished = outcome in ENDED
        epochs_done += epochs
        if epochs and isinstance(result.get("time_total_s"), (int, float)):
            timed.append((epochs, result["time_total_s"], result.get("time_this_iter_s")))
        if finished:
            epochs_planned += epochs
            ran.append(epochs)
        elif planned is None:
            unknown.append(epochs)
        else:
            epochs_planned += max(planned, epochs)
        planned_per_trial.append(planned if planned is not None or not finished else epochs)
        if outcome == RUNNING:
            running.append((str(trial), result, planned))
            left_running.append((planned, epochs, result.get("time_this_iter_s") if epochs >= 2 else None))
        elif outcome == PENDING:
            left_pending.append((planned, epochs))
    total = max(total_trials or 0, len(trials))
    not_created = total - len(trials)
    epochs_planned = _add_unplanned(epochs_planned, unknown, ran, planned_per_trial, not_created)
    sign = -1 if objective.mode == "max" else 1
    running.sort(key=lambda item: sign * _finite(item[1].get(objective.metric), sign * math.inf))
    per_trial = _mean_planned(ran, planned_per_trial)
    left_pending += [(None, 0)] * not_created
    counts = count_outcomes(outcomes, not_created, over)
    return {
        **counts,
        "total": total,
        "best": _best(trials, outcomes, objective),
        "epochs_done": epochs_done,
        "epochs_planned": epochs_planned,
        "running_trials": running,
        "slots": counts["running"],  # trials at once; the driver's callback puts the most it saw
        "time_left": _left(_trial_cost(timed), left_running, left_pending, per_trial),
    }


def _trial_cost(timed: list[tuple]) -> TrialCost | None:
    """The sweep's `TrialCost` from its trials' last results, (epochs, `time_total_s`, `time_this_iter_s`)
    each: the epoch is the median time of a trial's latest epoch past its first (Tune's
    `time_this_iter_s`), the start-up the median of `time_total_s - epochs x epoch`. Before any trial
    has a second epoch, the first epochs' mean, start-up 0. None before any epoch was timed."""
    later = [this for epochs, _, this in timed if epochs >= 2 and isinstance(this, (int, float))]
    if later:
        epoch_s = statistics.median(later)
        return TrialCost(statistics.median(max(0.0, total - e * epoch_s) for e, total, _ in timed), epoch_s)
    return TrialCost(0.0, statistics.median(total / e for e, total, _ in timed)) if timed else None


def _mean_planned(ran: list, planned: list) -> float | None:
    """Epochs a trial of unknown length runs: the mean of the known planned ones, else of the finished ones."""
    known = [p for p in planned if p is not None]
    if known:
        return sum(known) / len(known)
    return sum(ran) / len(ran) if ran and any(ran) else None


def _left(cost: TrialCost | None, running: list, pending: list, per_trial: float | None) -> dict | None:
    """The seconds each unfinished trial still needs, by `cost`: `running`, from (planned epochs or
    None, epochs done, its own latest epoch's seconds or None) per running trial, and `pending`, from
    (planned epochs or None, epochs done) per trial not running (created or not). A trial whose config
    names no epochs runs `per_trial` (at least what it did). None while no epoch was timed or such a
    trial's length is unknown."""
    if cost is None or (per_trial is None and any(p is None for p, *_ in running + pending)):
        return None

    def epochs_left(planned, done) -> float:
        return max(0.0, (planned if planned is not None else per_trial) - done)

    return {
        "running": [epochs_left(planned, done) * (own or cost.epoch_s) for planned, done, own in running],
        "pending": [cost.seconds(epochs_left(planned, done)) for planned, done in pending],
        "cost": cost,
    }


def _best(trials: list, outcomes: list[str], objective: Objective) -> tuple | None:
    """(best value of the objective's metric by its mode, trial name) over the trials neither failed nor
    stopped (as the tables rank them: `outcome.LEFT_OUT`), from Tune's `metric_analysis`; None before any value.
    Equal values: `best_index`'s rule, so the console, `status`, `--json` and `--notify` name the same one."""
    candidates = []
    for trial, outcome in zip(trials, outcomes):
        value = (trial.metric_analysis or {}).get(objective.metric, {}).get(objective.mode)
        if outcome not in LEFT_OUT and value is not None and not math.isnan(value):
            candidates.append((value, started(trial), trial))
    index = best_index([(value, start) for value, start, _ in candidates], objective.mode)
    return None if index is None else (candidates[index][0], str(candidates[index][2]))


def best_index(values: list[tuple[float, float]], mode: str) -> int | None:
    """The one tie rule of the best trial: the index of the best of (value, start) pairs by `mode` ("max" or
    "min"); equal values: the earliest start (Unix seconds, `started`; unknown: infinity, after every known one),
    then the first listed, whatever order the trials are listed in. None when `values` is empty."""
    sign = -1 if mode == "max" else 1
    return min(range(len(values)), key=lambda i: (sign * values[i][0], values[i][1], i), default=None)


def started(trial) -> float:
    """When a trial started, in Unix seconds: a Tune `Trial`'s `run_metadata.start_time`, a `status.TrialRecord`'s
    `start`; infinity when not known (after every trial that is)."""
    meta = getattr(trial, "run_metadata", None)
    start = getattr(meta, "start_time", None) if meta is not None else getattr(trial, "start", None)
    return float(start) if isinstance(start, (int, float)) and not math.isnan(start) else math.inf


def describe_counts(counts: dict, shown=("running", "pending", "finished", "errored", "diverged")) -> str:
    """`4 running, 6 pending, 2 finished, 1 pruned, 1 errored (1 no metric), 0 diverged, 2 interrupted, 3 not
    run`: the counts of `count_outcomes` in the words of the progress line, `--status`, the final line, the
    summary, the report and the `--notify` message; the `shown` ones always, the others when there are some."""
    words = []
    for key in (k for k in COUNTS if k != "no_metric"):
        if key in shown or counts.get(key):
            no_metric = f" ({counts['no_metric']} no metric)" if key == "errored" and counts.get("no_metric") else ""
            words.append(f"{counts.get(key, 0)} {key.replace('_', ' ')}{no_metric}")
    return ", ".join(words)


def _epochs_done(result: dict) -> int:
    """The epochs a trial ran, from its last result: its reports (`training_iteration`, which Tune keeps
    across a restore), not its `epoch`, which a command trial reports as its script logged it (imagenet
    counts from 0; a step that is not an epoch); a last report without `epoch` marks a failure, and one joining
    a final result to the step before repeats that step (`JOINS_STEP_METRIC`): neither is an epoch."""
    if "training_iteration" not in result:
        return int(result.get("epoch", 0) or 0)
    repeats = "epoch" not in result or bool(result.get(JOINS_STEP_METRIC))
    return max(int(result["training_iteration"]) - repeats, 0)


def _add_unplanned(epochs_planned: int, unknown: list, ran: list, planned: list, not_created: int) -> int | None:
    """`epochs_planned` plus the epochs of trials with no planned total (`unknown`: epochs done so far)
    and of trials not created yet; a trial of unknown length runs the mean epochs of the finished
    ones (`ran`), others their mean `planned` (None entries: unknown). None when nothing tells."""
    estimate = sum(ran) / len(ran) if ran and any(ran) else None
    known = [p for p in planned if p is not None]
    if unknown or (not_created and not known):
        if estimate is None:
            return None
        epochs_planned += sum(max(estimate, e) for e in unknown)
        known = known or [estimate]
    if not_created and known:
        epochs_planned += not_created * sum(known) / len(known)
    return round(epochs_planned)


def format_progress(
    status: dict,
    elapsed_s: float,
    metric: str = Objective.metric,
    log_lines: Mapping[str, str] | None = None,
) -> list[str]:
    """The console block for a `sweep_status` dict: a summary line, then one line per running trial.

    The ETA is `eta_seconds`'s: `?` until an epoch has been timed, while the planned epochs are
    unknown (command trials before one has finished), or while trials run past the estimate
    (never `0:00:00` while any runs).
    An accuracy held as a fraction is shown in % (`trainables.experiment.rules.shown_as_percent`), as the
    tables show it. At most RUNNING_LINES trial lines; the rest are counted.
    Args:
        elapsed_s: seconds since the sweep (this run of it) began.
        log_lines: trial name -> last line of its log, printed under the trial's line (`--status`).
    """
    s = status
    eta_s = eta_seconds(s)
    eta = format_duration(eta_s) if eta_s is not None else "?"
    best = f"best {metric} {_num(s['best'][0], metric)} ({s['best'][1]})" if s["best"] else f"best {metric} -"
    planned = s["epochs_planned"]
    epochs = f"{s['epochs_done']}" + (f"/{planned}" if planned is not None else "")
    lines = [
        f"[{format_duration(elapsed_s)}] {s['total']} trials: {describe_counts(s)} | {best} | "
        f"epochs {epochs} | ETA {eta}"
    ]
    width = max((len(name) for name, _, _ in s["running_trials"][:RUNNING_LINES]), default=0)
    for name, result, planned in s["running_trials"][:RUNNING_LINES]:
        gpus = result.get("gpu_ids")
        loss = f"train/loss {_num(result['train/loss'])}  " if "train/loss" in result else ""  # only if printed
        lines.append(
            f"  {name:<{width}}  epoch {result.get('epoch', 0)}{f'/{planned}' if planned is not None else ''}  "
            f"{metric} {_num(result.get(metric), metric)}  {loss}" + (f"GPU {gpus}" if gpus else "CPU")
        )
        if log_lines and log_lines.get(name):
            lines.append(f"    {log_lines[name]}")
    if len(s["running_trials"]) > RUNNING_LINES:
        lines.append(f"  ... and {len(s['running_trials']) - RUNNING_LINES} more running")
    return lines


def eta_seconds(status: dict) -> float | None:
    """Seconds until the trials of a `sweep_status` dict have all ended, by the sweep's wall-time
    model (`analysis/wall_time.py`, as `--estimate` predicts it) fed with the epochs timed so far:
    each running trial needs its epochs left at its own latest epoch's time, each trial not started
    its start-up and epochs, and they share the sweep's slots (`slots`: the most trials seen
    running at once, at least those running now and one), longest first. None until an epoch has
    been timed, while a trial's length is unknown, when none is left but trials still run (never
    `0:00:00` then), or when the sweep was stopped with trials left."""
    if not status["running"] + status["pending"] and status.get("interrupted", 0) + status.get("not_run", 0):
        return None  # the sweep was stopped: nothing runs until it is resumed
    left = status.get("time_left")
    if left is None:
        return None
    eta = makespan(left["pending"], max(1, status.get("slots") or 0, status["running"]), left["running"])
    return eta if eta > 0 or not status["running"] + status["pending"] else None


def format_duration(seconds: float) -> str:
    """`H:MM:SS` for a duration in seconds (negative counts as 0)."""
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _num(value, metric: str = "") -> str:
    """`value` with 4 decimals; an accuracy held as a fraction as the tables show it, `83.40%`."""
    if not isinstance(value, (int, float)):
        return "-"
    return show_value(metric, value)


def _finite(value, default: float) -> float:
    return value if isinstance(value, (int, float)) and not math.isnan(value) else default

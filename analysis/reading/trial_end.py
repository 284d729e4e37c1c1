"""Why each trial ended: it finished, its scheduler pruned it, the sweep's time budget stopped it, ...

One rule for the search's console table (`sweeps/lr_search.py`), the report's search table and
``--json``. A trial was pruned only when its scheduler stopped it, as
:func:`analysis.reading.scheduler_stop.stopped_by_scheduler` decides from the ``done`` Tune puts on the
result a STOP was made at (``result.json``). Beyond that rule: a trainable that returns gets ``done``
only in the experiment state's last result (Tune does not log the repeated final result), and a trial
that Tune stops with the whole sweep (``TuneConfig(time_budget_s=...)``: ``TimeoutStopper.stop_all``)
gets ``done`` nowhere: stopped by the time budget. No Ray import; pandas only in :func:`end_reasons`.
"""

from __future__ import annotations

from analysis.reading.scheduler_stop import STOPPED, stopped_by_scheduler

END_REASONS = {
    "finished": "finished",
    "pruned": "pruned by the scheduler",
    "budget": "stopped by the time budget",
    "errored": "errored",
    "diverged": "diverged",
    "running": "running",
    "pending": "pending",
    "paused": "paused",
}
"""Each end reason and its words in tables (``pruned``: "pruned by ASHA" where the scheduler is known)."""

_LIVE = {"RUNNING": "running", "PENDING": "pending", "PAUSED": "paused"}


def end_reason(
    status: str | None,
    diverged: bool,
    iterations: int,
    planned: int | None,
    stopped: bool | None,
    done: bool | None,
) -> str:
    """Why one trial ended, a key of :data:`END_REASONS`.

    Args:
        status: Tune's trial status (``TERMINATED``, ``ERROR``, ``RUNNING``, ``PENDING``, ``PAUSED``);
            None counts as ``TERMINATED``.
        diverged: the trial reported a non-finite metric or ``diverged: True``.
        iterations: results it reported (``training_iteration`` of its last result).
        planned: iterations it would run to the end (its ``epochs``), or None when unknown.
        stopped: ``done`` of its last *logged* result (``result.json``): a scheduler or stopper said
            STOP there; None when unknown (``ResultGrid.get_dataframe()``: then ``done`` stands for it).
        done: ``done`` of its last result as Tune's state holds it (True also for a trainable that
            returned); None when unknown.
    Returns:
        ``errored`` / ``diverged`` / ``running`` / ``pending`` / ``paused`` from the status; a
        terminated trial is ``pruned`` when its scheduler stopped it (``stopped_by_scheduler``: a STOP
        before its planned end, or any STOP when that end is unknown), ``budget`` when Tune stopped it
        without ever marking it done before that end, else ``finished``.
    """
    if status == "ERROR":
        return "errored"
    if diverged:
        return "diverged"
    if status in _LIVE:
        return _LIVE[status]
    if stopped is None:  # no logged result to tell: Tune's own `done` stands for a STOP
        stopped = done
    if stopped_by_scheduler({"done": stopped, "training_iteration": iterations}, planned):
        return "pruned"
    early = planned is None or iterations < planned
    return "budget" if done is False and early else "finished"


def end_reasons(trials, planned: int | None = None):
    """:func:`end_reason` of each row of a trial table, as a pandas Series (same index).

    Args:
        trials: a :func:`analysis.load_trials` table (``status``, ``diverged``, ``iterations``,
            ``stopped``, ``done``, ``config/epochs``) or ``ResultGrid.get_dataframe()``
            (``training_iteration``, ``done``, ``config/epochs``); a column that is absent counts
            as unknown (a status as ``TERMINATED``).
        planned: iterations of a full trial (ASHA's max_t); default each trial's ``config/epochs``,
            else unknown.
    """
    import pandas as pd

    iterations = next((trials[c] for c in ("iterations", "training_iteration") if c in trials), None)
    iterations = pd.to_numeric(iterations if iterations is not None else pd.Series(0, index=trials.index))
    iterations = iterations.fillna(0).astype(int)
    if planned is not None:
        plan = pd.Series(planned, index=trials.index)
    elif "config/epochs" in trials:
        plan = pd.to_numeric(trials["config/epochs"], errors="coerce")
    else:
        plan = pd.Series(None, index=trials.index, dtype=object)

    def column(name):
        return trials[name] if name in trials else pd.Series(None, index=trials.index, dtype=object)

    reasons = [
        end_reason(
            status,
            bool(diverged) if diverged == diverged and diverged is not None else False,
            int(n),
            None if p is None or p != p else int(p),
            _flag(stopped),
            _flag(done),
        )
        for status, diverged, n, p, stopped, done in zip(
            column("status"), column("diverged"), iterations, plan, column(STOPPED), column("done")
        )
    ]
    return pd.Series(reasons, index=trials.index, name="ended", dtype=object)


def _flag(value) -> bool | None:
    """True/False, or None for a missing value (None, NaN)."""
    if value is None or value != value:
        return None
    return bool(value)

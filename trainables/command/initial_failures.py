"""The driver's side of `trainables/command/failure_gate.py`: the sweep's gate, the stop once its first trials
all failed before reporting any metric, or ended without it for the same reason (`--max-initial-failures`,
W&B's `WANDB_AGENT_MAX_INITIAL_FAILURES`), and one explanation per distinct error of such failures (read from
each trial's failure record, never from an error's text), with a hint that fits its cause.
"""

from __future__ import annotations

import os
import posixpath
from collections import defaultdict

import ray
from ray import tune

from trainables import ray_private
from trainables.command.failure_gate import (
    EARLY_FAILURE,
    EARLY_FAILURE_METRIC,
    FAILURE_SIGNATURE_METRIC,
    SURVIVAL_WINDOW_S,
    WORKER_ENDED,
    WORKING_FOLDER,
    EarlyFailures,
    open_gate,
)
from trainables.command.parse import NO_RETRY_METRIC
from trainables.command.user_metrics import METRICS_FILE_ENV
from trainables.experiment import records
from trainables.experiment.outcome import (
    MISSING_ON_NODE,
    NO_METRIC,
    NO_METRIC_METRIC,
    NOT_STARTED,
    SET_UP,
    TrialFailure,
)

QUOTED_STDERR_LINES = 8  # of a failure before any metric, the last stderr lines printed


class InitialFailures(tune.Callback, tune.Stopper):
    """Tune callback and stopper (one object, in `RunConfig.callbacks` and `RunConfig.stop`): opens
    the sweep's `FailureGate` when `fit()` starts, counts the trial errors marked as failures before
    any metric (`EARLY_FAILURE_METRIC` in the trial's last result; a `no metric` by its reason,
    `FAILURE_SIGNATURE_METRIC`) as the gate does (`EarlyFailures`), and stops the sweep (`stop_all`) once they
    reach `limit` before any trial reported `metric`. Counting handled errors, not the gate's tally, lets the
    last of them end as ERROR before the stop ends the other trials (those running then end not run,
    or interrupted when they had reported a result: `outcome.trial_outcome`).
    Each trial that errors or ends has the tickets its dead workers held released (`FailureGate.forget`):
    a worker that died after its turn, before its command started, counts as such a failure too."""

    def __init__(self, limit: int, survival_s: float = SURVIVAL_WINDOW_S, metric: str | None = None):
        """Args: limit: --max-initial-failures (>= 0; 0: the sweep never stops for them); survival_s:
        --survival-window-s, seconds a command runs without failing that open the gate; metric: --metric,
        whose first report shows that the command works (None: any result)."""
        self.why = f"its first {limit} trial attempts failed before reporting any metric"  # once it stops
        self.limit, self.stopping, self.reported, self._gate = limit, False, False, None
        self.failures = EarlyFailures()
        self.workers_ended = 0  # of `failures`: workers that died after their turn, before their command started
        self.survival_s, self.metric = survival_s, metric

    def setup(self, **info):
        # afresh for each fit() (a resume, an out-of-memory re-run round); this handle keeps the actor alive, so a
        # later fit() of this driver resets it: a handle found by name would not (the first one's loss ends it)
        if self._gate is None:
            self._gate = open_gate(self.limit, self.survival_s)
        else:
            self._gate.reset.remote(self.limit, self.survival_s)
        self.stopping, self.failures, self.reported, self.workers_ended = False, EarlyFailures(), False, 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        marked = any(result.get(mark) for mark in (EARLY_FAILURE_METRIC, NO_RETRY_METRIC))
        if not marked and (self.metric is None or self.metric in result):
            self.reported = True  # the command works

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._count(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._count(trial)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._forget(trial, count=False)

    def _count(self, trial) -> None:
        """Count `trial`'s error if it failed before any metric; stop the sweep at `limit` of them."""
        ended, last = self._forget(trial, count=True), trial.last_result or {}
        if last.get(NO_METRIC_METRIC) and last.get(FAILURE_SIGNATURE_METRIC):
            self.failures.add(str(last[FAILURE_SIGNATURE_METRIC]), no_metric=True)
        elif last.get(EARLY_FAILURE_METRIC) or ended > 0:
            self.failures.add(WORKER_ENDED if ended else EARLY_FAILURE)  # any error counts: its text is not needed
        self.workers_ended += ended > 0
        if self.limit and not self.reported and not self.stopping and self.failures.count() >= self.limit:
            self.stopping = True
            if len(self.failures.crashes) < self.limit:  # exits without the metric, for one reason
                self.why = f"its first {self.limit} trials ended without reporting {self.metric or 'the metric'}"
                self.why += ", for the same reason"
            died = f"; {self.workers_ended} of them: {WORKER_ENDED} (killed?)" if self.workers_ended else ""
            print(f"stopping the sweep: {self.why} (--max-initial-failures {self.limit}){died}", flush=True)

    def _forget(self, trial, count: bool) -> int:
        """Release the tickets `trial`'s dead workers still hold at the gate; with `count`, returns how many
        died before their command started (each counts), and records that as the trial's failure when its
        worker wrote none (a watchdog's record, `trainables/command/startup.py`, says more)."""
        try:
            ended = ray.get(self._gate.forget.remote(trial.trial_id, count)) if self._gate is not None else 0
        except ray.exceptions.RayError as e:  # the gate's node or worker is gone: a retry, never the sweep's end
            print(
                f"warning: the sweep's failure gate did not answer for trial {trial} ({type(e).__name__}): "
                "its tickets are not released; Tune's retries go on",
                flush=True,
            )
            return 0
        folder = ray_private.trial_folder_uri(trial) if ended else None
        if folder and records.read_failure(folder) is None:
            failure = TrialFailure(
                kind=SET_UP,
                signature=f"{SET_UP}: {WORKER_ENDED}",
                exit_code=None,
                exception=WORKER_ENDED,
                missing_path=None,
                tail=(),
                source="traceback",
                summary=f"failed before its command started: {WORKER_ENDED} (killed, or out of memory?)",
                working_folder=folder,
                early=True,
            )
            records.write_failure(folder, failure)
        return ended

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False  # no single trial is stopped by this

    def stop_all(self) -> bool:
        return self.stopping

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_gate": None}  # the Tuner pickles its RunConfig; the actor is this run's


def explain(failures: dict[str, TrialFailure]) -> None:
    """Print each distinct failure before any metric once: how many trials it ended, the command's
    exit (for `no metric`, what each source held) and working folder, the last lines of its stream, and a hint
    fitting the cause.

    Args:
        failures: trial folder -> its failure record (`records.read_failure`), each `early`.
    """
    groups, not_started = defaultdict(list), 0
    for folder, failure in failures.items():
        if failure.kind == NOT_STARTED:
            not_started += 1
        else:
            groups[failure.signature].append((folder, failure))
    for members in sorted(groups.values(), key=len, reverse=True):
        folder, failure = members[0]
        tail, alike = [line for line in failure.tail if line.strip()], ", the same way" if len(members) > 1 else ""
        what = (
            f"error: {len(members)} trial(s) ended without the sweep's metric{alike}: {failure.summary}\n"
            f"  {failure.detail}\n  command: {failure.command}\n"
            if failure.kind == NO_METRIC  # what each source held, once
            else f"error: {len(members)} trial(s) failed {EARLY_FAILURE}, with the same error: "
            f"{failure.exception or (tail[-1].strip() if tail else '(no stderr output)')}\n"
            f"  {failure.summary}{f': {failure.command}' if failure.command else ''}\n"
        )
        print(
            what + f"  {WORKING_FOLDER}{failure.working_folder} (trial {posixpath.basename(str(folder))})\n"
            f"  its last {failure.source} lines ({posixpath.join(str(folder), 'error.txt')}):\n"
            + "\n".join(f"    {line}" for line in tail[-QUOTED_STDERR_LINES:])
            + f"\n{hint(failure)}"
        )
    if not_started:
        print(f"{not_started} trial(s) not started: the sweep stopped after its first trials failed")


def hint(failure: TrialFailure, in_check: bool = False) -> str:
    """A hint fitting a command's failure: an exit without the metric, the shapes read and --metric-pattern;
    a missing relative path names the path, the trial's working folder and what it resolves to there; an
    absolute one, the path; exit code 2, argparse; else --check (`in_check`: the failure is --check's own run,
    whose output is shown above)."""
    path, folder = failure.missing_path, failure.working_folder
    if failure.kind == NO_METRIC:
        return (
            "hint: raysweep reads the printed line shapes of docs/output-shapes.md (`epoch=3 val_acc=0.81`, "
            "`val_acc: 0.81` after `Epoch 3/10`, progress bars, Hugging Face's dicts, ...), JSON lines in "
            f"${METRICS_FILE_ENV} and tracker records (--metrics-from); for another shape give --metric-pattern, "
            r"a regex naming each metric (e.g. 'epoch (?P<epoch>\d+) val_acc (?P<val_acc>[\d.]+)'); where a key held "
            "above is the metric under another name, give it to --metric; try either on one cell with --check"
        )
    if failure.kind == MISSING_ON_NODE:
        return "hint: the command names a path this node lacks: put it at the same path on every node"
    if failure.kind == SET_UP:
        return (
            "hint: nothing of the command ran: the trial failed while making its working folder and environment "
            "on its node (the error above; trainables/command/startup.py)"
        )
    if path and not os.path.isabs(path):
        return (
            f"hint: {path!r} is relative to the trial's working folder {folder}, where it resolves to "
            f"{os.path.normpath(os.path.join(folder, path))}, which does not exist. Trials run in their own "
            "copy of the launch folder (docs/trial-folders.md): fix the path, or run every trial in the launch "
            "folder itself with --in-place"
        )
    if path:
        return f"hint: {path} does not exist on the node that ran the trial"
    if failure.exit_code == 2:
        return "hint: exit code 2 is argparse's usage error: the script refused the arguments the command gives it"
    if in_check:
        return "hint: the error is the script's own (its output is above): fix it, then run --check again"
    return "hint: run the first cell alone, in the foreground, with --check (a retry cannot fix an error at start)"

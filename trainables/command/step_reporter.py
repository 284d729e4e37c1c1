"""What a command trial reports to Tune: each result once across retries and `--resume`, with a `Checkpoint`
holding its step, and the trial's end when a result diverged (`docs/command-trial-internals.md`)."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ray import tune
from ray.tune import Checkpoint

from trainables import divergence, ray_private
from trainables.command.failure_gate import GateTicket
from trainables.command.parse import non_finite
from trainables.command.sources import STDOUT_LOG, last_reported_step, recorded_row, recorded_steps
from trainables.experiment import records
from trainables.proctitle import refresh_title

LATE_ROWS_WAIT_S = 5.0  # the longest Tune's stop of a trial waits for the rows its command wrote (`holding_stop`)


@dataclasses.dataclass
class StepReporter:
    """Reports each result once, across retries and `--resume`: results at or below the last step
    reported before (the step Checkpoint, or the trial's history) are skipped."""

    step_key: str
    trial_folder: Path
    last_step: float | None = None  # the highest step reported, by this attempt or one before it
    recorded: set | None = None  # the steps in the trial's own history; a checkpoint may outlive its row
    restarted: bool = False  # a retry or --resume of this trial
    parsed: int = 0  # results seen in this run, reported or skipped as reported before
    seen: dict = dataclasses.field(default_factory=dict)  # the metric names of those results, in first-seen order
    reported_before: bool = False  # an earlier attempt reported a result (its metric names are not known here)
    last_result: dict | None = None  # the result last reported: by this attempt, or the history's last row
    ticket: GateTicket = dataclasses.field(default_factory=GateTicket)  # told once `works`
    works_when: tuple = ()  # the metrics whose first report tells the gate the command works (--metric)
    works: bool = False  # this attempt's results held each of `works_when` (without them: it reported a result)
    extra_metrics: Callable[[], dict] = dict  # merged into each result reported: the trial's GPU (`gpu_report`)
    stopped: bool = False  # Tune stopped the trial (a scheduler, a time budget): it takes no report now
    recent: list = dataclasses.field(default_factory=list)  # the last rows, for `keep_late`
    cut: bool = True  # the command was still running when Tune stopped the trial (the runner says when it was not)
    idle: threading.Event = dataclasses.field(default_factory=lambda: _set(threading.Event()))  # clear in report_new
    kept: threading.Event = dataclasses.field(default_factory=threading.Event)  # set once `holding_stop` is left
    command_exited: Callable[[], bool] = lambda: False  # whether the command has exited (the runner's `proc.poll`)

    @classmethod
    def after_restart(cls, step_key: str, trial_folder: Path, checkpoint) -> StepReporter:
        """The reporter of a trial whose Tune `checkpoint` (None on a first start) and folder say
        where a retry or `--resume` goes on from. Its `checkpoint_*` folders count only beside the trial's
        history (`result.json`): the worker stores a step's checkpoint before the driver logs its row, and a
        worker killed before any row was logged left a folder whose rows the history never got. The history's
        last row is the result a final result at its step joins (`report_new`): a command that printed its last
        epoch, then was killed before its final figures, prints both again, and its history gets one joined row,
        not a second row of that step (which counted one epoch more, its final figures on a row of their own)."""
        history = trial_folder / "result.json"
        last_step = last_reported_step(checkpoint, trial_folder if history.exists() else None)
        restarted = last_step is not None or (trial_folder / STDOUT_LOG).exists()
        recorded = None
        if restarted and history.exists():
            recorded = recorded_steps(history)
            last_step = max(recorded, default=None)
        reporter = cls(step_key, trial_folder, last_step, recorded, restarted, reported_before=last_step is not None)
        if recorded:  # final figures at the last step join its row, as in one attempt
            last_row = recorded_row(history, last_step)
            reporter.last_result = last_row if step_key in last_row else None
        return reporter

    def report_new(self, results: list[dict], final: bool = False, missing: bool = False) -> bool:
        """Report the results not reported before; True when one diverged (the trial then ends).
        A final result (printed after the last step line) may share the last reported step: it is
        then reported joined to that step's row, marked `records.JOINS_STEP_METRIC` (the tables keep only
        the joined row); `missing` results are rows the history lacks, reported whatever their step.
        A trial Tune stops during the batch keeps the rest of the batch with it, in one `late_rows.json` write;
        Tune's stop waits for it while `idle` is clear (`holding_stop`)."""
        self.idle.clear()
        try:
            return self._report_batch(results, final, missing)
        finally:
            if self.stopped and results:
                self.keep_late()
            self.idle.set()

    def _report_batch(self, results: list[dict], final: bool, missing: bool) -> bool:
        """`report_new` of one batch: True when a result diverged (the results after it are not reported)."""
        key = self.step_key
        for result in results:
            self.parsed += 1
            self.seen.update(dict.fromkeys(result))
            if non_finite(result):
                _report_divergence(result, key, self.trial_folder, self.extra_metrics())
                return True
            last = self.last_step
            if not missing and last is not None and (result[key] < last or (result[key] == last and not final)):
                continue  # reported before a retry / resume; the script redid it from its own checkpoint
            if final and self.last_result is not None and self.last_result[key] == result[key]:
                result = {**self.last_result, **result, records.JOINS_STEP_METRIC: 1}
            self._report(result | self.extra_metrics())
            if not self.works and all(m in self.seen for m in self.works_when):
                self.works = True  # the sweep's other trials may start; lines without the metric do not count
                self.ticket.call("reported")
            self.last_result = result
            self.last_step = result[key] if last is None else max(last, result[key])
        return False

    def _report(self, result: dict) -> None:
        """`tune.report` one result with a `Checkpoint` holding its step (see the module docstring), unless Tune
        stopped the trial (its report then raises SystemExit); the last ones are kept for `keep_late`, which
        `report_new` calls once the batch is read."""
        metrics = {**result, "epoch": result[self.step_key]}
        self.recent = [*self.recent[1 - records.LATE_ROWS_KEPT :], {**metrics, "timestamp": int(time.time())}]
        if self.stopped:
            return
        with tempfile.TemporaryDirectory() as folder:
            records.write_command_step(folder, result[self.step_key])
            try:
                tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
            except SystemExit:  # Tune stopped the trial while it was reporting: the row may never be logged
                self.stopped = True
        refresh_title()  # Ray retitled the worker around the report

    def keep_late(self) -> None:
        """Once Tune stopped the trial, write its last rows as `late_rows.json` (the history adds those it lacks)."""
        if self.stopped and self.recent:
            records.write_late_rows(self.trial_folder, self.recent, self.cut)

    @contextlib.contextmanager
    def holding_stop(self) -> Iterator[None]:
        """While in this block (the trial's run of its command), Tune's stop of the trial waits, at most
        `LATE_ROWS_WAIT_S` in all (`ray_private.wait_in_trial_stop`), for the batch being reported (`idle`), and,
        when the command had already exited, until the block is left: the rows it wrote are then all read
        and kept. Tune removes a stopped trial's worker 0.01-0.2 s after its stop, often before the rows read
        with the stopping result were written, or the rows of an exited command read after them (a tracker's
        file written as the script exits holds all its epochs, its last step reported once the command has
        ended: a CI run lost that row under load, 2026-11-30). A command still running when stopped is
        not waited for (it is ended, and what it logs meanwhile is kept only while the worker lives, as
        before); a trial that left the block is not waited for. Without that Ray internal: no wait."""

        def wait_for_rows(timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            self.idle.wait(timeout_s)
            if self.command_exited():
                self.kept.wait(max(0.0, deadline - time.monotonic()))

        try:
            ray_private.wait_in_trial_stop(wait_for_rows, LATE_ROWS_WAIT_S)
        except (ImportError, AttributeError):
            pass
        try:
            yield
        finally:
            self.kept.set()


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


def _report_divergence(result: dict, step_key: str, trial_folder: Path, extra: dict) -> None:
    """End a trial whose result holds NaN/inf: `divergence.json` and one last `diverged` report (with `extra`)."""
    bad = non_finite(result)
    dump = {
        "epoch": result.get("epoch", result[step_key]),
        "step": result[step_key],
        "last_finite_loss": None,
        "parameters": [],
        "gradients": [],
        "non_finite_metrics": bad,
        "result": {k: v if k not in bad else str(v) for k, v in result.items()},
    }
    divergence.write_dump(trial_folder, dump)
    tune.report({**extra, **divergence.diverged_metrics(dump), "diverged/metrics": ",".join(bad)})

"""The driver's side of `trainables/command/failure_gate.py`: the sweep's gate, the stop once its first trials
all failed before reporting any metric (`--max-initial-failures`, W&B's `WANDB_AGENT_MAX_INITIAL_FAILURES`),
and one explanation per distinct error of such failures, with a hint that fits its cause.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections import defaultdict

from ray import tune

from trainables.command.failure_gate import (
    EARLY_FAILURE,
    EARLY_FAILURE_METRIC,
    SURVIVAL_WINDOW_S,
    WORKING_FOLDER,
    exception_line,
    missing_path,
    open_gate,
)
from trainables.command.parse import NO_RETRY_METRIC

NOT_STARTED = "not started: "  # the error of a trial that waited at the gate when the sweep stopped
QUOTED_STDERR_LINES = 8  # of a failure before any metric, the last stderr lines printed
# Ray's `RayTaskError` text puts `ray::ImplicitFunc.train() (pid=.., ip=..)` in place of each `Traceback ...` line,
# the script's own ones (in the stderr tail) included: they are put back.
_RAY_HEADER = re.compile(r"ray::\S+\(\).*\(pid=\d+")
_TRACEBACK = "Traceback (most recent call last):"


class InitialFailures(tune.Callback, tune.Stopper):
    """Tune callback and stopper (one object, in `RunConfig.callbacks` and `RunConfig.stop`): opens
    the sweep's `FailureGate` when `fit()` starts, counts the trial errors marked as failures before
    any metric (`EARLY_FAILURE_METRIC` in the trial's last result), and stops the sweep (`stop_all`)
    once `limit` of them were handled before any trial reported a result. Counting handled errors,
    not the gate's tally, lets the last of them end as ERROR before the stop ends the other trials."""

    def __init__(self, limit: int, survival_s: float = SURVIVAL_WINDOW_S):
        """Args: limit: --max-initial-failures (>= 0; 0: the sweep never stops for them); survival_s:
        --survival-window-s, seconds a command runs without failing that open the gate."""
        self.limit, self.stopping, self.failures, self.reported, self._gate = limit, False, 0, False, None
        self.survival_s = survival_s

    def setup(self, **info):
        # afresh for each fit() (a resume, an out-of-memory re-run round); the handle keeps the actor alive
        self._gate = open_gate(self.limit, self.survival_s)
        self.stopping, self.failures, self.reported = False, 0, False

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not any(result.get(mark) for mark in (EARLY_FAILURE_METRIC, NO_RETRY_METRIC)):
            self.reported = True  # the command works

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._count(trial)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._count(trial)

    def _count(self, trial) -> None:
        """Count `trial`'s error if it failed before any metric; stop the sweep at `limit` of them."""
        self.failures += bool((trial.last_result or {}).get(EARLY_FAILURE_METRIC))
        if self.limit and not self.reported and not self.stopping and self.failures >= self.limit:
            self.stopping = True
            print(
                f"stopping the sweep: its first {self.limit} trial attempts failed before reporting any metric "
                f"(--max-initial-failures {self.limit})",
                flush=True,
            )

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False  # no single trial is stopped by this

    def stop_all(self) -> bool:
        return self.stopping

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_gate": None}  # the Tuner pickles its RunConfig; the actor is this run's


def is_early(error) -> bool:
    """Whether a trial's error is a command's failure before any metric, or a start the gate refused."""
    text = str(error)
    return EARLY_FAILURE in text or NOT_STARTED in text


def explain(errors: dict[str, object]) -> None:
    """Print each distinct failure before any metric once: how many trials it ended, the command's
    exit and working folder, the last stderr lines, and a hint fitting the cause.

    Args:
        errors: trial folder -> its error (`Result.error`), each `is_early`.
    """
    groups, not_started = defaultdict(list), 0
    for folder, error in errors.items():
        parts = _parts(str(error))
        if parts is None:
            not_started += 1
            continue
        blanked = (parts["exception"] or parts["last"]).replace(parts["folder"], "{trial_dir}")
        groups[blanked].append((folder, parts))
    for _, members in sorted(groups.items(), key=lambda item: -len(item[1])):
        folder, parts = members[0]
        print(
            f"error: {len(members)} trial(s) failed {EARLY_FAILURE}, with the same error: "
            f"{parts['exception'] or parts['last']}\n"
            f"  {parts['exit']}\n  {WORKING_FOLDER}{parts['folder']} (trial {posixpath.basename(str(folder))})\n"
            f"  its last stderr lines ({posixpath.join(str(folder), 'error.txt')}):\n"
            + "\n".join(f"    {line}" for line in parts["tail"][-QUOTED_STDERR_LINES:])
            + f"\n{hint(parts)}"
        )
    if not_started:
        print(f"{not_started} trial(s) not started: the sweep stopped after its first trials failed")


def hint(parts: dict, in_check: bool = False) -> str:
    """A hint fitting a failure before any metric: a missing relative path names the path, the trial's
    working folder and what it resolves to there; an absolute one, the path; else --check (`in_check`:
    the failure is --check's own run, whose output is shown above)."""
    path = missing_path("\n".join([*parts["tail"], parts["exception"] or ""]))
    folder = parts["folder"]
    if path and not os.path.isabs(path):
        return (
            f"hint: {path!r} is relative to the trial's working folder {folder}, where it resolves to "
            f"{os.path.normpath(os.path.join(folder, path))}, which does not exist. Trials run in their own "
            "copy of the launch folder (docs/trial-folders.md): fix the path, or run every trial in the launch "
            "folder itself with --in-place"
        )
    if path:
        return f"hint: {path} does not exist on the node that ran the trial"
    if "exit code 2 " in parts["exit"]:
        return "hint: exit code 2 is argparse's usage error: the script refused the arguments the command gives it"
    if in_check:
        return "hint: the error is the script's own (its output is above): fix it, then run --check again"
    return "hint: run the first cell alone, in the foreground, with --check (a retry cannot fix an error at start)"


def _parts(text: str) -> dict | None:
    """The pieces of a `trainables/command/runner.py` error of a failure before any metric: the exit line,
    the working folder, the stderr tail, its exception line and last line; None for a start refused."""
    lines = [_TRACEBACK if _RAY_HEADER.search(line) else line for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if EARLY_FAILURE in line and "command exited" in line), None)
    if start is None:
        return None
    exit_line = lines[start][lines[start].index("command exited") :]
    folder = next((line[len(WORKING_FOLDER) :] for line in lines[start:] if line.startswith(WORKING_FOLDER)), "")
    tail_start = next((i + 1 for i in range(start, len(lines)) if lines[i].startswith("last ")), len(lines))
    tail = [line for line in lines[tail_start:-1] if line.strip()]
    return {
        "exit": exit_line,
        "folder": folder,
        "tail": tail,
        "exception": exception_line(tail),
        "last": tail[-1].strip() if tail else "(no stderr output)",
    }

"""Failures a retry cannot fix are not retried: Tune's `FailureConfig` retries every error alike.

A command trial whose command exits 2 (argparse's usage error) or exits 0 without printing any
metric would do the same again, so `trainables/command/runner.py` reports `NO_RETRY_METRIC` just before
raising. Tune delivers a trial's results before its error (`ray/train/_internal/session.py:get_next`
raises the runner's error only once every result is consumed), so this callback sees the marker
first and lowers that trial's `max_failures` to the failures it has had: `Trial.should_recover`
(`num_failures <= max_failures`) is then false for the error that follows, and Tune ends the trial
as ERROR at once instead of re-queuing it. Other trials keep `FailureConfig.max_failures`.
"""

from __future__ import annotations

from ray import tune

from trainables import ray_private
from trainables.command.parse import NO_RETRY_METRIC


class NoRetryOnMarkedError(tune.Callback):
    """Tune callback: a trial whose result holds `NO_RETRY_METRIC` is not retried after its next error."""

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get(NO_RETRY_METRIC):
            ray_private.stop_retries(trial)  # the error that follows makes num_failures exceed max_failures

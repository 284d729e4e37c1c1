"""Ray Tune's `OptunaSearch` as a search over trials that may end without their metric."""

from __future__ import annotations


def skip_results_without(searcher_class, metric_name: str):
    """`searcher_class` (Tune's `OptunaSearch`) told only of results that hold the metric.

    A diverged trial's last report has no metric, so that schedulers skip it; Tune's
    `OptunaSearch.on_trial_result` indexes `result[metric]` and would crash the whole search on it
    (a KeyError in the driver). Its `on_trial_complete` already records such a trial as pruned.
    """

    class Searcher(searcher_class):
        def on_trial_result(self, trial_id: str, result: dict) -> None:
            if metric_name in result:
                super().on_trial_result(trial_id, result)

    Searcher.__name__ = Searcher.__qualname__ = searcher_class.__name__
    return Searcher

"""Trial names in process titles: `ps` / `htop` / the dashboard show `ray::<trial name>` (issue 21)."""

from __future__ import annotations

import psutil

from tests.helpers.processes import title_of
from trainables import ray_private
from trainables.proctitle import refresh_title, report_then_refresh, trial_process_title


def test_title_is_the_trial_name_in_the_block_refreshed_after_a_report_and_restored_after():
    setproctitle = ray_private.proctitle_functions()[0]

    setproctitle("ray::ImplicitFunc.train")
    reports = []
    with trial_process_title("asym_0.375_seed1"):
        assert title_of(psutil.Process().pid) == "ray::asym_0.375_seed1"
        report = report_then_refresh(lambda metrics: (reports.append(metrics), setproctitle("ray::ImplicitFunc.train")))
        report({"epoch": 1})  # Ray retitles the worker around each report; the trial's title comes back
        assert reports == [{"epoch": 1}]
        assert title_of(psutil.Process().pid) == "ray::asym_0.375_seed1"
    assert title_of(psutil.Process().pid) == "ray::ImplicitFunc.train"  # the actor is reused: put back
    refresh_title()  # no trial running: nothing to put back
    assert title_of(psutil.Process().pid) == "ray::ImplicitFunc.train"
    with trial_process_title(None):  # outside Tune: left alone
        assert title_of(psutil.Process().pid) == "ray::ImplicitFunc.train"

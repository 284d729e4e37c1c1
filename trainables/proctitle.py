"""Trial names in process titles: `ps`, `htop`, `nvidia-smi` and the dashboard name the trial.

Ray titles a trial's worker process `ray::ImplicitFunc.train` for every trial. While a trial
runs, `trial_process_title` retitles its worker `ray::<trial name>` (e.g. `ray::asym_0.375_seed1`)
with the `setproctitle` Ray itself uses (`ray._raylet.setproctitle`, Ray's vendored copy of
py-setproctitle; the `setproctitle` package where that is missing), and puts the previous title
back when the trial ends, since Tune reuses actors for the next trial.

Ray retitles the process around each call of the actor's `train` method, i.e. at each
`tune.report`; the training thread waits in `tune.report` until the next call has begun, so
calling `refresh_title()` right after each report (`report_then_refresh`) keeps the name there while the epoch runs.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator

TITLE_PREFIX = "ray::"
_current: list[str] = []  # titles of the trials running in this process (one, nested at most in tests)


def trial_title(trial_name: str) -> str:
    """The process title of a worker running `trial_name`: `ray::<trial name>`."""
    return TITLE_PREFIX + trial_name


@contextlib.contextmanager
def trial_process_title(trial_name: str | None) -> Iterator[None]:
    """Title this process `ray::<trial_name>` for the duration of the block, then restore the title.

    Args:
        trial_name: the trial's name; None (outside a trial) leaves the title alone.
    Never raises for a missing setproctitle: without one the title stays as it is.
    """
    set_title, get_title = _setproctitle()
    if trial_name is None or set_title is None:
        yield
        return
    previous, title = get_title(), trial_title(trial_name)
    _current.append(title)
    set_title(title)
    try:
        yield
    finally:
        _current.pop()
        set_title(previous)


def refresh_title() -> None:
    """Set the running trial's title again (call it after each report: Ray retitled the process);
    nothing outside `trial_process_title`."""
    set_title, _ = _setproctitle()
    if _current and set_title is not None:
        set_title(_current[-1])


def titled_trial(trainable: Callable) -> Callable:
    """Decorate a Tune Function-API trainable so that its worker is titled `ray::<trial name>`
    while it runs (Tune's trial name from `tune.get_context()`; outside Tune: untouched)."""

    @functools.wraps(trainable)
    def run_titled(*args, **kwargs):
        with trial_process_title(_tune_trial_name()):
            return trainable(*args, **kwargs)

    return run_titled


def report_then_refresh(report: Callable) -> Callable:
    """`report` (`tune.report`, `ray.train.report`) followed by `refresh_title()`."""

    @functools.wraps(report)
    def report_and_refresh(*args, **kwargs):
        result = report(*args, **kwargs)
        refresh_title()
        return result

    return report_and_refresh


def _tune_trial_name() -> str | None:
    try:
        from ray import tune

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tune.get_context().get_trial_name()
    except Exception:  # no Tune session
        return None


@functools.cache
def _setproctitle() -> tuple[Callable[[str], None] | None, Callable[[], str] | None]:
    """(setproctitle, getproctitle): Ray's own, else the `setproctitle` package, else (None, None)."""
    try:
        from trainables import ray_private

        return ray_private.proctitle_functions()
    except ImportError:
        pass
    try:
        from setproctitle import getproctitle, setproctitle

        return setproctitle, getproctitle
    except ImportError:
        return None, None

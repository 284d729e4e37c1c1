"""Optuna's own pictures of a study (``optuna.visualization.matplotlib``), called as a library: each returns
a ``Figure`` that pyplot no longer holds, and leaves no global state behind (Optuna's logger, its
experimental-feature warnings and its ``plt.style.use("ggplot")`` are contained here).

The study comes from :func:`analysis.figures.search.study_from_trials`; its COMPLETE trials are drawn.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from analysis.reading.search_record import import_optuna
from trainables.experiment.rules import DEFAULT_METRIC as METRIC

optuna = import_optuna()

EVALUATORS = {
    "PedAnovaImportanceEvaluator": "PED-ANOVA (Watanabe et al. 2023)",
    "FanovaImportanceEvaluator": "fANOVA (Hutter et al. 2014)",
    "MeanDecreaseImpurityImportanceEvaluator": "mean decrease in impurity of a random forest",
}
"""Optuna's importance evaluators and the method each computes (the caption names it)."""


def default_evaluator() -> optuna.importance.BaseImportanceEvaluator:
    """Optuna's default importance evaluator, the one ``get_param_importances`` uses when given none:
    PED-ANOVA since Optuna 4 (``PedAnovaImportanceEvaluator``), else fANOVA."""
    evaluator = getattr(optuna.importance, "PedAnovaImportanceEvaluator", optuna.importance.FanovaImportanceEvaluator)
    return evaluator()


def plot_optimization_history(study: optuna.Study, metric: str = METRIC) -> Figure:
    """Optuna's ``plot_optimization_history``: each COMPLETE trial's value against its number (the
    search's order) and the best value so far; pruned and unfinished trials have no value (Optuna)."""
    with optuna_quiet():
        ax = optuna.visualization.matplotlib.plot_optimization_history(study, target_name=metric)
        ax.set_xlabel("trial (the search's order)")
        return _detached(ax, (7, 4.5))


def plot_slice(study: optuna.Study, params: list[str], metric: str = METRIC) -> Figure:
    """Optuna's ``plot_slice``: ``metric`` of the COMPLETE trials against each parameter, one panel
    each, on a log axis where the parameter's distribution is log (as sampled), coloured by trial number."""
    with optuna_quiet():
        axes = optuna.visualization.matplotlib.plot_slice(study, params=params, target_name=metric)
        return _detached(axes, (max(6.0, 2.6 * len(params) + 1.5), 4.5))


def plot_param_importances(
    study: optuna.Study, params: list[str] | None = None, metric: str = METRIC, evaluator=None
) -> Figure:
    """Optuna's ``plot_param_importances`` with ``evaluator`` (default :func:`default_evaluator`),
    named in the title (:data:`EVALUATORS`)."""
    evaluator = evaluator or default_evaluator()
    with optuna_quiet():
        ax = optuna.visualization.matplotlib.plot_param_importances(
            study, evaluator=evaluator, params=params, target_name=metric
        )
        name = type(evaluator).__name__
        ax.set_title(f"Importance for {metric}: {EVALUATORS.get(name, name)}", loc="left")
        return _detached(ax, (7, 0.45 * len(ax.get_yticks()) + 2.5))


def plot_parallel_coordinate(study: optuna.Study, params: list[str], metric: str = METRIC) -> Figure:
    """Optuna's ``plot_parallel_coordinate`` of the COMPLETE trials (log axes where sampled log)."""
    with optuna_quiet():
        ax = optuna.visualization.matplotlib.plot_parallel_coordinate(study, params=params, target_name=metric)
        return _detached(ax, (2.2 * (len(params) + 2), 5))


@contextlib.contextmanager
def optuna_quiet():
    """Optuna as a library call: its logger at ERROR (``create_study`` logs each study at INFO), its
    ``ExperimentalWarning`` (every matplotlib function is experimental) silenced, and matplotlib's
    settings restored afterwards (those functions call ``plt.style.use("ggplot")``, a global change)."""
    import matplotlib

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with warnings.catch_warnings(), matplotlib.rc_context():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _detached(axes, size: tuple[float, float]) -> Figure:
    """The Figure of Optuna's Axes, sized and closed in pyplot: Optuna draws with
    ``plt.subplots``, and a figure left open there would stay in memory (and show twice in a notebook)."""
    import matplotlib.pyplot as plt

    fig = np.ravel(axes)[0].figure
    fig.set_size_inches(*size)
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                _log_labels(axis)
    plt.close(fig)
    return fig


def _log_labels(axis) -> None:
    """Readable labels on a log axis: powers of ten where one is in view, else 2 and 5 times them
    (matplotlib labels every minor tick of a span under a decade, one over another in a narrow panel)."""
    low, high = sorted(axis.get_view_interval())
    if low > 0 and math.floor(math.log10(high)) < math.ceil(math.log10(low)):
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    else:
        axis.set_minor_formatter(NullFormatter())

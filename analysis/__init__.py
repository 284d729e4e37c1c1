"""Tidy DataFrames, paper tables, best-run tables and plots for any Ray Tune experiment.

    trials, history = load_experiment("runs/noise_grid")     # or a list of experiments
    table = paper_table(trials, history)                     # methods × noise, the sweep's objective
    table = paper_table(trials, history, Objective(select="last"))  # or another one
    print(format_paper_table(table, "latex"))                # booktabs, best bold
    print(sweep_summary("runs/noise_grid"))                  # what a sweep prints at its end
    write_up("runs/noise_grid")                              # what `python -m analysis` does (runs/noise_grid/report)

Names are imported on first use (PEP 562), so ``import analysis`` and ``python -m analysis
--help`` stay fast: pandas, matplotlib and scipy load only when a function needs them.
"""

from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import Objective
from trainables.experiment.rules import SELECT_RULES, check_select, describe_select

_WHERE = {
    "analysis.reading.load": (
        "SEED_KEY",
        "config_column",
        "duplicates_line",
        "guess_mode",
        "load_experiment",
        "load_history",
        "load_trials",
        "metric_column",
        "reported_metrics",
        "resolve_objective",
        "varying_config_columns",
    ),
    "analysis.reading.tune_state": ("latest_experiment",),
    "analysis.statistics.select": ("add_selected", "select_values"),
    "analysis.tables.paper": ("paper_table",),
    "analysis.tables.paper_format": ("format_cell", "format_paper_table", "paper_caption", "write_paper_table"),
    "analysis.statistics.stats": ("bootstrap_ci", "holm", "paired_test", "seed_stats"),
    "analysis.tables.formatting": ("latex_escape",),
    "analysis.tables.summary": ("summary_text", "sweep_summary"),
    "analysis.figures.confusion": ("load_confusion", "per_class_accuracy"),
    "analysis.figures.curves": ("plot_learning_curves", "plot_metric_vs_noise_rate", "plot_paper_curves"),
    "analysis.figures.plots": ("plot_confusion", "plot_heatmap", "plot_timeline", "save_figure"),
    "analysis.writeup": ("write_up", "write_report"),
    "analysis.tables.best_runs": ("best_runs", "failed", "format_table", "write_table"),
    "analysis.figures.packing": ("sweep_efficiency", "timeline"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(
    [
        "ExperimentError",
        "Objective",
        "SELECT_RULES",
        "check_select",
        "describe_select",
        *_MODULE_OF,
    ]
)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

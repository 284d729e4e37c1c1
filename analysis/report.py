"""A report folder for one experiment: tables, figures and a report.md that embeds them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.load import (
    ExperimentError,
    config_column,
    guess_mode,
    load_experiment,
    metric_column,
    reported_metrics,
    varying_config_columns,
)
from analysis.plots import (
    plot_heatmap,
    plot_learning_curves,
    plot_metric_vs_noise_rate,
    plot_timeline,
    save_figure,
)
from analysis.tables import best_runs, format_table, write_table
from analysis.timeline import sweep_efficiency

DEFAULT_METRIC, DEFAULT_MODE = "val/acc", "max"
"""Fallback when the sweep recorded no metric (raysweep.json or TuneConfig) and it was reported."""


def resolve_metric(trials: pd.DataFrame, metric: str | None = None, mode: str | None = None) -> tuple[str, str]:
    """The metric and mode to report: given ones, else the sweep's, else ``val/acc``/``max``.

    The sweep's are those :func:`analysis.load_trials` found in ``raysweep.json`` or Tune's
    state (``trials.attrs``). A given metric without a mode takes the recorded mode when it is
    the recorded metric, else :func:`analysis.guess_mode`.

    Raises:
        ExperimentError: the metric was not reported (the message lists the reported ones), or
            no metric was given or recorded and ``val/acc`` was not reported.
        ValueError: ``mode`` is not ``"max"``/``"min"``.
    """
    recorded, recorded_mode = trials.attrs.get("metric"), trials.attrs.get("mode")
    if metric is None:
        if recorded:
            metric = recorded
        elif DEFAULT_METRIC in reported_metrics(trials):
            metric, recorded_mode = DEFAULT_METRIC, DEFAULT_MODE
            recorded = metric
        else:
            existing = ", ".join(reported_metrics(trials)) or "none"
            raise ExperimentError(f"the sweep recorded no metric; pass one with --metric (reported metrics: {existing})")
    metric_column(trials, metric)
    if mode is None:
        mode = recorded_mode if metric == recorded and recorded_mode else guess_mode(metric)
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', not {mode!r}")
    return metric, mode


def write_report(
    source: Any,
    out_dir: str | os.PathLike | None = None,
    metric: str | None = None,
    mode: str | None = None,
    *,
    formats: tuple[str, ...] = ("png",),
) -> Path:
    """Write the report of an experiment and return its folder.

    Contents: ``best_runs.csv/.md/.tex`` (:func:`analysis.best_runs`; ``best_runs.txt`` is
    the console rendering the CLI prints), ``trials.csv``
    (:func:`analysis.load_trials`), figures ``learning_curves``, ``metric_vs_noise_rate`` (when
    the config has ``noise_rate``), ``heatmap`` (noise rate × noise type, or the first two
    varying config keys; when there are two), ``timeline``, in each of ``formats``, and
    ``report.md`` embedding the table and the PNGs.

    Args:
        source: experiment folder, URI or ``ResultGrid`` (as for :func:`analysis.load_trials`).
        out_dir: report folder; default ``<experiment>/report`` for a local experiment, else
            ``./reports/<experiment name>``.
        metric, mode: see :func:`resolve_metric`.
        formats: figure formats, e.g. ``("png", "svg")``; PNG is always written for report.md.

    Raises:
        ExperimentError: as :func:`analysis.load_trials` and :func:`resolve_metric`.
    """
    trials, history = load_experiment(source)
    metric, mode = resolve_metric(trials, metric, mode)
    experiment = trials.attrs["experiment"]
    if out_dir is None:
        out_dir = (Path(experiment) / "report" if "://" not in experiment
                   else Path("reports") / experiment.rstrip("/").rsplit("/", 1)[-1])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    formats = tuple(dict.fromkeys(("png", *formats)))

    table = best_runs(trials, metric, mode)
    write_table(table, out / "best_runs")
    (out / "best_runs.txt").write_text(f"{metric} ({mode}), mean over seeds ± 95% CI:\n" + format_table(table))
    trials.to_csv(out / "trials.csv", index=False)

    figures: dict[str, str] = {}

    def save(name: str, title: str, fig) -> None:
        save_figure(fig, out / name, formats)
        figures[title] = f"{name}.png"

    save("learning_curves", "Learning curves", plot_learning_curves(history, trials, metric))
    if _has(trials, "noise_rate"):
        save("metric_vs_noise_rate", f"{metric} vs noise rate", plot_metric_vs_noise_rate(trials, metric, mode))
    axes = _heatmap_axes(trials)
    if axes:
        save("heatmap", f"{metric} over {axes[0]} × {axes[1]}", plot_heatmap(trials, metric, *axes))
    save("timeline", "Trial timeline", plot_timeline(trials))

    (out / "report.md").write_text(_markdown(trials, table, metric, mode, figures))
    return out


def _has(trials: pd.DataFrame, key: str) -> bool:
    try:
        config_column(trials, key)
        return True
    except ExperimentError:
        return False


def _heatmap_axes(trials: pd.DataFrame) -> tuple[str, str] | None:
    varying = varying_config_columns(trials)
    if _has(trials, "noise_rate") and _has(trials, "noise_type") and \
            {"config/noise_rate", "config/noise_type"} <= set(varying):
        return "noise_rate", "noise_type"
    return (varying[0], varying[1]) if len(varying) >= 2 else None


def _markdown(trials: pd.DataFrame, table: pd.DataFrame, metric: str, mode: str, figures: dict) -> str:
    counts = trials["status"].value_counts()
    status = ", ".join(f"{n} {s.lower()}" for s, n in counts.items())
    diverged = int(trials["diverged"].sum())
    efficiency = sweep_efficiency(trials)
    lines = [
        f"# Report: {trials.attrs['experiment'].rstrip('/').rsplit('/', 1)[-1]}",
        "",
        f"- experiment: `{trials.attrs['experiment']}`",
        f"- trials: {len(trials)} ({status}; {diverged} diverged)",
        f"- metric: `{metric}` ({mode}), last reported value of each trial",
        f"- sweep efficiency: {efficiency:.0%} (busy slot-time / (slots × makespan))"
        if efficiency == efficiency else "- sweep efficiency: n/a (no timed trials)",
        "",
        "## Best configurations",
        "",
        "Mean over seeds with a 95 % Student-t confidence interval; errored and diverged trials are "
        "counted under *failed* and left out of the statistics. Also as `best_runs.csv` and `best_runs.tex`.",
        "",
        format_table(table, "markdown"),
    ]
    for title, file in figures.items():
        lines += [f"## {title}", "", f"![{title}]({file})", ""]
    return "\n".join(lines)

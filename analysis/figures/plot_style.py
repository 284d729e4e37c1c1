"""What every analysis figure shares: colours, legends and axis labels."""

from __future__ import annotations

import pandas as pd

AXIS_LABELS = {
    "noise_rate": "noise rate (fraction of labels corrupted)",
    "epoch": "epoch",
    "training_iteration": "training iteration (reports)",
    "time_total_s": "training time (s)",
    "lr": "learning rate",
}
"""Axis label of a config key or history column, where its bare name does not say enough."""


def axis_label(name: str) -> str:
    """The axis label of a column: :data:`AXIS_LABELS`, else its name with spaces."""
    return AXIS_LABELS.get(name, name.replace("_", " "))


def scope_text(trials: pd.DataFrame, metric: str, scope: str, what: str) -> str:
    """``"val/acc (last<what>)"``; for ``scope="select"`` the selection rule in words instead."""
    if scope == "select":
        return f"{trials.attrs.get('select_text', {}).get(metric, metric + ' (selected)')}{what}"
    return f"{metric} ({scope}{what})"


def colors(n: int, sequential: bool = False) -> list:
    """``n`` line colours: tab10/tab20 for categories; along viridis for ordered values (e.g.
    noise rates, ``sequential``) or more than 20 lines."""
    from matplotlib import colormaps

    if sequential:  # ordered values (e.g. noise rates): dark to light along viridis
        return [colormaps["viridis"](0.85 * i / max(1, n - 1)) for i in range(n)]
    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["viridis"](i / max(1, n - 1)) for i in range(n)]


def legend(ax, n: int) -> None:
    """A legend of ``n`` entries: inside the Axes up to 8, outside to the right beyond; none without any
    (every trial failed or was interrupted: an empty plot, without matplotlib's warning)."""
    if not ax.get_legend_handles_labels()[0]:
        return
    if n > 8:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=1 + n // 25)
    else:
        ax.legend(fontsize=8)

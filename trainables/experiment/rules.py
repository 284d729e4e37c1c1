"""Selection rules: which value of a trial's history a table reports, named once.

Light on purpose (no pandas): the CLI checks ``--select``/``--k`` before importing anything.
A sweep's rule travels in its :class:`trainables.experiment.objective.Objective` (``select``, ``k``);
the values themselves are computed by :func:`analysis.statistics.select.select_values`.

Rules, as papers on learning with noisy labels report test accuracy:

- ``best-val``: the metric at the epoch where the validation metric is best (ties: the
  earliest such epoch). GCE (Zhang & Sabuncu 2018) reports test accuracy this way.
- ``last``: the last reported value ("Last" in DivideMix, Li et al. 2020).
- ``last-k``: the mean over the last ``k`` reported epochs (Co-teaching, Han et al. 2018,
  reports the mean test accuracy of the last 10 epochs).

"Best test accuracy over epochs" is deliberately not a rule: it selects on the test set.
"""

from __future__ import annotations

from trainables.experiment.errors import ExperimentError

SELECT_RULES = ("best-val", "last", "last-k")


def check_select(select: str, k: int) -> None:
    """Raise :class:`ExperimentError` (one line) for an unknown rule or ``last-k`` with k < 1."""
    if select not in SELECT_RULES:
        raise ExperimentError(f"unknown selection rule {select!r}; choose one of {', '.join(SELECT_RULES)}")
    if select == "last-k" and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ExperimentError(f"last-k needs k >= 1 (an integer number of epochs), not {k!r}")


def describe_select(select: str, metric: str, val_metric: str, k: int) -> str:
    """The rule in words, for table captions, plot titles and console headers.

    ``describe_select("best-val", "test/acc", "val/acc", 10)`` ->
    ``"test/acc at the epoch of best val/acc (ties: earliest)"``.
    """
    check_select(select, k)
    if select == "best-val":
        if metric == val_metric:
            return f"best {val_metric} over epochs"
        return f"{metric} at the epoch of best {val_metric} (ties: earliest)"
    if select == "last":
        return f"{metric} at the last epoch"
    return f"{metric} averaged over the last {k} epochs"


def guess_mode(metric: str) -> str:
    """``"min"`` for metrics that read as losses or errors, else ``"max"``.

    The rule looks at the last ``/``-separated part of the name: it is ``"min"`` when that part
    contains ``loss``, ``err``, ``nll`` or ``perplexity`` (``val/loss``, ``test_error``).
    Pass the mode explicitly wherever the rule is wrong for a metric.
    """
    leaf = metric.rsplit("/", 1)[-1].lower()
    return "min" if any(word in leaf for word in ("loss", "err", "nll", "perplexity")) else "max"


def percent_scale(percent: bool) -> float:
    """What a value is multiplied by where it is shown: 100 for a percentage (`shown_as_percent`), else 1."""
    return 100.0 if percent else 1.0


def format_metric(value: float, percent: bool) -> str:
    """A metric's value as every table, plot label and progress block shows it: x100 with two decimals
    when `percent` (`shown_as_percent`: `83.40`), else four decimals (`0.8340`)."""
    return f"{value * percent_scale(percent):.{2 if percent else 4}f}"


def shown_as_percent(metric: str, values) -> bool:
    """Whether tables and the progress block show `metric` as a percentage (x100, unit `%`).

    Args:
        metric: its name; only an accuracy (`acc` in the last `/` part, any case) is scaled.
        values: its values (floats; NaN and inf ignored).
    Returns:
        True when every finite value lies in [0, 1] (a fraction); False for none, or for an
        accuracy already printed in percent (mnist's 98.94).
    """
    finite = [v for v in values if isinstance(v, (int, float)) and v == v and abs(v) != float("inf")]
    return "acc" in metric.rsplit("/", 1)[-1].lower() and bool(finite) and all(0 <= v <= 1 for v in finite)


def json_unit(percent: bool) -> str:
    """How `--json` states the unit of a metric's values, which it gives as logged: `fraction` for an accuracy
    in [0, 1] that the console, tables and report show x100 in % (`shown_as_percent`), else `as logged`."""
    return "fraction" if percent else "as logged"


def show_value(metric: str, value: float) -> str:
    """One value of `metric` on its own (the progress block, a notification): `83.40%` for an accuracy held
    as a fraction, else `0.8340` (`format_metric`)."""
    percent = shown_as_percent(metric, [value])
    return format_metric(value, percent) + ("%" if percent else "")

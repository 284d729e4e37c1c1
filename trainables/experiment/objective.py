"""The objective of a sweep, one frozen value: the metric that ranks its trials and its direction, the test
metric its tables report, and the selection rule that picks each trial's value.

Optuna's `Study` carries its `direction`; a sweep carries its `Objective`. A sweep script makes it once from
its flags (`add_objective_flags`, then `sweeps/engine/run_flags.py:run_options`) and passes it whole: Tune
gets `objective.metric` and `objective.mode`, the tables and the write-up the rest. `python -m analysis`
makes it from its own flags and the sweep's record (`analysis/reading/load.py:resolve_objective`).

Each default is written once, on its field below; the flags are generated from the fields, as the trial
options are from `trainables.config.TrainConfig`. Light on purpose (no pandas): the command lines build
their flags from it before anything heavy loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainables.experiment.errors import ExperimentError
from trainables.experiment.rules import check_select, describe_select, guess_mode

MODES = ("max", "min")
COMMAND_METRIC = "val_acc"  # a command's metric unless --metric names another: what most scripts print


@dataclass(frozen=True)
class Objective:
    """What a sweep optimises and what its tables report.

    A test metric equal to `metric` is stored as None: a sweep without a test metric (a command that
    reports only its validation metric), whose tables show `metric` itself and say so.
    Raises:
        ExperimentError: a mode other than max / min, an unknown selection rule, or last-k with k < 1.
    """

    metric: str = "val/acc"  # the validation metric that ranks trials: Tune's metric
    mode: str = "max"  # max or min: whether a larger metric is better
    test_metric: str | None = "test/acc"  # the metric the tables show, at the epoch the selection rule picks
    select: str = "best-val"  # best-val, last or last-k: which epoch of each trial the tables report
    k: int = 10  # epochs averaged by last-k, as Co-teaching's mean of the last 10

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ExperimentError(f"mode must be 'max' or 'min', not {self.mode!r}")
        check_select(self.select, self.k)
        if self.test_metric == self.metric:
            object.__setattr__(self, "test_metric", None)

    @property
    def table_metric(self) -> str:
        """The metric in a table's cells: the test metric, else (a sweep without one) `metric`."""
        return self.test_metric or self.metric

    @property
    def table_mode(self) -> str:
        """`table_metric`'s direction: `mode` for `metric`, else `guess_mode` of the test metric's name."""
        return self.mode if self.test_metric is None else guess_mode(self.test_metric)

    @property
    def step_metrics(self) -> tuple[str, ...]:
        """The metrics whose presence completes a command trial's step at once: `metric`, then the test metric."""
        return tuple(dict.fromkeys([self.metric, self.table_metric]))

    @property
    def rule(self) -> str:
        """The selection rule in words, for captions and headers (`rules.describe_select`)."""
        return describe_select(self.select, self.table_metric, self.metric, self.k)

    def validation(self) -> Objective:
        """The same objective without a test metric: its tables show `metric`, the one the best
        configuration is chosen by (never the test metric)."""
        return dataclasses.replace(self, test_metric=None)


def field_comments(cls) -> dict[str, str]:
    """Field name -> the comment after it in the source of dataclass `cls`: the one-line help of its flag."""
    pattern = re.compile(r"^\s+(\w+): [^=]+=.*?#\s*(.+)$")
    return {m.group(1): m.group(2) for line in inspect.getsource(cls).splitlines() if (m := pattern.match(line))}


def add_objective_flags(
    parser: argparse.ArgumentParser,
    names: Sequence[str],
    *,
    defaults: Mapping[str, object] | None = None,
    later: Mapping[str, str] | None = None,
) -> None:
    """Add one `--kebab-case` flag per field of `Objective` in `names`: its help is the field's comment,
    its default the field's.

    Args:
        names: the fields this command line sets, e.g. ``("metric", "test_metric", "mode")``.
        defaults: field -> this command line's own default (a command's ``val_acc``).
        later: field -> the words of a default decided after parsing ("the sweep's"); the flag's value is
            then None when not given.
    """
    comments, defaults, later = field_comments(Objective), defaults or {}, later or {}
    for field in dataclasses.fields(Objective):
        if field.name not in names:
            continue
        default = None if field.name in later else defaults.get(field.name, field.default)
        parser.add_argument(
            f"--{field.name.replace('_', '-')}",
            default=default,
            type=int if field.type == "int" else None,
            choices=MODES if field.name == "mode" else None,
            metavar="RULE" if field.name == "select" else None,
            help=f"{comments[field.name]} (default: {later.get(field.name, default)})".replace("%", "%%"),
        )


def objective_of(args: argparse.Namespace) -> Objective:
    """The `Objective` of parsed flags: each field from the flag of its name where the command line has
    one, else the field's default."""
    return Objective(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Objective) if hasattr(args, f.name)})

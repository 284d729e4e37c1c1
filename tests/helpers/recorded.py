"""What unmodified public scripts printed and wrote (`tests/recorded/`), and the rows a trial reads from such
lines: `console` feeds them to the command trial's parser, `file_rows` reads a logger's CSV with nothing but `csv`."""

from __future__ import annotations

import csv
from pathlib import Path

from trainables.command.parse import StepContext
from trainables.experiment.objective import Objective

RECORDED = Path(__file__).resolve().parents[1] / "recorded"


def console(lines: list[str], *metrics: str) -> list[dict]:
    """The rows a trial reads from `lines` (both streams, in order) with --metric/--test-metric `metrics`."""
    context = StepContext("epoch", objective=Objective(metrics[0], test_metric=metrics[-1]) if metrics else None)
    return [row for line in lines for row in context.feed(line)] + context.close()


def recorded_lines(*names: str) -> list[str]:
    return [line for name in names for line in (RECORDED / name).read_text(encoding="utf-8").splitlines()]


def file_rows(path: Path, column: str) -> dict:
    """{epoch: value} of `column` in a CSV file, read with nothing but `csv` (rows with an epoch and a value)."""
    with open(path, newline="") as f:
        return {int(r["epoch"]): float(r[column]) for r in csv.DictReader(f) if r["epoch"] and r[column]}

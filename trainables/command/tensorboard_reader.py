"""The scalars of a TensorBoard event file, read while it is written, grouped per log call.

A logger writes every value of one `log_metrics(metrics, step)` call as consecutive scalar events with
the same global step. Lightning's `TensorBoardLogger` (Lightning 2.x, `LoggerConnector.log_metrics`)
adds an `epoch` scalar to every call made with the global step (training steps, epoch-level values),
and none to the calls of validation steps, which count with a step of their own (0, 1, ... per
validation batch). A call's group is what tells them apart: `tracker_rows.tensorboard_rows` reads a
group with `epoch` at that epoch and leaves out the others of such a run.

Read with `tensorboard`'s `EventFileLoader`, which stops at a record still being written and goes on
from there at the next `read`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

HPARAMS_PLUGIN = "hparams"  # `SummaryWriter.add_hparams` / Lightning's `log_hyperparams`: not metrics


@dataclasses.dataclass
class LogCall:
    """The scalars one log call wrote: {tag: number} at global step `step`; `hparams` when it came with
    a hyperparameter summary (Lightning's placeholder `hp_metric` = -1)."""

    step: int
    scalars: dict
    hparams: bool = False


class EventFile:
    """One event file, read incrementally: `read()` returns the log calls completed since the last call
    (a call is complete when an event of another step follows it, or at `read(final=True)`)."""

    def __init__(self, path: Path):
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

        self.path, self.loader = path, EventFileLoader(str(path))
        self.open: LogCall | None = None  # the last call read, which more events may still join

    def read(self, final: bool = False) -> list[LogCall]:
        from tensorboard.util import tensor_util

        calls = []
        for event in self.loader.Load():
            for value in event.summary.value if event.HasField("summary") else ():
                plugin = value.metadata.plugin_data.plugin_name
                if self.open is None or self.open.step != event.step:
                    calls += [self.open] if self.open is not None else []
                    self.open = LogCall(event.step, {})
                if plugin == HPARAMS_PLUGIN:
                    self.open.hparams = True
                elif value.HasField("simple_value"):
                    self.open.scalars[value.tag] = value.simple_value
                elif plugin in ("scalars", "") and value.HasField("tensor"):
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size == 1 and array.dtype.kind in "fiu":
                        self.open.scalars[value.tag] = array.item()
        if final and self.open is not None:
            calls, self.open = calls + [self.open], None
        return calls

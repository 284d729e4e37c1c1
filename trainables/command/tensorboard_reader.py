"""The scalars of TensorBoard event files, read while they are written: per log call (`EventFile`), and as
the rows of each run folder at the epochs it names (`Runs`).

A logger writes every value of one `log_metrics(metrics, step)` call as consecutive scalar events with
the same global step. Lightning's `TensorBoardLogger` (Lightning 2.x, `LoggerConnector.log_metrics`)
adds an `epoch` scalar to every call made with the global step (training steps, epoch-level values),
and none to the calls of validation steps, which count with a step of their own (0, 1, ... per
validation batch). A call's group is what tells them apart: `Runs` reads a call with `epoch` at that
epoch and never makes a row of one without it.

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


class Runs:
    """The rows of the TensorBoard runs under a trial's folder, read while they are written.

    A run is a folder of event files (TensorBoard's UI shows one line per run), read as one series of log
    calls; the same tag in two runs is never merged. A value is read at epoch e only where its run says e:

    - a log call holding an `epoch` scalar (Lightning's `TensorBoardLogger` adds one to each call made
      with the global step) is read at that epoch; a call without one (Lightning's validation steps, which
      count with a step of their own; a per-batch scalar) is never a row when `step_key` is `epoch`;
    - `SummaryWriter.add_scalars(main, {k: v, ...}, step)` writes each `k` to a run folder `{main}_{k}/` of
      its own with the tag `main`: read as the metric `{main}_{k}` (the run name TensorBoard shows;
      `{main}/{k}`, for every key of the group, when the objective names a metric in that spelling), at the
      epoch its group's `epoch` key holds at the same step (values wait for it; those it never maps are not rows).

    With another `step_key` (`step`), every value is read at its TensorBoard step, except the calls without
    `epoch` of a run that writes one (validation steps). Lightning's `hp_metric` placeholder is not a metric.
    """

    def __init__(self, step_key: str, names=()):
        """Args: names: the objective's metrics (a `{main}/{k}` spelling among them names an add_scalars key)."""
        self.step_key, self.names = step_key, set(names)
        self.files: dict = {}  # event file -> its `EventFile`
        self.tagged: set = set()  # run folders that wrote an `epoch` scalar in a log call
        self.epochs: dict = {}  # add_scalars group (folder, main) -> {step: epoch}
        self.waiting: dict = {}  # add_scalars group -> {step: {metric: value}} not mapped to an epoch yet
        self.runs_of: dict = {}  # tag of a plain run -> the run folders holding it
        self.unmapped: dict = {}  # metric -> None: values at steps with no epoch (never rows)
        self.origins: dict = {}  # metric -> {"source": "tensorboard", "run": its folder, "tag": its tag}

    @property
    def ambiguous(self) -> dict:
        """{tag: [run folders]} of the tags found in several runs: not read (raysweep cannot tell them apart)."""
        return {tag: tuple(sorted(map(str, runs))) for tag, runs in self.runs_of.items() if len(runs) > 1}

    def unread(self) -> list[str]:
        """Clauses for an error: what the runs held but gave no row (values with no epoch, tags in several runs)."""
        parts = []
        if self.unmapped and self.step_key == "epoch":
            tags = ", ".join(list(self.unmapped)[:12])
            parts.append(
                f"tensorboard held {tags} only at TensorBoard steps, no epoch (--step-key step reads them there)"
            )
        for tag, runs in self.ambiguous.items():
            parts.append(f"tensorboard tag {tag} is in several run folders ({', '.join(runs)}): not read")
        return parts

    def read(self, paths: list[Path], root: Path, final: bool = False) -> tuple[list[dict], list[Path]]:
        """The rows of the log calls completed since the last read of the event files `paths` (in the
        order written; run folders named relative to `root`), and the files that held calls."""
        for path in paths:
            self.files.setdefault(path, EventFile(path))
        rows, held = [], []
        for path, events in self.files.items():
            calls = events.read(final)
            held += [path] if calls else []
            run = path.parent.relative_to(root) if path.parent.is_relative_to(root) else path.parent
            for call in calls:
                rows += self._rows(run, call)
        ambiguous = self.ambiguous
        rows = [{k: v for k, v in row.items() if k not in ambiguous or k in (self.step_key, "epoch")} for row in rows]
        if final:
            self.unmapped.update(
                dict.fromkeys(k for waiting in self.waiting.values() for s in waiting.values() for k in s)
            )
            self.waiting = {}
        return [row for row in rows if len(row) > 1], held

    def _rows(self, run: Path, call: LogCall) -> list[dict]:
        """The rows of one log call of the run folder `run`."""
        if call.hparams or not call.scalars:
            return []
        grouped = [(tag, run.name[len(_prefix(tag)) :]) for tag in call.scalars if _series(run.name, tag)]
        if grouped:
            return [row for tag, key in grouped for row in self._series(run, tag, key, call)]
        key, scalars = self.step_key, dict(call.scalars)
        for tag in scalars:
            self.runs_of.setdefault(tag, set()).add(run)
            self.origins.setdefault(tag, {"source": "tensorboard", "run": str(run), "tag": tag})
        if "epoch" in scalars:
            self.tagged.add(run)
            scalars["epoch"] = _whole(scalars["epoch"])
            return [scalars if key == "epoch" else {**scalars, key: call.step}]
        if key == "epoch" or run in self.tagged:  # a step of its own: no epoch says where it belongs
            self.unmapped.update(dict.fromkeys(scalars))
            return []
        return [{**scalars, key: call.step}]

    def _series(self, run: Path, main: str, key: str, call: LogCall) -> list[dict]:
        """The rows of one value of the add_scalars series `key` of group `main` (its folder `run`)."""
        group, value, step = (run.parent, main), call.scalars[main], call.step
        epochs, waiting = self.epochs.setdefault(group, {}), self.waiting.setdefault(group, {})
        if key == "epoch":
            epochs[step] = _whole(value)
            held = waiting.pop(step, {})
            return [{**held, "epoch": epochs[step]}] if self.step_key == "epoch" and held else []
        slash = any(name.startswith(f"{main}/") for name in self.names)  # the objective's spelling, for the group
        name = f"{main}/{key}" if slash else f"{main}_{key}"
        self.origins.setdefault(name, {"source": "tensorboard", "run": str(run), "tag": main})
        if self.step_key != "epoch":
            return [{name: value, self.step_key: step}]
        if step in epochs:
            return [{name: value, "epoch": epochs[step]}]
        waiting.setdefault(step, {})[name] = value
        return []


def _prefix(main: str) -> str:
    """The start of the run folders `add_scalars(main, ...)` writes (`torch.utils.tensorboard`, tensorboardX)."""
    return main.replace("/", "_") + "_"


def _series(folder: str, tag: str) -> bool:
    """Whether a run folder named `folder` holding `tag` is one series of an `add_scalars(tag, {k: ...})`."""
    return folder.startswith(_prefix(tag)) and len(folder) > len(_prefix(tag))


def _whole(value):
    """A float holding a whole number (TensorBoard's epoch `1.0`) as an int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value

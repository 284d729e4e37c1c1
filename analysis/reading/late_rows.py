"""Rows a command trial logged after Tune had stopped it, read into its history.

A scheduler (ASHA) or a time budget stops a trial on one of its results, while its command may already be
training the next epoch, or have finished them all and be writing its tracker's file as it exits. Tune takes
no report from a stopped trial, so those rows are not in its result.json; the command runtime keeps them in
``<trial>/late_rows.json`` (`trainables/command/step_reporter.py:StepReporter.keep_late`). Here the rows of that
record after the trial's last logged step are added to its history, in order, with the training iterations
that follow its last one: the table ranks the trial by every epoch it ran.
"""

from __future__ import annotations

import posixpath

import pandas as pd
import pyarrow.fs as pafs

from trainables.experiment.records import JOINS_STEP_METRIC, LATE_ROWS_FILE, parse_record

STEP = "epoch"  # the command runtime reports each result's step as `epoch`


def add_late_rows(fs: pafs.FileSystem, root: str, trials: list[dict], rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (the raw result rows, ``_trial`` indexing ``trials``) with each trial's late rows appended.

    Args:
        fs, root: the experiment folder; trials: the trial dicts (``dir``; ``tail`` is kept as Tune logged it,
            ``late`` is set to the number of rows added).
    Returns:
        the rows, each trial's still together and in order (late ones last); ``rows`` itself when there are none.
    """
    folders = [(i, posixpath.join(root, t["dir"], LATE_ROWS_FILE)) for i, t in enumerate(trials) if t["dir"]]
    found = {info.path for info in fs.get_file_info([p for _, p in folders]) if info.type == pafs.FileType.File}
    parts = []
    for i, path in folders:
        trials[i]["late"] = 0
        if path not in found:
            continue
        with fs.open_input_stream(path) as stream:
            record = parse_record(stream.readall(), path) or {}
        logged = rows[rows["_trial"] == i]
        late = _after(record.get("rows") or [], logged)
        if late:
            last = int(pd.to_numeric(logged.get("training_iteration"), errors="coerce").max()) if len(logged) else 0
            frame = pd.DataFrame.from_records(late)
            frame.insert(0, "_trial", i)
            frame["training_iteration"] = range(last + 1, last + 1 + len(late))
            parts.append(frame)
            trials[i]["late"] = len(late)
            trials[i]["late_cut"] = record.get("cut", True)  # its command was ended mid-run (older records: unknown)
            for row in late if trials[i].get("merged") is not None else ():
                trials[i]["merged"].update(row)  # the last value of each metric
    if not parts:
        return rows
    return pd.concat([rows, *parts], ignore_index=True).sort_values("_trial", kind="stable", ignore_index=True)


def _after(late: list, logged: pd.DataFrame) -> list[dict]:
    """The late rows after the last logged step (and a final block joined to that step, when the history
    lacks it)."""
    rows = [r for r in late if isinstance(r, dict) and isinstance(r.get(STEP), (int, float))]
    if STEP not in logged or logged[STEP].isna().all():
        return rows
    last = float(pd.to_numeric(logged[STEP], errors="coerce").max())
    joined = JOINS_STEP_METRIC in logged and logged[JOINS_STEP_METRIC].eq(1).any()
    return [r for r in rows if r[STEP] > last or (r[STEP] == last and r.get(JOINS_STEP_METRIC) and not joined)]

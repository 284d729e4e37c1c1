"""Out-of-memory re-run rounds, read as part of their sweep: a re-run counts in place of its failure.

A sweep re-runs the trials that ran out of GPU memory with twice the share, in a new `Tuner` whose folder
lies beside the sweep's: `<name>_oom_gpu<share>` (`trainables.experiment.records.oom_round_name`;
`sweeps/engine/run/launch.py:rerun_oom_trials`). Every reader of the sweep (its table and report,
`python -m analysis EXP`, `--json`, `--status`) reads those folders with it, smallest share first: a
round's trial takes the place of the errored trial of the same config (seed included) among the trials
read so far (`reruns`), so a sweep of 4 trials whose 4 ran out of memory and finished at twice the share
counts 4 done, not 4 errored and 4 more. A round's trial that replaces no failure (a folder another run
left) is not read. No Ray here, and pandas only inside `with_reruns` (the tables'): `--status` imports this.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from analysis.reading.tune_state import config_key
from trainables.experiment import records
from trainables.experiment.outcome import ERRORED

if TYPE_CHECKING:
    import pandas as pd


def round_folders(fs: pafs.FileSystem, root: str) -> list[str]:
    """The folders (paths on `fs`) of the out-of-memory re-run rounds of the experiment at `root`, smallest
    share first; [] when there are none or its parent folder cannot be listed."""
    parent, name = posixpath.split(root.rstrip("/"))
    try:
        entries = fs.get_file_info(pafs.FileSelector(parent or ".", allow_not_found=True))
    except (OSError, ValueError):  # ValueError: pyarrow's ArrowInvalid (a path it cannot list)
        return []
    shares = [
        (share, entry.path)
        for entry in entries
        if entry.type == pafs.FileType.Directory and (share := records.oom_round_share(entry.base_name, name))
    ]
    return [path for _, path in sorted(shares)]


def reruns(earlier: Sequence[tuple[str, bool]], later: Sequence[str]) -> dict[int, int]:
    """Which trials of a round take whose place.

    Args:
        earlier: (config key, errored) of each trial read so far (the sweep's, then earlier rounds').
        later: the config key of each trial of the round (`analysis.reading.tune_state.config_key`).
    Returns:
        {index in `earlier`: index in `later`}: each errored trial with a round trial of its config, paired
        with the first such trial not paired yet.
    """
    waiting: dict[str, list[int]] = {}
    for j, key in enumerate(later):
        waiting.setdefault(key, []).append(j)
    return {i: waiting[key].pop(0) for i, (key, errored) in enumerate(earlier) if errored and waiting.get(key)}


def reruns_line(replaced: Sequence[tuple[str, str]]) -> str | None:
    """`re-run after running out of GPU memory: N trial(s), counted in place of their failures (in <folder>)`,
    or None; `replaced`: (failed trial's folder, its re-run's folder) pairs."""
    if not replaced:
        return None
    folders = sorted({posixpath.dirname(str(rerun).rstrip("/")) for _, rerun in replaced})
    return (
        f"re-run after running out of GPU memory: {len(replaced)} trial(s), counted in place of their "
        f"failures (in {', '.join(folders)})"
    )


def with_reruns(
    trials: pd.DataFrame, history: pd.DataFrame, rerun: pd.DataFrame, rerun_history: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`trials` and `history` (`analysis.load_experiment`'s) with each errored trial that a round re-ran
    (`rerun`, `rerun_history`: the round's folder, loaded alike) replaced by its re-run, in its place
    (`reruns`); `trials.attrs["oom_reruns"]` lists (failed trial's folder, re-run's folder) pairs."""
    import numpy as np
    import pandas as pd

    from analysis.reading.trial_outcomes import outcome_column

    pairs = reruns(list(zip(_config_keys(trials), outcome_column(trials) == ERRORED)), _config_keys(rerun))
    if not pairs:
        return trials, history
    kept = rerun.iloc[list(pairs.values())].copy()
    taken = set(trials["trial_id"])  # Tune's ids are random per experiment: a clash is unlikely, not impossible
    ids = {
        t: f"{t}@{posixpath.basename(str(d))}" if t in taken else t for t, d in zip(kept["trial_id"], kept["trial_dir"])
    }
    kept["trial_id"] = kept["trial_id"].map(ids)
    added = rerun_history[rerun_history["trial_id"].isin(list(ids))].copy()
    added["trial_id"] = added["trial_id"].map(ids)
    replaced = list(pairs)
    order = [len(trials) + replaced.index(i) if i in pairs else i for i in range(len(trials))]
    merged = pd.concat([trials, kept], ignore_index=True).iloc[order].reset_index(drop=True)
    gone = set(trials["trial_id"].iloc[replaced])
    stacked = pd.concat([history[~history["trial_id"].isin(gone)], added], ignore_index=True)
    position = {t: k for k, t in enumerate(merged["trial_id"])}
    stacked = stacked.iloc[np.argsort(stacked["trial_id"].map(position).to_numpy(), kind="stable")]
    pairs_read = [(trials["trial_dir"].iat[i], rerun["trial_dir"].iat[j]) for i, j in pairs.items()]
    merged.attrs = {**trials.attrs, "oom_reruns": [*trials.attrs.get("oom_reruns", []), *pairs_read]}
    stacked.attrs = dict(history.attrs)
    return merged, stacked.reset_index(drop=True)


def _config_keys(trials: pd.DataFrame) -> list[str]:
    """Each trial's identity, its config (seed included), from the table's `config/` columns (set values only)."""
    columns = [c for c in trials.columns if c.startswith("config/")]
    return [
        config_key(
            {c: v for c, v in zip(columns, values) if not (v is None or (isinstance(v, float) and math.isnan(v)))}
        )
        for values in trials[columns].itertuples(index=False, name=None)
    ]

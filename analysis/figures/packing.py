"""Where and when each trial ran: slot assignment and sweep efficiency, per run of the sweep.

An experiment may be run several times: its launch, a `--resume` after a stop, an extension (more
seeds, another axis value) hours later. Each run is timed on its own and the gaps between runs are
left out (`runs`: a run's start from its provenance record, `analysis/reading/provenance.py`): an
idle night between two runs is not idle slots of the sweep.
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np
import pandas as pd

GPU_COLUMN = "last/gpu_ids"
"""Column with the trial's ``CUDA_VISIBLE_DEVICES`` (e.g. ``"0"`` or ``"0,1"``; ``""`` on CPU)."""


def timeline(trials: pd.DataFrame, runs: list[float] | None = None) -> pd.DataFrame:
    """One row per (trial, slot) it occupied, with times relative to the first trial start, the gaps
    between the sweep's runs left out.

    A trial that reported ``gpu_ids`` gets a row on each of its GPUs (slot ``"GPU 0"``, ...).
    Other trials are packed into CPU slots (``"slot 0"``, ...) greedily by start time, so that
    trials running at the same time get different slots and the number of slots equals the
    largest number of trials that ran at once (interval partitioning). A PBT member has one row per
    stretch it ran (a paused member holds no slot). With trials on more than
    one node, slots are prefixed with the node name. Trials without a start or end time
    (pending) are left out.

    Args:
        trials: a :func:`analysis.load_trials` table (uses ``start_time``, ``end_time``,
            ``status``, ``diverged``, ``node`` and ``last/gpu_ids`` when present).
        runs: Unix seconds each run of the sweep started (:func:`analysis.reading.provenance.run_starts`);
            each trial belongs to the run it ended in (a trial resumed by a later run starts there),
            and the time between one run's last end and the next run's first start is cut out.
            None: one run.

    Returns:
        DataFrame with ``trial_id``, ``trial_name``, ``slot`` (str), ``start_s`` and ``end_s``
        (float seconds since the earliest start, gaps between runs left out), ``status``,
        ``diverged`` and ``run`` (1, 2, ...); sorted by slot and start. ``attrs["gaps"]``: (where
        a gap was cut, in those seconds; its length in seconds) per gap. Empty (same columns) when
        no trial has both times.
    """
    columns = ["trial_id", "trial_name", "slot", "start_s", "end_s", "status", "diverged", "run"]
    timed = _stretches(trials)
    timed = timed[timed["start_time"].notna() & timed["end_time"].notna()]
    if timed.empty:
        return pd.DataFrame(columns=columns)
    origin = timed["start_time"].min()
    start = (timed["start_time"] - origin).dt.total_seconds().to_numpy(copy=True)
    end = (timed["end_time"] - origin).dt.total_seconds().to_numpy(copy=True)
    run, gaps = _cut_gaps(start, end, [t - origin.timestamp() for t in runs or []])
    nodes = timed["node"].fillna("").astype(str).to_numpy() if "node" in timed else np.full(len(timed), "")
    prefix = len(set(nodes)) > 1
    gpus = (timed[GPU_COLUMN].map(_gpu_list) if GPU_COLUMN in timed else pd.Series([[]] * len(timed))).to_numpy()

    rows, cpu_trials = [], []
    for i, (trial_id, name, status, diverged) in enumerate(
        zip(timed["trial_id"], timed["trial_name"], timed["status"], timed["diverged"])
    ):
        base = {
            "trial_id": trial_id,
            "trial_name": name,
            "start_s": start[i],
            "end_s": end[i],
            "status": status,
            "diverged": bool(diverged),
            "run": run[i],
        }
        if gpus[i]:
            for gpu in gpus[i]:
                rows.append({**base, "slot": f"{nodes[i]} GPU {gpu}" if prefix else f"GPU {gpu}"})
        else:
            cpu_trials.append((i, base))

    rows += _pack_cpu_trials(cpu_trials, nodes, prefix)
    out = pd.DataFrame(rows, columns=columns)
    order = out["slot"].map(_slot_order)
    out = out.assign(_order=order).sort_values(["_order", "start_s"]).drop(columns="_order").reset_index(drop=True)
    out.attrs["gaps"] = gaps
    return out


def _stretches(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials, a PBT member once per stretch it ran (``attrs["pbt"]["busy"]``,
    :mod:`analysis.reading.pbt_members`): paused while others trained, it held no slot."""
    busy = (trials.attrs.get("pbt") or {}).get("busy")
    if not busy:
        return trials
    parts = []
    for _, trial in trials.iterrows():
        spans = busy.get(trial["trial_id"]) or [(np.nan, np.nan)]
        part = pd.DataFrame([trial] * len(spans)).reset_index(drop=True)
        if busy.get(trial["trial_id"]):
            part["start_time"] = pd.to_datetime([s for s, _ in spans], unit="s", utc=True)
            part["end_time"] = pd.to_datetime([e for _, e in spans], unit="s", utc=True)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _cut_gaps(start: np.ndarray, end: np.ndarray, runs: list[float]) -> tuple[np.ndarray, list]:
    """Each trial's run (1-based: the last run that started before its end) and, in place, its times
    with the idle time between runs cut out; returns (runs, [(where cut, seconds cut)] per gap). All
    times in seconds since the first trial start. A trial resumed by a later run (it started before
    that run did) counts from that run's first trial start on."""
    starts = sorted(runs)
    run = (
        np.array([max(1, bisect.bisect_right(starts, e)) for e in end], dtype=int) if starts else np.ones(len(end), int)
    )
    gaps, cut, previous_end = [], 0.0, None
    for k in sorted(set(run.tolist())):
        members = run == k
        if starts:
            fresh = members & (start >= starts[k - 1])
            first = start[fresh].min() if fresh.any() else max(starts[k - 1], start[members].min())
            start[members] = np.maximum(start[members], first)
        if previous_end is not None:
            gap = max(0.0, start[members].min() - previous_end)
            gaps.append((float(previous_end - cut), float(gap)))
            cut += gap
        previous_end = end[members].max()
        start[members] -= cut
        end[members] -= cut
    return run, gaps


def _pack_cpu_trials(cpu_trials: list[tuple[int, dict]], nodes, prefix: bool) -> list[dict]:
    """Timeline rows of the trials without GPU ids: per node, each takes the lowest free CPU slot at
    its start (interval partitioning, greedy by start time), so the slots are as few as possible."""
    rows = []
    for node in sorted({nodes[i] for i, _ in cpu_trials}):
        members = sorted((b["start_s"], b["end_s"], k, b) for k, (i, b) in enumerate(cpu_trials) if nodes[i] == node)
        busy: list[tuple[float, int]] = []  # (end, slot) of trials running
        free: list[int] = []
        n_slots = 0
        for s, e, _, base in members:
            while busy and busy[0][0] <= s:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                slot = heapq.heappop(free)
            else:
                slot, n_slots = n_slots, n_slots + 1
            heapq.heappush(busy, (e, slot))
            rows.append({**base, "slot": f"{node} slot {slot}" if prefix else f"slot {slot}"})
    return rows


def sweep_efficiency(trials: pd.DataFrame, slots: int | None = None, runs: list[float] | None = None) -> float:
    """Busy slot-time / (slots × makespan), a float in [0, 1].

    Busy slot-time is, per slot of :func:`timeline`, the length of the union of its trials'
    intervals (so trials sharing a GPU are not counted twice); the makespan runs from the first
    start to the last end, the gaps between the sweep's runs left out (`runs`, as for :func:`timeline`).

    Args:
        trials: a :func:`analysis.load_trials` table.
        slots: number of slots available (e.g. GPUs of the machine); default: the slots that
            :func:`timeline` used, which misses slots that stayed idle the whole sweep.
        runs: Unix seconds each run started (None: one run).

    Returns:
        The efficiency, or NaN when no trial has a start and end time or the makespan is 0.
    """
    rows = timeline(trials, runs)
    if rows.empty:
        return float("nan")
    makespan = rows["end_s"].max() - rows["start_s"].min()
    n_slots = slots or rows["slot"].nunique()
    if makespan <= 0 or n_slots <= 0:
        return float("nan")
    busy = sum(_union_length(g["start_s"].to_numpy(), g["end_s"].to_numpy()) for _, g in rows.groupby("slot"))
    return float(min(1.0, busy / (n_slots * makespan)))


def run_efficiencies(trials: pd.DataFrame, runs: list[float], slots: int | None = None) -> pd.DataFrame:
    """The sweep efficiency of each run of the sweep (:func:`sweep_efficiency` of its trials alone).

    Args:
        trials: a :func:`analysis.load_trials` table; runs: Unix seconds each run started.
    Returns:
        DataFrame, one row per run that has timed trials: ``run`` (1-based), ``trials``, ``start``
        (UTC timestamp of its first trial start), ``makespan_s``, ``efficiency`` and ``gap_s``, the
        idle time before it since the previous run's last end (NaN for the first).
    """
    rows = timeline(trials, runs)
    out = []
    for k, members in rows.groupby("run"):
        ids = set(members["trial_id"])
        own = trials[trials["trial_id"].isin(ids)]
        began = pd.Timestamp(runs[k - 1], unit="s", tz="UTC") if runs else own["start_time"].min()
        fresh = own["start_time"][own["start_time"] >= began]  # not the trials this run resumed
        out.append(
            {
                "run": int(k),
                "trials": len(ids),
                "start": fresh.min() if len(fresh) else began,
                "makespan_s": float(members["end_s"].max() - members["start_s"].min()),
                "efficiency": sweep_efficiency(own, slots, [runs[k - 1]] if runs else None),
            }
        )
    gaps = [np.nan] + [gap for _, gap in rows.attrs.get("gaps", [])]
    return pd.DataFrame(out, columns=["run", "trials", "start", "makespan_s", "efficiency"]).assign(
        gap_s=gaps[: len(out)]
    )


def _gpu_list(value) -> list[str]:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _slot_order(slot: str) -> tuple:
    """Sort key: node, GPUs before CPU slots, then the number (so "GPU 10" follows "GPU 9")."""
    parts = slot.split(" ")
    number = int(parts[-1]) if parts[-1].isdigit() else 0
    return (" ".join(parts[:-2]), parts[-2] != "GPU", number, slot)


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    total, current_start, current_end = 0.0, None, None
    for s, e in sorted(zip(starts, ends)):
        if current_end is None or s > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = s, e
        else:
            current_end = max(current_end, e)
    if current_end is not None:
        total += current_end - current_start
    return total

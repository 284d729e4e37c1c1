"""Where and when each trial ran: slot assignment and sweep efficiency."""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd

GPU_COLUMN = "last/gpu_ids"
"""Column with the trial's ``CUDA_VISIBLE_DEVICES`` (e.g. ``"0"`` or ``"0,1"``; ``""`` on CPU)."""


def timeline(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (trial, slot) it occupied, with times relative to the first trial start.

    A trial that reported ``gpu_ids`` gets a row on each of its GPUs (slot ``"GPU 0"``, ...).
    Other trials are packed into CPU slots (``"slot 0"``, ...) greedily by start time, so that
    trials running at the same time get different slots and the number of slots equals the
    largest number of trials that ran at once (interval partitioning). With trials on more than
    one node, slots are prefixed with the node name. Trials without a start or end time
    (pending) are left out.

    Args:
        trials: a :func:`analysis.load_trials` table (uses ``start_time``, ``end_time``,
            ``status``, ``diverged``, ``node`` and ``last/gpu_ids`` when present).

    Returns:
        DataFrame with ``trial_id``, ``trial_name``, ``slot`` (str), ``start_s`` and ``end_s``
        (float seconds since the earliest start), ``status`` and ``diverged``; sorted by slot
        and start. Empty (same columns) when no trial has both times.
    """
    columns = ["trial_id", "trial_name", "slot", "start_s", "end_s", "status", "diverged"]
    timed = trials[trials["start_time"].notna() & trials["end_time"].notna()]
    if timed.empty:
        return pd.DataFrame(columns=columns)
    origin = timed["start_time"].min()
    start = (timed["start_time"] - origin).dt.total_seconds().to_numpy()
    end = (timed["end_time"] - origin).dt.total_seconds().to_numpy()
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
        }
        if gpus[i]:
            for gpu in gpus[i]:
                rows.append({**base, "slot": f"{nodes[i]} GPU {gpu}" if prefix else f"GPU {gpu}"})
        else:
            cpu_trials.append((i, base))

    rows += _pack_cpu_trials(cpu_trials, nodes, prefix)
    out = pd.DataFrame(rows, columns=columns)
    order = out["slot"].map(_slot_order)
    return out.assign(_order=order).sort_values(["_order", "start_s"]).drop(columns="_order").reset_index(drop=True)


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


def sweep_efficiency(trials: pd.DataFrame, slots: int | None = None) -> float:
    """Busy slot-time / (slots × makespan), a float in [0, 1].

    Busy slot-time is, per slot of :func:`timeline`, the length of the union of its trials'
    intervals (so trials sharing a GPU are not counted twice); the makespan runs from the first
    start to the last end.

    Args:
        trials: a :func:`analysis.load_trials` table.
        slots: number of slots available (e.g. GPUs of the machine); default: the slots that
            :func:`timeline` used, which misses slots that stayed idle the whole sweep.

    Returns:
        The efficiency, or NaN when no trial has a start and end time or the makespan is 0.
    """
    rows = timeline(trials)
    if rows.empty:
        return float("nan")
    makespan = rows["end_s"].max() - rows["start_s"].min()
    n_slots = slots or rows["slot"].nunique()
    if makespan <= 0 or n_slots <= 0:
        return float("nan")
    busy = sum(_union_length(g["start_s"].to_numpy(), g["end_s"].to_numpy()) for _, g in rows.groupby("slot"))
    return float(min(1.0, busy / (n_slots * makespan)))


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

"""Small Ray Tune experiments for the analysis tests, written without Ray or made by Ray.

``write_experiment`` writes the files Tune 2.x writes (experiment_state-*.json with the fields
analysis reads, and params.json / result.json per trial), so tests control every value.
``run_tune_experiment`` makes real ones with a tiny Tune run.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

SESSION = "2026-01-01_00-00-00"
T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


class PlacementGroupFactory:
    """Pickled in place of Ray's class of the same name (analysis reads only ``_bundles``)."""

    def __init__(self, bundles):
        self._bundles = bundles


def trial_spec(
    name,
    config,
    rows,
    *,
    status="TERMINATED",
    start=0.0,
    step_s=1.0,
    gpu_ids=None,
    error=None,
    resources=None,
    trial_id=None,
):
    """One trial for :func:`write_experiment`: ``rows`` are metric dicts, one per report."""
    return {
        "name": name,
        "config": config,
        "rows": rows,
        "status": status,
        "start": start,
        "step_s": step_s,
        "gpu_ids": gpu_ids,
        "error": error,
        "resources": resources or {"CPU": 1.0},
        "trial_id": trial_id,
    }


def write_experiment(
    root: Path,
    name: str,
    trials: list[dict],
    *,
    state: bool = True,
    metric: str | None = "val/acc",
    mode: str | None = "max",
    raysweep: bool = True,
) -> Path:
    """Write an experiment folder ``root/name`` holding ``trials`` (see :func:`trial_spec`).

    Times: trial k starts at ``T0 + start`` and reports every ``step_s`` seconds.
    """
    experiment = Path(root) / name
    experiment.mkdir(parents=True)
    trial_data = []
    for k, spec in enumerate(trials):
        trial_id = spec["trial_id"] or f"abcde_{k:05d}"
        folder = experiment / f"train_{trial_id}_{k}_{SESSION}"
        folder.mkdir()
        (folder / "params.json").write_text(json.dumps(spec["config"]))
        lines, elapsed = [], 0.0
        start = T0 + spec["start"]
        for i, metrics in enumerate(spec["rows"], start=1):
            elapsed += spec["step_s"]
            row = dict(metrics)
            if spec["gpu_ids"] is not None:
                row["gpu_ids"] = spec["gpu_ids"]
            row.update(
                {
                    "timestamp": int(start + elapsed),
                    "done": i == len(spec["rows"]) and spec["status"] == "TERMINATED",
                    "training_iteration": i,
                    "trial_id": trial_id,
                    "date": SESSION,
                    "time_this_iter_s": spec["step_s"],
                    "time_total_s": elapsed,
                    "pid": 100 + k,
                    "hostname": "node0",
                    "node_ip": "10.0.0.1",
                    "config": spec["config"],
                    "time_since_restore": elapsed,
                    "iterations_since_restore": i,
                }
            )
            lines.append(json.dumps(row))
        (folder / "result.json").write_text("".join(line + "\n" for line in lines))
        if spec["error"]:
            (folder / "error.txt").write_text(
                f"Failure # 1\nTraceback (most recent call last):\n  ...\n{spec['error']}\n"
            )
        info = {
            "trainable_name": "train",
            "trial_id": trial_id,
            "config": spec["config"],
            "status": spec["status"],
            "relative_logdir": folder.name,
            "custom_trial_name": spec["name"],
            "placement_group_factory": pickle.dumps(PlacementGroupFactory([spec["resources"]])).hex(),
        }
        meta = {
            "start_time": start if spec["status"] != "PENDING" else None,
            "last_result_time": start + elapsed if spec["rows"] else None,
            "error_filename": "error.txt" if spec["error"] else None,
            "last_result": json.loads(lines[-1]) if lines else {},
            "metric_analysis": _metric_analysis(spec["rows"]),
        }
        trial_data.append([json.dumps(info), json.dumps(meta)])
    if state:
        runner = {"_metric": metric} if metric else {}
        (experiment / f"experiment_state-{SESSION}.json").write_text(
            json.dumps({"trial_data": trial_data, "runner_data": runner, "stats": {"start_time": T0}})
        )
    if raysweep and metric:
        (experiment / "raysweep.json").write_text(json.dumps({"metric": metric, "mode": mode}))
    return experiment


def _metric_analysis(rows: list[dict]) -> dict:
    """Tune's per-metric summary of a trial (the fields the status command reads)."""
    names = {k for row in rows for k, v in row.items() if isinstance(v, (int, float))}
    return {
        k: {"max": max(v), "min": min(v), "last": v[-1]}
        for k in names
        if (v := [row[k] for row in rows if isinstance(row.get(k), (int, float))])
    }


def noise_grid(
    root: Path, name: str = "noise_grid", *, seeds=(0, 1, 2), rates=(0.0, 0.2, 0.4), epochs: int = 5, gpus: int = 2
) -> Path:
    """A finished noise-type × noise-rate × seed grid on ``gpus`` GPUs, trials back to back.

    val/acc of trial (type, rate, seed) at epoch e is
    ``0.9 - rate * (0.5 if sym else 0.8) - 0.1 / (e + 1) + 0.01 * seed``.
    """
    specs, k = [], 0
    for noise_type in ("sym", "asym"):
        for rate in rates:
            for seed in seeds:
                drop = 0.5 if noise_type == "sym" else 0.8
                rows = [
                    {
                        "epoch": e,
                        "val/acc": 0.9 - rate * drop - 0.1 / (e + 1) + 0.01 * seed,
                        "val/loss": 1.0 / (e + 1) + rate,
                        "train/loss": 1.0 / (e + 2),
                    }
                    for e in range(epochs)
                ]
                config = {
                    "model": "resnet18",
                    "loss": "ce",
                    "noise_type": noise_type,
                    "noise_rate": rate,
                    "seed": seed,
                    "epochs": epochs,
                    "lr": 0.1,
                }
                specs.append(
                    trial_spec(
                        f"{noise_type}_{rate}_seed{seed}",
                        config,
                        rows,
                        start=(k // gpus) * (epochs + 0.5),
                        gpu_ids=str(k % gpus),
                        resources={"CPU": 1.0, "GPU": 1.0},
                    )
                )
                k += 1
    return write_experiment(root, name, specs)


VAL_BUMP = (0.0, 0.05, 0.03, 0.01)
"""val/acc over 4 epochs, added to a trial's base: peaks at epoch 1."""
TEST_BUMP = (-0.02, 0.01, 0.04, -0.01)
"""test/acc over 4 epochs, added to the base: at the val peak +0.01, last -0.01, its own peak +0.04
(the value a rule selecting on the test set would report; no rule may)."""
LOSS_GAIN = {"ce": 0.0, "gce": 0.03, "sce": 0.05}


def paper_base(loss: str, noise_type: str, rate: float, seed: int) -> float:
    """Base accuracy of a :func:`paper_grid` trial."""
    return 0.9 - rate * (0.5 if noise_type == "sym" else 0.8) + LOSS_GAIN[loss] + 0.01 * seed


def paper_grid(
    root: Path,
    name: str = "paper",
    *,
    losses=("ce", "gce"),
    types=("sym", "asym"),
    rates=(0.2, 0.4),
    seeds=(0, 1, 2),
    config: dict | None = None,
    status: dict | None = None,
) -> Path:
    """A finished loss × noise type × noise rate × seed grid with val/acc and test/acc per epoch.

    val/acc at epoch e = base + VAL_BUMP[e], test/acc = base + TEST_BUMP[e], base =
    :func:`paper_base`. ``status`` maps ``(loss, type, rate, seed)`` to ``"ERROR"`` (the trial
    errors after 2 epochs) or ``"DIVERGED"`` (NaN losses from epoch 2); ``config`` is merged
    into every trial's config.
    """
    specs = []
    for loss in losses:
        for noise_type in types:
            for rate in rates:
                for seed in seeds:
                    base = paper_base(loss, noise_type, rate, seed)
                    rows = [
                        {
                            "epoch": e,
                            "val/acc": base + VAL_BUMP[e],
                            "test/acc": base + TEST_BUMP[e],
                            "train/loss": 1.0 / (e + 1),
                        }
                        for e in range(4)
                    ]
                    fate = (status or {}).get((loss, noise_type, rate, seed))
                    kwargs = {}
                    if fate == "ERROR":
                        rows, kwargs = rows[:2], {"status": "ERROR", "error": "RuntimeError: CUDA error"}
                    elif fate == "DIVERGED":
                        for row in rows[2:]:
                            row.update({"train/loss": float("nan"), "val/acc": 0.1, "test/acc": 0.1})
                        rows[-1]["diverged"] = True
                    cfg = {
                        "loss": loss,
                        "noise_type": noise_type,
                        "noise_rate": rate,
                        "seed": seed,
                        "epochs": 4,
                        **(config or {}),
                    }
                    specs.append(trial_spec(f"{loss}_{noise_type}_{rate}_seed{seed}", cfg, rows, **kwargs))
    return write_experiment(root, name, specs)


def write_confusion(
    trial_dir: Path,
    last: list[list[int]],
    best: list[list[int]],
    *,
    best_epoch: int = 1,
    last_epoch: int = 3,
    best_val: float = 0.9,
) -> Path:
    """``<trial_dir>/confusion.json`` in the format the trainable writes (clean test set)."""
    data = {
        "num_classes": len(last),
        "labels": "rows are true classes, columns predicted (clean test set)",
        "last": {"epoch": last_epoch, "test": last},
        "best-val": {"epoch": best_epoch, "val/acc": best_val, "test": best},
    }
    path = Path(trial_dir) / "confusion.json"
    path.write_text(json.dumps(data))
    return path

"""Small Ray Tune experiments for the analysis tests, written without Ray or made by Ray.

``write_experiment`` writes the files Tune 2.x writes (experiment_state-*.json with the fields
analysis reads, and params.json / result.json per trial), so tests control every value.
``run_tune_experiment`` makes real ones with a tiny Tune run.
"""

from __future__ import annotations

import json
import math
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
    logged_done=None,
    state_done=None,
    sampled=None,
    tag=None,
):
    """One trial for :func:`write_experiment`: ``rows`` are metric dicts, one per report.

    ``logged_done`` / ``state_done``: ``done`` of its last row in result.json / in the state's last
    result (default: True for a TERMINATED trial; Tune logs True where a scheduler said STOP, and
    sets it in the state also for a trainable that returned). ``sampled``, ``tag``: Tune's
    ``evaluated_params`` and ``experiment_tag``."""
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
        "logged_done": logged_done,
        "state_done": state_done,
        "sampled": sampled,
        "tag": tag,
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
    record: dict | None = None,
) -> Path:
    """Write an experiment folder ``root/name`` holding ``trials`` (see :func:`trial_spec`).

    Times: trial k starts at ``T0 + start`` and reports every ``step_s`` seconds. ``record``: more
    fields of raysweep.json (``searcher``, ``scheduler``).
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
        finished = spec["status"] == "TERMINATED"
        logged = finished if spec["logged_done"] is None else spec["logged_done"]
        for i, metrics in enumerate(spec["rows"], start=1):
            elapsed += spec["step_s"]
            row = dict(metrics)
            config = row.pop("config", spec["config"])  # a row's own: the config in force when it was logged
            if spec["gpu_ids"] is not None:
                row["gpu_ids"] = spec["gpu_ids"]
            row.update(
                {
                    "timestamp": int(start + elapsed),
                    "done": i == len(spec["rows"]) and logged,
                    "training_iteration": i,
                    "trial_id": trial_id,
                    "date": SESSION,
                    "time_this_iter_s": spec["step_s"],
                    "time_total_s": elapsed,
                    "pid": 100 + k,
                    "hostname": "node0",
                    "node_ip": "10.0.0.1",
                    "config": config,
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
            **({"evaluated_params": spec["sampled"]} if spec["sampled"] is not None else {}),
            **({"experiment_tag": spec["tag"]} if spec["tag"] is not None else {}),
        }
        last = json.loads(lines[-1]) if lines else {}
        if lines:
            last["done"] = finished if spec["state_done"] is None else spec["state_done"]
        meta = {
            "start_time": start if spec["status"] != "PENDING" else None,
            "last_result_time": start + elapsed if spec["rows"] else None,
            "error_filename": "error.txt" if spec["error"] else None,
            "last_result": last,
            "metric_analysis": _metric_analysis(spec["rows"]),
        }
        trial_data.append([json.dumps(info), json.dumps(meta)])
    if state:
        runner = {"_metric": metric} if metric else {}
        (experiment / f"experiment_state-{SESSION}.json").write_text(
            json.dumps({"trial_data": trial_data, "runner_data": runner, "stats": {"start_time": T0}})
        )
    if raysweep and metric:
        (experiment / "raysweep.json").write_text(json.dumps({"metric": metric, "mode": mode, **(record or {})}))
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


SEARCH_RECORD = {"searcher": "OptunaSearch", "scheduler": "AsyncHyperBandScheduler"}
"""What raysweep.json of sweeps/lr_search.py records about its search."""


def search_accuracy(lr: float, epoch: int, epochs: int) -> float:
    """val/acc of a :func:`search_experiment` trial: best at lr 0.1, rising over the epochs."""
    return 0.9 - 0.15 * abs(math.log10(lr) + 1) - 0.2 * (epochs - 1 - epoch) / epochs


def write_driver_end(experiment: Path, **record) -> None:
    """The `driver.json` of a driver that has ended (exit code 0 unless given), with ``record``'s fields
    (`stopped`, `scheduler_stops`, `ended_by`, ...)."""
    ended = {"host": "elsewhere", "pid": 4242, "since": "2026-11-22 18:50:18", "heartbeat": T0 + 100}
    ended |= {"ended": T0 + 100, "exit_code": 0} | record
    (Path(experiment) / "driver.json").write_text(json.dumps(ended))


def search_experiment(
    root: Path,
    name: str = "lr_search",
    *,
    n: int = 12,
    epochs: int = 4,
    finished: int = 6,
    budget: int = 1,
    errored: int = 0,
    searcher_state: bool = True,
    record: dict | None = SEARCH_RECORD,
) -> Path:
    """An lr_search-like experiment: ``n`` trials of TPE + ASHA at one noise rate (0.5).

    Trial k (started in that order) has lr ``10 ** (-4 + 4 k / (n - 1))`` (log-uniform on [1e-4, 1]), a
    weight decay on [1e-6, 1e-2] (log), batch size 64 or 256, loss ce or gce (with gce_q). The ``finished``
    trials closest to lr 0.1 run all ``epochs`` (ASHA's STOP at max_t: done), the next ``budget`` ones 2
    epochs and no ``done`` (the time budget stopped them), the next ``errored`` ones error after 1 epoch,
    the rest 1 epoch with ``done`` (ASHA pruned them); with ``budget`` trials, a driver record that says the time
    budget ended the sweep and stopped them. ``searcher_state``: a pickled OptunaSearch state
    (its study holds the distributions, a class of this module stands for the script's search space).
    """
    lrs = [10 ** (-4 + 4 * k / (n - 1)) for k in range(n)]
    by_closeness = sorted(range(n), key=lambda k: abs(math.log10(lrs[k]) + 1))
    fate = {k: "finished" for k in by_closeness[:finished]}
    fate |= {k: "budget" for k in by_closeness[finished : finished + budget]}
    fate |= {k: "errored" for k in by_closeness[finished + budget : finished + budget + errored]}
    specs, sampled = [], []
    for k, lr in enumerate(lrs):
        params = {
            "lr": lr,
            "weight_decay": 10 ** (-6 + 4 * ((7 * k) % n) / (n - 1)),
            "batch_size": (64, 256)[k % 2],
            "loss": ("ce", "gce")[(k // 2) % 2],
        }
        if params["loss"] == "gce":
            params["gce_q"] = 0.1 + 0.8 * ((5 * k) % n) / (n - 1)
        sampled.append(params)
        ran = {"finished": epochs, "budget": 2, "errored": 1}.get(fate.get(k), 1)
        rows = [
            {
                "epoch": e + 1,
                "val/acc": search_accuracy(lr, e, epochs),
                "test/acc": search_accuracy(lr, e, epochs) - 0.02,
            }
            for e in range(ran)
        ]
        kwargs = {"status": "ERROR", "error": "RuntimeError: boom"} if fate.get(k) == "errored" else {}
        if fate.get(k) == "budget":
            kwargs |= {"logged_done": False, "state_done": False}
        config = {"noise_type": "sym", "noise_rate": 0.5, "epochs": epochs, **params}
        specs.append(
            trial_spec(
                f"{name}_{k + 1:05d}", config, rows, start=2.0 * k, sampled=params, tag=f"{k + 1}_lr={lr:.4f}", **kwargs
            )
        )
    experiment = write_experiment(root, name, specs, record=record)
    if budget:  # the driver recorded why it ended, and which trials it stopped (`driver.json`)
        stopped = [f"abcde_{k:05d}" for k in sorted(k for k, f in fate.items() if f == "budget")]
        write_driver_end(experiment, ended_by="time budget", stopped=stopped)
    if searcher_state:
        (experiment / f"searcher-state-{SESSION}.pkl").write_bytes(pickle.dumps(_optuna_state(sampled)))
    return experiment


def _optuna_state(sampled: list[dict]) -> dict:
    """A pickled OptunaSearch's dict as Tune saves it: its study's trials carry the distributions."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    space = {
        "lr": FloatDistribution(1e-4, 1.0, log=True),
        "weight_decay": FloatDistribution(1e-6, 1e-2, log=True),
        "batch_size": CategoricalDistribution((64, 256)),
        "loss": CategoricalDistribution(("ce", "gce")),
        "gce_q": FloatDistribution(0.1, 0.9),
    }
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for params in sampled:
        study.add_trial(
            optuna.trial.create_trial(params=params, distributions={p: space[p] for p in params}, value=0.5)
        )
    return {"_metric": "val/acc", "_space": PlacementGroupFactory([]), "_ot_study": study}


def pbt_experiment(
    root: Path, name: str = "pbt", *, members: int = 4, epochs: int = 4, global_log: bool = True
) -> Path:
    """A PopulationBasedTraining run of ``members`` over ``epochs``, perturbing lr and weight decay.

    Member k starts at lr ``10 ** (-3 + k)`` (0.001, 0.01, 0.1, 1: a span of 1000, log) and weight decay
    1e-4. After its iteration 2 member 0 takes member 2's checkpoint with lr 0.12 and weight decay 2e-4 (one
    exploit/explore step, in ``pbt_global.txt`` as Tune writes it: at the iteration before, 1; its tag
    becomes ``...@perturbed[...]``); its rows carry the config in force when each was logged.
    """
    specs, base = [], {"noise_type": "sym", "noise_rate": 0.5, "epochs": epochs}
    for k in range(members):
        start = {"lr": 10.0 ** (-3 + k), "weight_decay": 1e-4}
        tag = f"{k}_lr={start['lr']:.4f},weight_decay={start['weight_decay']:.4f}"
        final = {**start, "lr": 0.12, "weight_decay": 2e-4} if k == 0 else start
        rows = [{"epoch": e + 1, "val/acc": 0.5 + 0.1 * e + 0.01 * k} for e in range(epochs)]
        if k == 0:
            rows = [{**row, "config": {**base, **(start if row["epoch"] <= 2 else final)}} for row in rows]
        specs.append(
            trial_spec(
                f"{name}_{k:05d}",
                {**base, **final},
                rows,
                trial_id=f"pbt42_{k:05d}",
                logged_done=False,
                sampled=start,
                tag=tag + ("@perturbed[lr=0.1200,weight_decay=0.0002]" if k == 0 else ""),
            )
        )
    experiment = write_experiment(root, name, specs, record={"searcher": None, "scheduler": "PopulationBasedTraining"})
    if global_log:
        source = {**base, "lr": 0.1, "weight_decay": 1e-4}
        step = ["0_lr=0.0010,weight_decay=0.0001", "2_lr=0.1000,weight_decay=0.0001", 1, 2, source]
        (experiment / "pbt_global.txt").write_text(
            json.dumps([*step, {**base, "lr": 0.12, "weight_decay": 2e-4}]) + "\n"
        )
    return experiment

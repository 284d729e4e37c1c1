"""Multi-GPU trials: one Tune trial trains data-parallel (DDP) over several GPUs with Ray Train.

Follows Ray's documented Train-inside-Tune pattern for Ray Train V2 (the default since Ray 2.51):
the Tune trial `train_classifier_ddp` is a light driver that builds a `TorchTrainer` and calls
`fit()`; Ray Train starts `num_workers` worker processes (one GPU each), sets up the process
group (NCCL on CUDA builds, gloo otherwise), and each worker runs `train_epochs` on its share of
every global batch. `TuneReportCallback` forwards rank 0's metrics to Tune, so a DDP trial reports
the same metric names as a single-GPU trial. Each worker runs the shared per-epoch runtime
(`trainables/trial.py:report_epochs`): rank 0 writes the log line, `confusion.json` and, on a NaN,
`divergence.json` into the Tune trial's folder, and saves checkpoints; Ray Train keeps them under
`<trial>/ddp/` and, when Tune retries the trial, resumes from the latest one. Every worker's
process is titled `ray::<trial name>` (`trainables/proctitle.py`), as a single-process trial's is.

The Tune trial itself holds no CPU or GPU (the workers hold them), so the sweep limits how many
DDP trials run at once with `max_concurrent_trials`.
"""

from __future__ import annotations

from pathlib import Path

import ray
import torch
from ray import train, tune
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer
from ray.tune.integration.ray_train import TuneReportCallback

from trainables.checkpoints import CHECKPOINT_FILE
from trainables.config import parse_config
from trainables.data import data_key, load_data
from trainables.gpu import nvml_utilization_reader
from trainables.gpu_use import gpu_metrics, record_placement, sample_gpu_utilization
from trainables.proctitle import report_then_refresh, trial_process_title
from trainables.train import train_epochs
from trainables.trial import report_epochs, start_trial


def train_classifier_ddp(
    config: dict,
    data: dict | None = None,
    *,
    num_workers: int = 2,
    cpus_per_worker: float = 1.0,
    use_gpu: bool = True,
    experiment_path: str | None = None,
) -> None:
    """A Tune trial that trains `config` with DDP over `num_workers` workers of one GPU each.

    Args:
        config: flat `TrainConfig` dict, as for `train_classifier`.
        data: the sweep's data dict (`tune.with_parameters`), handed to workers through the object store.
        num_workers: data-parallel processes, one GPU each (`--gpus-per-trial`).
        cpus_per_worker: CPU cores each worker holds.
        use_gpu: False trains on CPU workers (tests; backend gloo).
        experiment_path: the sweep's `<storage>/<name>` (shared storage on a cluster); the Train
            run goes to `<experiment_path>/<trial>/ddp`. None: the trial's local folder.
    Raises:
        ray.train.TrainingFailedError: a worker failed (Tune then retries the trial).
    """
    cfg = parse_config(config)  # fail in the trial, naming the key, before workers start
    if data is None or data.get("key") != data_key(cfg):
        data = load_data(cfg)
    trial_dir = start_trial(cfg, data)  # trial_config.json, noise.json: as every trial
    context = tune.get_context()
    trial_path = f"{experiment_path}/{context.get_trial_name()}" if experiment_path else str(trial_dir)
    trainer = TorchTrainer(
        _train_worker,
        train_loop_config={
            "config": config,
            "data": ray.put(data),
            "trial_dir": trial_path,
            "trial_name": context.get_trial_name(),
        },
        scaling_config=ScalingConfig(
            num_workers=num_workers,
            use_gpu=use_gpu,
            resources_per_worker={"CPU": cpus_per_worker, "GPU": 1 if use_gpu else 0},
        ),
        torch_config=TorchConfig(backend="nccl" if use_gpu and torch.version.cuda else "gloo"),
        run_config=RunConfig(name="ddp", storage_path=trial_path, callbacks=[TuneReportCallback()]),
    )
    with trial_process_title(context.get_trial_name()):  # until Ray retitles it at the first report
        trainer.fit()


def _train_worker(loop_config: dict) -> None:
    """One DDP worker: `train_epochs` on its share of each batch, reported by the shared runtime
    (`trainables/trial.py:report_epochs`); rank 0 alone writes the trial's files and checkpoints."""
    if torch.cuda.is_available():
        torch.cuda.set_device(train.torch.get_device())
    cfg = parse_config(loop_config["config"])
    data = ray.get(loop_config["data"]) if loop_config["data"] is not None else None
    state = None
    if (checkpoint := train.get_checkpoint()) is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / CHECKPOINT_FILE, map_location="cpu", weights_only=True)
    context = train.get_context()
    trial_dir = Path(loop_config["trial_dir"]) if context.get_world_rank() == 0 else None
    if trial_dir is not None:
        trial_dir.mkdir(parents=True, exist_ok=True)
        record_placement(trial_dir, 1.0)  # rank 0's GPU, as its results name it
    with (
        trial_process_title(loop_config.get("trial_name")),
        sample_gpu_utilization(nvml_utilization_reader()) as utilization,
    ):

        def extra_metrics() -> dict:  # one whole GPU per worker: no memory cap
            return {
                **gpu_metrics(1.0 if torch.cuda.is_available() else 0.0, None, utilization),
                "ddp/world_size": context.get_world_size(),
            }

        report_epochs(
            cfg,
            (cfg.seed,),
            [train_epochs(cfg, data, state)],
            trial_dir,
            extra_metrics,
            report=report_then_refresh(train.report),
            checkpoint_type=Checkpoint,
        )

"""What each trial runs and holds: its function, GPU share and concurrency limit, wrapped as Tune takes it."""

from __future__ import annotations

import dataclasses

import ray
from ray import tune
from ray.tune import TuneConfig

from sweeps.engine.cluster.gpus import auto_gpus_per_trial, probe_on_gpu
from sweeps.engine.cluster.ray_start import concurrent_slots, default_gpus_per_trial
from sweeps.engine.run_flags import RunOptions


@dataclasses.dataclass
class TrialFunction:
    """What each trial runs: `function(config, **params)` (Tune's Function API), the same function
    data-parallel over whole GPUs (`ddp`, optional), and the config whose model and batch size
    `--gpus-per-trial auto` probes (None: no probe, 0.25 GPU), and the job's Ray `runtime_env`
    (`ray.init(runtime_env=...)`: a code snapshot's `working_dir` on a cluster with no shared folder)."""

    function: object
    params: dict
    ddp: object | None = None
    probe_config: object | None = None
    runtime_env: dict | None = None


def max_concurrent_trials(
    options: RunOptions, gpus: float, trial_function: TrialFunction, tune_config: TuneConfig
) -> int | None:
    """`TuneConfig.max_concurrent_trials`: --max-concurrent, or a limit the sweep needs (None: none).

    Data-parallel trials (`gpus` >= 2 with `trial_function.ddp`) hold no resources in their driver:
    no more start than the GPUs can hold. A searcher keeps only one trial pending unless told how
    many may run: as many as the resources per trial allow (`concurrent_slots`), at most
    `tune_config.num_samples`.
    """
    max_concurrent = options.max_concurrent
    if gpus >= 2 and trial_function.ddp:
        return max_concurrent or max(1, int(ray.cluster_resources().get("GPU", 0) // gpus))
    if tune_config.search_alg is not None:
        return min(max_concurrent or concurrent_slots(gpus, options.cpus_per_trial), tune_config.num_samples)
    return max_concurrent


def gpus_per_trial(requested: float | str | None, cpus_per_trial: float, trial_function: TrialFunction) -> float:
    """Resolve --gpus-per-trial with Ray up: `requested` as it is (GPUs, a float), the default (None:
    0.25 with GPUs, else 0), or `auto` (probe the memory of one trial on a whole GPU, pack densely;
    `sweeps/engine/cluster/gpus.py`)."""
    if requested is None:
        return default_gpus_per_trial()
    if requested != "auto":
        return requested
    cfg, data = trial_function.probe_config, trial_function.params.get("data")
    probe = (lambda: probe_on_gpu(cfg, data, cpus_per_trial)) if cfg is not None else (lambda: None)
    headroom = cfg.gpu_memory_headroom if cfg is not None else 0.1
    gpus, why = auto_gpus_per_trial(ray.cluster_resources().get("GPU", 0), probe, headroom)
    print(f"--gpus-per-trial auto: {gpus:g} GPU per trial; {why}", flush=True)
    return gpus


def with_resources(trial_function: TrialFunction, gpus: float, cpus: float, experiment_dir: str):
    """The trainable with its parameters and resources per trial, as Tune takes it.

    A share of 2 or more GPUs runs `trial_function.ddp` when there is one: a Tune trial that drives a
    Ray Train run of one worker per GPU and itself holds almost nothing.
    """
    if gpus >= 2 and trial_function.ddp is not None:
        return tune.with_resources(
            tune.with_parameters(
                trial_function.ddp,
                **trial_function.params,
                num_workers=int(gpus),
                cpus_per_worker=cpus,
                experiment_path=experiment_dir,
            ),
            {"cpu": 0.01},
        )  # Tune needs some resource
    return tune.with_resources(
        tune.with_parameters(trial_function.function, **trial_function.params), {"cpu": cpus, "gpu": gpus}
    )

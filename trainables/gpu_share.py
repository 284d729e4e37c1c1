"""A trial's GPU share, without torch: what Tune gave it and the memory fraction that share may use (how a
trial that ran out of it is recognised, also without torch: `trainables/gpu_oom.py`).

Split from `trainables/gpu.py` (which needs torch) because the command-trial runtime and every sweep's
driver use these and never train: importing torch costs them about 1.3 s of start-up on a quiet
2-core machine (`tests/unit/test_import_hygiene.py` keeps torch out of a command sweep's driver).
"""

from __future__ import annotations

import warnings


def memory_fraction_for(gpus_per_trial: float, headroom: float) -> float | None:
    """Share of one device's memory a trial may allocate: `g * (1 - headroom)` for g < 1.

    Args:
        gpus_per_trial: the trial's GPU share (0.25: four trials per GPU); 0 or >= 1: no cap.
        headroom: share of the slice left free for the CUDA context, cuDNN workspaces and
            allocator fragmentation, which the cap does not count (`TrainConfig.gpu_memory_headroom`).
    Returns:
        A fraction in (0, 1), e.g. 0.225 for g=0.25, headroom=0.1; None when no cap applies.
    """
    if gpus_per_trial <= 0 or gpus_per_trial >= 1:
        return None
    return gpus_per_trial * (1.0 - headroom)


def trial_gpu_fraction() -> float:
    """GPUs Tune gave the running trial (0.25, 1, ...); 0.0 outside Tune or for CPU trials."""
    from ray import tune

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            resources = tune.get_context().get_trial_resources()
        except Exception:  # not in a Tune session
            return 0.0
    return float(resources.required_resources.get("GPU", 0.0)) if resources else 0.0

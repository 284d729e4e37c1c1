"""What Tune's start-up would load that a sweep never uses, left out (issue 50: a sweep's start-up costs no
more than Tune's own).

`sweep_run_config` (`sweeps/engine/run/launch.py`), which makes every sweep's `RunConfig`, calls
`trim_tune_start` before `Tuner.fit` can run:
- Tune's usage record of a run's callbacks imports Ray's W&B, MLflow, Comet and Aim integrations (and with
  them wandb and mlflow, where installed) to read four class names; every sweep has callbacks, Tune's
  defaults none. Counted by name instead, the same record (`ray_private.count_callbacks_by_name`).
- Tune's default TensorBoard logger imports tensorboardX, whose writer imports torch only to name a type
  in its annotations (`numpy_compatible`). Imported with torch held back, a driver that never trains
  (a command sweep's; the grid's hands `train_classifier` to Tune) never loads torch: 1.3 s of start-up
  on a quiet 2-core machine and some 300 MB.
"""

from __future__ import annotations

import sys

from trainables import ray_private


def trim_tune_start() -> None:
    """Leave out of Tune's start-up the imports above; nothing that Tune or a sweep uses changes."""
    ray_private.count_callbacks_by_name()
    tensorboardx_without_torch()


def tensorboardx_without_torch() -> None:
    """Import tensorboardX with `import torch` failing for that moment (`sys.modules["torch"] = None`), so
    its writer names numpy's array type instead of torch's in its annotations. Nothing when torch or
    tensorboardX is loaded already, or tensorboardX is not installed; a later `import torch` works as ever."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        return
    sys.modules["torch"] = None
    try:
        import tensorboardX  # noqa: F401  (loaded for Tune's TBXLoggerCallback)
    except ImportError:
        pass
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]

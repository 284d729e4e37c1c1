"""Point the trackers a command may log to (W&B, MLflow) at the trial's folder, so that their records
stay in the trial and `trainables/command/trackers.py` reads them; say so where the command names them."""

from __future__ import annotations

import re
from pathlib import Path

from trainables.experiment.records import MLFLOW_STORE

ENV_TRACKERS = ("wandb", "mlflow")  # the trackers `tracker_env` points at the trial's folder


def tracker_env(env: dict, work_dir: Path, metrics_from: str, shown=ENV_TRACKERS) -> list[str]:
    """Point the trackers `metrics_from` may read at the trial's folder, where `env` leaves them unset.

    Sets (in `env`) `WANDB_MODE=offline` (not with a `WANDB_API_KEY`: online runs write the same log)
    and `WANDB_DIR={trial_dir}` (W&B's run folder then is `{trial_dir}/wandb/offline-run-*`, which
    `wandb sync` uploads later), and
    `MLFLOW_TRACKING_URI=sqlite:///{trial_dir}/mlflow.db`, for `output` and the matching source.
    Args:
        shown: the trackers whose settings are returned (`trackers_named`); all are set.
    Returns:
        `NAME=value` for each variable set of a tracker in `shown`, to be said once in the trial's log.
    """
    wanted = {
        "wandb": {"WANDB_MODE": "offline", "WANDB_DIR": str(work_dir)},
        "mlflow": {"MLFLOW_TRACKING_URI": f"sqlite:///{work_dir / MLFLOW_STORE}"},
    }
    if env.get("WANDB_API_KEY"):  # logged in for online runs: they also write their log under WANDB_DIR
        del wanted["wandb"]["WANDB_MODE"]
    set_now = []
    for source, values in wanted.items():
        for name, value in values.items() if metrics_from in ("output", source) else ():
            if not env.get(name):
                env[name] = value
                set_now += [f"{name}={value}"] if source in shown else []
    return set_now


def trackers_named(argv: list[str], cwd: Path, metrics_from: str) -> tuple:
    """The trackers of `ENV_TRACKERS` that the command names (`--log-wandb`, `WandbLogger`) or whose
    name its script's source holds (`import wandb`, `import mlflow`), and the one --metrics-from names.

    Args:
        argv: the command; each word ending in `.py` is read as a file relative to `cwd` (when it is one).
    """
    text = " ".join(argv)
    for word in argv:
        path = Path(cwd, word)
        if word.endswith(".py") and path.is_file():
            text += path.read_text(errors="replace")
    return tuple(t for t in ENV_TRACKERS if t == metrics_from or re.search(t, text, re.IGNORECASE))

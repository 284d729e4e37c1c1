"""`log_metrics(**metrics)`: hand one result of your own training script to a raysweep command sweep.

    from trainables.command.user_metrics import log_metrics      # or copy this file next to your script
    log_metrics(epoch=3, val_acc=0.81, loss=0.52)
    log_metrics({"epoch": 3, "val/acc": 0.81})     # names that are not Python identifiers

`report` is the same function under its first name, kept so that scripts written with it keep working;
in raysweep "report" is Tune's `tune.report`, which this is not.

Under `sweeps/run_command.py` (the `train_command` trainable) the environment variable
`RAYSWEEP_METRICS_FILE` names a JSON-lines file of the trial; each call appends one line, which
the trainable turns into one `tune.report`. Run by hand (the variable unset), it prints
`epoch=3 val_acc=0.81 loss=0.52`, which the trainable's default stdout pattern also reads.
Only the standard library is imported, so the helper costs nothing in a script that does not
otherwise use Ray.
"""

from __future__ import annotations

import json
import os

METRICS_FILE_ENV = "RAYSWEEP_METRICS_FILE"


def log_metrics(metrics: dict | None = None, /, **more) -> None:
    """Append one result (`metrics` and keyword metrics) to `$RAYSWEEP_METRICS_FILE`, or print it.

    Args:
        metrics: optional dict of metrics (for names such as `val/acc`); keyword metrics are added.
            Values: numbers (ints, floats; numpy / 0-d torch values are converted with `.item()`),
            bools or strings. Include the sweep's step key (default `epoch`) in every result.
    """
    result = {**(metrics or {}), **more}
    result = {k: v.item() if hasattr(v, "item") else v for k, v in result.items()}
    path = os.environ.get(METRICS_FILE_ENV)
    if not path:
        print(" ".join(f"{k}={v}" for k, v in result.items()), flush=True)
        return
    # One write of one line in append mode: a concurrent reader sees whole lines or nothing new.
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")


report = log_metrics  # the helper's first name: scripts that import it keep working

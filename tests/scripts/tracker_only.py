"""A script that prints nothing of its own and logs each epoch only through one experiment tracker.

python tests/scripts/tracker_only.py --tracker wandb --lr 0.1 --out /tmp/run [--epochs 4] [--sleep 0.5]

--tracker: wandb (`wandb.log` with a step and a nested key, `train/loss`; WANDB_MODE / WANDB_DIR from the
environment), mlflow (`mlflow.log_metrics` with steps, the default store), csv (Lightning's CSVLogger
layout: `lightning_logs/version_N/metrics.csv`, train and val rows written separately) or hf
(`checkpoint-N/trainer_state.json` with the Trainer's `log_history`; with --at-exit one `trainer_state.json` at the end,
as `save_strategy="no"` and `trainer.save_state()` leave it). Epoch e logs `val_acc` = 0.5 + lr * e / 10
and the training loss 1 / e (W&B: `train/loss`, Hugging Face: `loss`, else `train_loss`).
--test-after (csv): after the last epoch E, a row `E + 1,,,,test_acc` (0.5 + lr), as Lightning's `trainer.test`
logs `test_acc` at `max_epochs`, one past the last epoch.
--kill-worker-at E: after logging epoch E, once, SIGKILL the Ray worker (the parent of the command shim); a rerun
goes on after the last epoch it logged (`<out>/done.txt`), as a script resuming from its checkpoint.
--start-after FILE: train only once FILE exists (a test orders two trials by a condition, not a delay); exit 3
if it has not appeared within 600 s.
"""

import argparse
import csv
import json
import os
import signal
import time
from pathlib import Path

import psutil

p = argparse.ArgumentParser()
p.add_argument("--tracker", choices=("wandb", "mlflow", "csv", "hf"), required=True)
p.add_argument("--lr", type=float, required=True)
p.add_argument("--out", required=True)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--kill-worker-at", type=int, default=0)
p.add_argument("--start-after", default="", help="a file to wait for before training")
p.add_argument("--test-after", action="store_true", help="csv: a test_acc row after the last epoch")
p.add_argument("--at-exit", action="store_true", help="hf: write trainer_state.json once, at the end (save_state())")
args = p.parse_args()
deadline = time.monotonic() + 600
while args.start_after and not os.path.exists(args.start_after):
    if time.monotonic() > deadline:
        raise SystemExit(f"{args.start_after} did not appear within 600 s")
    time.sleep(0.2)
out = Path(args.out)
done = out / "done.txt"
first = int(done.read_text()) + 1 if done.exists() else 1


def val_acc(epoch: int) -> float:
    return 0.5 + args.lr * epoch / 10


def wandb_logger():
    import wandb

    run = wandb.init(project="raysweep-test", config={"lr": args.lr})
    return lambda e: wandb.log({"val_acc": val_acc(e), "train": {"loss": 1.0 / e}}, step=e), run.finish


def mlflow_logger():
    import mlflow

    mlflow.start_run()
    return lambda e: mlflow.log_metrics({"val_acc": val_acc(e), "train_loss": 1.0 / e}, step=e), mlflow.end_run


def csv_logger():
    versions = out / "lightning_logs"
    folder = versions / f"version_{len(list(versions.glob('version_*'))) if versions.exists() else 0}"
    folder.mkdir(parents=True)
    path = folder / "metrics.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerow(["epoch", "step", "train_loss", "val_acc"] + (["test_acc"] if args.test_after else []))

    def log(e):
        with open(path, "a", newline="") as f:
            csv.writer(f).writerows([[e, e * 10, 1.0 / e, ""], [e, e * 10, "", val_acc(e)]])

    def test():
        if args.test_after:
            with open(path, "a", newline="") as f:
                csv.writer(f).writerow([args.epochs + 1, args.epochs * 10, "", "", 0.5 + args.lr])

    return log, test


def hf_logger():
    history = []

    def state(folder: Path, step: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": history}))

    def log(e):
        history.extend(
            [{"loss": 1.0 / e, "epoch": float(e), "step": e * 10}, {"val_acc": val_acc(e), "epoch": float(e)}]
        )
        if not args.at_exit:
            state(out / "trainer_out" / f"checkpoint-{e * 10}", e * 10)

    return log, lambda: state(out / "trainer_out", args.epochs * 10) if args.at_exit else None


log, finish = {"wandb": wandb_logger, "mlflow": mlflow_logger, "csv": csv_logger, "hf": hf_logger}[args.tracker]()
for epoch in range(first, args.epochs + 1):
    log(epoch)
    done.write_text(str(epoch))
    if epoch == args.kill_worker_at and not (out / "killed").exists():
        (out / "killed").touch()
        os.kill(psutil.Process().parent().parent().pid, signal.SIGKILL)  # trainables/command/shim.py's parent
        time.sleep(30)  # the watchdog ends this process once the worker is gone
    time.sleep(args.sleep)
finish()

"""A researcher's own training script, as the command-sweep tests run it; it knows nothing of Ray.

    python tests/scripts/train_script.py --noise-rate 0.2 --seed 0 --out /tmp/run --epochs 4

Trains a linear softmax classifier on synthetic 10-class data (no download, no sklearn import) with symmetric
label noise, in NumPy: a trial's start costs a Python and a NumPy import, not PyTorch's 4 s of CPU (the tests
run it in many trials; what a PyTorch script does at start is tried on pytorch/examples' scripts and
tests/scripts/imagenet_style.py). Prints `epoch=3 val_acc=0.81 loss=0.52` per epoch, and keeps its own
checkpoint in `--out/ckpt.npz`, resuming from it when present. The other flags inject what the tests need (a
crash, silence, NaN, a stuck grandchild, the JSON-lines routes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--noise-rate", type=float, default=0.0)
    p.add_argument("--noise-type", default="sym")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds of extra work per epoch")
    p.add_argument("--start-delay", type=float, default=0.0, help="seconds to wait before training")
    p.add_argument("--start-after", default="", help="wait (at most 120 s) until this file exists before training")
    p.add_argument("--touch-when-done", default="", help="create this file after the last epoch")
    p.add_argument(
        "--kill-self-at-epoch", type=int, default=0, help="SIGKILL itself after this epoch, first attempt only"
    )
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code after training (after a stderr line)")
    p.add_argument("--print-nothing", action="store_true")
    p.add_argument("--nan-at-epoch", type=int, default=0)
    p.add_argument("--spawn-child", action="store_true", help="start a grandchild that sleeps, marked with --out")
    p.add_argument("--report", choices=("stdout", "jsonl", "helper", "colon"), default="stdout")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"env_{os.getpid()}.json").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "started": time.time(),
                "argv": sys.argv[1:],
                "cwd": os.getcwd(),
                **{k: v for k, v in os.environ.items() if k.startswith("RAYSWEEP_") or k == "CUDA_VISIBLE_DEVICES"},
                "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            }
        )
    )
    if args.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"grandchild-of:{out}"])
        (out / "grandchild.pid").write_text(str(child.pid))

    time.sleep(args.start_delay)
    deadline = time.monotonic() + 120
    while args.start_after and not Path(args.start_after).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    g = np.random.default_rng(12345)  # the same data for every seed
    x = g.standard_normal((1800, 64))
    y = (x @ g.standard_normal((64, 10))).argmax(1)
    g = np.random.default_rng(args.seed)
    flip = g.random(len(y)) < args.noise_rate
    y_noisy = np.where(flip, g.integers(0, 10, len(y)), y)
    train, val = slice(0, 1400), slice(1400, None)
    weights, bias = np.zeros((64, 10)), np.zeros(10)
    start = 0
    ckpt = out / "ckpt.npz"
    if ckpt.exists():
        with np.load(ckpt) as state:
            weights, bias, start = state["weights"], state["bias"], int(state["epoch"])
        print(f"resumed from epoch {start}", file=sys.stderr, flush=True)

    for epoch in range(start + 1, args.epochs + 1):
        for _ in range(5):  # plain gradient descent on the cross-entropy, learning rate 0.5
            logits = x[train] @ weights + bias
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            loss = -np.log(p[np.arange(len(p)), y_noisy[train]]).mean()
            p[np.arange(len(p)), y_noisy[train]] -= 1
            weights -= 0.5 * x[train].T @ p / len(p)
            bias -= 0.5 * p.mean(0)
        time.sleep(args.sleep)
        val_acc = float(((x[val] @ weights + bias).argmax(1) == y[val]).mean())
        loss_value = float("nan") if epoch == args.nan_at_epoch else float(loss)
        with open(ckpt, "wb") as f:
            np.savez(f, weights=weights, bias=bias, epoch=epoch)
        metrics = {"epoch": epoch, "val_acc": round(val_acc, 4), "loss": loss_value}
        if args.print_nothing:
            pass
        elif args.report == "stdout":
            print(f"epoch={epoch} val_acc={val_acc:.4f} loss={loss_value:.4f}")
        elif args.report == "colon":
            print(f"Epoch: {epoch}, val/acc: {val_acc:.4f}, lr: 1e-3")
        elif args.report == "jsonl":
            with open(os.environ["RAYSWEEP_METRICS_FILE"], "a") as f:
                f.write(json.dumps(metrics) + "\n")
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
            from trainables.command.user_metrics import log_metrics

            log_metrics(metrics)
        sys.stdout.flush()
        marker = out / "killed_once"
        if epoch == args.kill_self_at_epoch and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    if args.touch_when_done:
        Path(args.touch_when_done).touch()
    if args.exit_code:
        print("Traceback (most recent call last):\nRuntimeError: injected failure for the test", file=sys.stderr)
        return args.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A script that keeps its own checkpoint in --out and resumes from it, like most research repos;
with --kill-parent-after N it kills the trial's worker (the parent of the command
shim that started it) right after
printing epoch N (once the trial's stdout file holds that line; with --kill-at-once (or --kill-at-once 1)
the worker is frozen (SIGSTOP) before the line is printed and killed right after, so it never reads it),
once: lines it printed that the worker never read or reported must not be lost.

    python tests/scripts/resumable.py --out /tmp/run --epochs 8 --kill-parent-after 6 [--kill-at-once [0|1]]
"""

import argparse
import json
import os
import signal
import time
from pathlib import Path

import psutil

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--epochs", type=int, default=8)
p.add_argument("--kill-parent-after", type=int, default=0)
p.add_argument("--kill-at-once", type=int, nargs="?", const=1, default=0, help="1: freeze the worker, print, kill it")
p.add_argument("--sleep", type=float, default=0.0, help="seconds of work per epoch")
args = p.parse_args()
out = Path(args.out)
ckpt = out / "ckpt.json"
start = json.loads(ckpt.read_text())["epoch"] + 1 if ckpt.exists() else 1
worker = psutil.Process().parent().parent()  # the trial's Ray worker: trainables/command/shim.py's parent
print(f"resuming from epoch {start}" if start > 1 else "starting", flush=True)
for epoch in range(start, args.epochs + 1):
    if args.kill_at_once and epoch == args.kill_parent_after and not (out / "killed").exists():
        os.kill(worker.pid, signal.SIGSTOP)  # the worker reads nothing more: the next line is printed unread
        stat, deadline = Path(f"/proc/{worker.pid}/stat"), time.monotonic() + 20
        while stat.read_text().rsplit(")", 1)[1].split()[0] not in "tT" and time.monotonic() < deadline:
            time.sleep(0.001)  # the stop has reached the worker (Linux: state T)
    print(f"epoch {epoch}/{args.epochs} val_acc={0.5 + epoch / 100:.2f}", flush=True)
    ckpt.write_text(json.dumps({"epoch": epoch}))
    time.sleep(args.sleep)
    if epoch == args.kill_parent_after and not (out / "killed").exists():
        (out / "killed").write_text("1")
        log, deadline = out.parent / "command_stdout.txt", time.monotonic() + 20  # the trial's copy of these lines
        while not args.kill_at_once and f"epoch {epoch}/" not in (log.read_text() if log.exists() else ""):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        os.kill(worker.pid, signal.SIGKILL)
        time.sleep(30)  # the watchdog ends this process once the worker is gone

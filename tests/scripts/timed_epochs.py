"""A script whose times are known: a start-up, then epochs of a fixed length (sleeps), each printed as
`epoch k/N val_acc=...`; for the estimate's tests and benchmarks/estimate_error.py.

    python tests/scripts/timed_epochs.py --startup 1 --epochs 8 --epoch-s 1.5 --seed 0

`--crash` exits 1 with a FileNotFoundError right after the start-up (a script that fails at start);
`--started FILE` appends the Unix time the script started to FILE (one line per start);
`--oom-below F` prints PyTorch's CUDA out-of-memory traceback and exits 1 after the start-up when the trial's
memory cap (RAYSWEEP_GPU_MEMORY_FRACTION; none: a whole GPU) is below F (a batch that fits a larger share only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--startup", type=float, default=1.0, help="seconds before the first epoch")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--epoch-s", type=float, default=1.5, help="seconds of each epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--crash", action="store_true")
    p.add_argument("--started", default=None)
    p.add_argument("--oom-below", type=float, default=0.0)
    args = p.parse_args()
    if args.started:
        with open(args.started, "a") as f:  # one short O_APPEND write per start: whole lines whatever runs beside it
            f.write(f"{time.time()}\n")
    time.sleep(args.startup)
    if float(os.environ.get("RAYSWEEP_GPU_MEMORY_FRACTION", "1")) < args.oom_below:
        print('Traceback (most recent call last):\n  File "train.py", line 42, in <module>', file=sys.stderr)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", file=sys.stderr)
        return 1
    if args.crash:
        open("../data_that_is_not_there/train.csv").read()
    for epoch in range(1, args.epochs + 1):
        time.sleep(args.epoch_s)
        print(f"epoch {epoch}/{args.epochs} val_acc={0.5 + 0.01 * epoch + 0.001 * args.seed:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

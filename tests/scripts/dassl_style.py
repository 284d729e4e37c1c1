"""A Dassl/CoOp-style training script: per-batch lines `epoch [3/5] batch [2/4] ... loss 0.83 acc 74.5 lr 2.0e-03`,
a per-epoch `val_acc: 71.5%` line without the epoch, and the test result once at the end as `* accuracy: 97.0%`.

    python tests/scripts/dassl_style.py --config configs/fast.yaml --dataset caltech101 \
        --num-classes 100 --seed 1 --epochs 3
"""

import argparse
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="none")
    p.add_argument("--dataset", default="caltech101")
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--sleep", type=float, default=0.0)
    args = p.parse_args()  # an unknown flag: argparse prints usage to stderr and exits 2
    print(f"Loading dataset: {args.dataset}, classes: {args.num_classes}, config {args.config}")
    base = 50 + 10 * args.seed + args.num_classes / 10 + len(args.config)
    for epoch in range(1, args.epochs + 1):
        for batch in range(1, 5):
            print(
                f"epoch [{epoch}/{args.epochs}] batch [{batch}/4] time 0.100 (0.120) data 0.001 "
                f"loss {1.5 / (epoch + batch):.4f} acc {base + epoch:.1f} lr {args.lr:.1e} eta 0:00:0{batch}"
            )
        print(f"val_acc: {base + 2 * epoch:.1f}%")
        time.sleep(args.sleep)
    print("Finished training")
    print("Evaluate on the *test* set")
    print("=> result")
    print("* total: 1,000")
    print(f"* accuracy: {base + 3 * args.epochs:.1f}%")
    print(f"* error: {100 - base - 3 * args.epochs:.1f}%")
    print("Elapsed: 0:00:03")
    print("done", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

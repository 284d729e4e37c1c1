"""A script that reports only through Python `logging` (its default handler writes to stderr), as a
NeurIPS 2023 label-noise repo does; stdout holds only prose.

python tests/scripts/logging_style.py --lr 0.1 --epochs 3
"""

import argparse
import logging

logging.basicConfig(level=logging.INFO, format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
log = logging.getLogger("train")
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--epochs", type=int, default=3)
args = p.parse_args()
print(f"Training with learning rate {args.lr}", flush=True)
for epoch in range(1, args.epochs + 1):
    acc = round(0.5 + 0.1 * epoch + args.lr, 3)
    log.info("%s", {"epoch": epoch, "train_loss": round(1.0 / epoch, 3), "eval_acc": acc})
print("done", flush=True)

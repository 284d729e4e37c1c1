"""A script that prints no step at all: its results once, at the end (a small paper-repo `eval` script).

python tests/scripts/final_only.py --lr 0.1
"""

import argparse

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
args = p.parse_args()
print("Building model... done")
print(f"val_accuracy = {0.9 - args.lr / 10:.3f}")
print(f"Test accuracy: {88.5 - args.lr:.1f}%")

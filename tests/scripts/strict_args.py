"""A script whose options differ from the sweep's command: argparse refuses `--lr` and exits 2.

python tests/scripts/strict_args.py --learning-rate 0.1
"""

import argparse

p = argparse.ArgumentParser()
p.add_argument("--learning-rate", type=float, required=True)
args = p.parse_args()
print(f"epoch=1 val_accuracy={args.learning_rate}")

"""A script that trains and exits 0 but prints no metric the sweep can read (its logs are prose).

python tests/scripts/quiet.py --lr 0.1
"""

import argparse

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
args = p.parse_args()
print(f"Training with learning rate {args.lr}")
print("Model saved to ./model.pt")

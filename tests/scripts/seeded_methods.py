"""A script whose result depends on method, cell and seed: method A 90 and B 80 in cell `gap`, both 85 in `same`.

python tests/scripts/seeded_methods.py --cell gap --method A --seed 3
Noise N(0, 1) per (cell, method, seed), so the same arguments print the same line.
"""

import argparse
import time
import zlib

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--cell", required=True, choices=("gap", "same"))
p.add_argument("--method", required=True, choices=("A", "B"))
p.add_argument("--seed", type=int, required=True)
p.add_argument("--sleep", type=float, default=0.0, help="seconds before the result (a sweep slow enough to kill)")
args = p.parse_args()
time.sleep(args.sleep)
mean = {("gap", "A"): 90.0, ("gap", "B"): 80.0}.get((args.cell, args.method), 85.0)
noise = np.random.default_rng([args.seed, zlib.crc32(f"{args.cell}{args.method}".encode())]).normal()
print(f"epoch=1 val_acc={mean + noise:.4f}")

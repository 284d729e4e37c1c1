"""A script whose lines need two regexes: training lines and evaluation lines of different shapes.

    python tests/scripts/pattern_style.py --dataset cifar10 --num-classes 10 --seed 0

Prints `Iter 100/300 | lr 1.0e-02 | loss 2.310` and, every 100 iterations,
`Eval @ 100 :: top1 41.50% top5 70.00%` (no `=` or `:` pairs the default pattern would read).
"""

import argparse

p = argparse.ArgumentParser()
p.add_argument("--dataset", required=True)
p.add_argument("--num-classes", type=int, required=True)
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
for it in range(50, 301, 50):
    print(f"Iter {it}/300 | lr 1.0e-02 | loss {3 / it * 100:.3f}")
    if it % 100 == 0:
        top1 = 30 + it / 20 + args.num_classes / 10 + args.seed
        print(f"Eval @ {it} :: top1 {top1:.2f}% top5 {top1 + 20:.2f}%")

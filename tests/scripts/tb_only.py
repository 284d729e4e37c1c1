"""A script that writes its metrics only to TensorBoard (tensorboardX's SummaryWriter), printing prose.

python tests/scripts/tb_only.py --logdir /tmp/run --lr 0.1 --steps 5
"""

import argparse

from tensorboardX import SummaryWriter

p = argparse.ArgumentParser()
p.add_argument("--logdir", required=True)
p.add_argument("--lr", type=float, required=True)
p.add_argument("--steps", type=int, default=5)
args = p.parse_args()
writer = SummaryWriter(args.logdir)
for step in range(1, args.steps + 1):
    writer.add_scalar("train/loss", 1.0 / step, global_step=step)
    writer.add_scalar("val/accuracy", 0.5 + args.lr * step / 10, global_step=step)
    writer.flush()
    print(f"finished step {step} of {args.steps}")
writer.close()

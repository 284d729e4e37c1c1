"""pytorch/examples `imagenet/main.py` as far as its files go: `save_checkpoint()` writes
`checkpoint.pth.tar` to the working folder with torch.save and copies it to `model_best.pth.tar`;
`--resume checkpoint.pth.tar` continues from it; it reads `config/<name>.json` and imports a sibling
module, both relative to where it runs. The test copies it into a repo-like folder as main.py.

    python main.py --lr 0.1 --seed 0 --epochs 3 --resume checkpoint.pth.tar --kill-self-at-epoch 2
"""

import argparse
import json
import os
import shutil
import signal
import sys

import sibling  # a module next to main.py, as imagenet/main.py imports its own files
import torch

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--seed", type=int, required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--config", default="x")
p.add_argument("--resume", default="")
p.add_argument("--kill-self-at-epoch", type=int, default=0, help="SIGKILL itself once, after saving this epoch")
args = p.parse_args()
config = json.load(open(f"config/{args.config}.json"))  # a relative read of the repo

start = 1
if args.resume and os.path.isfile(args.resume):
    checkpoint = torch.load(args.resume)
    start = checkpoint["epoch"] + 1
    print(f"=> resumed from epoch {checkpoint['epoch']} of {args.resume}", file=sys.stderr, flush=True)
for epoch in range(start, args.epochs + 1):
    acc = sibling.accuracy(args.lr, args.seed, epoch) * config["scale"]
    state = {"epoch": epoch, "lr": args.lr, "seed": args.seed, "acc": acc, "version": sibling.VERSION}
    torch.save(state, "checkpoint.pth.tar")
    shutil.copyfile("checkpoint.pth.tar", "model_best.pth.tar")
    os.makedirs("experiment", exist_ok=True)
    with open("experiment/log.txt", "a") as log:  # a file the repo already has: appended to, in the trial's copy
        log.write(f"lr={args.lr} seed={args.seed} epoch={epoch}\n")
    print(f"epoch={epoch} val_acc={acc:.4f} version={sibling.VERSION}", flush=True)
    if epoch == args.kill_self_at_epoch and start == 1:
        os.kill(os.getpid(), signal.SIGKILL)

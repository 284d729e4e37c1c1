"""A script that picks its own GPU, like many repos: `--gpu N` sets CUDA_VISIBLE_DEVICES before CUDA starts.
It waits until `--trials` scripts have started (files in `--meeting`), so the trials run at once.

    python pick_gpu.py --gpu {gpu} --meeting /tmp/m --trials 4
"""

import argparse
import os
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--gpu", required=True)
p.add_argument("--meeting", required=True)
p.add_argument("--trials", type=int, default=4)
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu
meeting = Path(args.meeting)
meeting.mkdir(parents=True, exist_ok=True)
(meeting / f"{os.getpid()}").write_text(args.gpu)
deadline = time.monotonic() + 120
while len(list(meeting.iterdir())) < args.trials and time.monotonic() < deadline:
    time.sleep(0.1)
print(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
print(f"epoch=1 gpu_id={int(args.gpu)}", flush=True)

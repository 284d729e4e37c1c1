"""Where each command of README.md and docs/*.md stands (tests/unit/test_docs_commands.py reads them from the pages
and fails on a command placed nowhere): run as written (`RUN_QUICK` in the unit lane, `RUN_SLOW` and the quick start
`SMOKE` end to end, tests/sweeps/test_docs_commands.py), parsed only (`NOT_RUN`, with the reason), or not even
parsed (`NOT_PARSED`); and `run_documented`, which runs one as written."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GRID_MINUTES = "trains the full grid (minutes to hours); its flags are checked by parsing"
GPU = "needs a GPU"
CLUSTER = "needs a running Ray cluster at that address"
SEARCH_OWN_SCRIPT = "needs the user's script; tests/commands/test_command.py searches tests/scripts/mnist_style.py so"
NOT_RUN = {  # command -> why the test only parses it
    "make sweep": "= python sweeps/noise_grid.py, " + GRID_MINUTES,
    "make test": "the whole suite: the integrator's and CI's job, not a test's",
    "python sweeps/noise_grid.py --seeds 3 --gpus-per-trial 0.25": GPU,
    "python sweeps/noise_grid.py --loss ce,gce,sce --lr 0.01,0.1 --noise-rates 0.2,0.4 --seeds 3": GRID_MINUTES,
    "python sweeps/noise_grid.py --dataset cifar10 --data-root '~/data/cifar-10-batches-py' --model resnet18 "
    "--loss gce --epochs 100 --gpus-per-trial 0.5": GPU + " and the CIFAR-10 batches (no download here)",
    "python sweeps/lr_search.py --smoke-test": "starts Ray; tests/sweeps/test_search.py runs lr_search.main end to end",
    "python sweeps/pbt.py --smoke-test": "starts Ray; tests/sweeps/test_search.py runs pbt.main end to end",
    "python sweeps/run_command.py --axis noise_rate=0.125,0.25,0.375,0.5,0.625,0.75 --axis noise_type=sym,asym "
    "--seeds 3 --gpus-per-trial 0.25 --metric val_acc -- python train.py --noise-rate '{noise_rate}' "
    "--noise-type '{noise_type}' --seed '{seed}' --out '{trial_dir}'": GPU + " and the user's train.py",
    "python -m analysis runs/ce runs/gce --paper --select best-val --rows loss --baseline ce": "needs two "
    "finished sweeps runs/ce and runs/gce; tests/unit/test_analysis_paper.py covers --paper",
    "python sweeps/noise_grid.py --seeds 3 --quiet": GRID_MINUTES,
    "python -m analysis runs/noise_grid --status --watch 30": "watches until the sweep ends; --status alone is run",
    "python sweeps/noise_grid.py --name a --seeds 3": GRID_MINUTES + " (on a shared `ray start` head)",
    "python sweeps/lr_search.py --name b --smoke-test": "starts Ray (on a shared `ray start` head)",
    "python sweeps/noise_grid.py --seeds 3": GRID_MINUTES,
    "python sweeps/noise_grid.py --seeds 3 --resume": "needs a killed sweep to resume",
    "python sweeps/noise_grid.py --seeds 5 --noise-rates 0.125,0.25,0.875": GRID_MINUTES,
    "python sweeps/noise_grid.py --seeds 3 --resume --retry-errored": "needs a killed sweep to resume",
    "python sweeps/noise_grid.py --seeds 3 --no-skip-existing": GRID_MINUTES,
    "python sweeps/noise_grid.py --fail-fast": GRID_MINUTES,
    "python sweeps/noise_grid.py --gpus 0,2": GPU + "s 0 and 2",
    "python sweeps/noise_grid.py --gpus all": GPU,
    "python sweeps/noise_grid.py --gpus-per-trial auto": GPU + " (on CPU, auto means CPU trials)",
    "python sweeps/noise_grid.py --dataset cifar10 --data-root '~/data/cifar-10-batches-py' --model resnet18 "
    "--gpus-per-trial 2": "needs two GPUs and the CIFAR-10 batches",
    "python sweeps/noise_grid.py --address HEAD_IP:6379 --storage-path /mnt/nfs/runs --seeds 3": CLUSTER,
    "python sweeps/noise_grid.py --mlflow-uri": GRID_MINUTES + "; tests/sweeps/test_trackers.py logs to sqlite",
    "python sweeps/noise_grid.py --mlflow-uri http://mlflow-host:5000": "needs an MLflow server",
    "python sweeps/noise_grid.py --wandb-project noise": GRID_MINUTES
    + "; tests/sweeps/test_trackers.py runs W&B offline",
    "python sweeps/run_command.py --axis dataset,num_classes=caltech101:100,oxford_pets:37 --seeds 3 "
    "--metric val_acc --test-metric accuracy -- python train.py --dataset '{dataset}' --num-classes "
    "'{num_classes}' --seed '{seed}' --out '{trial_dir}'": "needs the user's train.py and its data sets",
    "python sweeps/lr_search.py --noise-type sym --noise-rate 0.5 --num-samples 40 --repeat 3 --lr-range 1e-3,1 "
    "--weight-decay-range 1e-6,1e-2 --losses ce,gce,sce --batch-sizes 64,128 --grace-period 2 "
    "--reduction-factor 3 --gpus-per-trial 0.25": GPU,
}
NOT_RUN.update(
    {
        "python -m analysis runs/noise_grid --bootstrap": "the report again with 9999 resamples per cell; "
        "tests/unit/test_analysis_stats.py runs --bootstrap",
        "python -m analysis runs/ce runs/gce --paper --bootstrap": "needs two finished sweeps runs/ce and runs/gce",
        "python -m analysis runs/noise_grid --status --json --watch 30": "watches until the sweep ends; "
        "--status --json alone is run",
        "python -m analysis runs/ce runs/gce --json --select last-k --k 10": "needs two finished sweeps",
        "python -m analysis runs/command --provenance": "needs a finished command sweep; "
        "tests/analysis/test_research_record.py runs --provenance",
        "python sweeps/noise_grid.py --seeds 3 --notify ntfy://my-sweeps --notify mailto://user:pass@gmail.com": (
            GRID_MINUTES + "; tests/analysis/test_research_record.py notifies a loopback receiver"
        ),
        "python sweeps/noise_grid.py --seeds 5 --epochs 50 --dry-run --estimate-from runs/noise_grid_pilot": "needs "
        "a finished pilot sweep; tests/analysis/test_research_record.py checks an estimate against a real sweep",
        "python sweeps/noise_grid.py --seeds 3 --estimate": "trains the first cell and joins Ray for its slots; "
        "tests/sweeps/test_estimate_sweeps.py estimates the smoke grid before its run keeps the estimate",
        "python sweeps/run_command.py --axis lr=0.1,0.01 --seeds 3 --estimate -- python train.py --lr '{lr}' "
        "--seed '{seed}'": "needs the user's train.py; "
        "tests/sweeps/test_estimate_sweeps.py estimates a scripted command",
        "python sweeps/lr_search.py --num-samples 40 --estimate --json": "trains the first cell; "
        "tests/unit/test_estimate.py checks the document against its schema",
        "python sweeps/noise_grid.py --seeds 5 --dry-run --estimate --json": "needs a finished sweep runs/noise_grid; "
        "tests/unit/test_estimate.py estimates from a finished experiment",
        "python sweeps/run_command.py --axis lr=0.1,0.01 --seeds 2 --gpus-per-trial 1 -- python main.py --lr '{lr}' "
        "--seed '{seed}' --gpu '{gpu}'": GPU + " and the user's main.py",
        "python sweeps/noise_grid.py --loss ce,gce,sce --seeds auto --max-seeds 10": GRID_MINUTES
        + "; tests/sweeps/test_seeds_sweep.py runs --seeds auto end to end",
        "python sweeps/noise_grid.py --loss ce,gce,sce --seeds auto --max-seeds 15": "extends the sweep above",
        "python sweeps/noise_grid.py --loss ce,label_smoothing,gce,sce --seeds auto --pairs all": GRID_MINUTES
        + "; tests/sweeps/test_seeds_sweep.py runs four losses with --seeds auto end to end",
        "python sweeps/noise_grid.py --loss ce,gce,sce --seeds auto --max-seeds 10 --smoke-test --name j3grid": "the "
        "docs' 12-cell comparison: 224 trials, minutes; tests/sweeps/test_seeds_sweep.py runs --seeds auto end to end",
        "python sweeps/noise_grid.py --loss ce,gce,sce --seeds 10 --smoke-test --name j3fixed": "the fixed grid of "
        "the comparison: 360 trials, minutes",
        "python sweeps/noise_grid.py --loss ce,gce,sce --seeds auto --max-seeds 10 --epochs 10 --name j3grid10": "the "
        "docs' 12-cell comparison at 10 epochs: 318 trials, half an hour",
        "python sweeps/noise_grid.py --loss ce,gce,sce --seeds 10 --epochs 10 --name j3grid10": "completes the "
        "fixed grid of the run above",
        "python sweeps/run_command.py --axis noise_rate=0.2,0.4 --axis method=ce,gce --seeds auto --compare method "
        "--max-seeds 10 -- python train.py --method '{method}' --noise-rate '{noise_rate}' --seed '{seed}'": "needs "
        "the user's train.py; tests/sweeps/test_seeds_sweep.py runs a scripted command the same way",
        "python sweeps/lr_search.py --metric Accuracy --num-samples 8 -- python main.py --epochs 2 --lr '{lr}'": (
            SEARCH_OWN_SCRIPT
        ),
        "python sweeps/lr_search.py --metric Accuracy --num-samples 8 --space wd=loguniform:1e-5,1e-2 -- python "
        "main.py --epochs 10 --lr '{lr}' --weight-decay '{wd}'": SEARCH_OWN_SCRIPT,
        "python sweeps/lr_search.py --metric val_acc --space wd=loguniform:1e-5,1e-2 -- python train.py --epochs 30 "
        "--lr '{lr}' --wd '{wd}' --out '{trial_dir}'": SEARCH_OWN_SCRIPT,
        "python sweeps/lr_search.py --metric val_acc --num-samples 40 --seed 0 --space wd=loguniform:1e-5,1e-2 "
        "--space batch_size=choice:64,128,256 --space depth=int:2,6 -- python train.py --epochs 30 --lr '{lr}' "
        "--wd '{wd}' --batch-size '{batch_size}' --depth '{depth}' --seed '{seed}'": SEARCH_OWN_SCRIPT,
    }
)
NOT_RUN.update(
    {
        "raysweep run --axis lr=0.1,0.01 --seeds 3 -- python train.py --lr '{lr}' --seed '{seed}'": "needs the "
        "user's train.py; tests/sweeps/test_console.py runs `raysweep run` from a repository, end to end",
        "raysweep status runs/command": "needs a command sweep; tests/sweeps/test_console.py runs `raysweep status`",
        "raysweep analyze runs/command --json": "needs a command sweep; tests/sweeps/test_console.py runs it",
    }
)
NOT_PARSED = {  # command -> why even its flags cannot be checked
    "python sweeps/run_command.py ... --resume": "elided: the flags of the command above, plus --resume",
    "python sweeps/noise_grid.py --name a ...": "elided: any flags",
    "python sweeps/lr_search.py --name b ...": "elided: any flags",
    "python sweeps/lr_search.py --noise-type sym --noise-rate 0.5 ... --resume": "elided: the flags of the "
    "command above, plus --resume",
}
RUN_QUICK = {  # command -> a line its stdout must hold; run in a scratch folder with a stand-in train.py
    "python sweeps/run_command.py --dry-run --axis config=configs/fast.yaml,configs/slow.yaml -- python "
    "train.py '{config}'": "2 trials; nothing was run (--dry-run)",
    "python sweeps/noise_grid.py --seeds 3 --dry-run": "nothing was run (--dry-run)",
    "python sweeps/run_command.py --axis lr=0.1,0.01 --seeds 3 --dry-run -- python train.py --lr '{lr}' "
    "--seed '{seed}'": "6 trials; nothing was run (--dry-run)",
}
RUN_SLOW = {
    "python sweeps/run_command.py --check --metric val_acc --test-metric accuracy -- python train.py "
    "configs/fast.yaml": "exit code 0; --metric val_acc: seen; --test-metric accuracy: seen",
}
SMOKE = [  # run in this order in one scratch folder: the quick start, then its analysis
    "python sweeps/noise_grid.py --smoke-test",
    "python -m analysis runs/noise_grid",
    "python -m analysis runs/noise_grid --status",
    "python -m analysis runs/noise_grid --json",
    "python -m analysis runs/noise_grid --status --json",
]


def run_documented(text: str, cwd: Path, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a documented command as written, in cwd, with this interpreter and this checkout's code;
    `env`: the session's shared Ray (conftest's `sweep_env`), else the test process's environment."""
    argv = shlex.split(text)
    command = [sys.executable, *(argv[1:] if argv[1] == "-m" else [str(ROOT / argv[1]), *argv[2:]])]
    env = {**(env or os.environ), "PYTHONPATH": str(ROOT), "RAY_DEDUP_LOGS": "0"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

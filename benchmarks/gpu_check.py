"""`make gpu-check`: prove raysweep's GPU paths on a CUDA machine in one command, one table of checks and figures.

Run (from the repository root; without a CUDA GPU it says so and exits 0):
    python benchmarks/gpu_check.py                    # make gpu-check
    python benchmarks/gpu_check.py --json gpu_check.json

Each check runs what a user would type, as a subprocess on a private Ray (`--address local`), its results in
a temporary folder (`--keep DIR` keeps them):
- smoke grid: `noise_grid.py --smoke-test`: every trial finished, every row with its GPU ids, peak memory,
  memory cap and NVML utilisation;
- command sweep: `run_command.py --gpus-per-trial 0.25`, four seeds of a script that trains on CUDA with
  `--gpu {gpu}`: 4/4, each script saw `{gpu}` as its CUDA_VISIBLE_DEVICES, and its own allocator capped at
  0.225 (the sitecustomize hook; the script prints `torch.cuda.get_per_process_memory_fraction`);
- auto: `noise_grid.py --gpus-per-trial auto` (resnet18): the share the probe chose;
- OOM re-queue, built-in: one resnet18 trial at 0.125 GPU, fp32, batch 1024, `--gpu-memory-headroom 0.9` (a cap
  of 1.25 % of the device): out of memory, re-queued at twice the share until it fits, finished, counted by the
  final table;
- OOM re-queue, command: a script that allocates 30 % of the GPU: out of memory at 0.25 GPU (cap 22.5 %),
  finished at 0.5, the re-run counted in place of the failure;
- packing: `benchmarks/gpu_packing.py --quick`: resnet18 samples/s and utilisation, 1 x 1 and 4 x 0.25, and its
  OOM check (the batch grown until it runs out of memory);
- gpu tests: `pytest -m gpu`.
Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TIMEOUT_S = 1800  # per check
RAY = ["--address", "local", "--quiet"]
BASELINE_RESNET18 = 10_287  # samples/s of one resnet18 trial on an H200 before the device loop (../shared/gpu)

# A training script as users write them: it picks its GPU from --gpu, trains on CUDA, prints key=value lines.
# memory_fraction: what its allocator was capped at (the sitecustomize hook; 1.0 when uncapped).
GPU_SCRIPT = """
import argparse, os, torch
p = argparse.ArgumentParser()
p.add_argument("--gpu"); p.add_argument("--seed", type=int, default=0); p.add_argument("--grab", type=float, default=0)
a = p.parse_args()
seen = os.environ.get("CUDA_VISIBLE_DEVICES")
torch.manual_seed(a.seed)
if a.grab:  # hold this share of the device's memory, as a large model would
    total = torch.cuda.get_device_properties(0).total_memory
    block = torch.empty(int(a.grab * total), dtype=torch.uint8, device="cuda")
x = torch.randn(4096, 256, device="cuda"); y = (x[:, 0] > 0).long()
w = torch.zeros(256, 2, device="cuda", requires_grad=True); opt = torch.optim.SGD([w], lr=0.5)
for epoch in range(1, 4):
    for _ in range(50):
        loss = torch.nn.functional.cross_entropy(x @ w, y); opt.zero_grad(); loss.backward(); opt.step()
    acc = ((x @ w).argmax(1) == y).float().mean().item()
    fraction = torch.cuda.get_per_process_memory_fraction(0)
    print(f"epoch={epoch} val_acc={acc:.4f} loss={loss.item():.4f} memory_fraction={fraction:.4f} "
          f"gpu_flag_is_visible_device={int(a.gpu == seen)}", flush=True)
"""


@dataclasses.dataclass
class Check:
    """One row of the table: `status` is pass, FAIL or pending (a feature not on this branch)."""

    name: str
    status: str
    figures: str
    seconds: float = 0.0


def run(argv: list[str], cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess, float]:
    """Run `argv` (a Python script's path and flags, or `-m ...`) with this Python; (its result, seconds)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
    return done, time.perf_counter() - started


def trial_rows(experiment: Path) -> dict[str, list[dict]]:
    """Trial folder name -> its history (`result.json`, one JSON object per reported epoch), for every trial."""
    rows = {}
    for history in sorted(experiment.glob("*/result.json")):
        rows[history.parent.name] = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
    return rows


def failed(done: subprocess.CompletedProcess) -> str:
    """The last lines a failed run printed, for the table."""
    tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
    return f"exit {done.returncode}: " + " / ".join(line.strip()[:160] for line in tail)


def smoke_grid(tmp: Path) -> Check:
    done, seconds = run(["sweeps/noise_grid.py", "--smoke-test", "--storage-path", str(tmp), "--name", "smoke", *RAY])
    last = [rows[-1] for rows in trial_rows(tmp / "smoke").values() if rows]
    if not last:
        return Check("smoke grid", "FAIL", failed(done), seconds)
    complete = [r for r in last if r.get("epoch") == 2 and r.get("gpu_ids") and r.get("cuda/peak_memory_bytes")]
    utils = [r["gpu/utilization_mean"] for r in last if "gpu/utilization_mean" in r]
    peak = max(r.get("cuda/peak_memory_bytes", 0) for r in last) / 2**20
    figures = (
        f"{len(complete)}/{len(last)} trials with GPU ids and peak memory; {last[0].get('gpu/fraction')} GPU, "
        f"cap {last[0].get('gpu/memory_cap')}, peak {peak:.0f} MiB, util {min(utils, default=0):.0f}-"
        f"{max(utils, default=0):.0f} % ({len(utils)} rows)"
    )
    ok = done.returncode == 0 and len(complete) == len(utils) == len(last)
    return Check("smoke grid", "pass" if ok else "FAIL", figures, seconds)


def command_sweep(
    tmp: Path, name: str, share: str, grab: float = 0.0
) -> tuple[subprocess.CompletedProcess, dict, float]:
    """A `run_command.py` sweep of GPU_SCRIPT (4 seeds; 1 when `grab`) at `share` GPU; (run, trial rows, seconds)."""
    project = tmp / f"{name}_project"
    project.mkdir()
    (project / "train.py").write_text(GPU_SCRIPT)
    seeds, extra = ("1", ["--grab", str(grab)]) if grab else ("4", [])
    argv = [str(ROOT / "sweeps" / "run_command.py"), "--seeds", seeds, "--gpus-per-trial", share, "--in-place"]
    argv += ["--storage-path", str(tmp), "--name", name, *RAY, "--", sys.executable, "train.py"]
    done, seconds = run([*argv, "--gpu", "{gpu}", "--seed", "{seed}", *extra], cwd=project)
    return done, trial_rows(tmp / name), seconds


def command_check(tmp: Path) -> Check:
    done, trials, seconds = command_sweep(tmp, "command", "0.25")
    last = [rows[-1] for rows in trials.values() if rows]
    capped = [r for r in last if abs(r.get("memory_fraction", 0) - 0.225) < 1e-3]
    saw_gpu = [r for r in last if r.get("gpu_flag_is_visible_device") == 1]
    ids = [r for r in last if r.get("gpu_ids")]
    ok = done.returncode == 0 and len(last) == 4 and len(capped) == len(saw_gpu) == len(ids) == 4
    figures = (
        f"{len(last)}/4 trials; {{gpu}} = CUDA_VISIBLE_DEVICES in {len(saw_gpu)}; allocator capped at 0.225 by the "
        f"hook in {len(capped)}; GPU ids in the rows of {len(ids)} (issue 47 item 1)"
    )
    return Check("command sweep 4 x 0.25, {gpu}", "pass" if ok else "FAIL", figures if last else failed(done), seconds)


def auto_check(tmp: Path) -> Check:
    argv = ["sweeps/noise_grid.py", "--smoke-test", "--gpus-per-trial", "auto", "--model", "resnet18"]
    argv += ["--noise-types", "sym", "--noise-rates", "0.2", "--storage-path", str(tmp), "--name", "auto", *RAY]
    done, seconds = run(argv)
    said = re.search(r"--gpus-per-trial auto: (.+)", done.stdout)
    ok = done.returncode == 0 and said is not None and "probe peak" in said.group(1)
    return Check("--gpus-per-trial auto", "pass" if ok else "FAIL", said.group(1) if said else failed(done), seconds)


def builtin_oom_check(tmp: Path) -> Check:
    from benchmarks.gpu_packing import write_synthetic_cifar

    data = write_synthetic_cifar(tmp / "oom.npz", 2048, 512)
    argv = ["sweeps/noise_grid.py", "--dataset", "npz", "--data-root", str(data), "--model", "resnet18"]
    argv += ["--batch-size", "1024", "--amp", "off", "--epochs", "1", "--gpu-memory-headroom", "0.9"]
    argv += ["--gpus-per-trial", "0.125", "--noise-types", "sym", "--noise-rates", "0.2"]
    done, seconds = run([*argv, "--storage-path", str(tmp), "--name", "oom", *RAY])
    shares = re.findall(r"re-queued with ([\d.]+) GPU each", done.stdout)
    finished = [
        s for s in shares if any(r and r[-1].get("epoch") == 1 for r in trial_rows(tmp / f"oom_oom_gpu{s}").values())
    ]
    counted = done.returncode == 0 and "no report" not in done.stdout + done.stderr
    ok = bool(shares) and bool(finished) and counted
    figures = (
        f"out of memory at 0.125 GPU (cap 1.25 %): {'yes' if shares else 'NO'}; re-queued at "
        f"{', '.join(shares) or '-'} GPU; finished at {finished[-1] if finished else 'NO'}; "
        f"the final table counts the re-run: {'yes' if counted else 'NO (' + failed(done) + ')'}"
    )
    return Check("OOM re-queue, built-in", "pass" if ok else "FAIL", figures, seconds)


def command_oom_check(tmp: Path) -> Check:
    done, trials, seconds = command_sweep(tmp, "command_oom", "0.25", grab=0.3)
    requeued = re.findall(r"re-queued with ([\d.]+) GPU each", done.stdout)
    done_rows = [rows for rows in trial_rows(tmp / "command_oom_oom_gpu0.5").values() if rows]
    ok = done.returncode == 0 and requeued[:1] == ["0.5"] and len(done_rows) == 1
    figures = f"out of memory at 0.25 (cap 22.5 %, 30 % held): re-queued at {', '.join(requeued) or '-'} GPU"
    return Check("OOM re-queue, command", "pass" if ok else "FAIL", figures if ok else failed(done), seconds)


def packing_check(tmp: Path) -> Check:
    report = tmp / "packing.json"
    done, seconds = run(["benchmarks/gpu_packing.py", "--quick", "--json", str(report)])
    if done.returncode != 0 or not report.exists():
        return Check("packing (gpu_packing.py --quick)", "FAIL", failed(done), seconds)
    figures = json.loads(report.read_text())
    rows = {r["trials_per_gpu"]: r for r in figures["rows"] if "trials" in r}
    oom = figures.get("oom", {})
    one, four = rows.get(1), rows.get(4)
    said = []
    if one:
        rate, util = one["total_samples_per_s"], one["trials"][0]["utilization_percent"] or 0
        said.append(
            f"resnet18 1 x 1: {rate:,.0f} samples/s ({rate / BASELINE_RESNET18:.1f}x baseline), util {util:.0f} %"
        )
    if one and four:
        rate = four["total_samples_per_s"]
        said.append(f"4 x 0.25: {rate:,.0f} ({rate / one['total_samples_per_s']:.2f}x)")
    said.append(
        f"OOM check: batch {oom.get('batch_size')} out of memory {'yes' if oom.get('first_round_oom') else 'NO'}"
    )
    ok = len(rows) == 2 and oom.get("first_round_oom") and oom.get("finished_after_requeue")
    return Check("packing (gpu_packing.py --quick)", "pass" if ok else "FAIL", "; ".join(said), seconds)


def gpu_tests(tmp: Path) -> Check:
    done, seconds = run(["-m", "pytest", "tests", "-m", "gpu", "-q", "-p", "no:cacheprovider"])
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else failed(done)
    ok = done.returncode == 0 and " passed" in summary and "skipped" not in summary
    return Check("pytest -m gpu", "pass" if ok else "FAIL", summary, seconds)


CHECKS = (smoke_grid, command_check, auto_check, builtin_oom_check, command_oom_check, packing_check, gpu_tests)


def format_table(device: str, checks: list[Check]) -> str:
    """The checks as one table: check, status, seconds, figures."""
    lines = [f"gpu-check on {device}", f"{'check':<34}{'status':<9}{'s':>6}  figures"]
    lines += [f"{c.name:<34}{c.status:<9}{c.seconds:>6.0f}  {c.figures}" for c in checks]
    failed_checks = [c.name for c in checks if c.status == "FAIL"]
    lines.append(
        f"{len(checks) - len(failed_checks)}/{len(checks)} checks passed or pending"
        + (f"; failed: {', '.join(failed_checks)}" if failed_checks else "")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None, help="also write the checks to this JSON file")
    parser.add_argument("--keep", default=None, metavar="DIR", help="run in DIR and keep the sweeps' folders")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU on this machine (torch sees none): nothing checked")
        return 0
    device = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="gpu-check-"))
    tmp.mkdir(parents=True, exist_ok=True)
    checks = []
    try:
        for check in CHECKS:
            print(f"gpu-check: {check.__name__} ...", flush=True)
            try:
                checks.append(check(tmp))
            except Exception as e:  # a check that crashed fails; the others still run
                checks.append(Check(check.__name__, "FAIL", f"{type(e).__name__}: {e}"[:200]))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(format_table(device, checks))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "checks": [dataclasses.asdict(c) for c in checks]}))
    return 1 if any(c.status == "FAIL" for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())

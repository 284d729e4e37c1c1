"""Every command in README.md and docs/*.md still parses and the quick ones run; every relative link resolves.

The commands are read from the fenced code blocks: `bash`/`sh`/`shell` blocks hold commands, line by
line (a trailing backslash continues a line, `#` starts a comment); an untagged or `console` block holds
output, where only lines with a `$ ` prompt are commands. Within a line, a command of ours starts at
`python sweeps/X.py`, `python -m analysis` (any `python`, `.venv/bin/python`) or `make TARGET`, wherever
it stands (after `nohup`, `VAR=value`, `ray job submit ... --`), and ends at a shell operator.

Each of ours is parsed by the script's own parser, without Ray: `parse_args(argv)` of the entry
scripts (which also checks the values: a renamed flag or a refused value fails here), the parser
`analysis/__main__.py` builds, the Makefile's targets and variables. Those that run in seconds
(`--dry-run`, `--check`) are run as written; the smoke grid and the analysis of its output run in a
slow test. Every other command is in `NOT_RUN` with the reason (a GPU, a cluster, s3, minutes of
training), so a command added to the docs must be placed in one list or the other.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_LANGUAGES = {"bash", "sh", "shell"}
OUTPUT_LANGUAGES = {"", "console", "text"}
OPERATORS = {";", "&&", "||", "|", "&", ">", ">>", "<", "2>", "2>&1", ">&", "&>"}
PYTHON = re.compile(r"^(?:\S*/)?python3?$")
RAYSWEEP = re.compile(r"^(?:\S*/)?raysweep$")  # the console command (sweeps/cli.py)


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block (```lang ... ```) of a markdown text, in order."""
    blocks, language, lines = [], None, []
    for line in text.splitlines():
        fence = re.match(r"^\s*```\s*(\S*)", line)
        if fence and language is None:
            language, lines = fence.group(1).lower(), []
        elif fence:
            blocks.append((language, lines))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def shell_lines(language: str, lines: list[str]) -> list[str]:
    """The command lines of one block: continuations joined, `$ ` prompts removed, output lines dropped."""
    joined, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    if pending:
        joined.append(pending)
    if language in COMMAND_LANGUAGES:
        return [re.sub(r"^\s*\$ ", "", line) for line in joined if line.strip()]
    if language in OUTPUT_LANGUAGES:
        return [line.strip()[2:] for line in joined if line.strip().startswith("$ ")]
    return []  # python, yaml, ...: not shell


def words(line: str) -> list[str]:
    """Shell words of a line, comments dropped and operators (`;`, `|`, `&`, `>`, `2>&1`) as words of their own."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out = []
    for word in lexer:
        if out and word.startswith(">") and out[-1] == "2":  # 2>&1 and 2> come apart as "2", ">&" ...
            out[-1] = "2" + word
        elif out and out[-1] in ("2>", ">&", "2>&") and word == "1":
            out[-1] += word
        else:
            out.append(word)
    return out


def our_commands(line: str) -> list[list[str]]:
    """The commands of ours in one shell line, as argv from the program on (`python`, `make`) to the next operator."""
    found, ws = [], words(line)
    for i, word in enumerate(ws):
        if i > 0 and ws[i - 1] not in OPERATORS and not _starts_command(ws, i):
            continue
        end = next((j for j in range(i, len(ws)) if ws[j] in OPERATORS), len(ws))
        argv = ws[i:end]
        if PYTHON.match(word) and len(argv) > 1 and (argv[1].startswith("sweeps/") or argv[1:3] == ["-m", "analysis"]):
            found.append(["python", *argv[1:]])
        elif RAYSWEEP.match(word) and len(argv) > 1:
            found.append(["raysweep", *argv[1:]])
        elif word == "make":
            found.append(argv)
    return found


def _starts_command(ws: list[str], i: int) -> bool:
    """Whether word i begins a command: after `nohup`, after `VAR=value` prefixes, or after a `--` of a launcher."""
    before = ws[i - 1]
    return before in ("nohup", "--") or re.match(r"^[A-Z_][A-Z0-9_]*=", before) is not None


def documented_commands() -> dict[str, list[str]]:
    """Every command of ours in the docs: its text (argv joined) -> the pages it is on."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for language, lines in fenced_blocks(page.read_text()):
            for line in shell_lines(language, lines):
                for argv in our_commands(line):
                    found.setdefault(shlex.join(argv), []).append(page.relative_to(ROOT).as_posix())
    return found


# --- where each documented command stands ------------------------------------------------------------------

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
        "tests/sweeps/test_estimate_sweeps.py sets --estimate against real sweeps",
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
PLACED = {**NOT_RUN, **NOT_PARSED, **RUN_QUICK, **RUN_SLOW, **dict.fromkeys(SMOKE)}
DOCUMENTED = documented_commands()
PARSED = sorted(set(DOCUMENTED) - set(NOT_PARSED))


# --- parsing a command with its script's own parser, without Ray ---------------------------------------------


class _Parsed(Exception):
    """Raised once `python -m analysis`'s parser has parsed, so nothing after the parse runs."""


def parse_analysis(argv: list[str]) -> argparse.Namespace:
    """argv through the parser `analysis.__main__.main` builds, and its --select check; nothing is read."""
    from analysis import __main__ as analysis_main
    from trainables.experiment.rules import check_select

    real_parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(parser, args=None, namespace=None):
        raise _Parsed(real_parse(parser, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop):
        try:
            analysis_main.main(argv)
        except _Parsed as parsed:
            args = parsed.args[0]
    check_select(args.select, args.k)
    return args


def parse_sweep(script: str, argv: list[str]) -> argparse.Namespace:
    """argv through `sweeps/<script>.py`'s `parse_args`, then every trial config it implies through `parse_config`."""
    import importlib

    from sweeps.engine import grid
    from trainables.config import parse_config

    module = importlib.import_module(f"sweeps.{script}")
    args = module.parse_args(argv)
    if script == "noise_grid":
        axes = module.grid_axes(args)
        for cell in grid.grid_cells(axes, args.max_trials):
            parse_config(cell)
    elif script in ("lr_search", "pbt") and not getattr(args, "template", None):
        parse_config({**args.fixed, "lr": args.lr_range[1], "weight_decay": args.weight_decay_range[1]})
    return args


def parse_make(argv: list[str]) -> None:
    """`make TARGET VAR=value`: the target is a rule of the Makefile, the variable is one it sets; SWEEP_ARGS parse."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+):", makefile, re.M))
    variables = set(re.findall(r"^(\w+)\s*[?:]?=", makefile, re.M))
    for word in argv[1:]:
        name, is_variable, value = word.partition("=")
        if is_variable:
            assert name in variables, f"{word}: the Makefile has no variable {name} ({sorted(variables)})"
            if name == "SWEEP_ARGS":
                parse_sweep("noise_grid", shlex.split(value))
        else:
            assert word in targets, f"make {word}: the Makefile has no such target ({sorted(targets)})"


def parse_raysweep(argv: list[str]) -> None:
    """`raysweep SUBCOMMAND ...` through the parser of the script or `python -m analysis` it runs (sweeps/cli.py)."""
    from sweeps.cli import SUBCOMMANDS

    assert argv[0] in SUBCOMMANDS, f"raysweep {argv[0]}: no such subcommand ({sorted(SUBCOMMANDS)})"
    command = SUBCOMMANDS[argv[0]]
    if command.module == "analysis.__main__":
        parse_analysis(["--status"] * command.status + argv[1:])
    else:
        parse_sweep(command.module.removeprefix("sweeps."), argv[1:])


def parse_command(argv: list[str]) -> None:
    """Check one documented command's flags with its own parser (a usage error fails the test)."""
    if argv[0] == "make":
        parse_make(argv)
    elif argv[0] == "raysweep":
        parse_raysweep(argv[1:])
    elif argv[1:3] == ["-m", "analysis"]:
        parse_analysis(argv[3:])
    else:
        script = re.fullmatch(r"sweeps/(\w+)\.py", argv[1])
        assert script and (ROOT / argv[1]).is_file(), f"{argv[1]}: no such entry script"
        parse_sweep(script.group(1), argv[2:])


def run_documented(text: str, cwd: Path, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a documented command as written, in cwd, with this interpreter and this checkout's code;
    `env`: the session's shared Ray (conftest's `sweep_env`), else the test process's environment."""
    argv = shlex.split(text)
    command = [sys.executable, *(argv[1:] if argv[1] == "-m" else [str(ROOT / argv[1]), *argv[2:]])]
    env = {**(env or os.environ), "PYTHONPATH": str(ROOT), "RAY_DEDUP_LOGS": "0"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# --- the tests -------------------------------------------------------------------------------------------------


def test_extraction_reads_continuations_comments_prompts_and_operators():
    page = (
        "text `python sweeps/pbt.py --inline` is not a block\n"
        "```bash\n"
        "# a comment line\n"
        ".venv/bin/python sweeps/noise_grid.py --seeds 3 \\\n"
        "    --loss ce,gce   # two losses\n"
        "nohup python sweeps/noise_grid.py --quiet > log 2>&1 &\n"
        "ray job submit --working-dir . -- python sweeps/pbt.py --smoke-test; ray job list\n"
        "WANDB_MODE=offline python -m analysis runs/x --status | tail -1\n"
        "ssh -L 8265:localhost:8265 user@gpu-box\n"
        'make sweep SWEEP_ARGS="--seeds 3"\n'
        "```\n"
        "```\n"
        "$ python -m analysis runs/noise_grid --status\n"
        "python sweeps/lr_search.py --output-line-not-a-command\n"
        "```\n"
        "```python\n"
        "import analysis  # python sweeps/pbt.py --in-python\n"
        "```\n"
    )
    lines = [line for language, body in fenced_blocks(page) for line in shell_lines(language, body)]
    assert [shlex.join(argv) for line in lines for argv in our_commands(line)] == [
        "python sweeps/noise_grid.py --seeds 3 --loss ce,gce",
        "python sweeps/noise_grid.py --quiet",
        "python sweeps/pbt.py --smoke-test",
        "python -m analysis runs/x --status",
        "make sweep 'SWEEP_ARGS=--seeds 3'",
        "python -m analysis runs/noise_grid --status",
    ]


def test_every_documented_command_is_placed_and_no_placement_is_stale():
    """A command added to the docs must be run here or listed with the reason it is not; a removed one, unlisted."""
    unplaced = {text: pages for text, pages in DOCUMENTED.items() if text not in PLACED}
    assert not unplaced, "add these to RUN_QUICK, RUN_SLOW, SMOKE or NOT_RUN (with why) in this file:\n" + "\n".join(
        f"  {text!r}  ({', '.join(pages)})" for text, pages in unplaced.items()
    )
    stale = sorted(set(PLACED) - set(DOCUMENTED))
    assert not stale, f"no longer in README.md or docs/*.md; remove them from this file: {stale}"


@pytest.mark.parametrize("text", PARSED)
def test_documented_command_parses(text, python_on_path, tmp_path, monkeypatch):
    """The command's flags and values pass its own parser: a renamed flag or a refused value fails here."""
    from sweeps.engine import run_flags
    from sweeps.engine.flags import UsageError
    from trainables.experiment.errors import ExperimentError

    real_check = run_flags.check_storage_path

    def writable_elsewhere(path: str):  # /mnt/nfs/runs is the cluster's mount, not this machine's folder
        try:
            return real_check(path)
        except UsageError as error:
            if "is not writable" not in str(error):
                raise
            return path

    monkeypatch.setattr(run_flags, "check_storage_path", writable_elsewhere)
    monkeypatch.chdir(tmp_path)
    try:
        parse_command(shlex.split(text))
    except (UsageError, ExperimentError, SystemExit) as error:
        pytest.fail(f"{text!r} (in {', '.join(DOCUMENTED[text])}) does not parse: {error!r}")


def test_a_renamed_flag_fails_the_parse(python_on_path):
    """The check above can fail: an unknown flag, a refused value, a missing make target."""
    from sweeps.engine.flags import UsageError
    from trainables.experiment.errors import ExperimentError

    with pytest.raises(UsageError, match="unrecognized arguments: --noise-rate-list"):
        parse_command(["python", "sweeps/noise_grid.py", "--noise-rate-list", "0.2"])
    with pytest.raises(UsageError, match="1.5"):
        parse_command(["python", "sweeps/noise_grid.py", "--noise-rates", "0.2,1.5"])
    with pytest.raises(UsageError, match="program"):
        parse_command(["python", "sweeps/run_command.py", "--dry-run", "--", "no-such-program-here", "x"])
    with pytest.raises(SystemExit):
        parse_command(["python", "-m", "analysis", "runs/x", "--stats"])
    with pytest.raises(ExperimentError, match="best-test"):
        parse_command(["python", "-m", "analysis", "runs/x", "--select", "best-test"])
    with pytest.raises(AssertionError, match="sweeep"):
        parse_command(["make", "sweeep"])
    with pytest.raises(AssertionError, match="SWEEP_ARG"):
        parse_command(["make", "sweep", "SWEEP_ARG=--seeds 3"])
    with pytest.raises(UsageError, match="--seedz"):
        parse_command(["make", "sweep", "SWEEP_ARGS=--seedz 3"])


@pytest.mark.parametrize("text", sorted(RUN_QUICK))
def test_quick_command_runs_as_written(text, scratch):
    proc = run_documented(text, scratch, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert RUN_QUICK[text] in proc.stdout.splitlines(), proc.stdout[-2000:]
    assert sorted(p.name for p in scratch.iterdir()) == ["configs", "train.py"], "a dry run wrote something"


# --- links ------------------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(page: Path) -> list[str]:
    """The link targets of a markdown page that are neither URLs nor in-page anchors, outside code."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t)]


def test_links_are_found_outside_code_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[a](docs/a.md) ![img](x.png) [web](https://x.org) [top](#top) `[no](b.md)`\n```\n[no](c.md)\n```\n"
    )
    assert relative_links(page) == ["docs/a.md", "x.png"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_to_files_that_exist(page):
    missing = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_readme_is_at_most_300_lines_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    linked = {(ROOT / t.split("#")[0]).resolve() for t in relative_links(ROOT / "README.md")}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"docs pages no reader of the README can reach: {unlinked}"


CODE_PATH = re.compile(
    r"\b(?:sweeps|trainables|analysis|tests|benchmarks|notebooks|docs)/[\w/.-]+\.(?:py|ipynb|md|png|json)\b"
)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_files_named_in_code_spans_exist(page):
    """`sweeps/engine/run/launch.py` in a page names a file of this checkout: a moved file leaves no stale name."""
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", page.read_text(), flags=re.S))
    named = {path for span in spans for path in CODE_PATH.findall(span)}
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"


def test_own_scripts_flag_table_says_each_default_as_help_does():
    """docs/own-scripts.md's flag table: each backquoted default is the one `--help` states for that flag."""
    from sweeps import run_command

    helps = {flag: action.help for action in run_command.build_parser()._actions for flag in action.option_strings}
    table = [line.split("|")[1:3] for line in (ROOT / "docs" / "own-scripts.md").read_text().splitlines()]
    checked = []
    for flag_cell, default_cell in (row for row in table if len(row) == 2 and row[0].strip().startswith("`--")):
        named, defaults = re.findall(r"`(--[\w-]+)", flag_cell), re.findall(r"`([^`]+)`", default_cell)
        if len(named) != len(defaults):
            continue  # a default written in words (none, `key=value` / `key: value`)
        for flag, default in zip(named, defaults):
            said = re.search(r"\(default: ([^)]+)\)", helps[flag])
            assert said and said.group(1) == default, (
                f"docs/own-scripts.md: {flag} defaults to {default}; --help: {said and said.group(0)}"
            )
            checked.append(flag)
    assert {"--metrics-from", "--metric", "--mode", "--step-key"} <= set(checked)

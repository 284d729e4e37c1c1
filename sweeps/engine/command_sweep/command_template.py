"""Check a command sweep's flags before Ray starts: axes, the command template, the metric pattern.

Pure functions over strings; each user mistake raises `UsageError` with one line naming the flag,
the value and what is allowed. Rendering a template and reading a metrics line live in
`trainables/command/parse.py` (the trainable needs them too, and trainables never import sweeps);
they are re-exported here for the launcher.
"""

from __future__ import annotations

import os
import re
import shutil

from sweeps.engine.cluster import job_env
from sweeps.engine.flags import UsageError
from trainables.command.parse import (
    BUILTIN_PLACEHOLDERS,
    DEFAULT_METRIC_PATTERN,
    KEY,
    METRICS_FROM,
    METRICS_SOURCES,
    STREAMS_READ,
    parse_metrics_line,
    parse_number,
    render,
)
from trainables.command.parse import placeholders as _placeholders
from trainables.experiment.objective import Objective

__all__ = [
    "parse_axis",
    "read_tasks",
    "expand_cells",
    "cell_axes",
    "placeholders",
    "check_template",
    "compile_metric_pattern",
    "check_metric_producible",
    "gpu_warnings",
    "render",
    "parse_metrics_line",
    "DEFAULT_METRIC_PATTERN",
    "METRICS_SOURCES",
]

EXAMPLE = "-- python train.py --noise-rate {noise_rate} --seed {seed} --out {trial_dir}"


def parse_axis(text: str) -> tuple[str | tuple[str, ...], list]:
    """Parse one `--axis NAME=V1,V2,...` into `(name, values)`, or a linked axis
    `--axis A,B=a1:b1,a2:b2` into `((A, B), [(a1, b1), (a2, b2)])` (paired values, one cell each).

    Values that read as integers become ints, other numbers floats (`1e-3`, `.5`), the rest strings
    (`sym,asym`, `configs/fast.yaml`: paths reach the command verbatim). `nan`/`inf` stay strings.
    Raises:
        UsageError: no `=`, a name that is not an identifier or is `trial_dir` / `trial_name`,
            an empty value list or item, a linked value with another number of parts than names,
            or a value given twice.
    """
    name, sep, rest = text.partition("=")
    names = [n.strip() for n in name.split(",")]
    if not sep:
        raise UsageError(f"--axis {text!r} has no '='; write NAME=V1,V2,... e.g. --axis noise_rate=0.2,0.4,0.6")
    for n in names:
        if not n.isidentifier():
            raise UsageError(
                f"--axis {text!r}: the name {n!r} is not allowed; use letters, digits and _ (e.g. noise_rate)"
            )
        if n in BUILTIN_PLACEHOLDERS:
            raise UsageError(f"--axis {text!r}: {n} is set by raysweep for each trial; choose another name")
    if len(set(names)) < len(names):
        raise UsageError(f"--axis {text!r} names a setting twice")
    items = [item.strip() for item in rest.split(",")]
    if not rest.strip() or any(not item for item in items):
        raise UsageError(f"--axis {text!r}: give one or more comma-separated values after '=', none empty")
    if len(names) == 1:
        values = [_value(item) for item in items]
    else:
        parts = [[p.strip() for p in item.split(":")] for item in items]
        bad = next((item for item, ps in zip(items, parts) if len(ps) != len(names) or not all(ps)), None)
        if bad is not None:
            raise UsageError(
                f"--axis {text!r}: {bad!r} must have {len(names)} non-empty parts joined by ':' "
                f"({':'.join(names)}), e.g. --axis dataset,num_classes=caltech101:100,oxford_pets:37"
            )
        values = [tuple(_value(p) for p in ps) for ps in parts]
    repeated = sorted({str(v) for i, v in enumerate(values) if v in values[:i]})
    if repeated:
        raise UsageError(f"--axis {text!r} repeats {', '.join(repeated)}; give each value once")
    return (names[0] if len(names) == 1 else tuple(names)), values


def read_tasks(path: str) -> list[dict]:
    """The cells of a task file: a CSV with a header row, or a YAML / JSON list of mappings.

    Args:
        path: `*.csv`, `*.yaml` / `*.yml` or `*.json`; every row names the same settings, e.g.
            `dataset,num_classes` / `caltech101,100` (CSV values typed as `--axis` values are).
    Returns:
        One {setting: value} per row, in the file's order.
    Raises:
        UsageError: a missing or unreadable file, another suffix, no rows, a row that is not a
            mapping or names other settings than the first, a setting name that is not an
            identifier, or a row given twice.
    """
    import json

    suffix = os.path.splitext(path)[1].lower()
    try:
        with open(path, encoding="utf-8", newline="") as f:
            if suffix == ".csv":
                import csv

                rows = [
                    {k.strip(): None if v is None else _value(v.strip()) for k, v in row.items() if k is not None}
                    for row in csv.DictReader(f)
                ]
            elif suffix in (".yaml", ".yml"):
                import yaml

                rows = yaml.safe_load(f)
            elif suffix == ".json":
                rows = json.load(f)
            else:
                raise UsageError(
                    f"--tasks {path}: use a .csv (header row), .yaml/.yml or .json file (a list of mappings)"
                )
    except OSError as e:
        raise UsageError(f"--tasks {path}: cannot read it: {e.strerror or e}") from None
    except ValueError as e:  # JSON and YAML errors (yaml.YAMLError is not one: below)
        raise UsageError(f"--tasks {path}: not valid {suffix[1:].upper()}: {str(e).splitlines()[0]}") from None
    except Exception as e:
        if type(e).__module__.startswith("yaml"):
            raise UsageError(f"--tasks {path}: not valid YAML: {str(e).splitlines()[0]}") from None
        raise
    _check_rows(path, rows)
    return rows


def _check_rows(path: str, rows) -> None:
    """Raise UsageError unless `rows` (read from --tasks `path`) is a non-empty list of mappings of
    the same identifier-named settings, with no empty or nested value and no row given twice."""
    if not isinstance(rows, list) or not rows:
        raise UsageError(f"--tasks {path}: expected a non-empty list of rows (mappings of setting: value)")
    keys = list(rows[0]) if isinstance(rows[0], dict) else []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or list(row) != keys or not keys:
            raise UsageError(
                f"--tasks {path}: row {i} must be a mapping of the same settings as row 1 ({', '.join(map(str, keys))})"
            )
        if any(v is None or v == "" or isinstance(v, (dict, list)) for v in row.values()):
            raise UsageError(f"--tasks {path}: row {i} has an empty or nested value: {row}")
    for key in keys:
        if not str(key).isidentifier() or key in BUILTIN_PLACEHOLDERS:
            raise UsageError(
                f"--tasks {path}: setting {key!r} must be a name of letters, digits and _ "
                f"(not {' or '.join(BUILTIN_PLACEHOLDERS)})"
            )
    if any(row in rows[:i] for i, row in enumerate(rows)):
        raise UsageError(f"--tasks {path}: a row is given twice; give each task once")


def expand_cells(axes: dict, tasks: list[dict] | None, max_trials: int) -> list[dict]:
    """Every cell of a command sweep: the task rows crossed with every axis (linked axes as one).

    Args:
        axes: {name: values} and {(name, ...): [(value, ...), ...]} from `parse_axis` (plus `seed`).
        tasks: rows of `read_tasks`, or None.
        max_trials: --max-trials.
    Returns:
        Flat config dicts, tasks outermost, then the axes in their order.
    Raises:
        UsageError: more than `max_trials` cells, or a setting both in the task file and an axis.
    """
    import itertools
    import math

    flat = [n for key in axes for n in (key if isinstance(key, tuple) else (key,))]
    both = sorted(set(flat) & set(tasks[0] if tasks else {}))
    if both:
        raise UsageError(f"{both[0]} is set by both --tasks and --axis; give it in one of them")
    count = len(tasks or [{}]) * math.prod(len(v) for v in axes.values())
    if count > max_trials:
        raise UsageError(
            f"the grid has {count:,} trials, more than --max-trials={max_trials:,}; "
            "check the axes (a typo in --seeds?) or raise --max-trials"
        )
    cells = []
    for task in tasks or [{}]:
        for values in itertools.product(*axes.values()):
            cell = dict(task)
            for key, value in zip(axes, values):
                cell.update(zip(key, value) if isinstance(key, tuple) else [(key, value)])
            cells.append(cell)
    return cells


def cell_axes(cells: list[dict]) -> dict[str, list]:
    """{setting: its distinct values, in first-seen order} over `cells`: what `cli.trial_namer` names."""
    axes: dict[str, list] = {}
    for cell in cells:
        for key, value in cell.items():
            if value not in axes.setdefault(key, []):
                axes[key].append(value)
    return axes


def _value(text: str) -> int | float | str:
    """An axis or task value as the user wrote it: a number when it reads as one (`parse_number`), else the text."""
    number = parse_number(text, printed=False)
    return text if number is None else number


def placeholders(template: list[str]) -> set[str]:
    """The `{name}` placeholders of `template`.

    Raises:
        UsageError: a malformed placeholder (`{`, `{}`, `{0}`, `{a.b}`), naming the word.
    """
    try:
        return _placeholders(template)
    except ValueError as e:
        raise UsageError(f"command: {e}") from None


def check_template(
    template: list[str], axes: dict, seeds: bool, tasks: str | None = None, task_columns=(), resume: bool = False
) -> None:
    """Refuse a command that cannot run as a sweep.

    Args:
        template: the command after `--`, as argv.
        axes: {name: values} from `parse_axis`.
        seeds: whether the sweep adds a `seed` key to each trial (`--seeds`).
        tasks, task_columns: the `--tasks` file and its columns (also in `axes`), named in the
            error for a column the command never uses.
    Raises:
        UsageError: an empty command; a placeholder that is not an axis, `seed` (when seeds),
            `trial_dir` or `trial_name`; an axis the command never uses (every trial of it would
            run the same command); an axis named `seed` while seeds are swept too; a program not
            found on PATH (with `resume`, the launch's program runs: `programs.resolve_program` checks it), or
            a path that is not an executable file.
    """
    if not template:
        raise UsageError(f"command: none given; put it after --, e.g. {EXAMPLE}")
    if seeds and "seed" in axes:
        raise UsageError("--axis seed=... and --seeds both set the seed; give only one")
    used = placeholders(template)
    known = set(axes) | set(BUILTIN_PLACEHOLDERS) | ({"seed"} if seeds else set())
    unknown = sorted(used - known)
    if unknown:
        raise UsageError(
            f"command: placeholder {{{unknown[0]}}} is not defined; use one of "
            + ", ".join(f"{{{n}}}" for n in sorted(known))
            + " (or add --axis "
            + unknown[0]
            + "=...)"
        )
    unused = sorted((set(axes) | ({"seed"} if seeds else set())) - used)
    if unused:
        name = unused[0]
        if name in task_columns:
            raise UsageError(
                f"--tasks {tasks}: the command never uses its column {name!r}, so rows that differ only in "
                f"{name} would run the same command; pass it, e.g. --{name.replace('_', '-')} {{{name}}}, "
                "or drop the column"
            )
        where = "--seeds" if unused[0] == "seed" and seeds and "seed" not in axes else f"--axis {unused[0]}"
        raise UsageError(
            f"{where}: the command never uses {{{unused[0]}}}, so its trials would all run the same "
            f"command; pass it, e.g. --{unused[0].replace('_', '-')} {{{unused[0]}}}"
        )
    program = template[0]
    if _placeholders([program]):
        return  # chosen per trial: checked when it runs
    if os.sep in program:
        if not os.path.isfile(program) or not os.access(program, os.X_OK):
            raise UsageError(
                f"command: {program!r} is not an executable file; give an existing script with "
                f"chmod +x, or run it through its interpreter (python {program})"
            )
    elif shutil.which(program) is None and not resume:
        raise UsageError(f"command: program {program!r} is not found on PATH; give its path or an installed command")


def compile_metric_pattern(text: str) -> re.Pattern:
    """Compile `--metric-pattern`: a regex whose named groups are the metrics of a stdout line.

    Raises:
        UsageError: not a valid regex, or no named group (e.g. `(?P<epoch>\\d+)`).
    """
    try:
        pattern = re.compile(text)
    except re.error as e:
        raise UsageError(f"--metric-pattern={text!r} is not a valid regular expression: {e}") from None
    if not pattern.groupindex:
        raise UsageError(
            f"--metric-pattern={text!r} has no named group; name each metric, e.g. "
            r"'Epoch (?P<epoch>\d+).*acc (?P<val_acc>[\d.]+)'"
        )
    return pattern


def launch_line(template: list[str], plan, metrics_from: str) -> str:
    """The sweep's launch line: the command (`job_env.command_text`), how many cells run and are reused
    (`plan`: `todo`, `reused`), and `--metrics-from` in words, e.g. `wandb (the W&B runs under {trial_dir}/wandb)`."""
    words = {
        "output": "output (printed lines and $RAYSWEEP_METRICS_FILE; where they hold no --metric: the wandb, "
        "mlflow, csv, hf or tensorboard records under {trial_dir} that do, named in the trial's log, which win "
        "over printed lines holding it too)",
        "stdout": "stdout (its lines and $RAYSWEEP_METRICS_FILE)",
        "stderr": "stderr (its lines and $RAYSWEEP_METRICS_FILE)",
        "jsonl": "jsonl ($RAYSWEEP_METRICS_FILE)",
        "tensorboard": "tensorboard (event files under {trial_dir})",
        "wandb": "wandb (the W&B runs under {trial_dir}/wandb)",
        "mlflow": "mlflow (the MLflow store {trial_dir}/mlflow.db)",
        "csv": "csv (a *.csv under {trial_dir} with --metric as a column, else metrics.csv)",
        "hf": "hf (the newest trainer_state.json under {trial_dir})",
    }
    return (
        f"command: {job_env.command_text(template)}; {len(plan.todo)} to run, {len(plan.reused)} reused; "
        f"metrics from {words[metrics_from]}"
    )


def check_metric_producible(
    objective: Objective,
    patterns: list[re.Pattern] | re.Pattern | None,
    step_key: str,
    metrics_from: str = METRICS_FROM,
) -> None:
    """Refuse a `--metric` / `--test-metric` / `--step-key` that no result of this sweep can hold.

    Args:
        objective: the sweep's: its metric (ranks trials; ASHA / Optuna read it, e.g. `val_acc`) and
            test metric (none: the metric).
        patterns: the compiled `--metric-pattern`s (one or a list), or None for the default
            `key=value` pattern.
        step_key: the metric counting progress (`epoch`); read in any default step form, so it
            need not be a group of a pattern.
        metrics_from: `output`, `stdout`, `stderr`, `jsonl`, `tensorboard`, `wandb`, `mlflow`, `csv`
            or `hf` (JSON keys, TensorBoard tags and tracker keys may be any name, so only printed
            lines are checked).
    Raises:
        UsageError: with custom patterns, a metric that is none of their named groups; with the
            default pattern, a name that cannot be a key (spaces, leading digit, ...).
    """
    patterns = [patterns] if isinstance(patterns, re.Pattern) else list(patterns or [])
    groups = [g for p in patterns for g in p.groupindex]
    flags = [("--metric", objective.metric), ("--step-key", step_key)]
    flags += [("--test-metric", objective.test_metric)] if objective.test_metric else []
    for flag, name in flags if metrics_from in STREAMS_READ else ():
        if not re.fullmatch(KEY, name) and not (patterns and flag != "--step-key" and name in groups):
            raise UsageError(
                f"{flag}={name!r} cannot be read from `key=value` lines; use letters, digits, _ . / - @ "
                "starting with a letter"
            )
        if patterns and flag != "--step-key" and name not in groups:
            raise UsageError(
                f"{flag}={name!r} is not a named group of --metric-pattern (groups: "
                f"{', '.join(dict.fromkeys(groups))}); add (?P<{name}>...) or drop --metric-pattern if the "
                "script writes $RAYSWEEP_METRICS_FILE"
            )


_GPU_FLAG = re.compile(r"--gpu(?:[-_]?ids?)?(?:=(?P<value>.*))?")  # not --gpus N: a count (Lightning)
_CUDA_SET = re.compile(r"(?:^|[\s;&|(])CUDA_VISIBLE_DEVICES=(?P<value>\S*)")


def gpu_warnings(template: list[str]) -> list[str]:
    """One warning line for each place `template` picks a GPU itself, overriding the one Ray assigned.

    Found: `--gpu N`, `--gpu=N`, `--gpu-id N`, `--gpu_ids N`, `--gpuid N` with a fixed value, and
    `CUDA_VISIBLE_DEVICES=...` in any word (`env CUDA_VISIBLE_DEVICES=0 python ...`, `bash -c "..."`).
    A value that is a placeholder (`--gpu {gpu}`) is not warned about.
    Returns:
        The lines, without a `warning:` prefix; [] when none.
    """
    lines = []
    for i, word in enumerate(template):
        flag = _GPU_FLAG.fullmatch(word)
        value = (
            (flag["value"] if flag["value"] is not None else (template[i + 1] if i + 1 < len(template) else ""))
            if flag
            else None
        )
        if flag and value and not _placeholders([value]):
            lines.append(
                f"the command picks its GPU itself ({word if flag['value'] is not None else word + ' ' + value}): "
                "every trial would use that GPU, not the one Ray assigned; write --gpu {gpu}"
            )
        cuda = _CUDA_SET.search(word)
        if cuda and "{gpu}" not in cuda["value"]:
            lines.append(
                f"the command sets CUDA_VISIBLE_DEVICES={cuda['value']}: it overrides the GPU Ray assigned to each "
                "trial (Ray sets CUDA_VISIBLE_DEVICES itself); leave it out or write CUDA_VISIBLE_DEVICES={gpu}"
            )
    return lines

"""Check a command sweep's flags before Ray starts: axes, the command template, the metric pattern.

Pure functions over strings; each user mistake raises `UsageError` with one line naming the flag,
the value and what is allowed. Rendering a template and reading a metrics line live in
`trainables/command_parse.py` (the trainable needs them too, and trainables never import sweeps);
they are re-exported here for the launcher.
"""

from __future__ import annotations

import os
import re
import shutil

from sweeps.cli import UsageError
from trainables.command_parse import BUILTIN_PLACEHOLDERS, DEFAULT_METRIC_PATTERN, KEY, parse_metrics_line, render
from trainables.command_parse import placeholders as _placeholders

__all__ = ["parse_axis", "placeholders", "check_template", "compile_metric_pattern", "check_metric_producible",
           "render", "parse_metrics_line", "DEFAULT_METRIC_PATTERN"]

_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
EXAMPLE = "-- python train.py --noise-rate {noise_rate} --seed {seed} --out {trial_dir}"


def parse_axis(text: str) -> tuple[str, list]:
    """Parse one `--axis NAME=V1,V2,...` into `(name, values)`.

    Values that read as integers become ints, other numbers floats (`1e-3`, `.5`), the rest strings
    (`sym,asym`). `nan`/`inf` stay strings.
    Raises:
        UsageError: no `=`, a name that is not an identifier or is `trial_dir` / `trial_name`,
            an empty value list or item, or a value given twice.
    """
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep:
        raise UsageError(f"--axis {text!r} has no '='; write NAME=V1,V2,... e.g. --axis noise_rate=0.2,0.4,0.6")
    if not name.isidentifier():
        raise UsageError(f"--axis {text!r}: the name {name!r} is not allowed; use letters, digits and _ (e.g. noise_rate)")
    if name in BUILTIN_PLACEHOLDERS:
        raise UsageError(f"--axis {text!r}: {name} is set by raysweep for each trial; choose another name")
    items = [item.strip() for item in rest.split(",")]
    if not rest.strip() or any(not item for item in items):
        raise UsageError(f"--axis {text!r}: give one or more comma-separated values after '=', none empty")
    values = [_value(item) for item in items]
    repeated = sorted({str(v) for i, v in enumerate(values) if v in values[:i]})
    if repeated:
        raise UsageError(f"--axis {text!r} repeats {', '.join(repeated)}; give each value once")
    return name, values


def _value(text: str) -> int | float | str:
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def placeholders(template: list[str]) -> set[str]:
    """The `{name}` placeholders of `template`.

    Raises:
        UsageError: a malformed placeholder (`{`, `{}`, `{0}`, `{a.b}`), naming the word.
    """
    try:
        return _placeholders(template)
    except ValueError as e:
        raise UsageError(f"command: {e}") from None


def check_template(template: list[str], axes: dict, seeds: bool) -> None:
    """Refuse a command that cannot run as a sweep.

    Args:
        template: the command after `--`, as argv.
        axes: {name: values} from `parse_axis`.
        seeds: whether the sweep adds a `seed` key to each trial (`--seeds`).
    Raises:
        UsageError: an empty command; a placeholder that is not an axis, `seed` (when seeds),
            `trial_dir` or `trial_name`; an axis the command never uses (every trial of it would
            run the same command); an axis named `seed` while seeds are swept too; a program not
            found on PATH, or a path that is not an executable file.
    """
    if not template:
        raise UsageError(f"command: none given; put it after --, e.g. {EXAMPLE}")
    if seeds and "seed" in axes:
        raise UsageError("--axis seed=... and --seeds both set the seed; give only one")
    used = placeholders(template)
    known = set(axes) | set(BUILTIN_PLACEHOLDERS) | ({"seed"} if seeds else set())
    unknown = sorted(used - known)
    if unknown:
        raise UsageError(f"command: placeholder {{{unknown[0]}}} is not defined; use one of "
                         + ", ".join(f"{{{n}}}" for n in sorted(known)) + " (or add --axis " + unknown[0] + "=...)")
    unused = sorted((set(axes) | ({"seed"} if seeds else set())) - used)
    if unused:
        where = "--seeds" if unused[0] == "seed" and seeds and "seed" not in axes else f"--axis {unused[0]}"
        raise UsageError(f"{where}: the command never uses {{{unused[0]}}}, so its trials would all run the same "
                         f"command; pass it, e.g. --{unused[0].replace('_', '-')} {{{unused[0]}}}")
    program = template[0]
    if _placeholders([program]):
        return  # chosen per trial: checked when it runs
    if os.sep in program:
        if not os.path.isfile(program) or not os.access(program, os.X_OK):
            raise UsageError(f"command: {program!r} is not an executable file; give an existing script with "
                             f"chmod +x, or run it through its interpreter (python {program})")
    elif shutil.which(program) is None:
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
        raise UsageError(f"--metric-pattern={text!r} has no named group; name each metric, e.g. "
                         r"'Epoch (?P<epoch>\d+).*acc (?P<val_acc>[\d.]+)'")
    return pattern


def check_metric_producible(metric: str, pattern: re.Pattern | None, step_key: str) -> None:
    """Refuse a `--metric` / `--step-key` that no result of this sweep can hold.

    Args:
        metric: the metric the sweep ranks (and ASHA / Optuna read), e.g. `val_acc`.
        pattern: the compiled `--metric-pattern`, or None for the default `key=value` pattern.
        step_key: the metric counting progress (`epoch`).
    Raises:
        UsageError: with a custom pattern, a name that is not one of its named groups; with the
            default pattern, a name that cannot be a key (spaces, leading digit, ...).
    """
    for flag, name in (("--metric", metric), ("--step-key", step_key)):
        if pattern is None and not re.fullmatch(KEY, name):
            raise UsageError(f"{flag}={name!r} cannot be read from `key=value` lines; use letters, digits, _ . / - "
                             "starting with a letter")
        if pattern is not None and name not in pattern.groupindex:
            raise UsageError(f"{flag}={name!r} is not a named group of --metric-pattern (groups: "
                             f"{', '.join(pattern.groupindex)}); add (?P<{name}>...) or drop --metric-pattern if the "
                             "script writes $RAYSWEEP_METRICS_FILE")

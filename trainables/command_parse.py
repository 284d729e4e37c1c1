"""Pure helpers of the command trainable: fill a command template, read metrics from a line.

No Ray, torch or pandas here: `sweeps/command_template.py` re-exports these to check a command
before Ray starts, and `trainables/command.py` uses them inside each trial.

A template is the user's command as an argv list whose items may hold `{name}` placeholders
(Python `str.format` fields, `{{`/`}}` for literal braces, an optional format spec such as
`{lr:.0e}`). Names are config keys of the trial (axes, `seed`) plus `trial_dir` and `trial_name`.

Metrics come from stdout lines. The default pattern reads `key=value` and `key: value` pairs
whose value is a number (`epoch=3 val_acc=0.81 loss=0.52`, `epoch: 3, val/acc: 0.81`); a line
is one result when it holds the step key. A custom pattern is a regex with named groups, one per
metric (`Epoch (?P<epoch>\\d+) .* acc (?P<val_acc>[\\d.]+)`).
"""

from __future__ import annotations

import math
import re
import string

BUILTIN_PLACEHOLDERS = ("trial_dir", "trial_name")  # filled by the trainable, not from the config

# A key starts with a letter or `_`, may hold `. / -` (val/acc, train.loss); a value is an int,
# a float (1e-3, .5) or nan/inf, and must end the token (so `10ms`, `v1.2.3`, `abc123` are not read).
KEY = r"[A-Za-z_][\w./\-]*"
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|(?i:nan|inf(?:inity)?))"
DEFAULT_METRIC_PATTERN = re.compile(rf"(?<![\w./\-])(?P<key>{KEY})\s*[=:]\s*(?P<value>{NUMBER})(?![\w.])")
_INT = re.compile(r"[-+]?\d+")


def format_value(value) -> str:
    """A config value as a command-line word: ints as ints, floats plainly, else `str`.

    A float reads as Python prints it (0.4, 1.0, 1e-05) unless that shows binary noise, which 12
    significant digits drop: a sampled 0.30000000000000004 reads `0.3`.
    """
    if isinstance(value, float):
        short = f"{value:.12g}"
        return repr(value) if float(short) == value else short
    return str(value)


def placeholders(template: list[str]) -> set[str]:
    """The `{name}` placeholders used anywhere in `template`.

    Raises:
        ValueError: a malformed field (`{`, `{0}`, `{}`, `{a.b}`, `{a[0]}`), naming the word.
    """
    names = set()
    for word in template:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(word) if f is not None]
        except ValueError as e:
            raise ValueError(f"{word!r}: {e} (write {{{{ and }}}} for literal braces)") from None
        for field in fields:
            if not field.isidentifier():
                raise ValueError(f"{word!r}: placeholder {{{field}}} is not a name; use {{name}} with a config key, trial_dir or trial_name")
            names.add(field)
    return names


class _PlainFormatter(string.Formatter):
    def format_field(self, value, format_spec: str) -> str:
        return format(value, format_spec) if format_spec else format_value(value)


def render(template: list[str], config: dict, trial_dir: str, trial_name: str) -> list[str]:
    """Fill each word's placeholders from `config`, `trial_dir` and `trial_name`.

    Args:
        template: argv with `{name}` fields, e.g. ["python", "train.py", "--noise-rate", "{noise_rate}"].
        config: the trial's config (flat dict).
        trial_dir: folder the trial keeps across retries and `--resume` (absolute path).
        trial_name: Tune's name of the trial.
    Returns:
        The argv to run: ["python", "train.py", "--noise-rate", "0.4"].
    Raises:
        KeyError: a placeholder that is not a config key, `trial_dir` or `trial_name`.
    """
    values = {**config, "trial_dir": trial_dir, "trial_name": trial_name}
    return [_PlainFormatter().vformat(word, (), values) for word in template]


def _number(text: str) -> int | float | None:
    """`text` as an int (when it is one) or a float; None when it is not a number."""
    text = text.strip()
    if _INT.fullmatch(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return None


def parse_metrics_line(line: str, step_key: str, pattern: re.Pattern | None = None) -> dict | None:
    """The metrics one stdout line reports, or None when it reports none.

    Args:
        line: one line of the command's stdout (trailing newline allowed).
        step_key: the metric that counts training progress (`epoch`, `step`); a line without it
            is not a result (so `loading data: 3 files` is ignored).
        pattern: None for the default `key=value` / `key: value` pattern; else a compiled regex
            whose named groups are metrics (searched once per line; groups that did not take part
            or hold no number are left out).
    Returns:
        {metric: int | float} including `step_key`; None when the step key is absent.
        NaN and inf values are kept: the trainable treats them as divergence.
    """
    metrics = {}
    if pattern is None:
        for match in DEFAULT_METRIC_PATTERN.finditer(line):
            metrics.setdefault(match["key"], _number(match["value"]))
    else:
        match = pattern.search(line)
        for key, text in (match.groupdict() if match else {}).items():
            value = None if text is None else _number(text)
            if value is not None:
                metrics[key] = value
    if step_key not in metrics:
        return None
    return metrics


def non_finite(metrics: dict) -> list[str]:
    """Names of the metrics whose value is a NaN or infinite float."""
    return [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]

"""The search space of a search over your own command (`sweeps/lr_search.py ... -- COMMAND`).

A command receives only what its `{placeholders}` give it, so the space is built from them: `{lr}`
is drawn from `--lr-range` (log scale), every other placeholder from its own `--space NAME=FORM`,
and placeholders filled by a fixed trial option (`--seed 0` for `{seed}`, `--epochs 5` for
`{epochs}`) or by raysweep (`{trial_dir}`, `{trial_name}`, `{gpu}`) are not searched. The built-in
trainable's dimensions (loss, noise rate, weight decay, batch size, ...) never enter it. The forms
are Ray Tune's sampling functions (`tune.loguniform`, `tune.uniform`, `tune.randint`, `tune.choice`),
which Tune's `OptunaSearch` turns into Optuna's distributions:

    --space wd=loguniform:1e-5,1e-2     log scale, 0 < LOW < HIGH
    --space dropout=uniform:0,0.5       LOW < HIGH
    --space layers=int:2,8              whole numbers, both ends included
    --space opt=choice:sgd,adam         one of the values (numbers stay numbers)

Pure functions over strings: every mistake raises `UsageError` (one line, exit 2) before Ray starts.
"""

from __future__ import annotations

import dataclasses
import math
import re

from sweeps.engine.cluster import job_env
from sweeps.engine.command_sweep.command_template import parse_axis, placeholders
from sweeps.engine.flags import UsageError
from trainables.command.parse import BUILTIN_PLACEHOLDERS
from trainables.config import TrainConfig

FORMS = "loguniform:LOW,HIGH, uniform:LOW,HIGH, int:LOW,HIGH or choice:A,B,..."
LR_FLAG = "--lr-range"  # the range of {lr}
# flags a command gives its epoch count with (`--epochs 3`, `--max_epochs=3`): ASHA's max_t
EPOCH_FLAGS = ("--epochs", "--epoch", "--num-epochs", "--num_epochs", "--max-epochs", "--max_epochs", "--n-epochs")
EPOCH_FLAGS += ("--n_epochs", "--nepochs")
MAX_T_UNKNOWN = 100  # ASHA's max_t (Tune's default) when a command's epochs are unknown: its rungs stop there


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One searched placeholder: `kind` (loguniform, uniform, int, choice) over `values` ((LOW, HIGH),
    or the choices)."""

    name: str
    kind: str
    values: tuple

    def domain(self):
        """The Ray Tune domain (`tune.loguniform(LOW, HIGH)`, ...; `int` is `tune.randint(LOW, HIGH + 1)`:
        Tune's upper end is exclusive)."""
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.values))
        low, high = self.values
        return {"loguniform": tune.loguniform, "uniform": tune.uniform, "int": tune.randint}[self.kind](
            low, high + (self.kind == "int")
        )

    def text(self) -> str:
        """The `--space` form: `loguniform:1e-05,0.01` (recorded in raysweep.json, printed at launch)."""
        return f"{self.kind}:" + ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in self.values)


def parse_dimension(text: str) -> Dimension:
    """One `--space NAME=FORM` (the forms: module docstring).

    Raises:
        UsageError: no `=` or `:`, a name that is not an identifier or is raysweep's, an unknown
            form, bounds that are not two numbers, LOW >= HIGH, LOW <= 0 on a log scale, an `int`
            bound that is not whole, an empty or repeated choice; naming the value and the forms.
    """
    name, sep, form = (part.strip() for part in text.partition("="))
    kind, colon, rest = (part.strip() for part in form.partition(":"))
    where = f"--space {text!r}"
    if not sep or not colon:
        raise UsageError(f"{where}: write NAME=FORM with FORM one of {FORMS}, e.g. --space wd=loguniform:1e-5,1e-2")
    if not name.isidentifier() or name in BUILTIN_PLACEHOLDERS:
        raise UsageError(f"{where}: {name!r} is not a placeholder name one can search (letters, digits and _)")
    if kind == "choice":
        try:
            return Dimension(name, kind, tuple(parse_axis(f"{name}={rest}")[1]))  # numbers as numbers
        except UsageError:
            raise UsageError(f"{where}: choice needs values, each once and none empty, e.g. choice:32,64,128") from None
    if kind not in ("loguniform", "uniform", "int"):
        raise UsageError(f"{where}: {kind!r} is not a form; use {FORMS}")
    try:
        low, high = (float(v) for v in rest.split(","))
    except ValueError:
        raise UsageError(f"{where}: {rest!r} is not LOW,HIGH (two numbers); use {FORMS}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise UsageError(f"{where}: LOW must be below HIGH, both finite (got {low:g}, {high:g})")
    if kind == "loguniform" and low <= 0:
        raise UsageError(f"{where}: loguniform needs 0 < LOW (got {low:g}); use uniform for a range from 0")
    if kind == "int":
        if not (low.is_integer() and high.is_integer()):
            raise UsageError(f"{where}: int needs whole numbers (got {low:g}, {high:g})")
        return Dimension(name, kind, (int(low), int(high)))
    return Dimension(name, kind, (low, high))


def command_space(template: list[str], lr_range: tuple[float, float], texts: list[str], fixed: dict) -> dict:
    """{placeholder: Dimension} for each placeholder of `template` that is searched, in name order.

    Args:
        template: the command after `--`, as argv.
        lr_range: `--lr-range` (LOW, HIGH), drawn for `{lr}` on a log scale.
        texts: the `--space NAME=FORM` values.
        fixed: the trial options given on the command line (`--seed 0`), each filling its placeholder.
    Raises:
        UsageError: a placeholder with no range (naming it, `--space` and, for a trial option such as
            `{seed}`, its flag), no placeholder to search, a `--space` or a fixed option
            the command never uses, `--space lr=` (that is `--lr-range`), a `--space` that names a fixed
            option or is given twice, or a bad `--space` (`parse_dimension`).
    """
    used = placeholders(template) - set(BUILTIN_PLACEHOLDERS)
    unused = sorted(set(fixed) - used)
    if unused:
        flag = f"--{unused[0].replace('_', '-')}"
        raise UsageError(
            f"{flag}={fixed[unused[0]]}: the command never uses {{{unused[0]}}}, and a command receives only its "
            f"placeholders; put the value in the command, or pass it as {{{unused[0]}}}"
        )
    space = {}
    for text in texts:
        dimension = parse_dimension(text)
        if dimension.name == "lr":
            raise UsageError(f"--space {text!r}: {{lr}} is drawn from {LR_FLAG} LOW,HIGH (log scale); give that")
        if dimension.name in space or dimension.name in fixed:
            raise UsageError(f"--space {text!r}: {dimension.name} is given twice (--space or a fixed option)")
        if dimension.name not in used:
            raise UsageError(
                f"--space {text!r}: the command never uses {{{dimension.name}}}, so searching it changes nothing; "
                f"pass it, e.g. --{dimension.name.replace('_', '-')} {{{dimension.name}}}"
            )
        space[dimension.name] = dimension
    if "lr" in used and "lr" not in fixed:
        space["lr"] = Dimension("lr", "loguniform", tuple(lr_range))
    missing = sorted(used - set(space) - set(fixed))
    if missing:
        name = missing[0]
        option = name in {field.name for field in dataclasses.fields(TrainConfig)}  # a trial option: --seed 0
        raise UsageError(
            f"command: placeholder {{{name}}} has no range; give one with --space {name}=FORM, FORM one of "
            f"{FORMS} (e.g. --space {name}=loguniform:1e-5,1e-2)"
            + (f", or a fixed value with --{name.replace('_', '-')} VALUE" if option else "")
        )
    if not space:
        raise UsageError(
            "command: no placeholder to search; use {lr} (drawn from --lr-range) or another {name} with "
            "--space name=FORM in the command"
        )
    return dict(sorted(space.items()))


def command_epochs(template: list[str], fixed: dict) -> int | None:
    """The epochs each trial of `template` runs when the command says so: an epochs flag (`EPOCH_FLAGS`:
    `--epochs 3`, `--epochs=3`, `--max_epochs 3`) with a whole number or a fixed placeholder
    (`--epochs {epochs}` with `--epochs 3` given), or `{epochs}` anywhere with a fixed value; None
    otherwise (searched, or not given: unknown)."""
    for i, word in enumerate(template):
        flag, eq, value = word.partition("=")
        if flag in EPOCH_FLAGS and (eq or i + 1 < len(template)):
            value = value if eq else template[i + 1]
            field = re.fullmatch(r"\{(\w+)\}", value)
            value = str(fixed.get(field.group(1), "")) if field else value
            return int(value) if value.isdigit() and int(value) > 0 else None
    value = fixed.get("epochs") if "epochs" in placeholders(template) else None
    return value if isinstance(value, int) else None


def launch_line(space: dict, fixed: dict, num_samples: int, epochs: int | None, template: list[str]) -> str:
    """The first line of a search over a command: each searched placeholder in `--space` form, the fixed
    ones, `num_samples`, ASHA's max_t (the command's `epochs`, or said to be unknown: None), and the
    command `template` with the program its name resolves to (`job_env.command_text`)."""
    searched = ", ".join(f"{{{name}}} {dimension.text()}" for name, dimension in space.items())
    given = "".join(f", {{{name}}} = {value}" for name, value in fixed.items())
    max_t = (
        f"ASHA max_t {epochs} epochs (the command's)"
        if epochs
        else f"ASHA max_t unknown (no --epochs N or {{epochs}} in the command): its rungs go up to "
        f"{MAX_T_UNKNOWN} epochs and a trial runs until its script exits"
    )
    return (
        f"search over the command's placeholders: {searched}{given}; {num_samples} configurations; {max_t}; "
        f"command: {job_env.command_text(template)}"
    )

"""Pure helpers of the command trainable: fill a command template, read metrics from a line.

No Ray, torch or pandas here: `sweeps/engine/command_sweep/command_template.py` re-exports these to check a command
before Ray starts, and `trainables/command/runner.py` uses them inside each trial.

A template is the user's command as an argv list whose items may hold `{name}` placeholders
(Python `str.format` fields, `{{`/`}}` for literal braces, an optional format spec such as
`{lr:.0e}`). Names are config keys of the trial (axes, `seed`) plus `trial_dir` and `trial_name`.

Metrics come from printed lines (stdout and stderr). The default reading takes the common shapes of
`trainables/command/output_shapes.py` (mnist's `Accuracy: 9894/10000 (99%)`, imagenet's meters) and `key=value`
and `key: value` pairs
whose value is a number (`epoch=3 val_acc=0.81 loss=0.52`, `epoch: 3, val/acc: 0.81`, `acc: 97.0%`);
the step also in the forms `epoch 3`, `epoch 3/50`, `epoch [3/50]`, `[epoch 3]`. Custom patterns
are regexes with named groups, one per metric (`Epoch (?P<epoch>\\d+) .* acc (?P<val_acc>[\\d.]+)`).
`StepContext` groups the lines into one result per step (a final-result block included).
"""

from __future__ import annotations

import json
import math
import re
import string

from trainables.command import output_shapes
from trainables.command.key_sources import printed_origin
from trainables.command.output_shapes import KEY, NUMBER
from trainables.experiment.objective import Objective

BUILTIN_PLACEHOLDERS = ("trial_dir", "trial_name", "gpu")  # filled by the trainable, not from the config
# --metrics-from: `output` (the default) reads both streams, `stdout` / `stderr` one; each also reads
# the JSON-lines file; `output` also the tracker records of a script that prints no metric
# (`trainables/command/trackers.py`: wandb, mlflow, csv, hf, each also a source of its own).
STEP_KEY = "epoch"  # the metric counting a command's progress unless --step-key names another
METRICS_FROM = "output"  # where a command's results are read unless --metrics-from says otherwise
METRICS_SOURCES = ("output", "stdout", "stderr", "jsonl", "tensorboard", "wandb", "mlflow", "csv", "hf")
STREAMS_READ = {"output": ("stdout", "stderr"), "stdout": ("stdout",), "stderr": ("stderr",)}  # others: none
NO_RETRY_METRIC = "command/no_retry"  # in a command trial's last report: its error is not worth a retry

# A key starts with a letter or `_`, may hold `. / - @` (val/acc, train.loss, Acc@1); a value is an int,
# a float (1e-3, .5) or nan/inf, and must end the token (so `10ms`, `v1.2.3`, `abc123` are not read).
# `97.0%` is read as 97.0; `Elapsed: 0:00:03`, `total: 1,000` and `Accuracy: 9894/10000` are not
# numbers (a `:`, `,` or `/` and a digit follow; the last is read by `output_shapes.fraction_percent`).
# A key may be quoted, as Python dicts and JSON print it (Hugging Face's `{'eval_loss': 0.31, 'epoch': 2.0}`).
DEFAULT_METRIC_PATTERN = re.compile(
    rf"(?<![\w./\-@])(?P<q>['\"]?)(?P<key>{KEY})(?P=q)\s*[=:]\s*(?P<value>{NUMBER})%?(?![\w.%]|[:,/]\d)"
)
_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_NON_FINITE = re.compile(r"[-+]?(?:nan|inf(?:inity)?)", re.IGNORECASE)


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
                raise ValueError(
                    f"{word!r}: placeholder {{{field}}} is not a name; "
                    "use {name} with a config key, trial_dir or trial_name"
                )
            names.add(field)
    return names


class _PlainFormatter(string.Formatter):
    def format_field(self, value, format_spec: str) -> str:
        return format(value, format_spec) if format_spec else format_value(value)


def render(template: list[str], config: dict, trial_dir: str, trial_name: str, gpu: str = "") -> list[str]:
    """Fill each word's placeholders from `config`, `trial_dir`, `trial_name` and `gpu`.

    Args:
        template: argv with `{name}` fields, e.g. ["python", "train.py", "--noise-rate", "{noise_rate}"].
        config: the trial's config (flat dict).
        trial_dir: folder the trial keeps across retries and `--resume` (absolute path).
        trial_name: Tune's name of the trial.
        gpu: the GPU ids Ray assigned to the trial as the machine numbers them (`3`, `2,3`; "" on CPU).
    Returns:
        The argv to run: ["python", "train.py", "--noise-rate", "0.4"].
    Raises:
        KeyError: a placeholder that is not a config key, `trial_dir` or `trial_name`.
    """
    values = {**config, "trial_dir": trial_dir, "trial_name": trial_name, "gpu": gpu}
    return [_PlainFormatter().vformat(word, (), values) for word in template]


def parse_number(text: str, *, printed: bool = True) -> int | float | None:
    """`text` as an int when it is one (`3`), else a float (`0.81`, `1e-3`, `.5`); None when it is not a number.

    The one number parser of the command runtime and its flags. `printed`: a value a script printed or
    logged (a line, a CSV cell): a trailing `%` is dropped (`97.0%` -> 97.0) and `nan`, `inf` are numbers
    (a diverged metric). False: a value the user wrote for an axis, where `50%`, `nan` and `inf` stay text.
    """
    text = text.strip()
    text = text.removesuffix("%").rstrip() if printed else text
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text) or (printed and _NON_FINITE.fullmatch(text)):
        return float(text)
    return None


def step_pattern(step_key: str) -> re.Pattern:
    """The default forms of a step on a line, case-insensitive: `epoch=3`, `epoch: 3`, `epoch 3`,
    `epoch 3/50`, `epoch [3/50]`, `[epoch 3]` (for step key `epoch`); group `step` holds the number,
    `total` the number after `/` (None without one)."""
    return re.compile(
        rf"(?<![\w./\-]){re.escape(step_key)}(?:\s*[=:]\s*|\s+)\[?\s*(?P<step>\d+)(?:\s*/\s*(?P<total>\d+))?\s*\]?(?![\w.])",
        re.IGNORECASE,
    )


def line_metrics(line: str, step_key: str, patterns: list[re.Pattern] | None = None) -> dict:
    """The metrics one printed line holds, with the step when the line names one.

    Args:
        line: one line of the command's stdout or stderr (trailing newline allowed).
        step_key: the metric counting progress (`epoch`, `step`); found in any form of
            `step_pattern` (for `epoch` also `output_shapes.epoch_with_batch`), or as a named group
            of a pattern.
        patterns: None (or empty) for the default reading: the shapes of `trainables/command/output_shapes.py`
            (`Accuracy: 9894/10000 (99%)`, `Acc@1  75.00 ( 71.20)`, ` * Acc@1 76.130`, a tqdm bar),
            then `key=value` / `key: value` pairs; else compiled regexes, one per line shape, each
            searched once per line: their named groups that took part and hold a number are
            metrics (the first pattern to give a name wins).
    Returns:
        {metric: int | float}, `step_key` included when the line names the step; {} for a line
        with no number in these forms, for a configuration dump (`output_shapes.config_dump`) and for
        an end-of-run summary naming an earlier epoch (`output_shapes.end_of_run`).
        `97.0%` reads 97.0; NaN and inf are kept (the trainable treats them as divergence).
    """
    return read_line(line, step_key, patterns)[0]


def read_line(line: str, step_key: str, patterns: list[re.Pattern] | None = None) -> tuple[dict, frozenset]:
    """`line_metrics` and the names among them that are running values (`output_shapes.shape_metrics`)."""
    line = output_shapes.plain_text(line)
    if output_shapes.config_dump(line) or output_shapes.end_of_run(line):
        return {}, frozenset()
    step, line = output_shapes.epoch_with_batch(line) if step_key.lower() == "epoch" else (None, line)
    metrics, running = {}, frozenset()
    printed = None if patterns else output_shapes.number_dict(line)
    if printed:  # Hugging Face's `{'eval_loss': 0.31, 'epoch': 2.0}`, its values quoted or not
        metrics = {key: parse_number(str(value)) for key, value in printed.items()}
    elif not patterns and (phrase := output_shapes.phrase_pair(line)):
        metrics = phrase  # keras-io's closing `Test loss: 0.1685`: `test_loss`
    elif not patterns:
        metrics, running = output_shapes.shape_metrics(line)
        for match in DEFAULT_METRIC_PATTERN.finditer(line):
            if match["key"] not in output_shapes.NOT_METRICS:
                metrics.setdefault(match["key"], parse_number(match["value"]))
    for pattern in patterns or ():
        match = pattern.search(line)
        for key, text in (match.groupdict() if match else {}).items():
            value = None if text is None else parse_number(text)
            if value is not None:
                metrics.setdefault(key, value)
    if step is not None and step_key not in metrics:
        metrics[step_key] = step
    if step_key not in metrics and (match := step_pattern(step_key).search(line)):
        metrics = {k: v for k, v in metrics.items() if k.lower() != step_key.lower()}  # `Epoch: 3` read as a key
        metrics[step_key] = int(match["step"])
    return metrics, running & metrics.keys()


def parse_metrics_line(line: str, step_key: str, patterns: list[re.Pattern] | None = None) -> dict | None:
    """`line_metrics` of a line that names the step (one result on its own), else None."""
    metrics = line_metrics(line, step_key, patterns)
    return metrics if step_key in metrics else None


class StepContext:
    """Turns printed lines into results, one per step, the way training scripts print them.

    A line naming the step (`Epoch [3/50] ...`, `epoch=3 val_acc=0.8`) starts that step; metrics
    on it and on later lines without a step belong to it (`* accuracy: 97.0%` under the epoch's
    line). A step's result is complete, and returned, when a line names another step, when it
    holds the objective's metrics (`Objective.step_metrics`: so `epoch=3 val_acc=0.81` is reported at once, not an
    epoch late), or at `close()` (the command exited). Metrics printed after the last step's result
    (a test block, keras-io's `Test loss: 0.1685`), or by a script that never prints a step, are the
    final figures, at the last step seen (or step 0), returned once at `close()`: they never overwrite
    a value of that step (a name the step holds with another value becomes `final_<name>`; the same
    value is a repeat, dropped). A step whose line names it the last (`Epoch 15/15`) is held until
    `close()` and returned there joined with the final figures: the last epoch is one result.
    Metrics before the first step line are a preamble (`classes: 100`) and are dropped when the
    first step starts. Each step is returned once: metrics printed after its result was complete
    are dropped, unless they are the final figures. Running values (an AverageMeter's average, a
    progress bar's postfix, redrawn every batch) never complete a step before it ends. A JSON dump
    printed over several lines after a step (timm's `--result` list of its best epochs) sums up
    results already read: its lines are skipped, unless it is one object of numbers (final figures).
    A Keras bar after one that reached its epoch's last batch (`model.evaluate`'s) is final figures too.
    A crash dump (a traceback, Hydra's `Error executing job with overrides: [...]`) is skipped up to
    the next line naming a step. A Lightning RichProgressBar frame, wrapped onto several lines, is read
    as one line; a non-terminal gets only its last frame (rounded to 3 decimals): the reader says so once.

        ctx = StepContext("epoch", objective=Objective("val_acc", test_metric=None))
        ctx.feed("epoch [1/2] batch [1/4] loss 0.9")  # -> []
        ctx.feed("val_acc: 71.5%")                     # -> [{"val_acc": 71.5, "epoch": 1}]
        ctx.feed("* test_acc: 70.2%")                  # -> []
        ctx.close()                                    # -> [{"test_acc": 70.2, "epoch": 1}]
    """

    def __init__(self, step_key: str, patterns: list[re.Pattern] | None = None, objective: Objective | None = None):
        """Args: step_key and patterns as for `line_metrics`; objective: the sweep's, whose metrics'
        presence completes a step's result (its `--metric` and `--test-metric`; None: only the next step does)."""
        self.step_key, self.patterns = step_key, patterns
        self.steps = step_pattern(step_key)
        self.completes = frozenset(objective.step_metrics if objective else ())
        self.step = None  # the current step; None before the first step line
        self.pending: dict = {}  # metrics of the current step not returned yet
        self.completed = None  # the step last returned (or held)
        self.returned: dict = {}  # the result last returned: final figures never overwrite its values
        self.last_step = None  # the step a line named the last of the run (`Epoch 15/15`, `epoch [50/50]`)
        self.held: dict | None = None  # that step's result, returned at close() with the final figures
        self.settled: set = set()  # names in `pending` read from a line that is not a running value
        self.dump: list = []  # the lines of a multi-line JSON dump being read (`_json_dump`)
        self.frame: list = []  # the lines of a Rich progress-bar frame being read
        self.origins: dict = {}  # metric -> where it was first read (`key_sources.printed_origin`)
        self.stream = "stdout"  # the stream of the line being read
        self.crash = False  # in a crash dump: nothing is read until a line names a step
        self.bar_ended = False  # a Keras bar reached its last batch in this step: a later bar is an evaluation
        self.after: dict = {}  # that evaluation's values: final figures if no step follows
        self.rich_noted = False  # the note on Rich frames' values was printed

    def feed(self, line: str, stream: str = "stdout") -> list[dict]:
        """Results completed by this line of `stream`, each {metric: value, step_key: step}. A progress
        bar's redraws (`\r`-separated, as tqdm and Lightning print them) are read in order."""
        self.stream = stream
        if self.frame and output_shapes.rich_wrapped(line):
            self.frame.append(line.strip())
            return []
        done = self._read_frame()
        if output_shapes.rich_frame(line):
            self.frame = [line.strip()]
            return done
        dump = None if self.crash else self._json_dump(line)
        if dump is not None:
            self._note("a JSON object over several lines", dump)
            return done + self.add(dump)
        return done + [r for part in line.split("\r") for r in self._read(part)]

    def _read(self, part: str) -> list[dict]:
        """The results one line (or one redraw of a bar) completes; a crash dump's lines complete none."""
        if output_shapes.crash_start(part):
            self.crash = True
        metrics, running = read_line(part, self.step_key, self.patterns)
        if self.crash and (self.step_key not in metrics or part[:1].isspace()):
            return []  # `trainer.max_epochs=2` in Hydra's overrides, `lr=0.1` in a traceback's source line
        self.crash = False
        self._note(part, metrics)
        bar, last_batch = output_shapes.keras_bar(output_shapes.plain_text(part))
        if bar and self.bar_ended and self.step_key not in metrics:
            self.after.update(metrics)  # `model.evaluate`'s bar after `fit`'s last epoch: not the epoch's values
            return []
        self.bar_ended = self.bar_ended or last_batch
        named = self.steps.search(part) if self.step_key in metrics else None
        if named and named["total"] is not None and int(named["total"]) == metrics[self.step_key]:
            self.last_step = metrics[self.step_key]
        return self.add(metrics, running)

    def _note(self, part: str, metrics: dict) -> None:
        for key in metrics.keys() - self.origins.keys():
            self.origins[key] = printed_origin(self.stream, part, self.patterns, key)

    def _read_frame(self) -> list[dict]:
        """The results of the Rich frame read so far (its lines joined: a name and its value may be wrapped apart)."""
        if not self.frame:
            return []
        text, self.frame = " ".join(self.frame), []
        if not self.rich_noted:
            self.rich_noted = True
            print(
                "raysweep: values read from a Rich progress bar: a non-terminal gets its last frame only (the last"
                " epoch, 3 decimals); log to a file (Lightning's CSVLogger: logger=csv) for every epoch's exact values",
                flush=True,
            )
        return self._read(text)

    def _json_dump(self, line: str) -> dict | None:
        """None for a line outside a JSON dump printed over several lines after a step (from a lone `[` or
        `{` to the line closing it, brackets counted); for a line in one, {} until its last line, which
        gives the dump's metrics when it is one object of numbers without the step (`json.dumps(
        {"test_acc": 0.9}, indent=2)`: final figures), else {} (timm's list of its best epochs)."""
        text = line.strip()
        if not self.dump and (self.step is None or text not in ("[", "{")):
            return None
        self.dump.append(line)
        opened = sum(t.count("[") + t.count("{") - t.count("]") - t.count("}") for t in self.dump)
        if opened > 0:
            return {}
        text, self.dump = "\n".join(self.dump), []
        try:
            value = json.loads(text)
        except ValueError:
            return {}
        numbers = isinstance(value, dict) and all(type(v) in (int, float) for v in value.values())
        return value if numbers and self.step_key not in value else {}

    def add(self, metrics: dict, running=frozenset()) -> list[dict]:
        """As `feed`, for metrics read elsewhere (a TensorBoard event: {tag: value, step_key: step});
        `running` names metrics that are running values (a meter's average, a progress bar's
        postfix): they are kept, but only the step's end completes a result that needs them."""
        metrics = dict(metrics)
        done = []
        if self.step_key in metrics:
            step = metrics.pop(self.step_key)
            if self.step is None:
                self.pending, self.settled = {}, set()  # preamble
            elif step != self.step:
                done += self._flush() + self._release()
                self.bar_ended, self.after = False, {}
            self.step = step
        self.pending.update(metrics)
        self.settled |= metrics.keys() - running
        if self.step is not None and self.completes and self.completes <= self.settled:
            done += self._flush()
        return done

    def close(self, crashed: bool = False, cut: bool = False) -> list[dict]:
        """The final figures, joined to the held last step (else at the last step seen, 0 if none); [] if
        none, and [] when the command `crashed` (exited non-zero) before any step line: what it printed
        was a preamble (a config dump such as `lr: 0.1` lines), not a result. `cut`: Tune stopped the
        command mid-step: only a held step's result, which was complete."""
        if cut or (crashed and self.step is None):
            self.pending, self.settled = {}, set()
            return self._release()
        return self._read_frame() + self._flush(final=True)

    def _flush(self, final: bool = False) -> list[dict]:
        step = 0 if self.step is None else self.step
        result, self.pending, self.settled = {**self.pending, self.step_key: step}, {}, set()
        if final:
            result, self.after = {**self.after, **result}, {}
        if final and step == self.completed:
            return self._final_figures(result)
        if len(result) == 1 or step == self.completed:
            return []  # nothing but the step; or the rest of a step already returned (kept only as final figures)
        self.completed = step
        if step == self.last_step and not final:
            self.held = result  # the last epoch: returned with the final figures, as one result
            return []
        self.returned = result
        return [result]

    def _release(self) -> list[dict]:
        """The held result of the step named the last (a later step came after all, or the command ended)."""
        held, self.held = self.held, None
        if held is not None:
            self.returned = held
        return [] if held is None else [held]

    def _final_figures(self, result: dict) -> list[dict]:
        """`result`, printed after its step's result was complete, joined to the held step or on its own: a
        value never replaces one the step holds (`final_<name>` when it differs; the same value is a repeat)."""
        row = self.held or self.returned
        figures = {self.step_key: result[self.step_key]}
        for name, value in result.items():
            if name == self.step_key:
                continue
            if name not in row:
                figures[name] = value
            elif value != row[name] and not (value != value and row[name] != row[name]):  # NaN twice: a repeat
                figures[f"final_{name}"] = value
        if self.held is not None:
            self.held = {**self.held, **figures}
            return self._release()
        return [figures] if len(figures) > 1 else []


def non_finite(metrics: dict) -> list[str]:
    """Names of the metrics whose value is a NaN or infinite float."""
    return [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]

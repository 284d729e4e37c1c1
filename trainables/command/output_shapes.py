"""Common training-log shapes read with no --metric-pattern: one small pure function per shape.

Each function takes one printed line (no trailing newline) and returns what it reads; the table in
`docs/output-shapes.md` names the repo each shape comes from, and `tests/unit/test_command_parse.py`
holds their recorded lines. `command_parse.line_metrics` applies them before the `key=value` pairs.
"""

from __future__ import annotations

import ast
import json
import re

# Kept in step with command_parse.KEY / NUMBER (imported there from here, so there is one copy).
KEY = r"[A-Za-z_][\w./\-@]*"  # `@` for Acc@1 (pytorch/examples imagenet, timm)
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|(?i:nan|inf(?:inity)?))"
_NOT_KEY_BEFORE = r"(?<![\w./\-@])"

# `Accuracy: 9894/10000 (99%)`: a count out of a total, then its rounded percentage.
_FRACTION = re.compile(rf"{_NOT_KEY_BEFORE}(?P<key>{KEY}):\s*(?P<num>\d+)\s*/\s*(?P<den>\d+)\s*\(\s*{NUMBER}\s*%\s*\)")
# `Acc@1  75.00 ( 71.20)` (AverageMeter: name, value, (average)); timm writes `Acc@1:  75.000 ( 71.200)`.
_METER = re.compile(rf"{_NOT_KEY_BEFORE}(?P<key>{KEY}):?\s+{NUMBER}\s+\(\s*(?P<avg>{NUMBER})\s*\)")
# ` *   Acc@1 76.130 Acc@5 92.862` (ProgressMeter.display_summary); timm's validate.py adds `(error)`.
_SUMMARY_START = re.compile(r"^\s*\*\s")
_SUMMARY_PAIR = re.compile(rf"{_NOT_KEY_BEFORE}(?P<key>{KEY})\s+(?P<value>{NUMBER})(?:\s*\([^)]*\))?(?=\s|$)")
# A tqdm bar, as Lightning draws it: `Epoch 3: 100%|###| 10/10 [00:01<00:00, 8.1it/s, v_num=0, val_acc=0.812]`.
_BAR = re.compile(r"\d+%\|[^|]*\|\s*\d+/\d+\s*\[(?P<postfix>[^\]]*)\]")
_BAR_PAIR = re.compile(rf"(?P<key>{KEY})=(?P<value>{NUMBER})(?=,|$)")
NOT_METRICS = ("v_num",)  # Lightning's bar shows the logger's version (`v_num=0`): not a metric
# `| end of epoch   1 | time: 53.59s | valid loss  2.94 | valid ppl    19.00` (pytorch/examples
# word_language_model; fairseq's `simple` log format): `name value` segments between pipes, a name of
# one or more words (joined with `_`: `valid_loss`), the value ending its segment.
_PIPE_PAIR = re.compile(rf"^(?P<name>[A-Za-z_][\w./\-@]*(?: [A-Za-z_][\w./\-@]*)*):?\s+(?P<value>{NUMBER})%?$")
_PIPE_SUBSET = re.compile(r"^\w+ on '(?P<subset>\w+)' subset$")  # fairseq: `valid on 'valid' subset`
_PIPE_COUNTERS = ("epoch", "step", "iter", "iteration", "update")  # `end of epoch 1` is `epoch` = 1
# End-of-run summaries that name an earlier epoch: timm's `*** Best metric: 16.67 (epoch 0)`, Lightning's
# "`Trainer.fit` stopped: `max_epochs=2` reached." Their numbers are not a new result.
_END_OF_RUN = (
    re.compile(r"\bbest\b.*(?:\(\s*epoch\s*\d+\s*\)|\bat epoch\s*\d+)", re.IGNORECASE),
    re.compile(r"`?Trainer\.fit`? stopped"),
)
# Epoch forms with the batch after them: imagenet `Epoch: [3][ 10/391]`, mmengine `Epoch(val) [3][100/100]`,
# timm `Train: 3 [ 100/1251 (  8%)]`. The step is the number as printed (imagenet counts from 0).
_EPOCH_FORMS = (
    re.compile(r"(?<![\w.])Epoch:\s*\[\s*(?P<step>\d+)\s*\]\s*\[\s*\d+\s*/\s*\d+\s*\]"),
    re.compile(r"(?<![\w.])Epoch\(\w+\)\s*\[\s*(?P<step>\d+)\s*\]\s*\[\s*\d+\s*/\s*\d+\s*\]"),
    re.compile(r"(?<![\w.])Train:\s*(?P<step>\d+)\s+\[\s*\d+\s*/\s*\d+"),
)


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x08")  # ANSI colours and cursor moves, backspaces
# Keras 3's bar (`keras.utils.Progbar`): `15/15 ━━━━━━━━━━━━━━━━━━━━ 1s 83ms/step - accuracy: 0.8933 - loss: 0.3076`.
_KERAS_BAR = re.compile(r"^\s*(?P<done>\d+)/(?P<of>\d+) [━\s]+")
_KERAS_PAIR = re.compile(rf" - (?P<key>{KEY}): (?P<value>{NUMBER})(?=\s|$)")
# A log record's rank tag, not a value: lightning-hydra-template's RankedLogger `[rank: 0]`, torchrun's `[rank0]:`.
_RANK_TAG = re.compile(r"\[\s*(?:global_|local_)?rank\s*[:=]?\s*\d+\s*\]:?", re.IGNORECASE)
# The first line of a crash dump: Python's traceback, Hydra's `Error executing job with overrides: [...]` (its
# overrides `trainer.max_epochs=2` are a command line, not results) and Hydra's `HYDRA_FULL_ERROR=1` hint.
_CRASH = re.compile(
    r"^(?:Traceback \(most recent call last\):|Error executing job with overrides:"
    r"|Set the environment variable HYDRA_FULL_ERROR)"
)
# `Test loss: 0.1685` (keras-io's closing print): one `name: number` pair after a phrase of up to 3 words.
_PHRASE_PAIR = re.compile(
    rf"^\s*(?P<words>[A-Za-z]+(?: [A-Za-z]+){{0,2}}) (?P<key>{KEY})\s*[:=]\s*(?P<value>{NUMBER})%?\s*$"
)
# Lightning's RichProgressBar frame as a non-terminal gets it (once, at the end of `fit`), its metrics wrapped onto
# indented lines: `Epoch 1/1  ━━━━ 16/16 0:00:00 • 0:00:00 70.74it/s val/loss: 1.234` then `      val/acc: 0.672`.
_RICH_FRAME = re.compile(r"^Epoch \d+/\d+\s+[━╸╺╾╼\s]*\d+/\d+\s+[\d:]+\s+•\s+[\d:-]+")
_RICH_WRAPPED = re.compile(r"^\s{20,}\S")
# A row of a box table of two columns, name and value: Lightning's test results under Rich, `│ test/acc │ 0.704 │`.
_BOX_ROW = re.compile(rf"^\s*[│┃]\s*(?P<key>{KEY})\s*[│┃]\s*(?P<value>{NUMBER})\s*[│┃]\s*$")


def plain_text(line: str) -> str:
    """`line` as a reader sees it: without terminal escapes (colours, Keras's backspaces) and without the rank tag
    a logger puts before each record (`[rank: 0] Starting testing!`)."""
    return _RANK_TAG.sub(" ", _ESCAPES.sub("", line))


def keras_bar(line: str) -> tuple[dict, bool]:
    """Keras 3's progress bar, `15/15 ━━━━ 1s 83ms/step - accuracy: 0.8933 - loss: 0.3076 - val_accuracy: 0.945`
    -> ({"accuracy": 0.8933, ...}, True): its `- name: value` pairs and whether it is the epoch's last batch (its
    values then are the epoch's; before it, running averages); ({}, False) for other lines."""
    match = _KERAS_BAR.match(line)
    if not match:
        return {}, False
    pairs = {m["key"]: float(m["value"]) for m in _KERAS_PAIR.finditer(line[match.end() :])}
    return pairs, match["done"] == match["of"]


def crash_start(line: str) -> bool:
    """Whether `line` starts a crash dump (a traceback, Hydra's `Error executing job with overrides: [...]`):
    nothing in it is a result."""
    return bool(_CRASH.match(line))


def phrase_pair(line: str) -> dict:
    """`Test loss: 0.1685` -> {"test_loss": 0.1685}: a line holding one `name: number` pair after a phrase, named
    by the whole phrase in lower case with `_` (so keras-io's closing `Test loss:` is never the epochs' `loss`);
    {} for other lines and for a counter (`Train epoch: 3` is the step)."""
    match = _PHRASE_PAIR.match(line)
    if not match or match["key"].lower() in _PIPE_COUNTERS:
        return {}
    value = match["value"]
    name = "_".join([*match["words"].split(), match["key"]]).lower()
    return {name: int(value) if value.lstrip("+-").isdigit() else float(value)}


def box_row(line: str) -> dict:
    """`│ test/acc │ 0.7039999961853027 │` (Lightning's test table under Rich) -> {"test/acc": 0.7039999961853027};
    {} for other lines (a table of more columns: Keras's model summary)."""
    match = _BOX_ROW.match(line)
    return {match["key"]: float(match["value"])} if match else {}


def rich_frame(line: str) -> bool:
    """Whether `line` starts a Lightning RichProgressBar frame (`Epoch 1/1  ━━━ 16/16 0:00:00 • 0:00:00 ...`)."""
    return bool(_RICH_FRAME.match(line))


def rich_wrapped(line: str) -> bool:
    """Whether `line` continues a Rich frame's metrics, wrapped onto an indented line (`      val/acc: 0.672`)."""
    return bool(_RICH_WRAPPED.match(line))


# argparse's `Namespace(batch_size=64, data='../data', ...)`, as `print(args)` shows it
_NAMESPACE = re.compile(r"\bNamespace\(\w+=")


def config_dump(line: str) -> bool:
    """Whether `line` prints a configuration, not metrics: argparse's `Namespace(lr=0.1, ...)`, or a
    Python / JSON dict with a value that is not a number (`{'lr': 0.1, 'data_path': '../datasets'}`);
    a dict of numbers only (Hugging Face's `{'eval_loss': 0.31, 'epoch': 2.0}`, or transformers 5's
    `{'eval_loss': '0.3431', 'epoch': '2.0'}`: `number_dict`) is metrics."""
    if _NAMESPACE.search(line):
        return True
    value = _printed_dict(line)
    return value is not None and not all(_number_like(v) for v in value.values())


def number_dict(line: str) -> dict | None:
    """The printed dict of numbers on `line`, its values as printed (numbers, or numbers in quotes:
    transformers 5's Trainer prints `{'eval_loss': '0.3431', 'epoch': '2.0'}`); None when the line
    holds no dict, or one with another value (a configuration: `config_dump`)."""
    value = _printed_dict(line)
    if not value or not all(_number_like(v) for v in value.values()):
        return None
    return {str(k): v for k, v in value.items()}


def _printed_dict(line: str) -> dict | None:
    """The Python or JSON dict from the first `{` to the last `}` of `line`, else None."""
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end < start:
        return None
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(line[start : end + 1])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        return value if isinstance(value, dict) else None
    return None


def _number_like(value) -> bool:
    """A number (not a bool), or a string holding one (`'0.3431'`, `'nan'`)."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def end_of_run(line: str) -> bool:
    """Whether `line` sums up the run rather than reporting a step: timm's `*** Best metric: 16.67 (epoch 0)`
    (a best value and the epoch it came from), Lightning's "`Trainer.fit` stopped: `max_epochs=2` reached."."""
    return any(form.search(line) for form in _END_OF_RUN)


def fraction_percent(line: str) -> dict:
    """`Accuracy: 9894/10000 (99%)` (pytorch/examples mnist) -> {"Accuracy": 98.94}: the count over
    the total as a percentage (more digits than the rounded `(99%)`), never the count 9894."""
    return {m["key"]: round(100 * int(m["num"]) / int(m["den"]), 10) for m in _FRACTION.finditer(line) if int(m["den"])}


def meters(line: str) -> dict:
    """`Loss 6.9e+00 (6.9e+00)\\tAcc@1  75.00 ( 71.20)` -> {"Loss": 6.9, "Acc@1": 71.2}: the running
    average in parentheses (at an epoch's last batch it is the epoch's value), not the batch's."""
    return {m["key"]: float(m["avg"]) for m in _METER.finditer(line)}


def summary(line: str) -> dict:
    """` *   Acc@1 76.130 Acc@5 92.862` -> {"Acc@1": 76.13, "Acc@5": 92.862}: `name value` pairs after
    a leading `*`; a value's parenthesised remark (timm's `Acc@1 76.1 (23.870)` error) is skipped."""
    if not _SUMMARY_START.match(line):
        return {}
    return {m["key"]: float(m["value"]) for m in _SUMMARY_PAIR.finditer(line)}


def progress_bar(line: str) -> dict:
    """A tqdm bar's postfix, `... 10/10 [00:01<00:00, 8.1it/s, v_num=0, val_acc=0.812]` ->
    {"v_num": 0, "val_acc": 0.812} (Lightning's bar on stderr); {} for a line that is not a bar."""
    match = _BAR.search(line)
    if not match:
        return {}
    pairs = _BAR_PAIR.finditer(", ".join(p.strip() for p in match["postfix"].split(",")))
    return {
        m["key"]: int(m["value"]) if m["value"].isdigit() else float(m["value"])
        for m in pairs
        if m["key"] not in NOT_METRICS
    }


def pipe_pairs(line: str) -> dict:
    """`| epoch   3 | lr 20.00 | valid loss  2.94 | valid ppl    19.00` -> {"epoch": 3, "lr": 20.0,
    "valid_loss": 2.94, "valid_ppl": 19.0}: each `name value` segment of a line split by ` | `; a name of
    several words is joined with `_`, and one ending in a counter (`end of epoch 1`) is that counter.
    fairseq's `valid on 'valid' subset` segment prefixes the names after it (`valid_loss`). A segment that
    is not `name value` (`200/2983 batches`, `time: 53.59s`, `End of training`) is skipped; {} for a line
    with fewer than two segments."""
    segments = [s.strip() for s in line.strip().strip("|").split(" | ")]
    if len(segments) < 2:
        return {}
    found, prefix = {}, ""
    for segment in segments:
        if subset := _PIPE_SUBSET.match(segment):
            prefix = subset["subset"] + "_"
            continue
        match = _PIPE_PAIR.match(segment)
        if not match:
            continue
        words = match["name"].split()
        name = words[-1] if len(words) > 1 and words[-1].lower() in _PIPE_COUNTERS else "_".join(words)
        value = match["value"]
        found[name if name.lower() in _PIPE_COUNTERS else prefix + name] = (
            int(value) if value.lstrip("+-").isdigit() else float(value)
        )
    return found


def epoch_with_batch(line: str) -> tuple[int | None, str]:
    """The epoch of a line that prints it with its batch (`Epoch: [3][ 10/391]`, `Epoch(val) [3][100/100]`,
    `Train: 3 [ 100/1251 (  8%)]`) and the line without that text; (None, line) for other lines."""
    for form in _EPOCH_FORMS:
        match = form.search(line)
        if match:
            return int(match["step"]), line[: match.start()] + " " + line[match.end() :]
    return None, line


def shape_metrics(line: str) -> tuple[dict, frozenset]:
    """Every shape's metrics on `line` (a summary first, then fractions, pipe pairs, meters, a bar's postfix) and
    the names that are running values (meters, and bars before an epoch's last batch: redrawn during a step, so they
    never complete a step's result on their own; `command_parse.StepContext` waits for the step's end)."""
    bar, last_batch = keras_bar(line)
    settled = {**pipe_pairs(line), **fraction_percent(line), **summary(line), **box_row(line)}
    settled.update(bar if last_batch else {})
    running = {**progress_bar(line), **meters(line), **({} if last_batch else bar)}
    return {**running, **settled}, frozenset(running.keys() - settled.keys())

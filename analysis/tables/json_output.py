"""A sweep's status and its summary table as versioned JSON documents (`--status --json`, `--json`).

The documents are described by JSON Schema files shipped with the package, `analysis/schemas/status-2.json`,
`summary-2.json` and `estimate-1.json` (a sweep's `--estimate --json`; docs/json-output.md). A change that a
reader could trip over (a field removed or renamed, a unit changed) is a new version, its schema file beside
the old one's: version 2 of status and summary counts `finished` and `pruned` where version 1 had `done`.
No pandas at import: `--status --json` stays as light as `--status`.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any

from analysis.progress import eta_seconds
from analysis.reading.driver_record import continue_command, exit_code
from trainables.experiment import records
from trainables.experiment.objective import Objective
from trainables.experiment.outcome import COUNTS
from trainables.experiment.rules import json_unit

STATUS_SCHEMA = "raysweep.status/2"
SUMMARY_SCHEMA = "raysweep.summary/2"
ESTIMATE_SCHEMA = "raysweep.estimate/1"  # `--estimate --json` (sweeps/engine/estimate/prediction.py:Estimate.to_json)
SCHEMA_FILES = {
    STATUS_SCHEMA: "status-2.json",
    SUMMARY_SCHEMA: "summary-2.json",
    ESTIMATE_SCHEMA: "estimate-1.json",
    "raysweep.status/1": "status-1.json",  # the versions before: for readers of documents written then
    "raysweep.summary/1": "summary-1.json",
}


def status_document(state: dict) -> dict:
    """The ``raysweep.status/2`` document of a :func:`analysis.status.read_status` dict.

    Times are seconds (``elapsed_s``, ``eta_s``) or Unix seconds (the driver's ``heartbeat``,
    ``ended``); ``eta_s`` is None until an epoch has finished (:func:`analysis.progress.eta_seconds`).
    Running trials come best first, as in the text block; ``resume_command`` is what continues the sweep
    (:func:`analysis.reading.driver_record.continue_command`). See ``analysis/schemas/status-2.json``.
    """
    s = state["status"]
    eta = eta_seconds(s)
    return {
        "schema": STATUS_SCHEMA,
        "experiment": state["where"],
        "metric": state["metric"],
        "mode": state["mode"],
        "counts": {k: s[k] for k in ("total", *COUNTS)},
        "epochs": {"done": s["epochs_done"], "planned": s["epochs_planned"]},
        "elapsed_s": state["elapsed_s"],
        "eta_s": eta,
        "best": {"value": s["best"][0], "trial": s["best"][1]} if s["best"] else None,
        "running": [_running_trial(state, *trial) for trial in s["running_trials"]],
        "driver": _driver(state),
        "left": state["left"],
        "ended_by": state["ended_by"],
        "resume_command": _continue_command(state),
        "duplicates": list(state["duplicates"]),
        "exit_code": exit_code(state),
        "raysweep": state.get("raysweep"),
    }


def summary_document(trials, history, objective: Objective, *, rows: list[str] | None = None) -> dict:
    """The ``raysweep.summary/2`` document: the summary table's cells and the best configuration.

    Args:
        trials, history: :func:`analysis.load_experiment` of one experiment or several.
        objective: its metric and mode choose the best configuration (never the test metric), its
            selection rule picks each trial's value, its table metric fills the cells (the metric
            itself for a sweep without a test metric: then ``best.test`` is null).
        rows: as for :func:`analysis.paper_table`.
    Returns:
        dict, see ``analysis/schemas/summary-2.json``: one cell per (method, noise type, noise rate)
        with ``n`` seeds, ``mean``, ``std`` (ddof=1) and ``ci95`` of the table metric in its own
        units (an accuracy stays in [0, 1]); a statistic that does not exist (std of one seed) is null.
        ``units``: the unit of ``metric``'s and ``val_metric``'s values here (`rules.json_unit`: ``fraction``, an
        accuracy the console, tables and report show x100 in %, or ``as logged``).
        ``metric_sources``: trial name -> where each metric was read, for command trials that recorded
        it (absent otherwise).
        ``search``: of a search or PBT experiment, its search table (every trial ranked by ``metric``
        under the rule, searched parameters, epochs, how it ended); null for a grid. ``trials``: the trials
        by outcome, as everywhere; ``ended_by``: why the sweep ended. When no trial reported the table
        metric (every trial errored), the document still comes, with no cells and ``problem`` saying why.
    """
    from analysis.reading.provenance import releases
    from analysis.reading.trial_outcomes import trial_counts
    from analysis.tables.summary import sweep_tables
    from trainables.experiment.errors import ExperimentError

    select = objective.select
    document = {
        "schema": SUMMARY_SCHEMA,
        "experiment": trials.attrs.get("experiment"),
        "metric": objective.table_metric,
        "val_metric": objective.metric,
        "val_mode": objective.mode,
        "selection": {"rule": select, "k": objective.k if select == "last-k" else None, "description": None},
        "rows": [],
        "columns": [],
        "cells": [],
        "best": None,
        "trials": trial_counts(trials),
        "duplicates": list(trials.attrs.get("duplicates") or []),
        "raysweep": [
            r for path in trials.attrs.get("experiments") or [trials.attrs.get("experiment")] for r in releases(path)
        ],
        "seed_rule": None,
        "search": None,
        "ended_by": trials.attrs.get("ended_by"),
        "problem": None,
    }
    sources = _metric_sources(trials)
    document |= {"metric_sources": sources} if sources else {}
    try:
        tables = sweep_tables(trials, history, objective, rows=rows)
    except ExperimentError as error:  # nothing to tabulate: the counts still tell what happened
        document["selection"]["description"] = objective.rule
        return document | {"problem": str(error)}
    test, best = tables.test, tables.best
    a = test.attrs
    keys = a["rows"] + a["columns"]
    cells = {tuple(_plain(row[c]) for c in keys): _cell(row) for _, row in test.iterrows()}
    best_key = tuple(_plain(best[c]) for c in keys) if best is not None else None
    test_of_best = cells.get(best_key) if objective.test_metric else None  # None: no test metric, cells are metric's
    document["selection"]["description"] = a["rule"]
    return document | {
        "units": {objective.metric: json_unit(tables.val.attrs["percent"]), a["metric"]: json_unit(a["percent"])},
        "rows": a["rows"],
        "columns": a["columns"],
        "cells": [{"key": dict(zip(keys, key)), **cell} for key, cell in cells.items()],
        "best": None if best is None else {"key": dict(zip(keys, best_key)), "val": _cell(best), "test": test_of_best},
        "seed_rule": a.get("seed_rule"),
        "search": _search(trials, history, objective),
        "problem": None if any(cell["n"] for cell in cells.values()) else "no cell has a usable value",
    }


def _metric_sources(trials) -> dict:
    """Trial name -> {metric: where it was read} of the command trials that recorded it (`metric_sources.json`)."""
    found = {}
    for name, folder in zip(trials.get("trial_name", ()), trials.get("trial_dir", ())):
        keys = records.read_metric_sources(folder) if isinstance(folder, str) else None
        if keys:
            found[str(name)] = keys
    return found


def _search(trials, history, objective: Objective) -> dict | None:
    """The search table of a search or PBT experiment (``analysis/tables/search_table.py``), None for a grid:
    every trial ranked by the objective's metric under its rule, its searched parameters, epochs and outcome."""
    import pandas as pd

    from analysis.reading.pbt_members import BEST_EPOCH
    from analysis.statistics.select import add_selected
    from analysis.tables.search_table import experiment_search_table

    if trials.attrs.get("search") is None:
        return None
    metric = objective.metric
    ci = [f"{metric}_ci95"] if f"{metric}_ci95" in history.columns else []
    selected = add_selected(trials, history, [metric, *ci], objective)
    table = experiment_search_table(selected, objective)
    a = table.attrs
    return {
        "kind": a["kind"],
        "searcher": a["searcher"],
        "scheduler": a["scheduler"],
        "params": a["params"],
        "unit": json_unit(a["percent"]),
        "trials": [
            {
                "rank": None if pd.isna(row["rank"]) else int(row["rank"]),
                "trial": str(row["trial"]),
                "params": {p: _plain(row[p]) for p in a["params"] if _plain(row[p]) is not None},
                "epochs": int(row["epochs"]),
                "ended": row["ended"],
                "n_seeds": int(row["n_seeds"]),
                "value": _number(row[metric]),
                "ci95": _number(row[f"{metric}_ci95"]),
                **(
                    {"best_epoch": None if pd.isna(row[BEST_EPOCH]) else int(row[BEST_EPOCH])}
                    if BEST_EPOCH in row
                    else {}
                ),
            }
            for row in table.to_dict("records")
        ],
    }


def dumps(document: dict) -> str:
    """One line of JSON; NaN and ±inf become null (JSON has no NaN), numpy numbers plain ones."""
    return json.dumps(_finite(document), allow_nan=False, default=_plain)


def schema(name: str) -> dict:
    """The JSON Schema (a dict) of a document version, e.g. ``schema("raysweep.status/2")``.

    Raises:
        KeyError: an unknown version.
    """
    text = resources.files("analysis").joinpath("schemas", SCHEMA_FILES[name]).read_text(encoding="utf-8")
    return json.loads(text)


def _continue_command(state: dict) -> str | None:
    """`continue_command` of a `read_status` dict (None when the sweep recorded no command line)."""
    if not state["argv"]:
        return None
    resumed = bool((state["driver"] or {}).get("resumed", True))
    return continue_command(state["launch"], state["status"], state["ended_by"], resumed)


def _running_trial(state: dict, name: str, result: dict, planned: int) -> dict:
    return {
        "name": name,
        "gpu_ids": _gpu_ids(result.get("gpu_ids")),
        "step": int(result.get("epoch", result.get("training_iteration", 0)) or 0),
        "steps_planned": planned,
        "metric": _number(result.get(state["metric"])),
        "train_loss": _number(result.get("train/loss")),
        "log_line": state["log_lines"].get(name),
        **({"metric_sources": state["metric_sources"][name]} if name in state.get("metric_sources", {}) else {}),
    }


def _driver(state: dict) -> dict:
    """The driver's state, as `analysis.status.driver_line` words it, and its `driver.json` record."""
    record = state["driver"]
    if record is None:
        return {"state": "unknown"}
    alive = "alive" if state["driver_alive"] else "finished" if record.get("ended") is not None else "gone"
    fields = ("host", "pid", "since", "heartbeat", "ended", "exit_code")
    return {"state": alive, **{f: record.get(f) for f in fields}}


def _gpu_ids(value: Any) -> list:
    """GPU ids as a trial reports them (``"0,1"``, ``[0, 1]``, ``1``) -> ``[0, 1]``; [] on CPU."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [int(i) if str(i).strip().isdigit() else str(i).strip() for i in items]


def _cell(row) -> dict:
    from analysis.tables.paper_format import empty_cell

    cell = {
        "n": int(row["n"]),
        "n_failed": int(row["n_failed"]),
        "n_diverged": int(row["n_diverged"]),
        **{c: int(row[c]) for c in ("n_no_metric", "n_interrupted", "n_not_run")},
        "why": empty_cell(row),
        "mean": _number(row["mean"]),
        "std": _number(row["std"]),
        "ci95": _number(row["ci95"]),
    }
    if isinstance(row.get("decision"), str):  # --seeds auto: the seeds the rule ran and its decision
        cell |= {"seeds_n": int(row["seeds_n"]), "decision": row["decision"]}
        beats = row.get("seeds_beats")
        cell["beats"] = [m.strip() for m in beats.split(";") if m.strip()] if isinstance(beats, str) else []
    return cell


def _number(value: Any) -> float | None:
    """A finite float, else None (missing, NaN, ±inf, not a number)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _plain(value: Any) -> Any:
    """numpy scalars as Python ones, NaN as None (a key value of a cell)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return _plain(value) if hasattr(value, "item") else value

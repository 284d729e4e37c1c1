"""What an experiment folder says about its search: searcher, scheduler, search space, PBT's steps.

A search's report draws the search (`analysis/figures/search.py`); which search it was, and on which
scale each parameter was sampled, is read here, without Ray:

    raysweep.json                      "searcher", "scheduler": class names the sweep ran with
    searcher-state-<session>.pkl       Tune's saved searcher; OptunaSearch's holds its Optuna study,
                                       whose trials carry each parameter's distribution (log or not)
    pbt_global.txt                     PopulationBasedTraining's log, one JSON list per exploit step:
                                       [member tag, copied member's tag, its iteration, the copied
                                       one's iteration, the copied config, the new (explored) config]
    experiment_state-*.json            each trial's ``evaluated_params`` (the values it started with)
                                       and ``experiment_tag`` (PBT's tags name members by it)

A foreign Tune experiment (no raysweep.json) is known by the last two kinds of file.
"""

from __future__ import annotations

import dataclasses
import io
import json
import posixpath
import warnings
from typing import Any

from analysis.reading.tune_state import StubUnpickler, read_bytes

PBT_SCHEDULERS = ("PopulationBasedTraining", "PB2")
"""Tune's schedulers that change a trial's hyperparameters while it trains."""

SEARCHER_STATE = "searcher-state-"
PBT_LOG = "pbt_global.txt"


@dataclasses.dataclass(frozen=True)
class Exploit:
    """One exploit/explore step of PBT: `trial_id` took `source_id`'s checkpoint and new values."""

    trial_id: str
    source_id: str
    iteration: (
        int  # training_iteration of `trial_id` when it was replaced (its row at it was logged, then it restarted)
    )
    source_iteration: int  # training_iteration of the checkpoint it continued from
    config: dict  # its config after the step (the copied one, perturbed)


@dataclasses.dataclass(frozen=True)
class SearchRecord:
    """A search experiment as its files describe it (:func:`read_search_record`)."""

    kind: str  # "search" (a searcher proposes trials) or "pbt" (a population's hyperparameters change)
    searcher: str | None  # class name, e.g. OptunaSearch; None: Tune's own random / grid variants
    scheduler: str | None  # class name, e.g. AsyncHyperBandScheduler (ASHA), PopulationBasedTraining
    distributions: dict  # parameter -> optuna distribution, from the searcher's own study; {}: unknown
    sampled: dict  # trial_id -> {parameter: value} it started with (Tune's evaluated_params)
    exploits: tuple = ()  # PBT: the Exploit steps in the order they happened

    @property
    def params(self) -> list[str]:
        """The searched parameters: those the searcher (or Tune's sampler) set, in first-seen order."""
        names = dict.fromkeys(self.distributions)
        for values in self.sampled.values():
            names.update(dict.fromkeys(values))
        return list(names)


def read_search_record(fs, root: str, files: set[str], sweep: dict, trials: list[dict]) -> SearchRecord | None:
    """The :class:`SearchRecord` of an experiment, or None for a grid (no searcher, no PBT).

    Args:
        fs, root: the experiment folder; files: the names of its files.
        sweep: :func:`analysis.reading.tune_state.sweep_settings` (``searcher``/``scheduler`` when
            raysweep.json records them).
        trials: the trial dicts of :func:`analysis.reading.tune_state.state_trials` (``trial_id``,
            ``sampled``, ``tag``).
    An unreadable searcher state or PBT log leaves that part empty (the report says what it lacks).
    """
    states = sorted(f for f in files if f.startswith(SEARCHER_STATE) and f.endswith(".pkl"))
    searcher, scheduler = sweep.get("searcher"), sweep.get("scheduler")
    study = _optuna_study(read_bytes(fs, posixpath.join(root, states[-1]))) if states else None
    if "searcher" not in sweep:  # not recorded: a foreign experiment, or a sweep from before the record
        searcher = "OptunaSearch" if study is not None else "searcher" if states else None
    if "scheduler" not in sweep and (PBT_LOG in files or any(f.startswith("pbt_policy_") for f in files)):
        scheduler = "PopulationBasedTraining"
    if scheduler in PBT_SCHEDULERS:
        kind = "pbt"
    elif searcher not in (None, "BasicVariantGenerator"):
        kind = "search"
    else:
        return None
    sampled = {t["trial_id"]: dict(t["sampled"]) for t in trials if t.get("sampled")}
    exploits = _pbt_steps(read_bytes(fs, posixpath.join(root, PBT_LOG)), trials) if PBT_LOG in files else ()
    return SearchRecord(kind, searcher, scheduler, _distributions(study), sampled, exploits)


def _pbt_steps(data: bytes | None, trials: list[dict]) -> tuple:
    """The exploit steps of ``pbt_global.txt`` whose two members are both known by their tags.

    Tune names members by their first experiment tag (``3_lr=0.29,...``); an explored member's tag
    becomes ``<first tag>@perturbed[...]`` (``PopulationBasedTraining._exploit``). Tune logs the member's
    iteration before the result that made it exploit (its scheduler runs before `Trial.update_last_result`
    in `TuneController._process_trial_result`, Ray 2.54-2.60): the member was replaced one iteration later."""
    by_tag = {str(t["tag"]).split("@perturbed[", 1)[0]: t["trial_id"] for t in trials if t.get("tag")}
    steps = []
    for line in (data or b"").decode("utf-8", "replace").splitlines():
        try:
            target, source, iteration, source_iteration, _, config = json.loads(line)
        except (ValueError, TypeError):
            continue
        if target in by_tag and source in by_tag and isinstance(config, dict):
            steps.append(Exploit(by_tag[target], by_tag[source], int(iteration) + 1, int(source_iteration), config))
    return tuple(steps)


def _distributions(study) -> dict:
    """Parameter -> distribution over the trials of an Optuna study (first one seen of each)."""
    out: dict[str, Any] = {}
    for trial in getattr(study, "trials", None) or []:
        for name, distribution in trial.distributions.items():
            out.setdefault(name, distribution)
    return out


_SAFE_BUILTINS = {"set", "frozenset", "list", "dict", "tuple", "int", "float", "complex", "bytes", "str", "bool"}
_REAL_MODULES = ("optuna", "numpy", "datetime", "collections", "copyreg", "_codecs", "enum")


def _optuna_or_data(module: str, name: str) -> bool:
    """Classes built for real when reading a searcher's state: Optuna's and numpy's (the study and
    its distributions) and plain data; any other is stubbed, so no Ray is imported and no code of
    the sweep's script runs."""
    return module.split(".", 1)[0] in _REAL_MODULES or (module == "builtins" and name in _SAFE_BUILTINS)


def import_optuna():
    """``import optuna`` without the warning tqdm gives in a notebook without ipywidgets (Optuna imports
    ``tqdm.auto``, which warns "IProgress not found" there; Optuna shows no progress bar of ours)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import optuna
    return optuna


def _optuna_study(data: bytes | None):
    """The Optuna study in a pickled ``OptunaSearch`` state (its ``_ot_study``), or None."""
    if not data:
        return None
    import_optuna()
    try:
        state = StubUnpickler(io.BytesIO(data), real=_optuna_or_data).load()
    except Exception:  # another searcher's state, another Optuna version: the distributions are unknown
        return None
    study = state.get("_ot_study") if isinstance(state, dict) else None
    return study if hasattr(study, "trials") else None

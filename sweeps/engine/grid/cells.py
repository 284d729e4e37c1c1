"""The grid: the cross product of the axes, trial names, and folder-safe short forms of values."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import re
import typing

from sweeps.engine.flags import UsageError


def grid_cells(axes: dict[str, list], max_trials: int) -> list[dict]:
    """The cross product of the axes: one config dict per cell, in the axes' order.

    Raises:
        UsageError: more than `max_trials` cells (counted before any is built).
    """
    count = math.prod(len(v) for v in axes.values())
    if count > max_trials:
        raise UsageError(
            f"the grid has {count:,} trials, more than --max-trials={max_trials:,}; "
            "check the axes (a typo in --seeds?) or raise --max-trials"
        )
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


def trial_namer(axes: dict[str, list]) -> TrialNamer:
    """A `trial_name_creator`: every varying axis, then noise type, noise rate and seed when the
    trial has them, e.g. `gce_lr0.1_asym_0.4_seed2` (strings as they are, numbers after their name).
    A string a folder name cannot hold (`configs/fast.yaml`, spaces) appears in `short_forms`."""
    varying = tuple(k for k, v in axes.items() if len(v) > 1 and k not in TrialNamer.LAST)
    return TrialNamer(varying, {k: short_forms(v) for k, v in axes.items()})


@dataclasses.dataclass(frozen=True, eq=False)
class TrialNamer:
    """The `trial_name_creator` `trial_namer` makes. An object, not a closure: Tune keeps it in every
    trial's state and serialises that state again at each checkpoint; an object of a module's class
    is pickled by reference (a few hundred bytes), a closure by value (5 kB of code, each time)."""

    LAST: typing.ClassVar[tuple] = ("noise_type", "noise_rate", "seed")
    varying: tuple  # the axes named in the trial name, in their order
    shorts: dict  # axis -> {string value: its folder-safe short form}

    def __call__(self, trial) -> str:
        config = trial.config
        parts = [self._text(key, config[key], named=True) for key in self.varying]
        parts += [self._text(key, config[key], named=False) for key in self.LAST[:2] if key in config]
        parts += [f"seed{config['seed']}"] if "seed" in config else []
        return "_".join(parts) or "trial"

    def _text(self, key: str, value, named: bool) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = f"{value:g}"
            return f"{key.replace('_', '')}{value}" if named else value
        return self.shorts.get(key, {}).get(value) or short_forms([value])[value]


_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")  # what a trial folder name may hold


def short_forms(values: list) -> dict:
    """{value: a folder-safe, unique short form} for the strings in `values` (others left out).

    A string of `[A-Za-z0-9._+-]` only is itself; else its last path part (`configs/fast.yaml` ->
    `fast.yaml`) with other characters as `-`, at most 40 characters; when two values would share
    a form, the whole value is used, and an 8-digit hash of it is added where that is still not
    unique or too long.
    """
    strings = [v for v in values if isinstance(v, str)]

    def tidy(text: str) -> str:
        return _UNSAFE.sub("-", text).strip("-.") or "x"

    forms = {
        v: v if not _UNSAFE.search(v) and v not in (".", "..") else tidy(v.rstrip("/").rsplit("/", 1)[-1])[:40]
        for v in strings
    }
    first = list(forms.values())
    for v in strings:
        if first.count(forms[v]) > 1 and forms[v] != v:
            forms[v] = tidy(v)
    for v in strings:
        if list(forms.values()).count(forms[v]) > 1 or len(forms[v]) > 60:
            forms[v] = f"{forms[v][:40]}-{hashlib.sha1(v.encode()).hexdigest()[:8]}"
    return forms


def grid_size(param_space: dict) -> int:
    """Trials per sample of `param_space`: the product of the lengths of its `tune.grid_search` lists
    (nested dicts included); 1 without a grid."""
    size = 1
    for value in param_space.values():
        if isinstance(value, dict):
            size *= len(value["grid_search"]) if set(value) == {"grid_search"} else grid_size(value)
    return size

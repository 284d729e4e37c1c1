"""`--seeds auto`: a Tune `Searcher` that suggests the next (cell, method, seed) as results arrive.

Every time Tune has a free slot it calls `suggest`; the searcher applies the decision rule
(`analysis.statistics.seeds.decide`) to the results so far and hands out the next seed of a method that
still needs one (the least-advanced first), even while that method's earlier seeds still run, so
no slot waits for a round to finish. It returns None (Tune asks again later) only when every
method that could use a seed already has all its remaining seeds running, and `FINISHED` when
nothing is left. Decisions are recomputed from the results alone, so resuming (Tune restores the
searcher) and extending (`--max-seeds 15` with the finished trials reused) continue the allocation.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import pickle
import sys
import uuid

import numpy as np
from ray.tune.search import Searcher

from analysis.statistics.seeds import SeedRule, decide
from sweeps.engine.run.restored_trials import LIVE, RestoredTrial, restored_trials
from trainables.experiment import records, storage
from trainables.experiment.objective import Objective


def cell_key(config: dict, keys: list[str]) -> str:
    """The cell of a trial config: its values of `keys` (the axes other than seed and method), as JSON."""
    return json.dumps({k: config.get(k) for k in keys}, sort_keys=True, default=str)


def next_seeds(
    cells: list[str], methods: list, values: dict, running: set, failed: set, rule: SeedRule
) -> list[tuple[str, object, int]]:
    """The (cell, method, seed) triples to run next, most needed first; pure, no Ray.

    Args:
        cells: cell keys (`cell_key`); methods: the compared axis' values.
        values: {(cell, method, seed): metric}; running, failed: sets of (cell, method, seed).
    Returns:
        for each method the decision rule says `needs_more`, its lowest seed below max_seeds that is
        neither done, running nor failed (none for a method with a failed seed: its counted seeds end
        before it); ordered by its lead in results over the least-advanced open
        method of its cell, then seeds in flight, then the cell's largest adjusted p (highest first),
        then seeds done or running (fewest first). Every open method
        is listed, so a free slot is never left idle while one could use it.
    """
    results = {c: {m: {} for m in methods} for c in cells}
    for (c, m, s), v in values.items():
        if c in results and m in results[c]:
            results[c][m][s] = v
    rows = decide(results, rule)
    evidence = {}  # a cell's largest adjusted p against its best: the further from a decision, the higher
    for row in rows:
        evidence[row["cell"]] = max(evidence.get(row["cell"], 0.0), np.nan_to_num(row["p_adjusted"], nan=0.0))
    wanted = []
    for row in rows:
        taken = {s for (c, m, s) in values.keys() | running | failed if (c, m) == (row["cell"], row["method"])}
        free = [s for s in range(rule.max_seeds) if s not in taken]
        stuck = any((c, m) == (row["cell"], row["method"]) for (c, m, _) in failed)  # counted seeds end there
        if row["needs_more"] and free and not stuck:
            wanted.append((row["cell"], row["method"], free[0], row["n"], len(taken)))
    least = {}
    for c, _, _, done, _ in wanted:
        least[c] = min(least.get(c, done), done)
    # most needed first: a method whose results are not ahead of its cell's other open methods (a seed
    # counts only once its partner has it too), then one with fewer seeds in flight, then the cell
    # furthest from a decision (a seed run ahead there is least likely to be wasted), then fewer seeds
    wanted.sort(key=lambda w: (w[3] - least[w[0]], w[4] - w[3], -evidence[w[0]], w[4]))
    return [(c, m, s) for c, m, s, _, _ in wanted]


class SeedSearcher(Searcher):
    """Suggests trial configs `cell | {compare: method, "seed": seed}` by `next_seeds`.

    A seed whose trial errored is rerun once: it is the lowest seed its method has not run, so
    `next_seeds` hands it out next (the method's counted seeds are a gap-free prefix). A second error,
    or a diverged result, ends the method's counted seeds before it.

    Args:
        cells: one config per cell (the grid's axes without seed and `compare`).
        compare: the compared axis; methods: its values.
        rule: the `analysis.statistics.seeds.SeedRule`.
        objective: the sweep's (its metric's last reported value is the one compared, by its mode).
        known: {(cell key, method, seed): metric} of finished trials reused from earlier runs.
        experiment_dir: where the decisions are written (`write_decisions`) once the searcher says
            FINISHED, before the sweep's summary and report are made, so the tables show them; and where
            each trial's end is recorded at once (`write_journal`), for a resume after a SIGKILL.
    """

    def __init__(
        self,
        cells: list[dict],
        compare: str,
        methods: list,
        rule: SeedRule,
        objective: Objective,
        known,
        experiment_dir: str | None = None,
    ):
        super().__init__(metric=objective.metric, mode=objective.mode)
        self.experiment_dir = experiment_dir
        self.keys = sorted(cells[0]) if cells else []
        self.cells = {cell_key(c, self.keys): c for c in cells}
        self.compare, self.methods, self.rule = compare, list(methods), rule
        self.values, self.running, self.failed, self.retried = dict(known), {}, set(), set()
        self.done_ids: set[str] = set()  # the trials whose end is counted
        self.journal = (
            storage.join(experiment_dir, f"seeds-auto-{uuid.uuid4().hex[:8]}.pkl") if experiment_dir else None
        )
        self.max_concurrent = 0  # Tune's max_concurrent_trials (`set_max_concurrency`); 0: no limit of its own

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Tune's `max_concurrent_trials`: this searcher counts its running trials itself and returns True, so
        Tune's `ConcurrencyLimiter` keeps no second list of them (a list a resume could restore out of step
        with the trials, the slots then held by finished trials forever)."""
        self.max_concurrent = max_concurrent
        return True

    def suggest(self, trial_id: str) -> dict | None:
        if self.max_concurrent and len(self.running) >= self.max_concurrent:
            return None
        todo = next_seeds(
            list(self.cells), self.methods, self.values, set(self.running.values()), self.failed, self.rule
        )
        if not todo and self.running:
            return None
        if not todo:
            self._record()
            return Searcher.FINISHED
        cell, method, seed = self.running[trial_id] = todo[0]
        return self.cells[cell] | {self.compare: method, "seed": seed}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        key = self.running.pop(trial_id, None)
        if key is None:
            return
        self._take(key, result, error, trial_id)
        self.done_ids.add(trial_id)
        self.write_journal()
        if not self.running and not next_seeds(
            list(self.cells), self.methods, self.values, set(), self.failed, self.rule
        ):
            self._record()  # every planned trial ran: Tune stops without asking `suggest` again

    def _take(self, key: tuple, result: dict | None, error: bool, trial_id: str) -> None:
        """Count the end of trial `trial_id` of `key` (cell, method, seed): its metric, or an error or divergence.
        A trial that ended without error and without the metric in `result` and not diverged is read from its
        folder (`_reported_value`): Tune hands a trial restarted by `--resume` that reported nothing new the last
        result of its restored state, which is empty when that state was saved before its first report."""
        value = (result or {}).get(self.metric)
        if not error and value is None and not (result or {}).get("diverged"):
            value = self._reported_value(trial_id, key)
        if error and key not in self.retried:
            self.retried.add(key)  # errored (after Tune's FailureConfig retries): rerun once, as the method's next seed
        elif error or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.failed.add(key)  # errored twice, or diverged (the same seed would diverge again): not rerun
            why = "errored twice" if error else f"ended with {self.metric} = {value!r}"
            print(
                f"--seeds auto: {key[1]} seed {key[2]} of cell {key[0]} {why}: its method's counted seeds end there",
                flush=True,
            )
        else:
            self.values[key] = float(value)

    def _reported_value(self, trial_id: str, key: tuple) -> float | None:
        """The last value of the metric in the history of trial `trial_id` (`analysis.load_trials`, the reader of
        Tune's files), else in that of the trial folder of its config that `load_trials` keeps (a trial that
        continued in a lost trial's folder, `resume.note_lost_trials`, and reported nothing new: the folder's rows
        have the lost trial's id); None when neither has it, or the one of its config errored."""
        from analysis import ExperimentError, load_trials

        if not self.experiment_dir:
            return None
        try:
            rows = load_trials(self.experiment_dir).to_dict("records")
        except ExperimentError:
            return None
        mine = [r for r in rows if r.get("trial_id") == trial_id]
        others = [r for r in rows if r.get("status") != "ERROR"]
        return known_results(mine or others, self.compare, self.keys, self.metric).get(key)

    def _record(self) -> None:
        """Write the decisions once, when nothing is left to run (before the sweep's summary reads them)."""
        if self.experiment_dir and not getattr(self, "recorded", False):
            self.recorded = True
            write_decisions(self.experiment_dir, self.results(), self.compare, self.rule)

    def results(self) -> dict:
        """{cell key: {method: {seed: metric}}} of the results so far, seeds below the cap."""
        out = {c: {m: {} for m in self.methods} for c in self.cells}
        for (c, m, s), v in self.values.items():
            if c in out and m in out[c] and s < self.rule.max_seeds:
                out[c][m][s] = v
        return out

    def save(self, checkpoint_path: str) -> None:
        storage.write_bytes(checkpoint_path, pickle.dumps(self.__dict__))  # atomic: a killed save leaves the old one

    def restore(self, checkpoint_path: str) -> None:
        """Tune's restore of a resumed sweep: the saved state, then brought in step with the trials of the
        experiment state Tune resumes (`restored_trials`, beside `checkpoint_path`): Tune copies the two to
        storage apart, so a driver killed meanwhile can leave them from different saves. A saved state that
        cannot be read (cut short by the same kill) is rebuilt from those trials alone, on top of the
        finished trials this searcher was made with."""
        try:
            with open(checkpoint_path, "rb") as f:
                self.__dict__.update(pickle.load(f))
        except (OSError, EOFError, pickle.UnpicklingError):
            print(
                f"warning: {checkpoint_path} cannot be read; --seeds auto goes on from the trials Tune restored",
                file=sys.stderr,
                flush=True,
            )
        self.__dict__.setdefault("retried", set())  # a searcher saved before errored seeds were rerun
        self.__dict__.setdefault("experiment_dir", None)
        self.__dict__.setdefault("max_concurrent", 0)
        self.__dict__.setdefault("done_ids", set())
        self.__dict__.setdefault("journal", None)
        self.read_journal()
        trials = restored_trials(os.path.dirname(checkpoint_path))
        if trials is not None:
            self.reconcile(trials)
        self.write_journal()

    def restore_from_dir(self, checkpoint_dir: str) -> None:
        """Tune's `Searcher.restore_from_dir`, also when no saved state of this searcher reached storage (the
        driver killed before its copy): then `restore` goes on from the journal and Tune's trials, where Tune's
        raised RuntimeError."""
        saved = sorted(glob.glob(os.path.join(glob.escape(checkpoint_dir), self.CKPT_FILE_TMPL.format("*"))))
        self.restore(saved[-1] if saved else os.path.join(checkpoint_dir, self.CKPT_FILE_TMPL.format("none")))

    def write_journal(self) -> None:
        """Record the ends counted so far (`values`, `failed`, `retried`, `done_ids`) in the experiment folder at
        once, atomically (`storage.write_bytes`). Tune's own save of this searcher reaches storage only with its
        experiment state, every few seconds and copied file by file, so a driver SIGKILLed meanwhile resumes
        from a save that misses the trials that ended since (a CI run of 44b3d4b ran 8 seeds twice)."""
        if not self.journal:
            return
        ends = {"values": self.values, "failed": self.failed, "retried": self.retried, "done_ids": self.done_ids}
        try:
            storage.write_bytes(self.journal, pickle.dumps(ends))
        except OSError:
            pass  # a full disk: the previous journal stays whole, and Tune's saves hold what they hold

    def read_journal(self) -> None:
        """On restore: add the ends the journal recorded that the restored save had not counted yet."""
        try:
            ends = pickle.loads(storage.read_bytes(self.journal)) if self.journal else None
        except (OSError, EOFError, pickle.UnpicklingError):
            ends = None  # none written yet (no trial ended), or a sweep of an earlier release
        if not ends:
            return
        self.values = ends["values"] | self.values
        self.failed |= ends["failed"]
        self.retried |= ends["retried"]
        self.done_ids |= ends["done_ids"]
        self.running = {i: key for i, key in self.running.items() if i not in self.done_ids}

    def reconcile(self, trials: list[RestoredTrial]) -> None:
        """Take Tune's trials as the truth: the running ones are those Tune runs again (`restored_trials.LIVE`,
        same trial ids; a saved running trial Tune has as finished, or never had, is no longer waited for),
        and a finished trial whose end this searcher has not counted (it was running at the save, or never
        handed out then) is counted now, by its last result. Trials of other configs are left alone."""
        saved = self.running
        self.running = {}
        for trial in sorted(trials, key=lambda t: t.status not in LIVE):  # live first: their seeds are taken
            key = self._key(trial.config)
            if key is None:
                continue
            if trial.status in LIVE:
                self.running[trial.trial_id] = key
                continue
            if trial.trial_id in self.done_ids:
                continue  # its end is counted (the saved state, or the journal)
            error = trial.status == "ERROR"
            counted = key in self.failed or key in (self.retried if error else self.values)
            if trial.trial_id in saved or not counted:
                self._take(key, trial.last_result, error, trial.trial_id)
                self.done_ids.add(trial.trial_id)

    def _key(self, config: dict) -> tuple | None:
        """(cell key, method, seed) of a trial config this searcher handed out; None for any other."""
        cell = cell_key(config, self.keys)
        if cell not in self.cells or config.get(self.compare) not in self.methods or "seed" not in config:
            return None
        return cell, config[self.compare], int(config["seed"])


def known_results(trials, compare: str, keys: list[str], metric: str) -> dict:
    """{(cell key, method, seed): last `metric`} of finished trials (`analysis.load_trials` rows as dicts)."""
    out = {}
    for row in trials:
        config = {k[len("config/") :]: v for k, v in row.items() if k.startswith("config/")}
        value = row.get(f"last/{metric}")
        if compare in config and "seed" in config and isinstance(value, float) and math.isfinite(value):
            out[(cell_key(config, keys), config[compare], int(config["seed"]))] = value
    return out


def split_grid(cells: list[dict], compare: str) -> tuple[list[dict], list]:
    """The fixed grid's trial configs -> (cells without seed and `compare`, in order; the methods, in order)."""
    base: dict[str, dict] = {}
    for c in cells:
        b = {k: v for k, v in c.items() if k not in ("seed", compare)}
        base.setdefault(cell_key(b, sorted(b)), b)
    return list(base.values()), list(dict.fromkeys(c[compare] for c in cells))


def auto_search(
    cells: list[dict], compare: str, rule: SeedRule, experiment_dir: str, reused: dict, objective: Objective
):
    """The searcher of a `--seeds auto` sweep over the fixed grid `cells` (seeds 0..max_seeds-1).

    The finished trials in `reused` ({config hash: trial folder}, `resume.plan_cells`) are its known
    results, so a later `--max-seeds 15` reopens only the cells still undecided.
    Returns:
        (`SeedSearcher`, num_samples: the trials not yet run, an upper bound Tune stops before when
        the searcher says FINISHED).
    """
    from analysis import load_trials

    base, methods = split_grid(cells, compare)
    keys = sorted(base[0]) if base else []
    rows = load_trials(experiment_dir).to_dict("records") if reused else []
    folders = set(reused.values())
    known = known_results([r for r in rows if r["trial_dir"] in folders], compare, keys, objective.metric)
    searcher = SeedSearcher(base, compare, methods, rule, objective, known, experiment_dir=experiment_dir)
    print(f"--seeds auto: {len(known)} finished trial(s) reused; {rule.describe()}", flush=True)
    return searcher, max(1, len(cells) - len(known))


def auto_plan(plan, cells: list[dict], compare: str, settings: dict, experiment_dir: str, objective: Objective):
    """`plan` (`grid_plan.GridPlan`) for a `--seeds auto` sweep: the `SeedSearcher` of `auto_search`
    hands out the next seed of the undecided methods, for at most the trials not yet run.

    Args:
        settings: `seed_flags.seed_rule_settings` of the flags (`SeedRule`'s fields but mode).
        objective: the sweep's; its metric is compared, by its mode.
    Returns:
        (the plan with that searcher, an empty param_space and `num_samples`; the `SeedRule`).
    """
    rule = SeedRule(**settings, mode=objective.mode)
    searcher, num_samples = auto_search(cells, compare, rule, experiment_dir, plan.reused, objective)
    planned = dataclasses.replace(
        plan, param_space={}, search_alg=searcher, num_samples=num_samples, todo=[None] * num_samples
    )
    return planned, rule


def write_decisions(experiment_dir: str, results: dict, compare: str, rule: SeedRule):
    """Decide every (cell, method) of `results` ({cell key: {method: {seed: metric}}}) and write
    `report/seeds.csv` (`analysis.statistics.seeds.seeds_frame`; `trainables.experiment.records.write_seeds_table`,
    atomically).
    Returns (the frame, the CSV's path)."""
    from analysis.statistics.seeds import seeds_frame

    frame = seeds_frame(decide(results, rule), compare, rule)
    return frame, records.write_seeds_table(experiment_dir, frame.to_csv(index=False))


def finish_auto(experiment_dir: str, cells: list[dict], compare: str, rule: SeedRule, metric: str) -> str:
    """Decide every (cell, method) from the experiment's finished trials, write `report/seeds.csv` and
    print one line: trials run against the fixed `--max-seeds` grid. Returns the CSV's path."""
    from analysis import load_trials

    base, methods = split_grid(cells, compare)
    keys = sorted(base[0]) if base else []
    rows = load_trials(experiment_dir).to_dict("records")
    known = known_results([r for r in rows if r.get("status") == "TERMINATED"], compare, keys, metric)
    results = {cell_key(c, keys): {m: {} for m in methods} for c in base}
    for (c, m, s), v in known.items():
        if c in results and m in results[c] and s < rule.max_seeds:
            results[c][m][s] = v
    frame, path = write_decisions(experiment_dir, results, compare, rule)
    ran, fixed = sum(len(by_seed) for r in results.values() for by_seed in r.values()), len(cells)
    undecided = int((frame["decision"] == "undecided").sum())
    print(
        f"--seeds auto: {ran} trials run vs {fixed} in the fixed {rule.max_seeds}-seed grid "
        f"({fixed - ran} saved by the rule, {1 - ran / fixed:.0%}); {undecided} comparison(s) undecided; {path}",
        flush=True,
    )
    return path

"""The experiment folder: its layout, and every record raysweep keeps in it, read and written here alone.

    <storage_path>/.<name>.estimate.json    `--estimate`'s, beside the experiment until its launch keeps it
    <storage_path>/<name>/                  experiment_dir(storage_path, name)
    <storage_path>/<name>_oom_gpu<share>/   an out-of-memory re-run round (oom_round_name): trials re-run at that share
        raysweep.json                       sweep settings: metric, mode, command line, total_trials,
                                            the estimate and the wall time measured (launch, end)
        driver.json, .driver.lock           who runs the sweep, and its heartbeat (sweep_records/driver_lock.py)
        provenance/run-<UTC>.json (.patch)  one per run of the sweep: code, command, versions, nodes
        report/seeds.csv                    the sequential seed test's decisions (--seeds auto)
        code/<launch time>/                 the code snapshot trials copy; raysweep_code.json its manifest
        <trial>/                            Tune's trial folder (result.json, params.json: Tune's own files)
            trial_config.json               the resolved config and its hash (skip-existing, --resume)
            noise.json                      the realised label noise
            confusion.json                  clean-test confusion matrices, "last" and "best-val"
            divergence.json                 the dump of a diverged trial
            gpu_oom.json                    the marker of a trial that ran out of GPU memory
            placement.json                  where the trial runs: its GPU ids, share, host and pid, from its start
            failure.json                    a command trial's last failure (`outcome.TrialFailure`)
            late_rows.json                  rows a command logged once Tune had stopped its trial (scheduler_stops.py)
            metric_sources.json             where a command trial read each metric (trainables/command/key_sources.py)
            work/                           a command trial's working folder, {trial_dir}: a link into work_tree/
            work_tree/                      the folders around the launch folder, the launch folder's copy inside
            work/mlflow.db                  a command's MLflow store, where MLFLOW_TRACKING_URI is unset
            checkpoint_*/command_step.json  a command trial's last reported step

Paths are strings, local or URIs (`trainables.experiment.storage`). Every write is atomic (a temporary file then
`os.replace`; one PUT on object storage), so a stopped or killed process leaves no torn record. A
reader returns None for a missing record; for a torn or foreign one (not a JSON object) it warns
(`TornRecord`, naming the file) and returns None too, so `--resume` and `python -m analysis` go on.
No Ray, torch or pandas here: every layer (sweeps, analysis, trainables) imports this.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from trainables.experiment import storage
from trainables.experiment.outcome import TrialFailure

SETTINGS_FILE = "raysweep.json"
DRIVER_FILE = "driver.json"
DRIVER_LOCK = ".driver.lock"  # the local file lock next to the driver record
DRIVER_RESERVE = ".driver.reserve"  # space the driver keeps to record its end on a full disk
WRITE_PROBE = ".raysweep_write_probe"  # written and removed before Ray starts (sweeps/engine/run/preflight.py)
PROVENANCE_DIR = "provenance"
PROVENANCE_PREFIX = "run-"
REPORT_DIR = "report"
WRITING = ".writing"  # <report folder>.writing: the write-up under way, swapped in whole (analysis/writeup.py)
SEEDS_TABLE = "seeds.csv"
CODE_DIR = "code"
CODE_MANIFEST = "raysweep_code.json"
TRIAL_CONFIG_FILE = "trial_config.json"
NOISE_FILE = "noise.json"
CONFUSION_FILE = "confusion.json"
DIVERGENCE_FILE = "divergence.json"
OOM_MARKER = "gpu_oom.json"
PLACEMENT_FILE = "placement.json"
OOM_ROUND = "_oom_gpu"  # <name>_oom_gpu<share>: the folder of an out-of-memory re-run round
FAILURE_FILE = "failure.json"
LATE_ROWS_FILE = "late_rows.json"
TRIAL_END_FILE = "trial_end.json"
METRIC_SOURCES_FILE = "metric_sources.json"
LATE_ROWS_KEPT = 20  # the last results it keeps (Tune may drop those reported just before it stopped the trial)
WORK_DIR = "work"
WORK_TREE = "work_tree"
NODE_WORK_DIR = "raysweep_work"  # object storage: beside Ray's `working_dirs/<trial>` on the node
COMMAND_STEP_FILE = "command_step.json"
MLFLOW_STORE = "mlflow.db"  # in WORK_DIR (trainables/command/process.py:tracker_env)
PENDING_ESTIMATE = ".{name}.estimate.json"  # under the storage path, beside the experiment folder
# In a command trial's result that repeats the step of the row before it with a final result joined
# (`trainables/command/step_reporter.py:StepReporter`): the tables drop that earlier row, the progress counts one epoch.
JOINS_STEP_METRIC = "command/joins_step"

Folder = str | Path


class TornRecord(UserWarning):
    """A record that is not a whole JSON object (half written, or not ours); it was skipped."""


def experiment_dir(storage_path: Folder, name: str) -> str:
    """`<storage_path>/<name>`: where Tune writes the experiment (a path or a URI)."""
    return f"{str(storage_path).rstrip('/')}/{name}"


def record_path(folder: Folder, *names: str) -> str:
    """`folder/names...` for a local folder or URI."""
    return storage.join(os.fspath(folder), *names)


def parse_record(data: bytes, where: str) -> dict | None:
    """The JSON object in `data` (the bytes of the file `where`); None, with a `TornRecord` warning
    naming `where`, when it is not one (a torn or half-written file)."""
    try:
        value = json.loads(data)
    except ValueError as e:
        warnings.warn(f"skipped {where}: not a whole JSON record ({e})", TornRecord, stacklevel=3)
        return None
    if not isinstance(value, dict):
        warnings.warn(f"skipped {where}: not a JSON object", TornRecord, stacklevel=3)
        return None
    return value


def read_record(path: str) -> dict | None:
    """The record at `path` (local or URI): None when absent; None with a `TornRecord` warning naming
    the file when it is torn or unreadable."""
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        warnings.warn(f"skipped {path}: cannot read it ({e})", TornRecord, stacklevel=3)
        return None
    return parse_record(data, path)


def write_record(path: str, record: dict, indent: int | None = None) -> str:
    """Write `record` as JSON to `path` atomically (`trainables.experiment.storage.write_bytes`); returns `path`."""
    storage.write_bytes(path, json.dumps(record, indent=indent).encode())
    return path


def read_settings(experiment: Folder) -> dict | None:
    """The sweep settings (`raysweep.json`) of an experiment folder, or None."""
    return read_record(record_path(experiment, SETTINGS_FILE))


def write_settings(experiment: Folder, info: dict) -> str:
    """Write the sweep settings (`raysweep.json`: metric, mode, argv, settings, total_trials)."""
    return write_record(record_path(experiment, SETTINGS_FILE), info, indent=1)


def pending_estimate_path(storage_path: Folder, name: str) -> str:
    """Where `--estimate` keeps its estimate of the sweep `name` until the sweep's launch records it
    (beside the experiment folder, not in it: `--estimate` writes nothing into the experiment)."""
    return record_path(storage_path, PENDING_ESTIMATE.format(name=name))


def read_pending_estimate(storage_path: Folder, name: str) -> dict | None:
    """`--estimate`'s record for the sweep `name` ({"argv", "made", "estimate": {...}}), or None."""
    return read_record(pending_estimate_path(storage_path, name))


def write_pending_estimate(storage_path: Folder, name: str, record: dict) -> str:
    """Keep `--estimate`'s record for the sweep `name` (replacing an older one); returns its path."""
    return write_record(pending_estimate_path(storage_path, name), record, indent=1)


def delete_pending_estimate(storage_path: Folder, name: str) -> None:
    """Remove `--estimate`'s record for the sweep `name`; nothing when there is none."""
    storage.delete(pending_estimate_path(storage_path, name))


def read_driver(experiment: Folder) -> dict | None:
    """The driver record (`driver.json`, see `analysis/reading/driver_record.py`), or None."""
    return read_record(record_path(experiment, DRIVER_FILE))


def write_driver(experiment: Folder, record: dict) -> str:
    """Write the driver record (`driver.json`)."""
    return write_record(record_path(experiment, DRIVER_FILE), record)


def delete_driver(experiment: Folder) -> None:
    """Remove the driver record; nothing when there is none."""
    storage.delete(record_path(experiment, DRIVER_FILE))


def driver_lock_path(experiment: Folder) -> str:
    """The local file lock next to the driver record (`.driver.lock`)."""
    return record_path(experiment, DRIVER_LOCK)


def driver_reserve_path(experiment: Folder) -> str:
    """The space kept aside next to the driver record (`.driver.reserve`, `driver_lock.DriverHold`)."""
    return record_path(experiment, DRIVER_RESERVE)


def provenance_dir(experiment: Folder) -> str:
    """The folder of the experiment's provenance records (`provenance/`)."""
    return record_path(experiment, PROVENANCE_DIR)


def provenance_name(stamp: str, suffix: str = ".json") -> str:
    """The file name of a run's provenance record (`run-<stamp>.json`) or its patch (suffix `.patch`)."""
    return f"{PROVENANCE_PREFIX}{stamp}{suffix}"


def is_provenance_record(name: str) -> bool:
    """Whether a file name in `provenance/` is a run's record (not its patch)."""
    return name.startswith(PROVENANCE_PREFIX) and name.endswith(".json")


def read_provenance(path: str) -> dict | None:
    """One run's provenance record at `path` (see `provenance_dir`), or None."""
    return read_record(path)


def write_provenance(experiment: Folder, stamp: str, record: dict, patch: str = "") -> str:
    """Write one run's provenance record, and its `git diff` beside it when `patch` is not empty (the
    record's `code.patch` then names it); returns the record's path."""
    folder = provenance_dir(experiment)
    if patch:
        record["code"]["patch"] = provenance_name(stamp, ".patch")
        storage.write_bytes(record_path(folder, record["code"]["patch"]), patch.encode())
    return write_record(record_path(folder, provenance_name(stamp)), record, indent=1)


def seeds_table_path(experiment: Folder) -> str:
    """Where the sequential seed test's table goes (`report/seeds.csv`)."""
    return record_path(experiment, REPORT_DIR, SEEDS_TABLE)


def read_seeds_table(experiment: Folder) -> str | None:
    """The seeds table as CSV text, or None when there is none."""
    try:
        return storage.read_bytes(seeds_table_path(experiment)).decode()
    except FileNotFoundError:
        return None


def write_seeds_table(experiment: Folder, csv_text: str) -> str:
    """Write the seeds table (CSV text) atomically; returns its path."""
    path = seeds_table_path(experiment)
    storage.write_bytes(path, csv_text.encode())
    return path


def code_dir(experiment: Folder) -> Path:
    """The folder of the experiment's code snapshots (`code/`; local experiments only)."""
    return Path(experiment, CODE_DIR)


def read_code_manifest(snapshot: Folder) -> dict | None:
    """The manifest of a code snapshot (`raysweep_code.json`), or None."""
    return read_record(record_path(snapshot, CODE_MANIFEST))


def write_code_manifest(snapshot: Folder, manifest: dict) -> str:
    """Write the manifest of a code snapshot."""
    return write_record(record_path(snapshot, CODE_MANIFEST), manifest, indent=1)


def work_dir(trial: Folder) -> Path:
    """A command trial's working folder, `{trial_dir}` (`<trial>/work`, kept across retries and --resume)."""
    return Path(trial, WORK_DIR)


def node_work_dir(staging_trial: Folder) -> Path:
    """With object storage, a command trial's working folder on its node: beside the trial's folder in
    Ray's session folder (`<name>/working_dirs/<trial>` -> `<name>/raysweep_work/<trial>/work`), which
    Tune uploads, following links."""
    staging_trial = Path(staging_trial)
    return work_dir(staging_trial.parent.parent / NODE_WORK_DIR / staging_trial.name)


def read_trial_config(trial: Folder) -> dict | None:
    """The trial's resolved config and its hash (`trial_config.json`), or None."""
    return read_record(record_path(trial, TRIAL_CONFIG_FILE))


def write_trial_config(trial: Folder, record: dict) -> str:
    """Write `{"config_hash": str, "config": dict, "on_gpu": bool, "identity": dict}` as the trial's
    `trial_config.json` (`identity`: `trainables.config.identity`, the settings as they train)."""
    return write_record(record_path(trial, TRIAL_CONFIG_FILE), record)


def read_noise(trial: Folder) -> dict | None:
    """The trial's realised label noise (`noise.json`), or None."""
    return read_record(record_path(trial, NOISE_FILE))


def write_noise(trial: Folder, summary: dict) -> str:
    """Write the trial's realised label noise (`noise.json`)."""
    return write_record(record_path(trial, NOISE_FILE), summary, indent=1)


def read_confusion(trial: Folder) -> dict | None:
    """The trial's confusion matrices (`confusion.json`: "last", "best-val", num_classes), or None."""
    return read_record(record_path(trial, CONFUSION_FILE))


def write_confusion(trial: Folder, saved: dict) -> str:
    """Write the trial's whole `confusion.json`."""
    return write_record(record_path(trial, CONFUSION_FILE), saved)


def read_divergence(trial: Folder) -> dict | None:
    """The dump of a diverged trial (`divergence.json`), or None."""
    return read_record(record_path(trial, DIVERGENCE_FILE))


def write_divergence(trial: Folder, dump: dict) -> str:
    """Write the dump of a diverged trial (`divergence.json`); returns its path."""
    return write_record(record_path(trial, DIVERGENCE_FILE), dump, indent=1)


def read_oom_marker(trial: Folder) -> dict | None:
    """The out-of-GPU-memory marker (`gpu_oom.json`: gpus_per_trial, error), or None."""
    return read_record(record_path(trial, OOM_MARKER))


def write_oom_marker(trial: Folder, marker: dict) -> str:
    """Leave the out-of-GPU-memory marker in the trial folder; returns its path."""
    return write_record(record_path(trial, OOM_MARKER), marker)


def read_placement(trial: Folder) -> dict | None:
    """Where a trial runs (`placement.json`: gpu_ids, gpus, host, pid), or None."""
    return read_record(record_path(trial, PLACEMENT_FILE))


def write_placement(trial: Folder, placement: dict) -> str:
    """Write where a trial runs, at its start (`placement.json`); returns its path."""
    return write_record(record_path(trial, PLACEMENT_FILE), placement)


def oom_round_name(name: str, share: float) -> str:
    """The experiment name of the round that re-runs `name`'s out-of-memory trials at `share` GPUs:
    `<name>_oom_gpu<share>` (e.g. `noise_grid_oom_gpu0.5`), beside the experiment folder."""
    return f"{name}{OOM_ROUND}{share:g}"


def oom_round_share(folder_name: str, name: str) -> float | None:
    """The share of an out-of-memory re-run round of experiment `name` named `folder_name`
    (`oom_round_name`), else None."""
    prefix = name + OOM_ROUND
    if not folder_name.startswith(prefix):
        return None
    try:
        share = float(folder_name[len(prefix) :])
    except ValueError:
        return None
    return share if 0 < share <= 1 else None


def read_failure(trial: Folder) -> TrialFailure | None:
    """A command trial's last failure (`failure.json`), or None (none, torn, or not a failure record)."""
    record = read_record(record_path(trial, FAILURE_FILE))
    return TrialFailure.from_record(record) if record is not None else None


def write_failure(trial: Folder, failure: TrialFailure) -> str:
    """Write a command trial's failure (`failure.json`), replacing an earlier attempt's; returns its path."""
    return write_record(record_path(trial, FAILURE_FILE), failure.to_record(), indent=1)


def read_command_step(checkpoint: Folder) -> dict | None:
    """The step a command trial's checkpoint holds (`command_step.json`: {"step": number}), or None."""
    return read_record(record_path(checkpoint, COMMAND_STEP_FILE))


def write_command_step(checkpoint: Folder, step: float) -> str:
    """Write `{"step": step}` into a command trial's checkpoint folder."""
    return write_record(record_path(checkpoint, COMMAND_STEP_FILE), {"step": step})


def write_late_rows(trial: Folder, rows: list[dict], cut: bool) -> str:
    """Write `{"rows": [...], "cut": bool}` as the trial's `late_rows.json`
    (`trainables/command/step_reporter.py:StepReporter`): the results of its last steps, from shortly before Tune
    stopped it (a scheduler's decision, a time budget) until its command ended; the history adds those after its
    last logged step. `cut`: the command was still training when Tune stopped the trial (it was ended, so those
    rows are not a full run: a scheduler's stop pruned it), else it had exited by itself."""
    return write_record(record_path(trial, LATE_ROWS_FILE), {"rows": rows, "cut": cut})


def write_trial_end(trial: Folder, trial_id: str, ended_at: float) -> str:
    """Write `{"trial_id": ..., "ended_at": Unix seconds}` as the trial's `trial_end.json`: Tune ended it as completed
    (`on_trial_complete`: it returned, or its scheduler stopped it; not an error, not a stop of the whole sweep).
    Written by the driver straight into the trial's folder on storage, so that a trial whose end reached no saved
    experiment state (a driver killed between Tune's saves) still reads as ended (`read_trial_end`)."""
    return write_record(record_path(trial, TRIAL_END_FILE), {"trial_id": trial_id, "ended_at": ended_at})


def read_trial_end(trial: Folder) -> dict | None:
    """The trial's `trial_end.json` (`write_trial_end`), or None (it did not end as completed, or a sweep of an
    earlier release)."""
    return read_record(record_path(trial, TRIAL_END_FILE))


def read_metric_sources(trial: Folder) -> dict | None:
    """{metric: its origin} of a command trial (`metric_sources.json`, `trainables/command/key_sources.py`), or None."""
    record = read_record(record_path(trial, METRIC_SOURCES_FILE))
    return record.get("keys") if record and isinstance(record.get("keys"), dict) else None


def write_metric_sources(trial: Folder, origins: dict) -> str:
    """Write `{"keys": {metric: {"source": ..., ...}}}` as the trial's `metric_sources.json`; returns its path."""
    return write_record(record_path(trial, METRIC_SOURCES_FILE), {"keys": origins})

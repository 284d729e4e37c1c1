"""The provenance records of an experiment (`provenance/run-*.json` + `.patch`): read, compare, print."""

from __future__ import annotations

from trainables.experiment import records, storage
from trainables.experiment.release import label

FOLDER = records.PROVENANCE_DIR  # under the experiment folder: one record (+ patch) per run of the sweep


def read_records(experiment_dir: str) -> list[dict]:
    """Every run's record of `experiment_dir` (a folder or URI), oldest first; [] when there are none.

    Each record is the dict `sweeps.engine.sweep_records.provenance_capture.collect` made, plus `file` (its JSON
    file name)
    and `patch_text` (the `git diff HEAD` it saved, "" when none).
    """
    import pyarrow.fs as pafs

    fs, inner, prefix = storage.filesystem_of(records.provenance_dir(experiment_dir))
    if fs.get_file_info(inner).type != pafs.FileType.Directory:
        return []
    runs = []
    for info in sorted(fs.get_file_info(pafs.FileSelector(inner)), key=lambda i: i.base_name):
        record = records.read_provenance(prefix + info.path) if records.is_provenance_record(info.base_name) else None
        if record is None:  # a patch, another file, or a torn record (warned about, skipped)
            continue
        patch = (record.get("code") or {}).get("patch")
        folder = prefix + inner
        record["file"] = info.base_name
        record["patch_text"] = storage.read_bytes(storage.join(folder, patch)).decode() if patch else ""
        runs.append(record)
    return runs


def sweep_runs(experiment_dir: str) -> list[tuple[float, str]]:
    """Each run of the sweep, oldest first: (Unix seconds its process started, `launch`, `--resume`
    or `extension`: a later run without --resume, which added cells); [] without records or when
    they cannot be read."""
    import shlex

    try:
        found = read_records(experiment_dir)
    except (OSError, ValueError):
        return []
    runs = []
    for i, record in enumerate(r for r in found if isinstance(r.get("started"), (int, float))):
        words = shlex.split(record.get("command") or "")
        runs.append(
            (float(record["started"]), "launch" if i == 0 else "--resume" if "--resume" in words else "extension")
        )
    return runs


def changed_files(previous: dict, current: dict) -> list[str]:
    """Files whose code differs between two records of the same repository: those the commits'
    diff names (`current["code"]["since_previous"]`, filled by the writer) and those whose
    uncommitted diff (`diff_files`: path -> hash of its hunk) or untracked state changed."""
    before, now = previous.get("code") or {}, current.get("code") or {}
    files = set(now.get("since_previous") or [])
    old, new = before.get("diff_files") or {}, now.get("diff_files") or {}
    files |= {f for f in old.keys() | new.keys() if old.get(f) != new.get(f)}
    files |= set(before.get("untracked") or []) ^ set(now.get("untracked") or [])
    return sorted(files)


def releases(experiment_dir: str) -> list[dict | None]:
    """raysweep's `{"version", "commit"}` of each run of the sweep, oldest first (`trainables.experiment.release`);
    None for a run by a release before 0.8.0, which did not record it; [] without records or when unreadable."""
    try:
        return [record.get("raysweep") for record in read_records(experiment_dir)]
    except (OSError, ValueError):
        return []


def run_releases(experiment_dir: str) -> list[tuple[float, str | None]]:
    """(Unix seconds each run of the sweep started, the raysweep version that ran it or None before 0.8.0), oldest
    first; [] without records or when they cannot be read."""
    try:
        found = read_records(experiment_dir)
    except (OSError, ValueError):
        return []
    return [
        (float(r["started"]), (r.get("raysweep") or {}).get("version"))
        for r in found
        if isinstance(r.get("started"), (int, float))
    ]


def describe(record: dict, patch: bool = True) -> str:
    """One record as text: when, the command, the raysweep release that ran it, the code (repo, commit, branch,
    changed and untracked files, then the patch itself when `patch`), the versions, and the nodes with their GPUs."""
    code, versions = record.get("code") or {}, record.get("versions") or {}
    lines = [
        f"run {record.get('file', '')}: started {record.get('started_utc', '?')} UTC",
        f"  command: {record['command']}",
    ]
    lines.append(f"  cwd: {record.get('cwd', '?')}")
    lines.append(f"  ran by: {label(record.get('raysweep'))}")
    if code.get("commit"):
        dirty = code.get("diff_files") or {}
        lines.append(
            f"  code: {code['repo']} commit {code['commit']} (branch {code.get('branch') or 'detached'}), "
            + (
                f"uncommitted changes in {', '.join(sorted(dirty))} ({code['patch']})"
                if dirty
                else "no uncommitted changes"
            )
        )
        if code.get("untracked"):
            more = f" and {code['untracked_more']} more" if code.get("untracked_more") else ""
            lines.append(f"  untracked files: {', '.join(code['untracked'])}{more}")
    else:
        lines.append(f"  code: {code.get('folder', '?')} ({code.get('why', 'not a git repository')})")
    named = ", ".join(f"{k} {versions.get(k) or 'none'}" for k in ("python", "torch", "ray", "cuda", "driver"))
    lines.append(f"  versions: {named}; {len(record.get('packages') or {})} packages installed")
    for node in record.get("nodes") or []:
        gpus = ", ".join(f"{g['name']} {g['memory_gib']:.0f} GiB" for g in node.get("gpus") or [])
        lines.append(
            f"  node {node['host']}: {node.get('cpus', 0):g} CPUs, {node.get('gpu_count', 0):g} GPUs"
            + (f" ({gpus})" if gpus else "")
        )
    if patch and record.get("patch_text"):
        lines += ["  --- git diff HEAD ---", record["patch_text"].rstrip("\n")]
    return "\n".join(lines)


def format_provenance(experiment_dir: str) -> str:
    """Every run's record of an experiment, oldest first, each with its patch, and a line per run
    whose code changed since the run before it.

    Raises:
        FileNotFoundError: the experiment has no provenance records (it ran before they existed).
    """
    records = read_records(experiment_dir)
    if not records:
        raise FileNotFoundError(f"{experiment_dir} has no {FOLDER}/run-*.json records")
    blocks = []
    for previous, record in zip([None] + records, records):
        blocks.append(describe(record))
        if previous is not None and (files := changed_files(previous, record)):
            blocks.append(f"  code changed since the previous run: {', '.join(files)}")
    return "\n".join(blocks) + "\n"


def print_provenance(experiments: list[str]) -> int:
    """`python -m analysis EXP... --provenance`: print each experiment's records; exit code 0, or 2
    (one `error:` line) when one has none or cannot be read."""
    import sys

    for experiment in experiments:
        try:
            print(format_provenance(experiment), end="")
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


def writeup_lines(experiment_dir: str) -> list[str]:
    """The write-up's "Provenance" section (markdown lines): per run, its command, commit and
    uncommitted files, versions and nodes; [] when the experiment has no records."""
    try:
        records = read_records(experiment_dir)
    except (OSError, ValueError):
        return []
    if not records:
        return []
    lines = ["## Provenance", "", f"Recorded at each run in `{FOLDER}/` (`python -m analysis EXP --provenance`).", ""]
    for record in records:
        lines += ["```text", describe(record, patch=False), "```", ""]
    return lines

"""A full disk under the storage folder ends the sweep with one line, not Tune's traceback.

When the storage folder fills up, trials fail writing their checkpoints (`OSError: [Errno 28] No space left
on device`) and Tune cannot write their error records either: `Tuner.fit()` then raises Ray's `EOFError`
from `ray/tune/experiment/trial.py get_pickled_error` (an empty `error.pkl`), or an `OSError` ENOSPC.
`stop_line` tells such an end at the driver's `fit()` boundary (`sweep_end.fit`): the cause is ENOSPC, or the
storage folder has (almost) no free space left (`shutil.disk_usage`). The line names the storage folder,
what could not be written and the command that continues the sweep once space is freed (with
`--retry-errored`: the trials the full disk failed run again from their checkpoints; finished ones never do).
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import sys

from analysis.reading.driver_record import continue_advice
from trainables.experiment.outcome import DISK_FULL
from trainables.experiment.redaction import redacted_argv

FULL_BELOW_BYTES = 1 << 20  # a local storage folder with less free than this is full


def _causes(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def free_bytes(folder: str) -> int | None:
    """Bytes free for this user under a local folder (its nearest existing parent); None for a URI."""
    if "://" in str(folder):
        return None
    path = os.path.abspath(folder)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def stop_line(
    errors: list[BaseException], storage_path: str, experiment_dir: str, counts: dict, resumed: bool, failed=()
) -> str | None:
    """The one line for a `fit()` that ended on a full disk, else None (not a full disk).

    Args:
        errors: what `Tuner.fit()` raised (`EOFError`, `OSError`), or its trials' errors.
        storage_path: the sweep's `--storage-path`; experiment_dir: `<storage-path>/<name>`.
        counts: its trials by outcome (`sweep_end.Ending.counts`), for the continue command.
        resumed: this run was a `--resume`.
        failed: the folders of the trials whose errors `errors` are.
    """
    causes = [cause for error in errors for cause in _causes(error)]
    enospc = [e for e in causes if isinstance(e, OSError) and e.errno == errno.ENOSPC or "[Errno 28]" in str(e)]
    free = free_bytes(storage_path)
    if not errors or not enospc and (free is None or free >= FULL_BELOW_BYTES):
        return None
    names = [os.path.basename(str(f).rstrip("/")) for f in failed]
    empty = [p for p in glob.glob(os.path.join(experiment_dir, "*", "error.pkl")) if os.path.getsize(p) == 0]
    what = next((e.filename for e in enospc if getattr(e, "filename", None)), None) or (
        f"the files of trial(s) {', '.join(names)}" if names else None
    )
    if what is None:
        what = f"Tune's error records ({', '.join(sorted(os.path.relpath(p, experiment_dir) for p in empty))})"
        what = what if empty else f"its files ({type(errors[0]).__name__}: {errors[0]})"
    launch = {"argv": redacted_argv(sys.argv), "python": sys.executable}
    advice = continue_advice(launch, counts, DISK_FULL, resumed)
    room = f"{free / 2**20:.1f} MiB free" if free is not None else "no space left"
    return (
        f"the disk of the storage folder {storage_path} is full ({room}): could not write {what}; "
        f"free space there, then {advice or 'run the same command again'}"
    )

"""The program of a command sweep, resolved once: at launch, for the launch and every resume.

Why: a command names its program by a bare name (`python train.py`, `torchrun ...`), which each shell
resolves on its own PATH. A sweep launched with a venv active and continued from a new shell (a login,
`tmux`, a SLURM requeue) would otherwise run the new shell's `python`: the system one, without torch,
and every trial fails at start. So the name is looked up on the launching shell's PATH when the sweep
starts (`shutil.which`, the symlink kept: a venv's `bin/python` is a venv only by its path), recorded in
`raysweep.json` (`settings["program"]`: {"name", "path"}), and every trial of the launch and of each
`--resume` runs that file; a resume whose shell finds another one says so in one line. A program given by
its path, or chosen per trial by a placeholder, is run as it is.
"""

from __future__ import annotations

import os
import shutil

from sweeps.engine.flags import UsageError
from trainables.command.parse import placeholders
from trainables.experiment import records


def resolve_program(template: list[str], experiment_dir: str, resume: bool) -> tuple[list[str], dict | None]:
    """The command the trials run, its program resolved (see the module docstring), and its record.

    Args:
        template: the command after `--`, as typed.
        experiment_dir: `RunOptions.experiment_dir`: a resumed sweep's `raysweep.json` holds the launch's.
        resume: `--resume`: the launch's program, whatever this shell's PATH finds.
    Returns:
        (the template with its program's absolute path in front, {"name": as typed, "path": that path} for
        `settings["program"]`); (template, None) for a program given by its path or a placeholder.
    Raises:
        UsageError: a resumed sweep's program that no longer exists (its venv removed), or a bare name
            no PATH finds.
    """
    program = template[0] if template else ""
    if not program or os.sep in program or placeholders([program]):
        return template, None
    found = shutil.which(program)
    found = os.path.abspath(found) if found else None
    launched = _launch_program(experiment_dir) if resume else None
    if launched is not None and launched.get("name") == program and launched.get("path"):
        path = launched["path"]
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(
                f"--resume: the command's {program} at launch, {path}, is gone; restore it (its venv), or start "
                "the sweep again under a new --name"
            )
        if found != path:
            where = f"this shell's PATH finds {found}" if found else "this shell's PATH finds none"
            print(f"the command's {program} is {path}, as at launch ({where})", flush=True)
        return [path, *template[1:]], {"name": program, "path": path}
    if found is None:
        raise UsageError(f"command: program {program!r} is not found on PATH; give its path or an installed command")
    return [found, *template[1:]], {"name": program, "path": found}


def _launch_program(experiment_dir: str) -> dict | None:
    """`settings["program"]` of the sweep's `raysweep.json`, None when it has none (an older sweep's)."""
    info = records.read_settings(experiment_dir) or {}
    program = (info.get("settings") or {}).get("program")
    return program if isinstance(program, dict) else None

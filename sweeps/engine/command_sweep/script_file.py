"""The script file a command runs through its interpreter, checked before anything runs or is written:
`python nosuch.py` or `bash run.sh` with no such file is refused up front, as a program missing from PATH
is (`command_template.check_template`), instead of after Ray started and every trial failed on it."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from sweeps.engine.flags import UsageError

PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")  # python, python3, python3.11
SHELLS = ("bash", "sh", "zsh", "dash", "ksh")  # each runs `SHELL FILE`, searching PATH when FILE is not here
# options whose value is the next word (the script comes after it)
VALUE_OPTIONS = {"python": ("-W", "-X", "--check-hash-based-pycs"), "shell": ("-o", "+o", "-O", "+O", "--rcfile")}


def script_of(template: list[str]) -> tuple[str, str] | None:
    """(`python` or `shell`, the script's path as written) of a command that runs a script file through
    Python or a shell, None for any other command, for `-c`/`-m`/stdin, or a path with a placeholder."""
    program = os.path.basename(template[0]) if template else ""
    kind = "python" if PYTHON.match(program) else "shell" if program in SHELLS else None
    words = iter(template[1:])
    for word in words:
        if kind is None or "{" in word or word == "-":
            return None
        if word in VALUE_OPTIONS[kind]:
            next(words, None)  # its value
        elif word.startswith("--") or (kind == "python" and word.startswith(("-W", "-X"))):
            continue  # a long option, or a value given with it
        elif word.startswith(("-", "+")):
            if set(word[1:]) & ({"c", "m"} if kind == "python" else {"c"}):
                return None  # code or a module, not a file: `-c CODE`, `-m pkg`, `-ec CODE`
        else:
            return kind, word
    return None


def check_script(template: list[str], folder: str | Path) -> None:
    """Refuse a command whose script file does not exist, as the command would see it from `folder` (the
    launch folder; each trial runs it from its copy of that folder, or from the folder itself with
    --in-place). A shell's script may also be found on PATH, as the shell looks for it there.

    Raises:
        UsageError: naming the script, the folder it was looked for in and what to do.
    """
    found = script_of(template)
    if found is None:
        return
    kind, script = found
    path = Path(folder, script)
    if path.is_file() or (kind == "shell" and os.sep not in script and shutil.which(script, mode=os.F_OK)):
        return
    where = "" if os.path.isabs(script) else f" in {folder}"
    raise UsageError(
        f"command: script {script!r} does not exist{where}"
        + (" (it is a folder)" if path.is_dir() else "")
        + "; each trial runs the command from a copy of the launch folder: launch from the folder the "
        "path is relative to, or give the script's path"
    )

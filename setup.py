"""Bakes raysweep's version and commit into the wheel (`trainables/experiment/_release.json`), read by
`trainables.experiment.release`; everything else is in pyproject.toml."""

import json
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithRelease(build_py):
    """`build_py`, then `_release.json`: `{"version", "commit"}` (`git describe`; "unknown" outside git)."""

    def run(self):
        super().run()
        try:
            out = subprocess.run(["git", "describe", "--tags", "--always", "--dirty"], capture_output=True, text=True)
            commit = out.stdout.strip() if out.returncode == 0 else ""
        except OSError:
            commit = ""
        target = Path(self.build_lib, "trainables", "experiment", "_release.json")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"version": self.distribution.get_version(), "commit": commit or "unknown"}))


setup(cmdclass={"build_py": BuildWithRelease})

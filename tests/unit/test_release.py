"""raysweep's version and commit travel with the results (issue 56.2): `trainables.experiment.release`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from trainables.experiment import release

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_reads_pyprojects_version_and_git_describe():
    found = release.release()
    assert found["version"] == re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert found["version"] != "0.1.0"  # the version follows the project (docs/research-record.md)
    assert (
        found["commit"] != "unknown"
        and found["commit"].split("-")[0]
        in subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%H %h"], capture_output=True, text=True
        ).stdout
    )


def test_a_wheel_reads_the_release_baked_at_build(tmp_path, monkeypatch):
    baked = tmp_path / "_release.json"
    baked.write_text(json.dumps({"version": "0.8.0", "commit": "v0.8.0-2-gabc1234"}))
    monkeypatch.setattr(release, "BAKED", baked)
    release.release.cache_clear()
    try:
        assert release.release() == {"version": "0.8.0", "commit": "v0.8.0-2-gabc1234"}
    finally:
        release.release.cache_clear()


def test_a_resume_by_another_release_or_python_says_so_in_one_line():
    now = release.release()
    assert release.resume_change({"raysweep": now, "python": sys.executable}, sys.executable) is None
    line = release.resume_change({"python": "/old/venv/bin/python"}, sys.executable)
    assert line.startswith("--resume: raysweep before 0.8.0 (not recorded) launched it, raysweep " + now["version"])
    assert f"python was /old/venv/bin/python, is {sys.executable}" in line and "\n" not in line
    other = {"version": "0.8.0", "commit": "deadbee"}
    assert "raysweep 0.8.0 (deadbee) launched it" in release.resume_change({"raysweep": other}, sys.executable)


def test_the_cli_help_runs_no_git(tmp_path):
    """`--help` stays fast: the release is read only when a sweep records or shows it."""
    fake_git = tmp_path / "git"
    fake_git.write_text(f"#!/bin/sh\ntouch {tmp_path / 'called'}\nexit 1\n")
    fake_git.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    for command in (["-c", "from sweeps.cli import main; main(['--help'])"], ["sweeps/noise_grid.py", "--help"]):
        done = subprocess.run(
            [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert "usage:" in done.stdout
    assert not (tmp_path / "called").exists()

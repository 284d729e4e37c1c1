"""Every command in README.md and docs/*.md still parses and the quick ones run; every relative link resolves.

The commands are read from the fenced code blocks: `bash`/`sh`/`shell` blocks hold commands, line by
line (a trailing backslash continues a line, `#` starts a comment); an untagged or `console` block holds
output, where only lines with a `$ ` prompt are commands. Within a line, a command of ours starts at
`python sweeps/X.py`, `python -m analysis` (any `python`, `.venv/bin/python`) or `make TARGET`, wherever
it stands (after `nohup`, `VAR=value`, `ray job submit ... --`), and ends at a shell operator.

Each of ours is parsed by the script's own parser, without Ray: `parse_args(argv)` of the entry
scripts (which also checks the values: a renamed flag or a refused value fails here), the parser
`analysis/__main__.py` builds, the Makefile's targets and variables. Those that run in seconds
(`--dry-run`, `--check`) are run as written; the smoke grid and the analysis of its output run in a
slow test. Every other command is in `NOT_RUN` with the reason (a GPU, a cluster, s3, minutes of
training), so a command added to the docs must be placed in one list or the other.
"""

from __future__ import annotations

import pytest

from tests.helpers.docs_commands import RUN_SLOW, SMOKE, run_documented


@pytest.mark.slow
@pytest.mark.parametrize("text", sorted(RUN_SLOW))
def test_check_command_runs_as_written(text, scratch):
    proc = run_documented(text, scratch, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert RUN_SLOW[text] in proc.stdout.splitlines(), proc.stdout[-2000:]


@pytest.mark.slow
def test_quick_start_smoke_grid_then_its_analysis(smoke_grid):
    """The README's smoke grid in a scratch folder (./runs is its storage: conftest's `smoke_grid`, one run
    shared with tests/sweeps/test_sweeps.py), then the analysis commands on it."""
    sweep, tmp_path = smoke_grid.proc, smoke_grid.folder
    assert smoke_grid.command == SMOKE[0]  # the run is the documented command
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    assert "12 trials in the grid" in sweep.stdout
    report = run_documented(SMOKE[1], tmp_path, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    assert (tmp_path / "runs" / "noise_grid" / "report" / "report.md").is_file()
    assert "report: " in report.stdout.splitlines()[-1]
    status = run_documented(SMOKE[2], tmp_path, timeout=120)
    assert status.returncode == 0, status.stderr[-2000:]
    assert "12 trials: 0 running, 0 pending, 12 finished" in status.stdout, status.stdout

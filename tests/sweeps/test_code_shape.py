"""Code shape (developers' guide): no file over 400 lines; no function over 100 lines (except `train_epochs`).

About 60 lines a function is a guideline, not a cap: a function that reads top to bottom beats two halves
made to pass a line count. The check here is a backstop far above it, for the function that grew without
anyone reading it again."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_fit_path_and_each_script_shows_its_own_tuner():
    """Every entry script runs through `Sweep.fit` (resume included) and builds its own `Tuner(...)`."""
    for script in ("noise_grid", "lr_search", "pbt", "run_command"):
        source = (ROOT / "sweeps" / f"{script}.py").read_text()
        assert source.count("Tuner(") == 1 and ".restore(" not in source and "options.resume" not in source, script

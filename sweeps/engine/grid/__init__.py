"""The grid: its cells, trial names and folder-safe short forms (`cells.py`, light: the command line uses
them before Ray loads), and the one grid planner and run of `noise_grid.py` and `run_command.py`
(`plan.py`, which imports Ray Tune: import it by its path, `sweeps.engine.grid.plan`, where it is used)."""

from sweeps.engine.grid.cells import grid_cells, grid_size, short_forms, trial_namer

__all__ = ["grid_cells", "grid_size", "short_forms", "trial_namer"]

"""analysis/ on experiments written by tests/helpers/analysis_fixtures.py and on hand-made DataFrames.

No Ray here: see test_analysis_tune.py for experiments made by real Tune runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.analysis_fixtures import paper_grid

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# Notebook
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    paper_grid(tmp_path / "runs", "noise_grid", losses=("ce",), seeds=(0, 1), rates=(0.0, 0.4))  # latest under ./runs
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    notebook = nbformat.read(REPO / "notebooks" / "noise_grid_analysis.ipynb", as_version=4)
    assert "parameters" in notebook.cells[0].metadata.get("tags", [])
    assert "EXPERIMENT = None" in notebook.cells[0].source
    client = nbclient.NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any cell error
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert f"{tmp_path / 'runs' / 'noise_grid'}: 8 trials, ranked by val/acc (max)" in text
    assert any("| noise_type | noise_rate |" in o.get("data", {}).get("text/markdown", "") for o in outputs)
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 5  # paper curves, learning curves, metric vs noise rate, heatmap, timeline
    assert any(
        o.get("data", {}).get("text/markdown", "").startswith("test/acc (%): test/acc at the epoch of best val/acc")
        for o in outputs
    )  # the paper table, its rule in the caption
    assert "failed trials (left out of the cells): 0 errored, 0 diverged" in text

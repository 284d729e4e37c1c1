"""Every notebook in notebooks/ runs unedited on each kind of experiment (issue 56 item 4): a noise grid, a command
sweep, a search, a PBT run and a plain Ray Tune experiment (tests/helpers/experiment_kinds.py, written without Ray).

The experiment is named by RAYSWEEP_EXPERIMENT, as a user (or `jupyter nbconvert --execute`) would; one kernel per
notebook serves all five kinds (`%reset -f` between them), so each run after the first pays no kernel start or imports.
"""

from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path

import pytest

from tests.helpers.experiment_kinds import KIND_METRICS, five_kinds

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.xdist_group("notebooks")  # one worker runs them all: one kernel per notebook, one build

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = ("noise_grid_analysis", "search_analysis")
SELECT_LAST = {"grid", "command"}  # kinds run with SELECT = "last" injected after the parameters cell (papermill-style)


@pytest.fixture(scope="module")
def experiments(tmp_path_factory) -> dict[str, Path]:
    return five_kinds(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """notebook name -> a NotebookClient whose kernel (started on first use) stays up for the module."""
    clients: dict[str, nbclient.NotebookClient] = {}
    cwd = tmp_path_factory.mktemp("cwd")  # no ./runs here: only RAYSWEEP_EXPERIMENT names the experiment
    with contextlib.ExitStack() as stack:

        def client(name: str) -> nbclient.NotebookClient:
            if name not in clients:
                notebook = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
                clients[name] = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3")
                stack.enter_context(clients[name].setup_kernel(cwd=str(cwd), env=_kernel_env()))
            return clients[name]

        yield client


def _kernel_env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "agg"}


def run_notebook(kernels, name: str, experiment: Path, kind: str, capsys) -> tuple[list, str | None]:
    """Run notebooks/<name>.ipynb as it is, in its module kernel, on `experiment` (named by RAYSWEEP_EXPERIMENT;
    SELECT = "last" injected for the kinds in SELECT_LAST); prints the seconds it took. Returns the outputs of its
    code cells and the SELECT injected. Raises CellExecutionError on any cell error; fails on any warning."""
    client = kernels(name)
    notebook = copy.deepcopy(nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4))
    assert "parameters" in notebook.cells[0].metadata.get("tags", [])
    assert 'EXPERIMENT = os.environ.get("RAYSWEEP_EXPERIMENT")' in notebook.cells[0].source
    setup = nbformat.v4.new_code_cell(f'%reset -f\nimport os\nos.environ["RAYSWEEP_EXPERIMENT"] = {str(experiment)!r}')
    select = "last" if kind in SELECT_LAST else None
    injected = [nbformat.v4.new_code_cell(f"SELECT = {select!r}")] if select else []
    notebook.cells = [setup, notebook.cells[0], *injected, *notebook.cells[1:]]
    client.nb = notebook
    start = time.perf_counter()
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            client.execute_cell(cell, index)
    with capsys.disabled():
        print(f"\n{name} on {kind}: {time.perf_counter() - start:.1f} s")
    outputs = [o for cell in notebook.cells[1:] if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"]  # no warning
    return outputs, select


def _text(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stdout")


def _markdown(outputs) -> list[str]:
    return [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]


def _images(outputs) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KIND_METRICS))
def test_the_grid_notebook_runs_on_every_kind(kind, experiments, kernels, capsys):
    metric, mode = KIND_METRICS[kind]
    outputs, select = run_notebook(kernels, "noise_grid_analysis", experiments[kind], kind, capsys)
    text, markdown = _text(outputs), _markdown(outputs)
    rule = f"{metric} at the last epoch" if select else f"best {metric} over epochs"
    assert f"{experiments[kind]}: " in text and f"ranked by {metric} ({mode}); each trial's value: {rule}" in text
    assert any(m.startswith(f"**{metric}** ({mode}; {rule}), mean over seeds") for m in markdown)  # best runs
    if kind == "plain_tune":
        assert "the experiment recorded no metric: ranked by its first reported one, mean_accuracy (max" in text
    if kind == "grid":  # every picture, each trial's value the last epoch's (SELECT)
        assert _images(outputs) == 5  # paper curves, learning curves, metric vs noise rate, heatmap, timeline
        assert any("| noise_type | noise_rate |" in m for m in markdown)
        assert any(m.startswith("test/acc (%): test/acc at the last epoch") for m in markdown)  # the paper table
        assert "failed trials (left out of the cells): 0 errored, 0 diverged" in text
    elif kind in ("command", "plain_tune"):  # no noise axes: said, not drawn
        assert _images(outputs) == 2  # learning curves, timeline
        for name in ("noise_rate_curves", "metric_vs_noise_rate"):
            assert f"{name} left out: no noise_rate in the trials' configs: nothing to draw against" in text
        assert "heatmap left out: fewer than two config keys vary" in text
    else:
        assert _images(outputs) == 2
        assert "metric_vs_noise_rate left out: one noise rate (0.5): nothing to draw against" in text
        assert "heatmap left out: " + ("PBT changes" if kind == "pbt" else "a search samples") in text


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KIND_METRICS))
def test_the_search_notebook_runs_on_every_kind(kind, experiments, kernels, capsys):
    metric, mode = KIND_METRICS[kind]
    outputs, select = run_notebook(kernels, "search_analysis", experiments[kind], kind, capsys)
    text, markdown = _text(outputs), _markdown(outputs)
    assert f"ranked by {metric} ({mode})" in text
    table = next(m for m in markdown if "| rank | trial |" in m)
    assert ("at the last epoch" if select else f"best {metric} over epochs") in table  # the caption: SELECT's rule
    if kind == "search":
        assert "a search (OptunaSearch, AsyncHyperBandScheduler)" in text
        assert "| rank | trial | lr | weight_decay |" in table
        assert _images(outputs) == 6  # history, history over time, slice, importances, parallel coordinates, curves
    elif kind == "pbt":
        assert "a PBT run (PopulationBasedTraining)" in text
        assert _images(outputs) == 2  # the PBT schedule, curves
    else:
        assert "not a search or PBT run" in text
        params = {"grid": "noise_rate | noise_type | seed", "command": "lr | seed", "plain_tune": "lr"}[kind]
        assert f"| rank | trial | {params} | epochs |" in table  # every trial ranked, its varying config keys
        assert _images(outputs) == 1  # curves

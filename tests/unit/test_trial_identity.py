"""A trial's identity survives releases (issue 56): the config hashes of earlier releases' default cells stay.

The hashes below were computed by each release's own `config_hash` on the cells of its `noise_grid.py`
(default flags, and `--smoke-test`), from this repository's history (`git worktree add ... c556436`).
A hash that must change needs its reason recorded in `CHANGED` (cell -> why); then the finished trials of
that release rerun, and the release notes say so.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from sweeps.engine.run import resume
from trainables.config import TrainConfig, TrialIdentity, config_hash, identity

# release 0.1.0, commit c556436 (2026-11-26): (noise_type, noise_rate, seed, epochs or None) -> config_hash
RELEASE_0_1_0 = {
    ("sym", 0.125, 0, None): "5541953fd2e340bf",
    ("sym", 0.25, 0, None): "abd0e73673ead9a4",
    ("sym", 0.375, 0, None): "f28d161e22230991",
    ("sym", 0.5, 0, None): "5204927893d49597",
    ("sym", 0.625, 0, None): "3da06c41c286c940",
    ("sym", 0.75, 0, None): "6f8c1aee6167599e",
    ("asym", 0.125, 0, None): "250fa73e46a1b3c2",
    ("asym", 0.25, 0, None): "faca004c7b891565",
    ("asym", 0.375, 0, None): "9ce016dcaa8ddbb6",
    ("asym", 0.5, 0, None): "470ee555e4306970",
    ("asym", 0.625, 0, None): "43fc86e72a8a0c5a",
    ("asym", 0.75, 0, None): "49bb1e93490cb26d",
    ("sym", 0.125, 0, 2): "bb57938e9580afeb",
    ("sym", 0.25, 0, 2): "5ac7510f65f461e1",
    ("sym", 0.375, 0, 2): "bc29f2cb4ec37a32",
    ("sym", 0.5, 0, 2): "55f99df7cc65af12",
    ("sym", 0.625, 0, 2): "89577128d7970bde",
    ("sym", 0.75, 0, 2): "5787c41290916b78",
    ("asym", 0.125, 0, 2): "cfdbe2e4ea34c4cc",
    ("asym", 0.25, 0, 2): "cfd6f3073a2cb5db",
    ("asym", 0.375, 0, 2): "bd1a5caa3e2349ce",
    ("asym", 0.5, 0, 2): "694fe28da619e952",
    ("asym", 0.625, 0, 2): "e7ad36d0c229ab80",
    ("asym", 0.75, 0, 2): "21c983c6cc8c9011",
}
CHANGED: dict[tuple, str] = {}  # cell -> the reason its hash changed on purpose


def _cell(key: tuple) -> dict:
    noise_type, noise_rate, seed, epochs = key
    cell = {"noise_type": noise_type, "noise_rate": noise_rate, "seed": seed}
    return cell if epochs is None else {**cell, "epochs": epochs}


@pytest.mark.parametrize("key", sorted(RELEASE_0_1_0, key=repr))
def test_default_cells_of_release_0_1_0_keep_their_hash_on_a_cpu(key):
    if key in CHANGED:
        pytest.skip(CHANGED[key])
    assert config_hash(_cell(key)) == RELEASE_0_1_0[key]  # today's default amp=auto on a CPU is 0.1.0's off
    assert config_hash({**_cell(key), "amp": "off"}, on_gpu=True) == RELEASE_0_1_0[key]  # --amp off on a GPU


def test_amp_auto_on_a_gpu_is_its_own_identity():
    cell = _cell(("sym", 0.125, 0, 2))
    assert config_hash(cell, on_gpu=True) != config_hash(cell)  # bf16 autocast on a bf16 GPU: not off


def test_a_field_new_since_0_1_0_is_left_out_at_its_default_only(monkeypatch):
    from trainables import config

    monkeypatch.setattr(config, "FIRST_RELEASE_FIELDS", config.FIRST_RELEASE_FIELDS - {"grad_clip"})
    cell = _cell(("sym", 0.25, 0, None))
    assert "grad_clip" not in identity(cell)
    assert identity({**cell, "grad_clip": 1.0})["grad_clip"] == 1.0
    assert TrainConfig.grad_clip != 1.0


def _finished_trial(folder, config: dict, on_gpu=None) -> None:
    """A trial folder as the built-in trainable leaves it finished (`trial_config.json`, `result.json`)."""
    folder.mkdir(parents=True)
    full = {**vars(TrainConfig(**config))}
    saved = {"config_hash": "recorded", "config": full, **({} if on_gpu is None else {"on_gpu": on_gpu})}
    (folder / "trial_config.json").write_text(json.dumps(saved))
    (folder / "params.json").write_text(json.dumps(config))
    row = {"epoch": full["epochs"], "val/acc": 0.5, "training_iteration": full["epochs"], "trial_id": folder.name}
    (folder / "result.json").write_text(json.dumps(row) + "\n")


def test_a_0_1_0_trial_is_reused_by_todays_default_cell_and_a_changed_field_is_said(tmp_path):
    old = {"noise_type": "sym", "noise_rate": 0.2, "seed": 0, "epochs": 1, "amp": "off"}  # 0.1.0's default amp
    _finished_trial(tmp_path / "exp" / "a", old)
    cells = [{k: v for k, v in old.items() if k != "amp"}, {**old, "noise_rate": 0.4}]
    out = io.StringIO()
    with redirect_stdout(out):
        todo, reused = resume.plan_cells(cells, tmp_path / "exp", skip_existing=True)
    assert [c["noise_rate"] for c in todo] == [0.4] and len(reused) == 1
    _finished_trial(tmp_path / "exp" / "b", {**old, "noise_rate": 0.8})  # a cell this grid does not hold
    with redirect_stdout(out):
        resume.plan_cells(cells, tmp_path / "exp", skip_existing=True)
    assert "differ" not in out.getvalue()  # noise_rate is swept: 0.4 is a new cell, not 0.8 changed

    with redirect_stdout(out):  # the same cell with lr given anew: one line names the field, then and now
        todo, reused = resume.plan_cells([{**cells[0], "lr": 0.1}], tmp_path / "exp", skip_existing=True)
    assert len(todo) == 1 and not reused
    assert "only in lr (then 0.05, now 0.1)" in out.getvalue()


def test_an_amp_auto_trial_that_ran_on_a_gpu_is_not_a_cpu_cell(tmp_path):
    cell = {"noise_type": "sym", "noise_rate": 0.2, "seed": 0, "epochs": 1}
    _finished_trial(tmp_path / "exp" / "a", cell, on_gpu=True)
    with redirect_stdout(io.StringIO()):
        assert resume.plan_cells([cell], tmp_path / "exp", True, hash_fn=TrialIdentity(False))[1] == {}
        assert len(resume.plan_cells([cell], tmp_path / "exp", True, hash_fn=TrialIdentity(True))[1]) == 1


def test_the_planner_knows_before_ray_whether_trials_train_on_cuda(monkeypatch):
    from sweeps.engine.cluster import local_gpus

    monkeypatch.delenv(local_gpus.LOGICAL_GPUS_ENV, raising=False)
    assert not local_gpus.trials_use_cuda(0, None) and local_gpus.trials_use_cuda(0.25, None)
    monkeypatch.setattr(local_gpus, "light_readings", lambda: [{"index": 0}])
    assert local_gpus.trials_use_cuda(None, None) and not local_gpus.trials_use_cuda(None, "ray://head:10001")
    monkeypatch.setattr(local_gpus, "light_readings", lambda: [])
    assert not local_gpus.trials_use_cuda(None, None)
    monkeypatch.setenv(local_gpus.LOGICAL_GPUS_ENV, "2")  # logical GPUs carry no CUDA
    assert not local_gpus.trials_use_cuda(1, None)

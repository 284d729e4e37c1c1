"""A restored trial whose recorded checkpoint is gone resumes from the newest one left
(sweeps/engine/run/checkpoint_repair.py).

The state is made exactly, not by racing a kill against Tune's snapshot: a trial errors after four
checkpoints, so the experiment snapshot names its latest (checkpoint_000003); that folder is then
deleted, as `num_to_keep` does when the driver dies between a checkpoint and the next snapshot.
"""

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from ray import tune
from ray.tune import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, Tuner

from sweeps.engine.run.checkpoint_repair import RestoreFromSurvivingCheckpoint, reported_checkpoints

ITERATIONS = 6


def make_trainable():
    """A trainable reporting iterations 1..ITERATIONS with a checkpoint each, failing after the 4th while
    `fail_flag` exists. Defined in a function so that cloudpickle ships it by value: Ray workers cannot
    import tests/."""

    def counting_trainable(config):
        start = 0
        if checkpoint := tune.get_checkpoint():
            with checkpoint.as_directory() as folder:
                start = json.loads((Path(folder) / "state.json").read_text())["count"]
        for done in range(start + 1, ITERATIONS + 1):
            with tempfile.TemporaryDirectory() as folder:
                (Path(folder) / "state.json").write_text(json.dumps({"count": done}))
                tune.report({"count": done, "resumed_from": start}, checkpoint=Checkpoint.from_directory(folder))
            if done == 4 and Path(config["fail_flag"]).exists():
                raise RuntimeError("injected failure after the 4th checkpoint")

    return tune.with_resources(counting_trainable, {"cpu": 1})


def run_rows(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line]


@pytest.mark.parametrize("num_to_keep, gone", [(None, "deleted"), (2, "emptied")])
def test_a_trial_whose_snapshot_checkpoint_is_gone_resumes_from_the_newest_left(
    ray_gpus, tmp_path, capsys, num_to_keep, gone
):
    """`emptied`: the deletion was cut short, the folder is left without its files (what a driver killed
    while `num_to_keep` deleted leaves; on S3 the folder's marker object): it counts as gone."""
    flag = tmp_path / "fail"
    flag.touch()
    run_config = RunConfig(
        name="exp",
        storage_path=str(tmp_path / "runs"),
        verbose=0,
        checkpoint_config=CheckpointConfig(num_to_keep=num_to_keep),
        failure_config=FailureConfig(max_failures=0),
        callbacks=[RestoreFromSurvivingCheckpoint()],
    )
    first = Tuner(make_trainable(), param_space={"fail_flag": str(flag)}, run_config=run_config).fit()
    assert first.errors, "the injected failure should have ended the trial"
    (trial_dir,) = [p for p in (tmp_path / "runs" / "exp").iterdir() if p.is_dir() and (p / "result.json").exists()]
    assert (trial_dir / "checkpoint_000003").is_dir()
    assert {r["checkpoint_dir_name"] for r in run_rows(trial_dir)} >= {"checkpoint_000002", "checkpoint_000003"}
    shutil.rmtree(trial_dir / "checkpoint_000003")  # the checkpoint the snapshot names is gone
    if gone == "emptied":
        (trial_dir / "checkpoint_000003").mkdir()
    flag.unlink()

    capsys.readouterr()
    restored = Tuner.restore(str(tmp_path / "runs" / "exp"), make_trainable(), resume_errored=True).fit()
    out = capsys.readouterr().out
    assert not restored.errors, restored.errors
    assert (
        "its checkpoint checkpoint_000003 was deleted" in out and "resuming from checkpoint_000002 (iteration 3)" in out
    )
    rows = run_rows(trial_dir)
    after = [r for r in rows if r["resumed_from"] == 3]
    assert [r["count"] for r in after] == [4, 5, 6]  # from the surviving checkpoint, not from scratch
    assert [r["training_iteration"] for r in after] == [4, 5, 6]  # Tune's count continues from that checkpoint
    # the next checkpoint took the index after the newest left, so it overwrote none of them
    assert after[0]["checkpoint_dir_name"] == "checkpoint_000003"
    assert reported_checkpoints_of(trial_dir)["checkpoint_000005"]["count"] == 6


def reported_checkpoints_of(trial_dir: Path) -> dict:
    import pyarrow.fs as pafs

    return reported_checkpoints(pafs.LocalFileSystem(), str(trial_dir))

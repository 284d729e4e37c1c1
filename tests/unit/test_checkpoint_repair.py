"""A restored trial whose recorded checkpoint is gone resumes from the newest one left
(sweeps/engine/run/checkpoint_repair.py).

The state is made exactly, not by racing a kill against Tune's snapshot: a trial errors after four
checkpoints, so the experiment snapshot names its latest (checkpoint_000003); that folder is then
deleted, as `num_to_keep` does when the driver dies between a checkpoint and the next snapshot.
"""

import json

from sweeps.engine.run.checkpoint_repair import RestoreFromSurvivingCheckpoint, reported_checkpoints


def test_reported_checkpoints_skip_a_torn_last_line_and_rows_without_a_checkpoint(tmp_path):
    import pyarrow.fs as pafs

    (tmp_path / "result.json").write_text(
        json.dumps({"count": 1, "checkpoint_dir_name": "checkpoint_000000"})
        + "\n"
        + json.dumps({"count": 2, "checkpoint_dir_name": None})
        + "\n"
        + '{"count": 3, "checkpoint_dir_na'
    )
    assert reported_checkpoints(pafs.LocalFileSystem(), str(tmp_path)) == {
        "checkpoint_000000": {"count": 1, "checkpoint_dir_name": "checkpoint_000000"}
    }
    assert reported_checkpoints(pafs.LocalFileSystem(), str(tmp_path / "missing")) == {}


def test_a_storage_error_while_checking_is_one_line_and_leaves_the_trial_to_tune(capsys):
    from types import SimpleNamespace

    class Unreachable:
        def get_file_info(self, path):
            raise OSError(
                "When getting information for key 'runs/exp/t/checkpoint_000001': AWS Error NETWORK_CONNECTION"
            )

    trial = SimpleNamespace(
        PENDING="PENDING",
        status="PENDING",
        checkpoint=SimpleNamespace(filesystem=Unreachable(), path="runs/exp/t/checkpoint_000001"),
    )
    callback = RestoreFromSurvivingCheckpoint()
    callback.on_step_begin(0, [trial])
    callback.on_step_begin(1, [trial])  # checked once, at the first step
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "could not check that its checkpoint still exists (OSError: When getting" in out[0]
    assert trial.checkpoint.path == "runs/exp/t/checkpoint_000001"  # left as it was


def test_a_missing_checkpoint_of_another_trial_is_left_to_tune(tmp_path):
    """A PBT member restores from the member it copies: rebuilding from that folder would let this
    trial's bookkeeping delete the other trial's checkpoints, so the trial is left as it is."""
    from types import SimpleNamespace

    import pyarrow.fs as pafs

    from sweeps.engine.run.checkpoint_repair import repair_missing_checkpoint

    donor, member = tmp_path / "pbt_member_0", tmp_path / "pbt_member_1"
    (donor / "checkpoint_000004").mkdir(parents=True)
    (donor / "result.json").write_text(
        json.dumps({"training_iteration": 5, "checkpoint_dir_name": "checkpoint_000004"}) + "\n"
    )
    manager = object()
    trial = SimpleNamespace(
        checkpoint=SimpleNamespace(filesystem=pafs.LocalFileSystem(), path=str(donor / "checkpoint_000002")),
        storage=SimpleNamespace(trial_fs_path=str(member)),
        run_metadata=SimpleNamespace(checkpoint_manager=manager),
    )
    line = repair_missing_checkpoint(trial)
    assert "belongs to another trial and is gone; left to Tune" in line
    assert trial.run_metadata.checkpoint_manager is manager and (donor / "checkpoint_000004").is_dir()

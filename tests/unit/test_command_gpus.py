"""A command trial's GPU, without a GPU: the figures NVML gives of its process tree (a fake NVML), its
placement from its start in the progress line, and a CUDA out-of-memory error in its output (the re-queue)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.fs
import pynvml
import pytest

from tests.helpers.processes import wait_until
from trainables import gpu_oom, gpu_use
from trainables.command import failure
from trainables.experiment import records
from trainables.experiment.outcome import OUT_OF_MEMORY

GIB = 1 << 30


def fake_nvml(monkeypatch, processes: dict[int, list], utilization: dict[int, float]) -> None:
    """NVML with len(utilization) devices: device i lists `processes[i]` (pid, bytes), `utilization[i]` % busy."""
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(utilization))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda uuid: int(uuid.rsplit("-", 1)[1]))
    listing = {i: [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in p] for i, p in processes.items()}
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: listing.get(h, []))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses", lambda h: [])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=utilization[h]))


@pytest.fixture
def process_tree():
    """A shell whose child sleeps: (the shell's pid, the child's pid)."""
    shell = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        import psutil

        wait_until(lambda: psutil.Process(shell.pid).children(), 10, every_s=0.01)
        yield shell.pid, psutil.Process(shell.pid).children()[0].pid
    finally:
        for child in psutil.Process(shell.pid).children():
            child.kill()
        shell.kill()
        shell.wait()


def test_the_process_trees_memory_is_summed_over_its_pids_and_the_device_it_uses(monkeypatch, process_tree):
    shell, child = process_tree
    stranger = 999_999_999  # another job's process on the same device: not counted
    fake_nvml(monkeypatch, {2: [(child, 3 * GIB), (stranger, 9 * GIB)], 0: [(shell, GIB)]}, {0: 10.0, 1: 0.0, 2: 80.0})
    read = gpu_use.process_tree_reader(shell, "2")
    assert read() == gpu_use.TreeReading(memory_bytes=4 * GIB, utilization=45.0)  # the tree is on GPUs 0 and 2

    fake_nvml(monkeypatch, {}, {0: 10.0, 1: 0.0, 2: 80.0})  # CUDA not started yet, or NVML sees other pids
    assert gpu_use.process_tree_reader(shell, "GPU-fake-2")() == gpu_use.TreeReading(None, 80.0)  # its visible GPU
    assert gpu_use.process_tree_reader(shell, "") is None  # a CPU trial reads nothing

    readings = [gpu_use.TreeReading(None, 20.0), gpu_use.TreeReading(GIB, 40.0), gpu_use.TreeReading(3 * GIB, None)]
    assert gpu_use.gpu_metrics(0.25, None, readings) == {
        "gpu/fraction": 0.25,
        "gpu/memory_cap": 0.0,
        "gpu/utilization_mean": 30.0,
        "gpu/peak_memory_bytes": 3 * GIB,
    }


def test_without_nvml_a_command_trial_reads_nothing(monkeypatch):
    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert gpu_use.process_tree_reader(1, "0") is None and gpu_use.utilization_reader("GPU-0") is None


def test_the_trial_records_its_gpu_at_its_start_and_the_progress_line_names_it_before_any_report(tmp_path, monkeypatch):
    from sweeps.engine.run.monitoring import SweepProgress

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    folder = tmp_path / "lr0.1"
    folder.mkdir()
    assert gpu_use.record_placement(folder, 0.25) == "3"
    assert records.read_placement(folder)["gpu_ids"] == "3" and records.read_placement(folder)["gpus"] == 0.25
    assert gpu_use.record_placement(tmp_path, 0.0) == ""  # a CPU trial: no GPU, whatever the variable says

    class Trial(SimpleNamespace):  # what SweepProgress reads of a Tune Trial
        def __str__(self):
            return self.name

    def trial(name: str, gpus: float, trial_id: str, result: dict) -> Trial:
        storage = SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=str(tmp_path / name))
        resources = SimpleNamespace(required_resources={"CPU": 1, "GPU": gpus})
        return Trial(name=name, trial_id=trial_id, status="RUNNING", config={}, last_result=result, metric_analysis={},
                     placement_group_factory=resources, storage=storage)  # fmt: skip

    started = trial("lr0.1", 0.25, "a", {})  # started, no report yet
    reported = trial("lr0.2", 0.25, "b", {"epoch": 1, "val/acc": 0.5, "gpu_ids": "1"})
    on_cpu = trial("lr0.3", 0.0, "c", {})
    starting = trial("lr0.4", 0.5, "d", {})  # its worker has not written placement.json yet
    out = io.StringIO()
    progress = SweepProgress(interval_s=0.0, stream=out)
    progress.setup(total_num_samples=3)
    progress.on_step_end(iteration=1, trials=[started, reported, on_cpu, starting])
    lines = {line.split()[0]: line for line in out.getvalue().splitlines()[1:]}
    assert lines["lr0.1"].endswith("GPU 3") and lines["lr0.2"].endswith("GPU 1") and lines["lr0.3"].endswith("CPU")
    assert lines["lr0.4"].endswith("GPU ?")  # on a GPU, which one not known yet: never `CPU`

    records.write_oom_marker(folder, {"gpus_per_trial": 0.25, "error": "CUDA out of memory"})
    started.status, started.error_file = "ERROR", str(folder / "error.txt")
    progress.on_trial_error(iteration=2, trials=[started], trial=started)
    assert (
        out.getvalue()
        .splitlines()[-1]
        .endswith(f"trial lr0.1 ran out of GPU memory at 0.25 GPU (re-run with more later): see {folder / 'error.txt'}")
    )


def test_a_cuda_out_of_memory_error_is_recognised_in_the_forms_torch_and_jax_print():
    for line in (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "RuntimeError: CUDA out of memory. Tried to allocate 1.5 GiB",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00GiB.",
    ):
        assert gpu_oom.is_oom_line(line), line
    for line in ("RuntimeError: CUDA error: device-side assert triggered", "MemoryError", "epoch=1 oom_count=0"):
        assert not gpu_oom.is_oom_line(line), line


def test_a_command_that_ran_out_of_gpu_memory_is_re_queued_not_gated_nor_retried(tmp_path, monkeypatch):
    reported, gate = [], []
    monkeypatch.setattr(failure.tune, "report", lambda metrics: reported.append(metrics))
    reporter = SimpleNamespace(
        parsed=0,
        last_step=None,
        trial_folder=tmp_path,
        ticket=SimpleNamespace(call=lambda *args: gate.append(args)),
        extra_metrics=lambda: {"gpu_ids": "2"},  # every row of the trial names its GPU
    )
    tail = [
        "Traceback (most recent call last):",
        '  File "train.py", line 9',
        "torch.OutOfMemoryError: CUDA out of memory.",
    ]
    output = SimpleNamespace(tails={"ERR": tail, "OUT": ["epoch=0 starting"]})
    reading = SimpleNamespace(work_dir=tmp_path / "work")
    with pytest.raises(failure.CommandOutOfMemory, match="ran out of GPU memory at 0.25 GPU") as raised:
        failure.verdict(1, ["python", "train.py"], reporter, output, reading, str(tmp_path), gpus=0.25)
    assert gpu_oom.is_gpu_oom(raised.value) and isinstance(raised.value, failure.CommandFailed)
    assert gate == []  # not an initial failure: a larger share may fit, whatever the other trials did
    assert reported == [{"gpu_ids": "2", "command/failed": 1, "command/no_retry": 1}]  # no retry at the same share
    saved = records.read_failure(tmp_path)
    assert (saved.kind, saved.early, saved.exception) == (OUT_OF_MEMORY, False, tail[-1])
    assert records.read_oom_marker(tmp_path) == {"gpus_per_trial": 0.25, "error": tail[-1]}

    reported.clear()  # the same output on a CPU trial (no CUDA device: host memory) is a plain crash
    with pytest.raises(failure.CommandFailed) as plain:
        failure.verdict(1, ["python", "train.py"], reporter, output, reading, str(tmp_path), gpus=0.0)
    assert not gpu_oom.is_gpu_oom(plain.value) and gate and gate[0][0] == "failed_early"


def test_gpu_figures_out_of_memory_errors_and_re_run_rounds_are_read_without_torch():
    code = (
        "import sys, trainables.gpu_use, trainables.gpu_oom, analysis.reading.oom_rounds; print('torch' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert run.stdout.strip() == "False", run.stderr

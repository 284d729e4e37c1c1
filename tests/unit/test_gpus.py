"""GPU selection, memory caps, packing, OOM re-queue, DDP trials and clusters, tested on CPU.

No GPU here: NVML readings are recorded values (an 8-GPU box with two cards in use), CUDA
out-of-memory errors are injected, and Ray's logical GPUs stand in for devices.
"""

import os

import pytest
import torch

from sweeps import noise_grid
from sweeps.engine import flags
from sweeps.engine.cluster import gpus
from sweeps.engine.flags import UsageError
from tests.helpers.processes import wait_until
from trainables import gpu, gpu_oom, gpu_share, gpu_use
from trainables.experiment import records

GIB = 2**30

# Recorded `read_nvml()` of a shared 4 x A100-80GB node: GPU 1 runs someone's job (74 GiB used),
# GPU 3 is 97 % utilised with little memory, GPUs 0 and 2 are idle.
READINGS = [
    {
        "index": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total": 80 * GIB,
        "memory_free": int(79.2 * GIB),
        "utilization": 0.0,
    },
    {
        "index": 1,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total": 80 * GIB,
        "memory_free": int(5.6 * GIB),
        "utilization": 31.0,
    },
    {
        "index": 2,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total": 80 * GIB,
        "memory_free": int(78.9 * GIB),
        "utilization": 2.0,
    },
    {
        "index": 3,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total": 80 * GIB,
        "memory_free": int(70.0 * GIB),
        "utilization": 97.0,
    },
]

MOUNTS = """overlay / overlay rw,relatime 0 0
/dev/nvme0n1p2 /home ext4 rw,relatime 0 0
nas01:/export/runs /mnt/shared nfs4 rw,vers=4.2 0 0
tmpfs /tmp tmpfs rw 0 0
"""


# --- selection -------------------------------------------------------------------------------


def test_busy_gpus_are_left_out_with_the_reason():
    chosen, messages = gpus.select_gpus(READINGS, None)
    assert chosen == [0, 2]
    assert len(messages) == 2
    assert "GPU 1" in messages[0] and "5.6 of 80 GiB free" in messages[0]
    assert "GPU 3" in messages[1] and "97 % utilised" in messages[1]


def test_gpu_list_restricts_and_all_overrides():
    assert gpus.select_gpus(READINGS, [0, 1]) == ([0], [gpus.select_gpus(READINGS, None)[1][0]])
    assert gpus.select_gpus(READINGS, "all") == ([0, 1, 2, 3], [])
    with pytest.raises(UsageError, match="GPU 7 does not exist; this machine has GPU"):
        gpus.select_gpus(READINGS, [0, 7])
    with pytest.raises(UsageError, match="every selected GPU is busy.*--gpus all"):
        gpus.select_gpus(READINGS, [1, 3])


def test_without_gpu_information_selection_falls_back_cleanly():
    assert gpus.select_gpus(None, None) == (None, [])  # Ray detects GPUs (or none) itself
    assert gpus.select_gpus([], None) == ([], [])  # no GPU: CPU trials
    assert gpu.nvml_utilization_reader() is None or torch.cuda.is_available()


@pytest.mark.parametrize(
    "readings,selection,match",
    [
        (None, [0, 2], r"--gpus=0,2: no GPU can be detected here \(neither NVML nor torch sees one\)"),
        ([], [0], r"--gpus=0: this machine has no GPU \(NVML and torch see none\); drop --gpus"),
        ([], "all", r"--gpus=all: this machine has no GPU"),
        (READINGS, [0, 7], r"--gpus: GPU 7 does not exist; this machine has GPU\(s\) 0, 1, 2, 3$"),
    ],
)
def test_gpus_are_never_invented(readings, selection, match):
    with pytest.raises(UsageError, match=match):
        gpus.select_gpus(readings, selection)


def test_torch_readings_when_nvml_is_missing(monkeypatch):
    """NVML missing: torch's device count decides what exists; load is unknown, so no GPU counts as busy."""
    monkeypatch.setattr(gpus, "read_nvml", lambda: None)
    monkeypatch.setattr(gpus, "GPU_DEVICE_FILES", ("/",))  # a GPU driver's device files exist
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    readings = gpus.read_gpus()
    assert [r["index"] for r in readings] == [0, 1] and readings[0]["memory_free"] is None
    assert gpus.select_gpus(readings, None) == ([0, 1], [])
    with pytest.raises(UsageError, match=r"GPU 3 does not exist; this machine has GPU\(s\) 0, 1"):
        gpus.select_gpus(readings, [1, 3])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert gpus.read_gpus() == []


def test_no_gpu_device_files_means_no_gpus_without_importing_torch(monkeypatch):
    """Linux without /dev/nvidia*, /dev/kfd or /dev/dxg: no device torch could see; torch is not asked."""
    monkeypatch.setattr(gpus, "read_nvml", lambda: None)
    monkeypatch.setattr(gpus, "GPU_DEVICE_FILES", ("/nonexistent-gpu-device*",))
    monkeypatch.setattr(gpus.sys, "platform", "linux")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # would say 2 if it were asked
    assert gpus.read_gpus() == []
    with pytest.raises(UsageError, match="this machine has no GPU"):
        gpus.select_gpus(gpus.read_gpus(), [0])


def test_logical_gpus_only_through_the_test_variable(monkeypatch):
    monkeypatch.setattr(gpus, "read_nvml", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.delenv(gpus.LOGICAL_GPUS_ENV, raising=False)
    assert gpus.read_gpus() == []
    monkeypatch.setenv(gpus.LOGICAL_GPUS_ENV, "4")
    assert [r["index"] for r in gpus.read_gpus()] == [0, 1, 2, 3]
    assert gpus.select_gpus(gpus.read_gpus(), [1, 3]) == ([1, 3], [])  # idle: none is left out as busy
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv(gpus.LOGICAL_GPUS_ENV, bad)
        with pytest.raises(UsageError, match=f"RAYSWEEP_LOGICAL_GPUS='{bad}' must be a whole number >= 1"):
            gpus.read_gpus()


def test_choose_local_gpus_exports_cuda_visible_devices(monkeypatch, capsys):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus.choose_local_gpus(None, None, readings=READINGS) == 2
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,2"
    out = capsys.readouterr().out
    assert "leaving out busy GPU 1" in out and "GPUs for this sweep: 0,2" in out
    assert gpus.choose_local_gpus(None, "HEAD:6379", readings=READINGS) is None  # a cluster's GPUs are its own
    monkeypatch.setenv("RAY_ADDRESS", "HEAD:6379")
    assert gpus.choose_local_gpus(None, None, readings=READINGS) is None


def test_choose_local_gpus_on_logical_gpus_and_on_none(monkeypatch, capsys):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "untouched")
    monkeypatch.setattr(gpus, "read_nvml", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert gpus.choose_local_gpus(None, None) is None  # no GPU: Ray finds none itself
    with pytest.raises(UsageError, match="this machine has no GPU"):
        gpus.choose_local_gpus([0], None)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "untouched"
    monkeypatch.setenv(gpus.LOGICAL_GPUS_ENV, "4")
    assert gpus.choose_local_gpus([1, 3], None) == 2
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,3" and "GPUs for this sweep: 1,3" in capsys.readouterr().out


@pytest.mark.parametrize(
    "given,match",
    [
        (("a,b", None, None), "--gpus='a,b' is not a list of GPU indices"),
        (("0,0", None, None), "indices must be distinct"),
        (("0", "2", None), r"--gpus-per-trial=2 is more than the 1 GPU\(s\) selected by --gpus=0"),
        (("0,2", None, "auto"), "--gpus applies to a local Ray only"),
        ((None, "1.5", None), "--gpus-per-trial=1.5 is not allowed"),
    ],
)
def test_bad_gpu_flags_are_refused(given, match):
    with pytest.raises(UsageError, match=match):
        flags.parse_gpu_flags(*given)


def test_gpu_flags_parse():
    assert flags.parse_gpu_flags("0,2", "0.5", None) == ([0, 2], 0.5)
    assert flags.parse_gpu_flags("all", "auto", None) == ("all", "auto")
    assert flags.parse_gpu_flags(None, None, "auto") == (None, None)


def test_bad_gpu_flags_stop_the_sweep_before_ray(tmp_path):
    with pytest.raises(UsageError, match="more than the 2 GPU"):
        noise_grid.main(["--gpus", "0,2", "--gpus-per-trial", "4", "--storage-path", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()


# --- memory caps and packing -----------------------------------------------------------------


def test_memory_fraction_is_the_share_minus_headroom():
    assert gpu_share.memory_fraction_for(0.25, 0.1) == pytest.approx(0.225)
    assert gpu_share.memory_fraction_for(0.5, 0.0) == 0.5
    assert gpu_share.memory_fraction_for(1.0, 0.1) is None  # a whole GPU is not capped
    assert gpu_share.memory_fraction_for(0.0, 0.1) is None  # CPU trial


def test_cap_gpu_memory_calls_torch_with_the_fraction(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine: no cap on this process
    assert gpu.cap_gpu_memory(0.25, 0.1) is None  # no CUDA: nothing capped
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append((f, d)))
    assert gpu.cap_gpu_memory(0.25, 0.1, device=torch.device("cuda", 0)) == pytest.approx(0.225)
    assert gpu.cap_gpu_memory(1.0, 0.1) is None
    assert calls == [(pytest.approx(0.225), torch.device("cuda", 0))]


@pytest.mark.parametrize(
    "peak_gib,expected",
    [
        (1.9, 1 / 8),  # 80/8 * 0.9 = 9 GiB >= 2.4 GiB needed
        (15.0, 1 / 3),  # 1/4 caps at 18 GiB < 18.75 needed; 1/3 caps at 24 GiB
        (60.0, 1.0),  # needs 75 GiB: a whole, uncapped GPU
    ],
)
def test_pack_fraction_picks_the_densest_packing_that_fits(peak_gib, expected):
    fraction, why = gpus.pack_fraction(int(peak_gib * GIB), 80 * GIB, headroom=0.1)
    assert fraction == pytest.approx(expected)
    assert f"probe peak {peak_gib:.2f} GiB" in why and f"1/{round(1 / expected)} GPU" in why


def test_pack_fraction_refuses_a_model_larger_than_the_gpu():
    with pytest.raises(UsageError, match="probe peaked at 70.00 GiB but a GPU holds 80 GiB"):
        gpus.pack_fraction(70 * GIB, 80 * GIB, headroom=0.1)


def test_auto_means_cpu_without_gpus_and_a_probe_with_them(monkeypatch):
    def no_probe():
        raise AssertionError("probe must not run without GPUs")

    assert gpus.auto_gpus_per_trial(0, no_probe, 0.1)[0] == 0.0
    assert gpus.auto_gpus_per_trial(4, lambda: None, 0.1)[0] == 0.25
    recorded = {"peak_bytes": int(9.5 * GIB), "total_bytes": 80 * GIB}  # resnet18 on CIFAR-10, batch 512, bf16
    fraction, why = gpus.auto_gpus_per_trial(4, lambda: recorded, 0.1)
    assert fraction == pytest.approx(1 / 6) and "1/6 GPU" in why
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the probe on a GPU: tests/unit/test_gpu_device.py
    assert gpu.peak_memory_of_probe(None, None, None) is None


# --- OOM -------------------------------------------------------------------------------------


def test_oom_share_doubles_up_to_a_whole_gpu():
    assert gpus.next_fraction_after_oom(0.25) == 0.5
    assert gpus.next_fraction_after_oom(0.5) == 1.0
    assert gpus.next_fraction_after_oom(0.3) == pytest.approx(0.6)
    assert gpus.next_fraction_after_oom(0.75) == 1.0
    assert gpus.next_fraction_after_oom(1.0) is None
    assert gpus.next_fraction_after_oom(0.0) is None


def test_cuda_oom_becomes_gpu_out_of_memory_with_a_marker(tmp_path):
    with pytest.raises(
        gpu_oom.GpuOutOfMemory, match="at 0.25 GPU: CUDA out of memory. Tried to allocate 2.00 GiB"
    ) as info:
        with gpu.mark_gpu_oom(0.25, tmp_path):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")
    assert gpu_oom.is_gpu_oom(info.value)
    assert records.read_oom_marker(tmp_path)["gpus_per_trial"] == 0.25
    with pytest.raises(gpu_oom.GpuOutOfMemory, match="earlier at 0.25 GPU"):  # Tune's retry at the same share
        with gpu.mark_gpu_oom(0.25, tmp_path):
            raise AssertionError("must fail before training")
    with gpu.mark_gpu_oom(0.5, tmp_path):  # a larger share trains
        pass
    with pytest.raises(ValueError):  # other errors pass through unchanged
        with gpu.mark_gpu_oom(0.25, None):
            raise ValueError("not memory")


def test_is_gpu_oom_sees_through_wrapping():
    wrapped = RuntimeError("trial failed")
    wrapped.__cause__ = torch.cuda.OutOfMemoryError("CUDA out of memory")
    assert gpu_oom.is_gpu_oom(wrapped)
    assert gpu_oom.is_gpu_oom(RuntimeError("ray::ImplicitFunc.train() ... trainables.gpu_oom.GpuOutOfMemory: ran out"))
    assert not gpu_oom.is_gpu_oom(ValueError("bad value"))
    assert not gpu_oom.is_gpu_oom("Could not re-use actor for trial t")  # Tune's own errors can be text
    assert not gpu_oom.is_gpu_oom(None)


# --- utilisation sampling --------------------------------------------------------------------


def test_utilization_is_sampled_in_the_background():
    recorded = iter([30.0, 60.0, 90.0] * 1000)
    with gpu_use.sample_gpu_utilization(lambda: next(recorded), every_s=0.005) as samples:
        wait_until(lambda: len(samples) >= 6, 5, every_s=0.01)
    assert len(samples) >= 6 and samples[:3] == [30.0, 60.0, 90.0]
    metrics = gpu_use.gpu_metrics(0.25, 0.225, [30.0, 60.0, 90.0])
    assert metrics == {"gpu/fraction": 0.25, "gpu/memory_cap": 0.225, "gpu/utilization_mean": 60.0}
    with gpu_use.sample_gpu_utilization(None) as none:
        assert none == []
    assert gpu_use.gpu_metrics(0.0, None, []) == {"gpu/fraction": 0.0, "gpu/memory_cap": 0.0}


# --- clusters --------------------------------------------------------------------------------


def test_multi_node_cluster_needs_shared_storage():
    gpus.check_shared_storage("/home/me/runs", 1, mounts=MOUNTS)  # one node: local storage is fine
    gpus.check_shared_storage("/mnt/shared/runs", 3, mounts=MOUNTS)  # NFS
    gpus.check_shared_storage("s3://bucket/runs", 3, mounts=MOUNTS)
    gpus.check_shared_storage("/home/me/runs", 2, trusted=True, mounts=MOUNTS)
    with pytest.raises(
        UsageError, match=r"/home/me/runs is on a local file system \(ext4\) but the cluster has 2 nodes"
    ):
        gpus.check_shared_storage("/home/me/runs", 2, mounts=MOUNTS)
    assert gpus.filesystem_type("/mnt/shared/runs/x", MOUNTS) == "nfs4"
    assert gpus.filesystem_type("/var/lib", MOUNTS) == "overlay"

"""The logic of the performance work, without timing anything: trial order, the start-up
milestones, the per-trial overhead breakdown, and the GPU packing kit's table and plot on recorded
(here: made-up) figures."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from benchmarks import gate, gpu_packing, startup, sweep_efficiency, trainable_overhead
from sweeps.engine.grid.plan import expected_cost, longest_first


def test_longest_first_orders_by_epochs_times_model_and_keeps_ties_in_order():
    cells = [
        {"epochs": 2, "seed": 0},
        {"epochs": 5, "model": "cnn"},
        {"seed": 1},
        {"epochs": 5, "model": "mlp"},
        {"epochs": 2, "seed": 1},
    ]
    ordered = longest_first(cells)
    # cnn x 5 epochs (60) > default 30 mlp epochs (30) > mlp x 5 (5) > the two 2-epoch cells, in their order
    assert ordered == [cells[1], cells[2], cells[3], cells[0], cells[4]]
    assert (
        expected_cost({"model": "resnet18", "epochs": 1})
        > expected_cost({"model": "cnn", "epochs": 1})
        > expected_cost({"epochs": 1})
    )


def test_longest_first_leaves_a_grid_of_equal_trials_unchanged():
    cells = [{"noise_rate": r, "seed": s} for r in (0.2, 0.4) for s in (0, 1)]
    assert longest_first(cells) == cells  # so noise_grid keeps its plain grid_search


def test_per_trial_overhead_breaks_down_into_its_parts_and_sums_to_the_total():
    # two trials on one slot: 3 reports each (the last one's costs fall after the trial's end stamp)
    trials = [
        {
            "slot": "0",
            "start": 0.0,
            "end": 3.5,
            "work": 3.0,
            "write_s": 0.03,
            "reports": 3,
            "report_s": 0.05,
            "persist_s": 0.01,
        },
        {
            "slot": "0",
            "start": 3.7,
            "end": 6.9,
            "work": 3.0,
            "write_s": 0.01,
            "reports": 3,
            "report_s": 0.03,
            "persist_s": 0.01,
        },
    ]
    parts = sweep_efficiency.overhead_breakdown(trials, gaps=[0.2])
    assert parts["overhead_write_s"] == pytest.approx(0.02)
    assert parts["overhead_persist_s"] == pytest.approx(0.02)  # 0.01 s x 2 reports inside the trial
    assert parts["overhead_report_s"] == pytest.approx((0.04 * 2 + 0.02 * 2) / 2)
    assert parts["overhead_reuse_gap_s"] == pytest.approx(0.2)
    in_trial = (0.5 + 0.2) / 2
    assert sum(
        v
        for k, v in parts.items()
        if k.startswith("overhead_") and k not in ("overhead_reuse_gap_s", "overhead_outside_report_s")
    ) == pytest.approx(in_trial)
    outside = parts["overhead_write_s"] + parts["overhead_other_s"] + parts["overhead_reuse_gap_s"]
    assert parts["overhead_outside_report_s"] == pytest.approx(outside)
    summary = sweep_efficiency.summarise({"t0": -1.0, "end": 7.0, "trials": trials})
    assert summary["per_trial_overhead_s"] == pytest.approx(in_trial + 0.2)
    assert (
        sweep_efficiency.overhead_breakdown([{"slot": "0", "start": 0, "end": 1, "work": 1}], []) == {}
    )  # batches: no parts


def test_startup_milestones_are_recognised_from_the_sweep_lines():
    assert startup.milestone_of("12 trials in the grid\n") == "args"
    assert startup.milestone_of("data: digits (1221 train / 216 val / 360 test); 12 to run, 0 reused\n") == "data"
    assert startup.milestone_of("Ray started in 5.2 s; dashboard: http://127.0.0.1:8265\n") == "ray"  # --baseline
    assert (
        startup.milestone_of("started a local Ray with 2 CPUs and 0 GPUs in 5.2 s; dashboard: http://127.0.0.1:8265\n")
        == "ray"
    )
    assert startup.milestone_of("[0:00:16] sweep finished: 12 trials: 0 running\n") == "last_trial"
    assert startup.milestone_of("report: runs/noise_grid/report/report.md\n") == "report"
    assert startup.milestone_of("results: runs/noise_grid\n") is None


def test_startup_table_gives_times_and_phases():
    run = dict(zip(startup.MILESTONES, [0.1, 2.0, 7.0, 9.0, 20.0, 20.2, 22.0, 23.0]))
    later = {k: v + 1.0 for k, v in run.items()}
    report = {"help_s": [0.1, 0.1, 0.1], "forms": {"smoke": {"runs": [run, later, run]}}}
    table = startup.format_table(report)
    first_trial = next(line for line in table.splitlines() if line.startswith("first_trial"))
    assert "9.00 [9.00, 10.00]" in first_trial and "2.00 [2.00, 2.00]" in first_trial  # at, and phase since `ray`


def test_startup_pairs_the_grid_with_the_bare_tune_script_and_its_table_leaves_out_what_bare_lacks():
    grid = [dict(zip(startup.MILESTONES, [0.1, 2.0, 7.0, 9.0, 20.0, 20.2, 22.0, 23.0 + i])) for i in range(3)]
    bare = [dict(zip(startup.BARE_MILESTONES, [0.1, 2.5, 7.5, 10.0 - i, 18.0, 20.0])) for i in range(3)]
    grid[1]["first_trial"] = 30.0  # a load spike during one grid run
    figures = startup.versus_bare(grid, bare)
    assert figures["startup_ratio"] == pytest.approx(9.0 / 8.0)  # the fastest of each: the spike adds nothing
    assert figures["startup_ratio_paired_median"] == pytest.approx(9.0 / 8.0)  # the median of 9/10, 30/9, 9/8
    assert figures["wall_ratio"] == pytest.approx(23.0 / 20.0) and figures["pairs"] == 3
    table = startup.format_table(startup.summarise("bare_tune.py", [], {"smoke": bare}, {"smoke": []}))
    assert next(line for line in table.splitlines() if line.startswith("report")).split()[1:] == ["-", "-"]
    exit_row = next(line for line in table.splitlines() if line.startswith("exit"))
    assert "2.00 [2.00, 2.00]" in exit_row  # the phase since last_trial: the bare script has no table or report


def test_in_trial_figures_leave_out_the_first_epoch_and_one_stretched_epoch_does_not_decide():
    epochs = [{"compute_s": 5.0, "in_trial_s": 1.0}] + [{"compute_s": 0.5, "in_trial_s": 0.01}] * 3
    figures = trainable_overhead.in_trial_figures(epochs + [{"compute_s": 0.5, "in_trial_s": 0.5}])
    assert figures["in_trial_ms"] == pytest.approx(10.0) and figures["compute_ms"] == pytest.approx(500.0)
    assert figures["in_trial_ratio"] == pytest.approx(1.02)  # the median epoch
    assert figures["in_trial_ratio_mean"] == pytest.approx((2.0 + 0.53) / 2.0)  # every epoch weighs


# Figures as the quick benchmarks wrote them on the shared 2-core machine (load 18-37, other sessions' tests
# beside them): this build (startup.py's seconds: the fastest of 3 runs each), and the same build slowed by
# `trainable_overhead.py --slow-report 0.5` (each report sleeps half an epoch).
QUICK_STARTUP = {
    "versus_bare": {
        "smoke": {
            "startup_ratio": 0.834,
            "wall_ratio": 0.874,
            "grid_first_trial_s": 62.0,
            "bare_first_trial_s": 74.3,
            "grid_exit_s": 92.4,
            "bare_exit_s": 105.7,
            "pairs": 3,
        }
    }
}
QUICK_OVERHEAD = {
    "slow_report": 0.0,
    "in_trial_ms": 385.3,
    "in_trial_ratio": 1.07,
    "models": {"cnn": {"compute_ms": 7100.0}, "mlp": {"compute_ms": 180.0}},
}
SLOWED_OVERHEAD = QUICK_OVERHEAD | {"slow_report": 0.5, "in_trial_ms": 3900.0, "in_trial_ratio": 1.58}


def test_the_gate_passes_this_build_and_names_each_ratio(capsys):
    found = gate.checks(QUICK_STARTUP, QUICK_OVERHEAD)
    assert [c.name for c in found] == ["startup (smoke)", "grid_wall (smoke)", "in_trial (cnn)"]
    assert all(c.passed for c in found)
    assert [c.limit for c in found] == [1.15, 1.5, 1.15]


def test_the_gate_fails_a_build_whose_ratio_passes_its_limit_and_only_that_one():
    over = {"versus_bare": {"smoke": QUICK_STARTUP["versus_bare"]["smoke"] | {"startup_ratio": 1.16}}}
    assert [c.name for c in gate.checks(over, QUICK_OVERHEAD) if not c.passed] == ["startup (smoke)"]
    assert [c.name for c in gate.checks(None, SLOWED_OVERHEAD) if not c.passed] == ["in_trial (cnn)"]
    long_grid = {"versus_bare": {"default": QUICK_STARTUP["versus_bare"]["smoke"] | {"wall_ratio": 1.51}}}
    assert [c.name for c in gate.checks(long_grid, None) if not c.passed] == ["grid_wall (default)"]


def test_the_gate_command_exits_1_over_a_limit_0_within_and_swaps_them_for_the_slowed_self_test(tmp_path, capsys):
    files = {}
    for name, document in {"ok": QUICK_OVERHEAD, "slowed": SLOWED_OVERHEAD, "startup": QUICK_STARTUP}.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(document))
    assert gate.main(["--startup", str(files["startup"]), "--trainable-overhead", str(files["ok"])]) == 0
    assert "every ratio within its limit" in capsys.readouterr().out
    assert gate.main(["--trainable-overhead", str(files["slowed"])]) == 1
    out = capsys.readouterr().out
    assert "OVER" in out and "over the limit: in_trial (cnn)" in out and "slowed x0.5" in out
    assert gate.main(["--trainable-overhead", str(files["slowed"]), "--expect-fail"]) == 0
    assert gate.main(["--trainable-overhead", str(files["ok"]), "--expect-fail"]) == 1
    assert "the gate is blind" in capsys.readouterr().out
    assert gate.main(["--startup", str(tmp_path / "missing.json")]) == 2
    files["startup"].write_text("{}")
    assert gate.main(["--startup", str(files["startup"])]) == 2


RECORDED = {  # made-up figures in the kit's JSON layout (no GPU measured them)
    "device": "Test GPU",
    "total_memory_bytes": 80 * 2**30,
    "epochs": 4,
    "n_train": 20000,
    "rows": [
        {
            "model": "resnet18",
            "amp": "off",
            "trials_per_gpu": 1,
            "gpu_per_trial": 1.0,
            "total_samples_per_s": 5000.0,
            "trials": [
                {
                    "samples_per_s": 5000.0,
                    "peak_memory_bytes": 2 * 2**30,
                    "memory_cap_bytes": None,
                    "utilization_percent": 60.0,
                }
            ],
        },
        {
            "model": "resnet18",
            "amp": "off",
            "trials_per_gpu": 4,
            "gpu_per_trial": 0.25,
            "total_samples_per_s": 9000.0,
            "trials": [
                {
                    "samples_per_s": 2250.0,
                    "peak_memory_bytes": 2 * 2**30,
                    "memory_cap_bytes": 18 * 2**30,
                    "utilization_percent": 95.0,
                }
            ]
            * 4,
        },
        {"model": "resnet18", "amp": "off", "trials_per_gpu": 8, "errors": ["GpuOutOfMemory: ran out at 0.125 GPU"]},
    ],
    "oom": {
        "batch_size": 4000,
        "share": 0.125,
        "cap_bytes": 9 * 2**30,
        "first_round_oom": True,
        "requeued_shares": [0.25],
        "finished_after_requeue": True,
    },
}


def test_gpu_table_shows_speedup_memory_against_cap_and_the_oom_requeue():
    lines = gpu_packing.format_table(RECORDED).splitlines()
    packed = next(line for line in lines if line.split()[:3] == ["resnet18", "off", "4"])
    assert "9,000" in packed and "1.80" in packed  # total samples/s and x vs one trial on the whole GPU
    assert "2.00 / 18.00" in packed and packed.rstrip().endswith("95")  # peak vs cap in GiB, NVML utilisation
    assert any("failed: GpuOutOfMemory" in line for line in lines)
    assert "re-queued at 0.25 GPU; finished yes" in lines[-1]


def test_the_oom_check_doubles_the_batch_until_the_first_attempt_runs_out_of_memory():
    attempts = []

    def attempt(batch):
        attempts.append(batch)
        return ("oom" if batch >= 5000 else "finished"), batch

    assert gpu_packing.grow_until_oom(1500, attempt) == ([1500, 3000, 6000], "oom", 6000) and attempts[-1] == 6000
    tried, status, _ = gpu_packing.grow_until_oom(1500, lambda batch: ("finished", batch), max_batch=10_000)
    assert tried == [1500, 3000, 6000] and status == "finished"  # 12000 is past the largest batch
    nothing = {"batch_sizes": tried, "batch_size": 6000, "share": 0.125, "cap_bytes": 9 * 2**30}
    nothing |= {"first_round_oom": False, "why": "no batch up to 6000 ran out of memory", "requeued_shares": []}
    last = gpu_packing.format_table({**RECORDED, "oom": nothing}).splitlines()[-1]
    assert last == (
        "OOM check proved nothing: no batch up to 6000 ran out of memory at 0.125 GPU (cap 9.00 GiB) "
        "(batches tried: 1500, 3000, 6000)"
    )


def test_gpu_plot_has_one_line_per_model_and_precision_over_trials_per_gpu():
    figure = gpu_packing.plot_throughput(RECORDED)
    (line,) = figure.axes[0].get_lines()  # the failed 8x row is left out
    assert list(line.get_xdata()) == [1, 4] and list(line.get_ydata()) == [5000.0, 9000.0]


def test_gpu_trial_figures_skip_the_first_epoch_and_read_the_cap_as_a_share_of_the_device():
    history = pd.DataFrame(
        {
            "samples_per_s": [100.0, 1000.0, 1100.0, 900.0],
            "cuda/peak_memory_bytes": [1, 5, 7, 6],
            "gpu/memory_cap": [0.225] * 4,
            "gpu/utilization_mean": [50.0, 60.0, 70.0, 80.0],
        }
    )
    figures = gpu_packing.trial_figures(history, total_memory_bytes=1000)
    assert figures == {
        "samples_per_s": 1000.0,
        "peak_memory_bytes": 7,
        "memory_cap_bytes": 225,
        "utilization_percent": 80.0,
    }
    uncapped = gpu_packing.trial_figures(history.assign(**{"gpu/memory_cap": 0.0}), total_memory_bytes=1000)
    assert uncapped["memory_cap_bytes"] is None


def test_gpu_kit_without_a_gpu_says_so_and_exits_0(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("sys.argv", ["gpu_packing.py", "--quick", "--json", str(tmp_path / "g.json")])
    gpu_packing.main()
    assert "no CUDA GPU" in capsys.readouterr().out
    assert (tmp_path / "g.json").read_text().count("no CUDA GPU") == 1


def fake_runs(monkeypatch, grid_first_trial: list[float]) -> None:
    """startup.py's timings replaced: the bare script's first trial after 10 s, exit 20 s; the grid's
    first trial after each of `grid_first_trial` in turn, exit 10 s later."""
    grid_times = iter(grid_first_trial)

    def time_sweep_again(flags, sweep, milestones=tuple(startup.MILESTONES), started=startup.GRID_STARTED):
        first = 10.0 if sweep == startup.BARE else next(grid_times)
        return {name: first for name in milestones} | {"exit": first + 10.0}

    monkeypatch.setattr(startup, "time_sweep_again", time_sweep_again)
    monkeypatch.setattr(startup, "time_help", lambda sweep: 0.5)


@pytest.mark.parametrize(
    "grid_first_trial, pairs, gate_exit",
    [
        ([10.5, 10.2, 10.4], 3, 0),  # within the limit: 3 pairs, no more
        ([12.5, 12.2, 12.4, 10.5, 11.0, 10.1], 6, 0),  # a draw of the load: over after 3, within after 6
        ([12.5, 12.2, 12.4, 12.6, 12.3, 12.8], 6, 1),  # a slower build: over after 3 and after 6
    ],
)
def test_the_startup_benchmark_times_more_pairs_before_a_ratio_over_the_limit_reaches_the_gate(
    monkeypatch, tmp_path, capsys, grid_first_trial, pairs, gate_exit
):
    fake_runs(monkeypatch, grid_first_trial)
    startup.main(["--quick", "--json", str(tmp_path / "startup.json")])
    figures = json.loads((tmp_path / "startup.json").read_text())
    assert figures["versus_bare"]["smoke"]["pairs"] == pairs and figures["repeats"] == pairs
    assert ("the fastest of 6 each decides" in capsys.readouterr().out) == (pairs == 6)
    assert gate.main(["--startup", str(tmp_path / "startup.json")]) == gate_exit

"""F6 searches: lr_search (TPE + ASHA, seeds, resume), the seed-mean trainable, analysis/figures/search.py."""

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from analysis.figures.search import (
    best_so_far,
    param_importance,
    plot_best_so_far,
    plot_parallel_coordinates,
    study_from_trials,
    top_trials,
)
from analysis.tables.search_table import format_search_table, search_table
from sweeps import lr_search
from sweeps.engine.flags import UsageError
from trainables import load_data, parse_config, train_epochs
from trainables.experiment.objective import Objective
from trainables.seed_group import apply_hyperparameters, seed_mean

# --- bad input: refused before Ray starts -------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--lr-range", "0.1,1e-3"], r"--lr-range='0.1,1e-3': LOW must be below HIGH"),
        (["--lr-range", "0.01,0.01"], "LOW must be below HIGH"),
        (["--lr-range=-0.1,1"], r"--lr-range: -0.1 is outside the allowed range \(0, 10\]"),
        (["--lr-range", "1e-3"], "is not LOW,HIGH"),
        (["--weight-decay-range", "0,1e-2"], r"--weight-decay-range: 0 is outside the allowed range \(0, 1\]"),
        (["--gce-q-range", "0.5,1.5"], r"--gce-q-range: 1.5 is outside"),
        (["--losses", "ce,mae"], "--losses: 'mae' is not one of ce, gce, sce"),
        (["--batch-sizes", "0,64"], "--batch-sizes: 0 must be"),
        (["--batch-sizes", "64,big"], "is not a list of whole numbers"),
        (["--reduction-factor", "1"], "--reduction-factor=1 must be > 1"),
        (["--grace-period", "5", "--epochs", "3"], r"--grace-period=5 must be <= --epochs \(3\)"),
        (["--repeat", "0"], "--repeat=0 must be"),
        (["--num-samples", "0"], "--num-samples=0 must be"),
        (["--noise-rate", "1.0"], r"--noise-rate: noise_rate=1.0 is outside the allowed range \[0.0, 1.0\)"),
        (["--loss", "gce"], "searches loss; use --losses"),
        (["--lr", "0.1"], "searches lr; use --lr-range"),
        (["--noise-rate", "0.2,0.4"], "this sweep takes one value"),
        (["--resume"], "no sweep to resume"),
    ],
)
def test_bad_search_bounds_fail_before_any_trial_starts(argv, match, tmp_path):
    import ray

    storage = tmp_path / "runs"
    was_running = ray.is_initialized()
    with pytest.raises(UsageError, match=match):
        lr_search.main([*argv, "--storage-path", str(storage)])
    assert not storage.exists()
    assert ray.is_initialized() == was_running


# --- a search over your own command: its placeholders, and nothing else ---------------------------------

COMMAND = ["--", "python", "main.py", "--epochs", "3", "--lr", "{lr}", "--wd", "{wd}", "--seed", "{seed}"]


def test_a_commands_search_space_is_its_placeholders_and_records_nothing_of_the_trainable(tmp_path):
    from sweeps.engine.command_sweep.search_space import Dimension

    args = lr_search.parse_args(
        [
            "--metric",
            "acc",
            "--seed",
            "1",
            "--space",
            "wd=loguniform:1e-5,1e-2",
            "--storage-path",
            str(tmp_path),
            *COMMAND,
        ]
    )
    assert args.space == {
        "lr": Dimension("lr", "loguniform", (1e-4, 1.0)),  # --lr-range's default
        "wd": Dimension("wd", "loguniform", (1e-5, 1e-2)),
    }
    assert args.fixed == {"seed": 1} and args.epochs == 3  # no noise rate; ASHA's max_t from `--epochs 3`
    bounds, settings = lr_search.search_bounds(args)
    assert bounds == {} and settings == {
        "seed": 1,
        "space": {"lr": "loguniform:0.0001,1", "wd": "loguniform:1e-05,0.01"},
        "max_t": 3,
        "num_samples": 20,
        "search_seed": 0,
        "grace_period": 2,
        "reduction_factor": 3.0,
    }
    assert "{lr} loguniform:0.0001,1, {wd} loguniform:1e-05,0.01, {seed} = 1" in lr_search.launch_line(args, None)
    domains = {name: d.domain() for name, d in args.space.items()}
    from ray.tune.search.optuna import OptunaSearch

    distributions = OptunaSearch.convert_search_space({**args.fixed, **domains})
    assert set(distributions) == {"lr", "wd"} and distributions["wd"].log and distributions["lr"].high == 1.0


@pytest.mark.parametrize(
    "form, low, high, kind",
    [("uniform:0,0.5", 0.0, 0.5, "Float"), ("int:2,8", 2, 8, "Int"), ("choice:sgd,adam,1", None, None, "Cat")],
)
def test_space_forms_become_optunas_distributions(form, low, high, kind):
    from ray.tune.search.optuna import OptunaSearch

    from sweeps.engine.command_sweep.search_space import parse_dimension

    distribution = OptunaSearch.convert_search_space({"x": parse_dimension(f"x={form}").domain()})["x"]
    assert type(distribution).__name__.startswith(kind)
    if low is None:
        assert distribution.choices == ("sgd", "adam", 1)  # numbers stay numbers
    else:
        assert (distribution.low, distribution.high) == (low, high)  # int: both ends included


@pytest.mark.parametrize(
    "template, fixed, epochs",
    [
        (["python", "main.py", "--epochs", "3"], {}, 3),
        (["python", "main.py", "--max_epochs=7"], {}, 7),
        (["python", "main.py", "--epochs", "{epochs}"], {"epochs": 4}, 4),
        (["python", "main.py", "--n", "{epochs}"], {"epochs": 5}, 5),
        (["python", "main.py", "--epochs", "{e}"], {}, None),  # searched
        (["python", "main.py", "--lr", "{lr}"], {}, None),  # the script's own default: unknown
    ],
)
def test_asha_max_t_is_the_commands_epochs_when_it_says_them(template, fixed, epochs):
    from sweeps.engine.command_sweep.search_space import command_epochs

    assert command_epochs(template, fixed) == epochs


def test_a_command_without_epochs_runs_asha_with_max_t_stated_unknown(tmp_path):
    args = lr_search.parse_args(["--storage-path", str(tmp_path), "--", "python", "main.py", "--lr", "{lr}"])
    assert args.epochs is None and lr_search.search_bounds(args)[1]["max_t"] is None
    assert "ASHA max_t unknown (no --epochs N or {epochs} in the command)" in lr_search.launch_line(args, None)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--space", "wd=normal:0,1", *COMMAND], r"--space 'wd=normal:0,1': 'normal' is not a form; use loguniform:"),
        (["--space", "wd=loguniform:0,1e-2", *COMMAND], r"loguniform needs 0 < LOW \(got 0\)"),
        (["--space", "wd=loguniform:1e-2", *COMMAND], r"'1e-2' is not LOW,HIGH \(two numbers\); use loguniform:"),
        (["--space", "wd", *COMMAND], "write NAME=FORM with FORM one of loguniform:LOW,HIGH"),
        (["--space", "wd=uniform:0.5,0.1", *COMMAND], "LOW must be below HIGH"),
        (["--space", "wd=int:1.5,4", *COMMAND], r"int needs whole numbers \(got 1.5, 4\)"),
        (["--space", "wd=choice:a,a", *COMMAND], "choice needs values, each once"),
        (["--space", "wd=uniform:0,1", "--space", "other=uniform:0,1", *COMMAND], "the command never uses {other}"),
        (COMMAND, r"placeholder {seed} has no range; give one with --space seed=FORM, .*or a fixed value with --seed"),
        (["--seed", "0", *COMMAND], r"placeholder {wd} has no range; give one with --space wd=FORM"),
        (["--space", "wd=uniform:0,1", "--space", "lr=uniform:0,1", *COMMAND], "{lr} is drawn from --lr-range"),
        (["--losses", "ce", "--space", "wd=uniform:0,1", *COMMAND], "--losses: the built-in trainable's"),
        (["--weight-decay-range", "1e-5,1e-3", *COMMAND], "--weight-decay-range: the built-in trainable's"),
        (["--noise-rate", "0.2", "--space", "wd=uniform:0,1", *COMMAND], "the command never uses {noise_rate}"),
        (
            ["--seed", "0", "--space", "wd=uniform:0,1", "--grace-period", "5", *COMMAND],
            r"--grace-period=5 must be <= ASHA max_t \(3\)",
        ),
        (["--space", "wd=uniform:0,1"], "--space wd=uniform:0,1: searches a command's placeholders"),
    ],
)
def test_bad_command_search_space_fails_in_one_line_before_ray(argv, match, tmp_path):
    with pytest.raises(UsageError, match=match) as refused:
        lr_search.parse_args(["--storage-path", str(tmp_path), *argv])
    assert "\n" not in str(refused.value)


def test_a_bad_space_exits_2_naming_the_value_and_the_forms(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, str(root / "sweeps" / "lr_search.py"), "--space", "wd=normal:0,1", *COMMAND]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "'normal' is not a form; use loguniform:LOW,HIGH" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_only_a_stop_by_the_scheduler_before_the_last_epoch_is_a_prune():
    from trainables.experiment.outcome import scheduler_pruned

    assert scheduler_pruned(1, 1, 3)  # ASHA's STOP at a rung
    assert not scheduler_pruned(None, 1, 3)  # the script ended by itself
    assert not scheduler_pruned(3, 3, 3)  # a STOP at max_t: all epochs ran
    assert scheduler_pruned(5, 5, None)  # epochs unknown
    assert not scheduler_pruned(2, 3, None)  # it logged past the STOP: its script ran on and exited by itself
    assert scheduler_pruned(2, None, 3)  # no iteration known: the STOP's


# --- the seed-mean trainable, without Ray ---------------------------------------------------------------


def test_seed_mean_averages_metrics_and_gives_a_t_interval():
    per_seed = [
        {"epoch": 4, "val/acc": acc, "train/loss": loss, "gpu_ids": "0"}
        for acc, loss in [(0.8, 1.0), (0.9, 2.0), (0.7, 3.0)]
    ]
    out = seed_mean(per_seed, seeds=(0, 1, 2))
    assert out["epoch"] == 4 and out["gpu_ids"] == "0" and out["num_seeds"] == 3
    assert out["val/acc"] == pytest.approx(0.8) and out["train/loss"] == pytest.approx(2.0)
    assert [out[f"val/acc_seed{s}"] for s in range(3)] == [0.8, 0.9, 0.7]
    assert out["val/acc_std"] == pytest.approx(0.1)
    assert out["val/acc_ci95"] == pytest.approx(4.303 * 0.1 / math.sqrt(3), rel=1e-4)  # t(0.975, df=2) = 4.3027
    single = seed_mean(per_seed[:1], seeds=(5,))
    assert single["val/acc_ci95"] == 0.0 and single["val/acc_seed5"] == 0.8


def test_restored_state_takes_the_configs_new_lr_and_weight_decay(tiny_config):
    """PBT's explore step changes lr in the config; the loaded optimizer must not bring the old one back."""
    cfg = {**tiny_config, "epochs": 2, "batch_size": 256, "warmup_epochs": 0.0, "lr": 0.05, "weight_decay": 1e-4}
    new = {**cfg, "lr": 0.2, "weight_decay": 1e-3}
    data = load_data(parse_config(cfg))
    first, state = next(iter(train_epochs(cfg, data)))
    kept = apply_hyperparameters(copy.deepcopy(state), parse_config(cfg))
    changed = apply_hyperparameters(copy.deepcopy(state), parse_config(new))
    assert changed["optimizer"]["param_groups"][0]["weight_decay"] == 1e-3
    assert changed["optimizer"]["param_groups"][0]["lr"] == pytest.approx(4 * first["lr"])
    second_kept, _ = next(iter(train_epochs(cfg, data, kept)))
    second_changed, _ = next(iter(train_epochs(new, data, changed)))
    assert second_kept["epoch"] == second_changed["epoch"] == 2
    assert second_changed["lr"] == pytest.approx(4 * second_kept["lr"])  # same schedule position, 4x the peak


# --- analysis/figures/search.py on hand-made tables ----------------------------------------------------------------


@pytest.fixture
def trials_df() -> pd.DataFrame:
    """30 trials: val/acc rises with log10(lr) up to 1e-1 and ignores weight decay (plus tiny noise)."""
    rng = np.random.default_rng(0)
    lr = 10 ** rng.uniform(-4, 0, 30)
    wd = 10 ** rng.uniform(-6, -2, 30)
    loss = np.array(["ce", "gce", "sce"])[np.arange(30) % 3]
    acc = 0.9 - 0.1 * np.abs(np.log10(lr) + 1) + rng.normal(0, 0.002, 30)
    q = rng.uniform(0.1, 1.0, 30)
    return pd.DataFrame(
        {
            "trial_id": [f"t{i:02d}" for i in range(30)],
            "config/lr": lr,
            "config/weight_decay": wd,
            "config/loss": loss,
            "config/gce_q": np.where(loss == "gce", q, np.nan),
            "val/acc": acc,
            "val/acc_ci95": 0.01,
            "num_seeds": 3,
            "training_iteration": np.where(np.arange(30) % 4 == 0, 1, 10),
            "timestamp": 1000.0 + 10 * np.arange(30)[::-1],  # rows listed newest first
            "time_total_s": 5.0,
        }
    )


def test_best_so_far_follows_finishing_order(trials_df):
    curve = best_so_far(trials_df)
    assert list(curve["trials"]) == list(range(1, 31))
    expected = trials_df.sort_values("timestamp")["val/acc"].cummax().to_numpy()
    np.testing.assert_allclose(curve["best"], expected)
    assert curve["elapsed_s"].iloc[0] == pytest.approx(5.0) and curve["elapsed_s"].iloc[-1] == pytest.approx(295.0)
    assert (np.diff(best_so_far(trials_df, Objective(mode="min"))["best"]) <= 0).all()
    fig = plot_best_so_far(trials_df, x="time")
    assert isinstance(fig, Figure)
    np.testing.assert_allclose(fig.axes[0].lines[0].get_xdata(), curve["elapsed_s"])
    with pytest.raises(ValueError, match="needs a 'timestamp' column"):
        plot_best_so_far(trials_df.drop(columns="timestamp"), x="time")
    assert "timestamp" in trials_df  # input untouched


def test_fanova_ranks_the_parameter_that_drives_the_metric_first(trials_df):
    importance = param_importance(trials_df, ["lr", "weight_decay", "loss"])
    assert importance.index[0] == "lr" and importance["lr"] > 0.6
    assert importance["weight_decay"] < 0.3 and importance["loss"] < 0.3
    assert importance.sum() == pytest.approx(1.0)
    # gce_q exists for a third of the trials only: it is left out of the common space
    assert "gce_q" not in param_importance(trials_df, ["lr", "gce_q"]).index


def test_study_and_parallel_coordinates_from_a_table(trials_df):
    study = study_from_trials(trials_df, ["lr", "weight_decay", "loss", "gce_q"])
    assert len(study.trials) == 30 and study.best_value == pytest.approx(trials_df["val/acc"].max())
    lr_dist = study.trials[0].distributions["lr"]
    assert lr_dist.log and lr_dist.low == pytest.approx(trials_df["config/lr"].min())
    assert sum("gce_q" in t.params for t in study.trials) == 10
    fig = plot_parallel_coordinates(trials_df, ["lr", "weight_decay", "loss"])
    assert isinstance(fig, Figure) and fig.axes
    with pytest.raises(KeyError, match="config/momentum"):
        study_from_trials(trials_df, ["momentum"])


def test_top_trials_shows_mean_and_ci_and_says_why_each_trial_ended(trials_df):
    table = top_trials(trials_df, k=5, epochs=10)
    assert len(table) == 5
    best = trials_df.loc[trials_df["val/acc"].idxmax()]
    assert table.loc[0, "trial"] == best["trial_id"]
    # an accuracy in [0, 1]: x100 in %, as the summary above it and every other table of the run shows it
    assert table.attrs["percent"] and table.loc[0, "val/acc"] == f"{best['val/acc'] * 100:.2f} ± 1.00"
    assert {"lr", "weight_decay", "loss", "gce_q"} <= set(table.columns)
    assert ((table["gce_q"] == "") == (table["loss"] != "gce")).all()  # blank where the loss has no q
    assert (table["ended"] == "finished").all()  # nothing says a scheduler stopped any: none is pruned
    # With outcomes (`load_trials`' column): ASHA's pruned trials are ranked and say so; one the time budget
    # stopped is not ranked (its value is no result), and says what stopped it in the search table.
    early = trials_df["training_iteration"] < 10
    budget = trials_df.index[early][:2]
    results = trials_df.assign(outcome=np.where(early, "pruned", "finished"))
    results.loc[budget, "outcome"] = "interrupted"
    results.attrs["ended_by"] = "time budget"
    ended = top_trials(results, k=30, epochs=10, scheduler="ASHA").set_index("trial")["ended"]
    assert set(ended[ended == "pruned by ASHA"].index) == set(trials_df.loc[early, "trial_id"]) - set(
        trials_df.loc[budget, "trial_id"]
    )
    assert set(ended[ended == "finished"].index) == set(trials_df.loc[~early, "trial_id"])
    table = search_table(results.rename(columns={"outcome": "ended"}), Objective())
    table.attrs["ended_by"] = "time budget"
    text = format_search_table(table, scheduler="AsyncHyperBandScheduler")
    assert text.count("stopped by the time budget") == 2 and table["rank"].isna().sum() == 2
    # The rows as logged (`stopped`: done on the last logged row, a STOP) and epochs unknown.
    marked = trials_df.assign(stopped=np.arange(30) % 8 == 0)  # trials 0, 8, ... ran 1 of 10 epochs
    ended = top_trials(marked, k=30).set_index("trial")["ended"]
    assert ended["t00"] == "pruned" and ended["t04"] == "finished"  # t04 ended by itself
    assert (ended == "pruned").sum() == 4


# --- PBT: bounds and flags (the run itself: `python sweeps/pbt.py --smoke-test`) ---------------------------


def test_pbt_explore_is_clipped_to_the_search_bounds():
    from sweeps.pbt import clip_to_bounds

    bounds = {"lr": (1e-3, 0.5), "weight_decay": (1e-6, 1e-2)}
    assert clip_to_bounds({"lr": 0.6, "weight_decay": 1e-7, "loss": "ce"}, bounds) == {
        "lr": 0.5,
        "weight_decay": 1e-6,
        "loss": "ce",
    }
    assert clip_to_bounds({"lr": 0.01, "weight_decay": 1e-4}, bounds) == {"lr": 0.01, "weight_decay": 1e-4}


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--perturbation-interval", "4", "--epochs", "4"], r"--perturbation-interval=4 must be below --epochs \(4\)"),
        (["--quantile-fraction", "0.6"], r"--quantile-fraction=0.6 is outside the allowed range \(0, 0.5\]"),
        (["--lr-range", "1,0.1"], "LOW must be below HIGH"),
        (["--loss", "mae"], "loss='mae' is not one of"),
    ],
)
def test_pbt_bad_input_fails_before_ray_starts(argv, match, tmp_path):
    from sweeps import pbt

    with pytest.raises(UsageError, match=match):
        pbt.main([*argv, "--storage-path", str(tmp_path / "runs")])
    assert not (tmp_path / "runs").exists()


def test_the_search_table_says_the_unit_and_spread_of_its_metric():
    """An accuracy in [0, 1] x100 in %, as the summary above it (`rules.shown_as_percent` decides for every
    table), its ± named as the 95 % CI over a trial's seeds; a loss as logged, 4 significant digits."""
    df = pd.DataFrame(
        {
            "trial": ["a", "b"],
            "config/lr": [0.1, 0.01],
            "training_iteration": [3, 3],
            "ended": ["finished", "finished"],
            "num_seeds": [3, 3],
            "val/acc": [0.5290, 0.61234],
            "val/acc_ci95": [0.0123, float("nan")],
            "val/loss": [0.000123, 0.5],
        }
    )
    table = search_table(df, Objective("val/acc", "max"))
    header, first, second = format_search_table(table).splitlines()[:3]
    assert header.endswith("val/acc (%; ± 95% CI)") and first.endswith("61.23") and second.endswith("52.90 ± 1.23")
    loss = search_table(df.assign(num_seeds=1), Objective("val/loss", "min"))
    header, first = format_search_table(loss).splitlines()[:2]
    assert not loss.attrs["percent"] and header.split()[-1] == "val/loss" and first.endswith("0.000123")

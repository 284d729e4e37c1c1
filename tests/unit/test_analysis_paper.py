"""Selection rules, the paper table, paired tests, the sweep summary and confusion matrices,
on experiments written by tests/helpers/analysis_fixtures.py (no Ray)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis.__main__ import main
from tests.helpers.analysis_fixtures import (
    TEST_BUMP,
    paper_base,
    paper_grid,
    trial_spec,
    write_confusion,
    write_experiment,
)

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# Selection rules
# ---------------------------------------------------------------------------------------------


def _history(val, test, trial="t"):
    return pd.DataFrame(
        {"trial_id": trial, "training_iteration": range(1, len(val) + 1), "val/acc": val, "test/acc": test}
    )


def test_best_val_reports_test_at_the_val_peak_ties_earliest():
    history = pd.concat(
        [
            _history([0.5, 0.7, 0.6, 0.7], [0.40, 0.45, 0.90, 0.50], "a"),  # val tie at 2 and 4: the earliest
            _history([0.5, np.nan, 0.6], [0.3, 0.99, 0.35], "b"),  # NaN val is never the peak
        ],
        ignore_index=True,
    )
    out = analysis.select_values(history, "test/acc", analysis.Objective(select="best-val"))
    assert out.loc["a", "value"] == 0.45 and out.loc["a", "iteration"] == 2  # not the 0.90 test peak
    assert out.loc["b", "value"] == 0.35 and out.loc["b", "iteration"] == 3
    low = analysis.select_values(
        history.assign(**{"val/acc": -history["val/acc"]}),
        "test/acc",
        analysis.Objective(mode="min", select="best-val"),
    )
    assert low.loc["a", "value"] == 0.45


def test_last_and_last_k():
    history = _history([0.1] * 5, [0.1, 0.2, 0.3, 0.4, np.nan], "a")  # last epoch did not report test/acc
    last = analysis.select_values(history, "test/acc", analysis.Objective(select="last"))
    assert last.loc["a", "value"] == 0.4 and last.loc["a", "iteration"] == 4
    last2 = analysis.select_values(history, "test/acc", analysis.Objective(select="last-k", k=2))
    assert last2.loc["a", "value"] == pytest.approx(0.35) and last2.loc["a", "epochs"] == 2
    all10 = analysis.select_values(
        history, "test/acc", analysis.Objective(select="last-k")
    )  # k = 10 > 4 reported: all of them
    assert all10.loc["a", "value"] == pytest.approx(0.25) and all10.loc["a", "epochs"] == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"select": "best-test"}, "unknown selection rule 'best-test'; choose one of best-val, last, last-k"),
        ({"select": "last-k", "k": 0}, "last-k needs k >= 1"),
        ({"select": "best-val", "val_metric": "val/top1"}, "best-val needs the validation metric 'val/top1'"),
        ({"metric": "test/top1"}, "metric 'test/top1' is not in the history; reported metrics: val/acc, test/acc"),
    ],
)
def test_selection_bad_input(kwargs, message):
    history = _history([0.1, 0.2], [0.3, 0.4])
    kwargs = {"metric": "test/acc", **kwargs}
    rule = {"metric" if key == "val_metric" else key: value for key, value in kwargs.items() if key != "metric"}
    with pytest.raises(analysis.ExperimentError, match=re.escape(message)):
        analysis.select_values(history, kwargs["metric"], analysis.Objective(**rule))


# ---------------------------------------------------------------------------------------------
# Paper table
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def three_losses(tmp_path):
    return paper_grid(tmp_path, losses=("ce", "gce", "sce"))


def test_paper_table_cells_follow_the_rule(three_losses):
    trials, history = analysis.load_experiment(three_losses)
    for select, bump in (
        ("best-val", TEST_BUMP[1]),
        ("last", TEST_BUMP[3]),
        ("last-k", (TEST_BUMP[2] + TEST_BUMP[3]) / 2),
    ):
        table = analysis.paper_table(trials, history, analysis.Objective(select=select, k=2)).set_index(
            ["loss", "noise_type", "noise_rate"]
        )
        expected = np.mean([paper_base("gce", "asym", 0.4, s) for s in (0, 1, 2)]) + bump
        assert table.loc[("gce", "asym", 0.4), "mean"] == pytest.approx(expected)
        assert table.loc[("gce", "asym", 0.4), "std"] == pytest.approx(0.01)
        assert table.loc[("gce", "asym", 0.4), "n"] == 3
    assert table.attrs["rows"] == ["loss"] and table.attrs["columns"] == ["noise_type", "noise_rate"]
    assert table.attrs["rule"] == "test/acc averaged over the last 2 epochs"


def test_paper_table_best_bold_second_underlined_per_column(three_losses):
    trials, history = analysis.load_experiment(three_losses)
    table = analysis.paper_table(trials, history)
    md = analysis.format_paper_table(table, "markdown")
    caption, _, header, align, *rows = md.splitlines()
    assert caption.startswith("test/acc (%): test/acc at the epoch of best val/acc (ties: earliest). Mean ± std over 3")
    assert "† p < 0.05 against ce (paired t-test" in caption and "fewer than 3" in caption
    assert header == "| loss | asym 0.2 | asym 0.4 | sym 0.2 | sym 0.4 |"
    cells = {row.split(" | ")[0].strip("| "): row.strip("| ").split(" | ")[1:] for row in rows}
    assert all(c.startswith("**") for c in cells["sce"])  # +0.05: best in every column
    assert all(c.startswith("<u>") for c in cells["gce"])  # +0.03: second
    assert not any(c.startswith(("**", "<u>")) for c in cells["ce"])
    expected = np.mean([paper_base("sce", "sym", 0.2, s) for s in (0, 1, 2)]) + TEST_BUMP[1]
    assert cells["sce"][2].startswith(f"**{100 * expected:.2f} ± 1.00**")

    tex = analysis.format_paper_table(table, "latex")
    assert [line for line in tex.splitlines() if line in (r"\toprule", r"\midrule", r"\bottomrule")] == [
        r"\toprule",
        r"\midrule",
        r"\bottomrule",
    ]
    assert r" & \multicolumn{2}{c}{asym} & \multicolumn{2}{c}{sym} \\" in tex
    sce = next(line for line in tex.splitlines() if line.startswith("sce &"))
    assert sce.count(r"\textbf{") == 4 and r"\underline{" not in sce
    assert next(line for line in tex.splitlines() if line.startswith("gce &")).count(r"\underline{") == 4
    assert r"\caption{test/acc (\%): test/acc at the epoch of best val/acc" in tex


def test_no_marks_where_a_column_has_fewer_than_two_methods(tmp_path):
    trials, history = analysis.load_experiment(paper_grid(tmp_path, "one", losses=("ce",)))
    table = analysis.paper_table(trials, history)
    assert table["rank"].isna().all()
    md = analysis.format_paper_table(table, "markdown")
    assert "**" not in md and "<u>" not in md and "No best marked: no column has two methods" in md
    tex = analysis.format_paper_table(table, "latex")
    assert r"\textbf{" not in tex and r"\underline{" not in tex
    # two methods, but in one column only one has a value (every gce seed errored there)
    fates = {("gce", "asym", 0.2, s): "ERROR" for s in (0, 1, 2)}
    trials, history = analysis.load_experiment(paper_grid(tmp_path, "two", status=fates))
    table = analysis.paper_table(trials, history).set_index(["loss", "noise_type", "noise_rate"])
    assert math.isnan(table.loc[("ce", "asym", 0.2), "rank"])
    assert table.loc[("ce", "sym", 0.2), "rank"] in (1, 2) and table.loc[("gce", "sym", 0.2), "rank"] in (1, 2)
    md = analysis.format_paper_table(table.reset_index(), "markdown")
    ce = next(line for line in md.splitlines() if line.startswith("| ce |")).split(" | ")
    assert not ce[1].startswith(("**", "<u>")) and "Best per column in bold" in md


def test_failed_and_diverged_cells_and_missing_seeds(tmp_path):
    fates = {
        ("gce", "sym", 0.4, 1): "ERROR",
        **{("ce", "asym", 0.4, s): "DIVERGED" for s in (0, 1, 2)},
        **{("gce", "asym", 0.2, s): "ERROR" for s in (0, 1, 2)},
    }
    trials, history = analysis.load_experiment(paper_grid(tmp_path, status=fates))
    table = analysis.paper_table(trials, history)
    cell = table.set_index(["loss", "noise_type", "noise_rate"])
    assert cell.loc[("gce", "sym", 0.4), ["n", "n_failed"]].tolist() == [2, 1]
    assert cell.loc[("ce", "asym", 0.4), ["n", "n_failed", "n_diverged"]].tolist() == [0, 3, 3]
    md = analysis.format_paper_table(table, "markdown").splitlines()
    ce, gce = md[-2].split(" | "), md[-1].split(" | ")
    assert ce[2] == "diverged" and gce[1] == "errored"
    assert gce[4].rstrip(" |").endswith("(n=2)") and "(n=" not in gce[3]


def test_paired_test_known_p_value_and_scipy():
    from scipy import stats

    # differences 1, 2, 3: t = 2 / (1 / sqrt 3), df 2, two-sided p = 1 - t / sqrt(2 + t^2)
    out = analysis.paired_test([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    t = 2 / (1 / math.sqrt(3))
    assert out["p_ttest"] == pytest.approx(1 - t / math.sqrt(2 + t * t))
    assert out["p_wilcoxon"] == pytest.approx(0.25)  # exact: 2 * (1/2)^3
    half = 4.302652729911275 * 1 / math.sqrt(3)  # t(0.975, 2), from tables
    assert (out["diff_mean"], out["diff_ci95_low"], out["diff_ci95_high"]) == pytest.approx((2, 2 - half, 2 + half))
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.8, 0.02, 7), rng.normal(0.78, 0.02, 7)
    out = analysis.paired_test(a, b)
    assert out["p_ttest"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert out["p_wilcoxon"] == pytest.approx(stats.wilcoxon(a, b).pvalue)
    two = analysis.paired_test([0.9, 0.8], [0.7, 0.6])
    assert math.isnan(two["p_ttest"]) and two["test"] == "no test possible: 2 paired seed(s), fewer than 3"


def test_significance_in_table_is_paired_over_seeds(tmp_path):
    # gce beats ce by a seed-dependent margin; seed effects are shared (same noise draw)
    margins = {0: 0.02, 1: 0.03, 2: 0.025, 3: 0.035}
    specs = []
    for loss in ("ce", "gce"):
        for seed, margin in margins.items():
            test = 0.7 + 0.05 * seed + (margin if loss == "gce" else 0)
            specs.append(
                trial_spec(
                    f"{loss}{seed}",
                    {"loss": loss, "noise_type": "sym", "noise_rate": 0.4, "seed": seed},
                    [{"val/acc": 0.5, "test/acc": test}],
                )
            )
    specs.append(
        trial_spec(
            "gce_lone",
            {"loss": "gce", "noise_type": "sym", "noise_rate": 0.8, "seed": 0},
            [{"val/acc": 0.5, "test/acc": 0.3}],
        )
    )
    specs.append(
        trial_spec(
            "ce_lone",
            {"loss": "ce", "noise_type": "sym", "noise_rate": 0.8, "seed": 0},
            [{"val/acc": 0.5, "test/acc": 0.2}],
        )
    )
    trials, history = analysis.load_experiment(write_experiment(tmp_path, "sig", specs))
    table = analysis.paper_table(trials, history).set_index(["loss", "noise_rate"])
    from scipy import stats

    gce = [0.7 + 0.05 * s + m for s, m in margins.items()]
    ce = [0.7 + 0.05 * s for s in margins]
    row = table.loc[("gce", 0.4)]
    assert row["p_ttest"] == pytest.approx(stats.ttest_rel(gce, ce).pvalue) and row["p_ttest"] < 0.05
    assert row["p_wilcoxon"] == pytest.approx(stats.wilcoxon(gce, ce).pvalue)
    assert row["diff_mean"] == pytest.approx(0.0275) and row["n_pairs"] == 4
    assert stats.ttest_ind(gce, ce).pvalue > 0.05  # unpaired it would not be significant
    assert table.loc[("ce", 0.4), "test"] == "baseline"
    assert table.loc[("gce", 0.8), "test"].startswith("no test possible") and math.isnan(
        table.loc[("gce", 0.8), "p_ttest"]
    )
    md = analysis.format_paper_table(analysis.paper_table(trials, history), "markdown").splitlines()
    assert md[-1].split(" | ")[1].endswith("†") and not md[-1].rstrip(" |").endswith("†")  # 0.4 marked, 0.8 not


def test_rows_and_baseline_bad_input(three_losses):
    trials, history = analysis.load_experiment(three_losses)
    with pytest.raises(
        analysis.ExperimentError, match=r"row key 'optimizer' is not a config key .*varying keys: loss$"
    ):
        analysis.paper_table(trials, history, rows=["optimizer"])
    with pytest.raises(analysis.ExperimentError, match=r"baseline 'mae' is not a row of the table; rows: ce; gce; sce"):
        analysis.paper_table(trials, history, baseline="mae")
    assert analysis.paper_table(trials, history, baseline="gce").attrs["baseline"] == "gce"
    assert analysis.paper_table(trials, history, baseline=None)["p_ttest"].isna().all()


# ---------------------------------------------------------------------------------------------
# Several experiments
# ---------------------------------------------------------------------------------------------


def test_table_across_two_experiment_folders(tmp_path):
    ce = paper_grid(tmp_path, "ce_sweep", losses=("ce",))
    gce = paper_grid(tmp_path, "gce_sweep", losses=("gce",))
    trials, history = analysis.load_experiment([ce, gce])
    assert list(trials["experiment"].unique()) == ["ce_sweep", "gce_sweep"] and len(trials) == 24
    assert trials["trial_id"].is_unique and set(history["trial_id"]) == set(trials["trial_id"])
    table = analysis.paper_table(trials, history)
    assert table.attrs["rows"] == ["loss"] and table.attrs["baseline"] == "ce"
    together = table.set_index(["loss", "noise_type", "noise_rate"])["mean"]
    alone = analysis.paper_table(*analysis.load_experiment(gce)).set_index(["loss", "noise_type", "noise_rate"])["mean"]
    assert together.loc["gce"].equals(alone.loc["gce"])
    assert (table[table["loss"] == "gce"]["n_pairs"] == 3).all()  # paired across folders by seed

    # same configs in both: the experiment tells the methods apart
    again = paper_grid(tmp_path / "b", "ce_sweep_v2", losses=("ce",))
    both = analysis.paper_table(*analysis.load_experiment([ce, again]))
    assert both.attrs["rows"] == ["experiment"] and set(both["experiment"]) == {"ce_sweep", "ce_sweep_v2"}


def test_experiments_with_conflicting_metrics(tmp_path):
    a = write_experiment(tmp_path, "a", [trial_spec("t", {"seed": 0}, [{"val/acc": 0.5}])])
    b = write_experiment(
        tmp_path, "b", [trial_spec("t", {"seed": 0}, [{"val/loss": 0.5}])], metric="val/loss", mode="min"
    )
    with pytest.raises(
        analysis.ExperimentError,
        match=r"^the experiments record different metrics "
        r"\(a: val/acc \(max\), b: val/loss \(min\)\)",
    ):
        analysis.load_trials([a, b])


# ---------------------------------------------------------------------------------------------
# Console summary and report
# ---------------------------------------------------------------------------------------------


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+\.\d\d ± \d+\.\d\d", text)


def test_console_summary_and_report_agree(tmp_path):
    path = paper_grid(tmp_path, status={("gce", "sym", 0.4, 1): "ERROR", ("ce", "asym", 0.2, 2): "DIVERGED"})
    summary = analysis.sweep_summary(str(path))
    lines = summary.splitlines()
    assert lines[0] == (
        "test/acc (%): test/acc at the epoch of best val/acc (ties: earliest); "
        "mean ± std (n seeds) over seeds, columns: noise type"
    )
    assert lines[1].split() == ["loss", "noise_rate", "asym", "sym"]  # grid-shaped, not ranked
    assert [line.split()[:2] for line in lines[2:6]] == [["ce", "0.2"], ["ce", "0.4"], ["gce", "0.2"], ["gce", "0.4"]]
    assert lines[2].split()[2:] == ["75.50", "±", "0.71", "(2)", "82.00", "±", "1.00", "(3)"]  # seeds 0, 1: 75, 76
    assert lines[6] == "failed trials (left out of the cells): 1 errored, 1 diverged"
    # best by val/acc at its peak (gce, sym 0.2: base 0.83 + 0.05 over seeds), never by test
    assert lines[7] == (
        "best configuration by best val/acc over epochs: loss=gce, noise_type=sym, noise_rate=0.2: "
        "val/acc 89.00 ± 1.00 (3), test/acc 85.00 ± 1.00 (3)"
    )

    out = analysis.write_up(path)
    report = (out / "report.md").read_text()
    assert report.splitlines()[2] == "## Paper table"
    assert (out / "summary.txt").read_text() == summary
    paper = (out / "paper_table.md").read_text()
    assert sorted(_numbers(paper)) == sorted(_numbers("\n".join(lines[2:6])))
    assert "val/acc: best val/acc over epochs. Mean over seeds" in report.split("## Best configurations")[1]
    for name in ("paper_table.tex", "paper_table.csv", "noise_rate_curves.png"):
        assert (out / name).stat().st_size > 0
    csv = pd.read_csv(out / "paper_table.csv")
    assert {"p_ttest", "p_wilcoxon", "diff_ci95_low", "diff_ci95_high", "rule"} <= set(csv.columns)
    assert "confusion.png" not in {p.name for p in out.iterdir()}  # no confusion.json: skipped silently


def test_summary_with_nothing_to_show(tmp_path):
    path = write_experiment(tmp_path, "e", [trial_spec("t", {"seed": 0}, [{"val/acc": 0.5}])])
    with pytest.raises(analysis.ExperimentError, match="no trial reported 'test/acc'"):
        analysis.sweep_summary(path)


def test_cli_paper_two_experiments(tmp_path, capsys):
    ce = paper_grid(tmp_path, "ce_sweep", losses=("ce",))
    gce = paper_grid(tmp_path, "gce_sweep", losses=("gce",))
    out = tmp_path / "out"
    assert (
        main(
            [str(ce), str(gce), "--paper", "--select", "last", "--rows", "loss", "--baseline", "ce", "--out", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("test/acc (%): test/acc at the last epoch.")
    assert {p.name for p in out.iterdir()} == {"paper_table.md", "paper_table.tex", "paper_table.csv"}
    assert (out / "paper_table.md").read_text() in printed


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--paper", "--rows", "optimizer"],
            "error: row key 'optimizer' is not a config key of these trials; varying keys: loss\n",
        ),
        (["--paper", "--baseline", "mae"], "error: baseline 'mae' is not a row of the table; rows: ce; gce\n"),
        (
            ["--paper", "--metric", "val/top1"],
            "error: metric 'val/top1' was not reported by any trial; reported metrics: "
            "epoch, val/acc, test/acc, train/loss\n",
        ),
        (["--select", "best"], "error: unknown selection rule 'best'; choose one of best-val, last, last-k\n"),
        (["--select", "last-k", "--k", "0"], "error: last-k needs k >= 1 (an integer number of epochs), not 0\n"),
    ],
)
def test_cli_bad_input_exit_2(tmp_path, capsys, args, message):
    path = paper_grid(tmp_path)
    with pytest.raises(SystemExit) if "--select" in args else _no_raise() as raised:
        code = main([str(path), *args])
    code = raised.value.code if "--select" in args else code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err == message
    assert not (path / "report").exists()  # nothing written


class _no_raise:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_cli_help_and_usage_errors_import_no_pandas():
    for args in (["--help"], ["x", "--select", "nope"]):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "analysis", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
        assert result.returncode == (0 if args == ["--help"] else 2)
        assert imported and not imported & {"pandas", "matplotlib", "scipy", "pyarrow", "numpy"}


def test_analysis_imports_only_the_record_owner_from_trainables():
    """analysis reads records through their owner (trainables.experiment.records, .storage), takes the one
    t-quantile from trainables.experiment.confidence, the objective, selection rules, which scheduler stops pruned
    (scheduler_stops), error, the redaction of
    recorded --notify URLs and raysweep's release label from the same shared floor,
    and loads no training code, torch, Ray or sweep engine."""
    code = (
        "import sys, analysis.figures.search, analysis.writeup, analysis.status; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'trainables', 'sweeps', 'torch', 'ray'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    expected = [
        "trainables",
        "trainables.experiment",
        "trainables.experiment.confidence",
        "trainables.experiment.errors",
        "trainables.experiment.objective",
        "trainables.experiment.outcome",
        "trainables.experiment.records",
        "trainables.experiment.redaction",
        "trainables.experiment.release",
        "trainables.experiment.rules",
        "trainables.experiment.scheduler_stops",
        "trainables.experiment.storage",
    ]
    assert result.stdout.strip() == str(expected), result.stderr
    df = pd.DataFrame({"trial_id": ["a", "b"], "val/acc": [0.5, 0.7], "config/lr": [0.1, 0.01]})
    from analysis.figures.search import top_trials

    assert list(top_trials(df, k=1)["trial"]) == ["b"]  # default metric val/acc, mode max


# ---------------------------------------------------------------------------------------------
# Plots and confusion matrices
# ---------------------------------------------------------------------------------------------


def test_plot_paper_curves(three_losses):
    table = analysis.paper_table(*analysis.load_experiment(three_losses))
    fig = analysis.plot_paper_curves(table)
    assert [ax.get_title() for ax in fig.axes] == ["noise_type = asym", "noise_type = sym"]
    assert fig.get_suptitle() == "test/acc at the epoch of best val/acc (ties: earliest) vs noise rate"
    for ax in fig.axes:
        assert [line.get_label() for line in ax.lines] == ["ce", "gce", "sce"]
        assert len(ax.collections) == 3  # one 95 % CI band per method
        assert list(ax.lines[0].get_xdata()) == [0.2, 0.4]
    sym_gce = fig.axes[1].lines[1].get_ydata()
    assert sym_gce[0] == pytest.approx(
        100 * (np.mean([paper_base("gce", "sym", 0.2, s) for s in (0, 1, 2)]) + TEST_BUMP[1])
    )


PAIR_FLIP = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}


def _digits_confusion(flip: float) -> list[list[int]]:
    matrix = np.zeros((10, 10), dtype=int)
    for c in range(10):
        matrix[c, c] = 100
        if c in PAIR_FLIP:
            matrix[c, c] -= int(100 * flip)
            matrix[c, PAIR_FLIP[c]] += int(100 * flip)
    return matrix.tolist()


def test_load_confusion_and_plot(tmp_path):
    path = paper_grid(tmp_path)
    trials = analysis.load_trials(path)
    trial_dir = trials["trial_dir"].iloc[0]
    write_confusion(Path(trial_dir), last=_digits_confusion(0.4), best=_digits_confusion(0.1))
    best = analysis.load_confusion(trial_dir)
    assert best.shape == (10, 10) and best[2, 7] == 10 and best[2, 2] == 90
    assert analysis.load_confusion(trial_dir, "last")[5, 6] == 40
    assert list(analysis.per_class_accuracy(analysis.load_confusion(trial_dir, "last"))[[0, 2, 3]]) == [1.0, 0.6, 0.6]
    with pytest.raises(FileNotFoundError):
        analysis.load_confusion(trials["trial_dir"].iloc[1])
    with pytest.raises(analysis.ExperimentError, match="saved for best-val, last, not 'last-k'"):
        analysis.load_confusion(trial_dir, "last-k")
    fig = analysis.plot_confusion(best, "gce")
    matrix_ax, bars = fig.axes[0], fig.axes[1]
    assert matrix_ax.images[0].get_array().shape == (10, 10)
    assert {t.get_text() for t in matrix_ax.texts} == {"0.10"}  # the five pair flips, annotated
    assert len(matrix_ax.texts) == 5
    assert [p.get_width() for p in bars.patches][2] == pytest.approx(0.9)


def test_report_includes_confusion_of_best_configuration(tmp_path):
    path = paper_grid(tmp_path)
    trials = analysis.load_trials(path)
    best = trials[
        (trials["config/loss"] == "gce") & (trials["config/noise_type"] == "sym") & (trials["config/noise_rate"] == 0.2)
    ]
    for trial_dir in best["trial_dir"]:
        write_confusion(Path(trial_dir), last=_digits_confusion(0.4), best=_digits_confusion(0.2))
    out = analysis.write_up(path)
    assert (out / "confusion.png").stat().st_size > 0
    assert "![Confusion matrix of the best configuration](confusion.png)" in (out / "report.md").read_text()


def test_duplicate_trials_count_once_and_are_reported(tmp_path):
    """A copied trial folder and a second driver's run of the same cell (same config, seed included)
    are one trial: the newest counts, the console and the report say what was left out and where."""
    import shutil

    path = paper_grid(tmp_path)
    trials, _ = analysis.load_experiment(path)
    original = trials[
        (trials["config/loss"] == "ce")
        & (trials["config/noise_type"] == "sym")
        & (trials["config/noise_rate"] == 0.2)
        & (trials["config/seed"] == 0)
    ].iloc[0]
    folder = Path(original["trial_dir"])
    shutil.copytree(folder, path / "copied_by_hand")  # same trial id, same times: not in the state file
    rerun = path / "second_driver_trial"  # another driver's trial of the same cell, finished later
    rerun.mkdir()
    shutil.copy(folder / "params.json", rerun / "params.json")
    rows = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
    for row in rows:
        row.update(trial_id="zzzzz_00000", timestamp=row["timestamp"] + 3600, **{"test/acc": row["test/acc"] - 0.3})
    (rerun / "result.json").write_text("".join(json.dumps(row) + "\n" for row in rows))

    trials, history = analysis.load_experiment(path)
    assert len(trials) == 24 and trials["trial_id"].is_unique and set(history["trial_id"]) == set(trials["trial_id"])
    assert sorted(trials.attrs["duplicates"]) == sorted([str(folder), str(path / "copied_by_hand")])
    assert "zzzzz_00000" in set(trials["trial_id"])  # the newest is the one counted
    cell = analysis.paper_table(trials, history).set_index(["loss", "noise_type", "noise_rate"]).loc[("ce", "sym", 0.2)]
    expected = np.mean([paper_base("ce", "sym", 0.2, s) + TEST_BUMP[1] for s in (0, 1, 2)]) - 0.3 / 3
    assert cell["n"] == 3 and cell["mean"] == pytest.approx(expected)

    summary = analysis.sweep_summary(str(path))
    line = next(line for line in summary.splitlines() if line.startswith("duplicates left out: 2 trial(s)"))
    assert str(folder) in line and "copied_by_hand" in line
    report = (analysis.write_up(path) / "report.md").read_text()
    assert "- duplicates left out: 2 trial(s) with the same config (seed included)" in report
    # a different seed is another trial, not a duplicate; an unfinished repeat is not dropped either
    assert analysis.load_trials(paper_grid(tmp_path, "plain")).attrs["duplicates"] == []


def test_a_second_driver_session_in_the_folder_is_read_and_its_repeat_counted_once(tmp_path):
    """Two drivers (or an extended grid) leave two experiment_state files; each lists its own trials.
    Both are read, so the other session's trials keep their status (Tune's last result of a finished
    function trial is not marked `done`), and a repeated cell is one trial."""
    import shutil

    path = paper_grid(tmp_path, losses=("ce",))
    other = write_experiment(
        tmp_path / "elsewhere",
        "paper",
        [
            trial_spec(
                "sym_0.2_seed0",
                {"loss": "ce", "noise_type": "sym", "noise_rate": 0.2, "seed": 0, "epochs": 4},
                [{"epoch": e, "val/acc": 0.5, "test/acc": 0.5} for e in range(4)],
                trial_id="zzzzz_00000",
                start=7200.0,
            )
        ],
    )
    for folder in other.glob("train_*"):
        rows = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
        (folder / "result.json").write_text("".join(json.dumps({**r, "done": False}) + "\n" for r in rows))
        shutil.move(str(folder), str(path / (folder.name + "_b")))
    state = json.loads(next(other.glob("experiment_state-*.json")).read_text())
    state["trial_data"] = [
        [json.dumps({**json.loads(info), "relative_logdir": json.loads(info)["relative_logdir"] + "_b"}), meta]
        for info, meta in state["trial_data"]
    ]
    (path / "experiment_state-2026-01-02_00-00-00.json").write_text(json.dumps(state))

    trials, _ = analysis.load_experiment(path)
    assert len(trials) == 12 and (trials["status"] == "TERMINATED").all()
    assert "zzzzz_00000" in set(trials["trial_id"]) and len(trials.attrs["duplicates"]) == 1

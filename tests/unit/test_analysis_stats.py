"""One LaTeX escaper, one seed-statistics function, Holm's correction of the paper table's marks and
its bootstrap intervals (analysis/tables/formatting.py, analysis/statistics/stats.py), on constructed inputs (no
Ray)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis.__main__ import main
from analysis.statistics.stats import bootstrap_ci, holm, seed_stats
from analysis.tables.formatting import bare, format_number, format_value, latex_escape, sort_key
from tests.helpers.analysis_fixtures import trial_spec, write_experiment

# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, latex",
    [
        ("\\", r"\textbackslash{}"),
        ("{", r"\{"),
        ("}", r"\}"),
        ("$", r"\$"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("^", r"\textasciicircum{}"),
        ("~", r"\textasciitilde{}"),
        ("noise_rate", r"noise\_rate"),
        ("a\\b{c}", r"a\textbackslash{}b\{c\}"),  # the backslash is not escaped a second time
        ("10% & $5", r"10\% \& \$5"),
        ("x^2 ~ y", r"x\textasciicircum{}2 \textasciitilde{} y"),
        ("0.9 ± 0.1 †", r"0.9 $\pm$ 0.1 $^\dagger$"),
        ("– …", r"-- \dots{}"),
        ("p < 0.05", r"p $<$ 0.05"),
        ("plain text", "plain text"),
    ],
)
def test_latex_escape_table(text, latex):
    assert latex_escape(text) == latex


def test_names_numbers_and_sort_keys():
    assert bare("config/noise_rate") == "noise_rate" and bare("experiment") == "experiment"
    assert bare("config/train_loop_config/lr") == "train_loop_config/lr"
    assert [format_value(v) for v in (0.4, np.float64(1e-5), 3, "ce", None, math.nan, pd.NA)] == [
        "0.4",
        "1e-05",
        "3",
        "ce",
        "–",
        "–",
        "–",
    ]
    assert [format_number(v, 4) for v in (0.895712, np.int64(7), math.nan, 12345.678)] == [
        "0.8957",
        "7",
        "–",
        "1.235e+04",
    ]
    mixed = [("sym",), (0.4,), (None,), (0.2,), ("asym",), (math.nan,)]
    ordered = sorted(mixed, key=sort_key)
    assert ordered[:4] == [(0.2,), (0.4,), ("asym",), ("sym",)]  # numbers first, then strings
    assert ordered[4][0] is None or ordered[4][0] != ordered[4][0]  # None and NaN last


def test_paper_latex_escapes_names_once(tmp_path):
    specs = [
        trial_spec(
            f"{loss}{seed}",
            {"loss": loss, "noise_type": "sym", "noise_rate": 0.4, "seed": seed},
            [{"val/acc": 0.5, "test/acc": 0.7 + 0.01 * seed + (0.02 if loss != "ce" else 0)}],
        )
        for loss in ("ce", "gce_{q}$")
        for seed in range(3)
    ]
    trials, history = analysis.load_experiment(write_experiment(tmp_path, "names", specs))
    tex = analysis.format_paper_table(analysis.paper_table(trials, history), "latex")
    assert r"gce\_\{q\}\$ &" in tex  # the row label, escaped once
    assert r"\caption{test/acc (\%):" in tex and r"$\pm$" in tex


# ---------------------------------------------------------------------------------------------
# Seed statistics
# ---------------------------------------------------------------------------------------------


def test_seed_stats_hand_computed():
    out = seed_stats([0.80, 0.82, 0.84])
    assert out["n"] == 3 and out["mean"] == pytest.approx(0.82) and out["std"] == pytest.approx(0.02)
    assert out["ci95"] == pytest.approx(4.302652729911275 * 0.02 / math.sqrt(3))  # t(0.975, 2), from tables
    one = seed_stats([0.5])
    assert one["n"] == 1 and one["mean"] == 0.5 and math.isnan(one["std"]) and math.isnan(one["ci95"])
    none = seed_stats([])
    assert none["n"] == 0 and math.isnan(none["mean"])


def test_tables_and_paper_share_the_seed_statistics(tmp_path):
    values = {0: 0.71, 1: 0.75, 2: 0.80, 3: 0.78}
    specs = [
        trial_spec(f"ce{s}", {"loss": "ce", "noise_rate": 0.4, "seed": s}, [{"val/acc": 0.5, "test/acc": v}])
        for s, v in values.items()
    ]
    trials, history = analysis.load_experiment(write_experiment(tmp_path, "same", specs))
    expected = seed_stats(list(values.values()))
    paper = analysis.paper_table(trials, history, analysis.Objective(select="last")).iloc[0]
    best = analysis.best_runs(trials, analysis.Objective("test/acc", "max"), by=["loss"]).iloc[0]
    for row in (paper, best):
        assert (row["n"], row["mean"], row["std"], row["ci95"]) == pytest.approx(
            (4, expected["mean"], expected["std"], expected["ci95"])
        )


# ---------------------------------------------------------------------------------------------
# Holm's correction
# ---------------------------------------------------------------------------------------------


def test_holm_hand_computed():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> max so far 0.06)
    adjusted, reject = holm([0.01, 0.04, 0.03, 0.005, math.nan], alpha=0.05)
    np.testing.assert_allclose(adjusted[:4], [0.03, 0.06, 0.06, 0.02])
    assert math.isnan(adjusted[4])
    assert reject.tolist() == [True, False, False, True, False]
    # step-down stops at the first failure: 0.04 <= 0.05 alone, but 0.03 > 0.05 / 2 came first
    assert holm([0.03, 0.04])[1].tolist() == [False, False]
    assert holm([0.02, 0.04])[1].tolist() == [True, True]  # 0.02 <= 0.025, then 0.04 <= 0.05
    # the adjusted value is capped at 1 and never smaller than an earlier one
    np.testing.assert_allclose(holm([0.5, 0.9, 0.6])[0], [1.0, 1.0, 1.0])
    assert holm([])[0].size == 0


def _ten_comparisons(tmp_path):
    """ce and gce at 10 noise rates, 4 seeds each; gce beats ce by seed-dependent margins at
    rate 0.0 (paired p ~ 0.03) and by nothing on average at the other nine rates."""
    margins = {0.0: [0.02, 0.03, 0.01, 0.04]}
    specs = []
    for rate in [round(0.1 * i, 1) for i in range(10)]:
        gains = margins.get(rate, [0.01, -0.01, 0.02, -0.02])
        for seed, gain in enumerate(gains):
            for loss, extra in (("ce", 0.0), ("gce", gain)):
                config = {"loss": loss, "noise_type": "sym", "noise_rate": rate, "seed": seed}
                rows = [{"val/acc": 0.5, "test/acc": 0.6 + 0.05 * seed + extra}]
                specs.append(trial_spec(f"{loss}_{rate}_{seed}", config, rows))
    return analysis.load_experiment(write_experiment(tmp_path, "ten", specs))


def test_paper_table_uncorrected_p_003_among_ten_is_not_marked(tmp_path):
    trials, history = _ten_comparisons(tmp_path)
    table = analysis.paper_table(trials, history)
    cell = table.set_index(["loss", "noise_rate"]).loc[("gce", 0.0)]
    assert 0.02 < cell["p_ttest"] < 0.04  # significant on its own
    assert table.attrs["n_comparisons"] == 10 and table.attrs["correction"] == "holm"
    assert cell["p_ttest_holm"] == pytest.approx(min(1.0, 10 * cell["p_ttest"]))  # the smallest p: x m
    assert not cell["significant"] and not table["significant"].any()
    md = analysis.format_paper_table(table, "markdown")
    caption, body = md.splitlines()[0], md.splitlines()[2:]
    assert "†" not in "".join(body)
    assert "paired t-test over seeds" in caption and "Holm-corrected over 10 comparisons, α = 0.05" in caption
    assert r"Holm-corrected over 10 comparisons, $\alpha$ = 0.05" in analysis.format_paper_table(table, "latex")

    # the same cell alone (one comparison) keeps its mark: the correction, not the data, removed it
    alone = analysis.paper_table(trials[trials["config/noise_rate"] == 0.0], history)
    assert alone.attrs["n_comparisons"] == 1 and alone["significant"].any()
    assert "†" in analysis.format_paper_table(alone, "markdown").splitlines()[-1]


def test_paper_csv_has_raw_and_adjusted_p_and_the_rule(tmp_path):
    trials, history = _ten_comparisons(tmp_path)
    md, _, csv = analysis.write_paper_table(analysis.paper_table(trials, history), tmp_path / "out" / "paper_table")
    frame = pd.read_csv(csv)
    assert {"p_ttest", "p_ttest_holm", "p_wilcoxon", "p_wilcoxon_holm", "significant"} <= set(frame.columns)
    assert set(frame["correction"]) == {"holm over 10 comparisons, alpha=0.05"}
    tested = frame.dropna(subset=["p_ttest"])
    assert (tested["p_ttest_holm"] >= tested["p_ttest"]).all()


# ---------------------------------------------------------------------------------------------
# Bootstrap intervals
# ---------------------------------------------------------------------------------------------


def test_bootstrap_ci_is_scipys_bca_and_reproducible():
    from scipy import stats

    values = [0.71, 0.75, 0.80, 0.78, 0.74]
    low, high = bootstrap_ci(values)
    ref = stats.bootstrap((np.array(values),), np.mean, method="BCa", rng=np.random.default_rng(0))
    assert (low, high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high))
    assert low < np.mean(values) < high and bootstrap_ci(values) == (low, high)
    p_low, p_high = bootstrap_ci(values, method="percentile")
    assert min(values) <= p_low < p_high <= max(values)  # percentile bounds lie among resampled means
    assert all(math.isnan(v) for v in bootstrap_ci([0.5]) + bootstrap_ci([0.5, 0.5, 0.5]))


def test_paper_table_bootstrap_option_and_cli(tmp_path, capsys):
    trials, history = _ten_comparisons(tmp_path)
    plain = analysis.paper_table(trials, history)
    assert "boot_low" not in plain.columns and "[" not in analysis.format_paper_table(plain).splitlines()[-1]
    table = analysis.paper_table(trials, history, bootstrap=True)
    cell = table.set_index(["loss", "noise_rate"]).loc[("gce", 0.0)]
    gce = [0.6 + 0.05 * s + g for s, g in enumerate([0.02, 0.03, 0.01, 0.04])]
    assert (cell["boot_low"], cell["boot_high"]) == pytest.approx(bootstrap_ci(gce))
    assert table.attrs["bootstrap"] == "BCa"
    md = analysis.format_paper_table(table, "markdown")
    assert f"[{cell['boot_low'] * 100:.2f}, {cell['boot_high'] * 100:.2f}]" in md
    assert "BCa bootstrap 95 % interval of the mean (Efron 1987)" in md.splitlines()[0]

    assert main([str(tmp_path / "ten"), "--paper", "--bootstrap", "--out", str(tmp_path / "cli")]) == 0
    assert "BCa bootstrap" in capsys.readouterr().out
    frame = pd.read_csv(tmp_path / "cli" / "paper_table.csv")
    assert frame["boot_low"].notna().sum() == len(frame)


def test_a_trials_seed_interval_is_the_tables_t_interval_beyond_ten_seeds():
    from trainables.seed_group import seed_mean

    values = [0.80 + 0.01 * i for i in range(11)]
    out = seed_mean([{"val/acc": v, "epoch": 1} for v in values], range(11))
    std = float(np.std(values, ddof=1))
    assert out["val/acc_ci95"] == pytest.approx(seed_stats(values)["ci95"])  # one t-quantile: scipy's t(0.975, 10)
    assert out["val/acc_ci95"] > 1.96 * std / math.sqrt(11) * 1.1  # 2.228, not the normal 1.96

"""One of each (issue 39, item 4): one table writer, one percent rule with its format, the best-by-validation
table computed once per report and read by the summary, the report and `--json`."""

from __future__ import annotations

import json
import math

import analysis
from analysis.__main__ import main
from analysis.tables import summary
from analysis.tables.formatting import aligned_text, latex_tabular, markdown_table
from tests.helpers.analysis_fixtures import paper_grid
from trainables.experiment.rules import format_metric, show_value

HEADER, BODY = ["loss", "mean"], [["ce", "0.5"], ["gce_q", "12.25"]]


def test_one_writer_lays_out_markdown_latex_and_text():
    assert markdown_table(HEADER, BODY) == ["| loss | mean |", "|---|---|", "| ce | 0.5 |", "| gce_q | 12.25 |"]
    assert markdown_table(HEADER, BODY, n_keys=1)[1] == "|:--|--:|"
    assert latex_tabular(HEADER, BODY, 1) == [
        r"\begin{tabular}{lr}",
        r"\toprule",
        r"loss & mean \\",
        r"\midrule",
        r"ce & 0.5 \\",
        r"gce\_q & 12.25 \\",
        r"\bottomrule",
        r"\end{tabular}",
    ]
    spans = latex_tabular(HEADER, [["a_b", r"\textbf{1}"]], 1, align="c", above=["X"], latex_values=True)
    assert spans[:3] == [r"\begin{tabular}{lc}", r"\toprule", "X"] and spans[5] == r"a\_b & \textbf{1} \\"
    assert aligned_text(HEADER, BODY, 1) == ["loss   mean", "ce       0.5", "gce_q  12.25"]


def test_one_percent_rule_for_tables_the_progress_block_and_notifications():
    from sweeps.engine.run.notify import best_line

    assert (format_metric(0.834, True), format_metric(0.834, False)) == ("83.40", "0.8340")
    assert (show_value("val/acc", 0.834), show_value("val/loss", 0.834), show_value("acc", 98.94)) == (
        "83.40%",
        "0.8340",
        "98.9400",
    )

    class Result:
        config, metrics, metrics_dataframe, path = {"lr": 0.1}, {"val/acc": 0.834}, None, "a"

    assert best_line([Result()], analysis.Objective()) == "best: lr=0.1 (val/acc 83.40%)"  # as the progress block


def test_the_notify_best_line_breaks_ties_as_the_console_status_and_json():
    from analysis.progress import best_index
    from sweeps.engine.run.notify import best_line

    assert best_index([(0.5, 30.0), (0.7, 20.0), (0.7, 10.0), (0.7, 10.0)], "max") == 2  # earliest, then listed first
    assert best_index([(0.5, 30.0), (0.7, 10.0)], "min") == 0 and best_index([], "max") is None
    assert best_index([(0.7, math.inf), (0.7, 5.0)], "max") == 1  # an unknown start comes after every known one

    class Result:
        def __init__(self, name, value):
            self.config, self.metrics, self.metrics_dataframe, self.path = (
                {"trial": name},
                {"val/acc": value},
                None,
                name,
            )

    results = [Result(f"i{k}", 0.9) for k in range(1, 301)]  # 300 equal values, listed i1 ... i300
    starts = {f"i{k}": 1000.0 + (k - 110) % 300 for k in range(1, 301)}  # i110 started first
    assert best_line(results, analysis.Objective(), starts=starts) == "best: trial=i110 (val/acc 90.00%)"
    assert best_line(results, analysis.Objective()) == "best: trial=i1 (val/acc 90.00%)"  # no starts: the first listed
    results.append(Result("i301", 0.95))  # a better value wins whenever it started
    assert best_line(results, analysis.Objective(), starts=starts) == "best: trial=i301 (val/acc 95.00%)"


def test_the_report_computes_each_table_once_and_the_summary_and_json_read_the_same(tmp_path, monkeypatch, capsys):
    path = paper_grid(tmp_path, types=("sym",), rates=(0.2,), seeds=(0, 1))  # small: figures take the time
    made = []
    paper_table = summary.paper_table
    monkeypatch.setattr(summary, "paper_table", lambda *a, **k: made.append(a[2].table_metric) or paper_table(*a, **k))
    out = analysis.write_up(path)
    assert made == ["test/acc", "val/acc"]  # the paper table, then the validation table: once each
    assert analysis.write_report is analysis.write_up  # the first name of the write-up still works
    assert main([str(path), "--json"]) == 0 and made[2:] == ["test/acc", "val/acc"]
    document = json.loads(capsys.readouterr().out)
    text = (out / "summary.txt").read_text()
    best = ", ".join(f"{k}={v}" for k, v in document["best"]["key"].items())
    assert f"best configuration by best val/acc over epochs: {best}:" in text

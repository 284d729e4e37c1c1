"""Write the report of Ray Tune experiments, or only their paper table.

    python -m analysis runs/noise_grid [--metric val/acc --mode max --out DIR --svg]
    python -m analysis runs/ce runs/gce --paper [--select best-val|last|last-k] [--k 10]
                       [--rows loss] [--baseline ce] [--test-metric test/acc]
    python -m analysis runs/ce runs/gce --paper --bootstrap      # + bootstrap CIs of each cell
    python -m analysis runs/noise_grid --status [--watch 30]     # a running (or ended) sweep
    python -m analysis runs/noise_grid [--status] --json         # the same as JSON (docs/json-output.md)

Arguments are parsed and checked before pandas, matplotlib or scipy are imported, so --help and
usage errors are immediate. Bad input: one line ``error: ...`` on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from trainables.experiment.errors import ExperimentError
from trainables.experiment.objective import add_objective_flags
from trainables.experiment.rules import check_select

OBJECTIVE_FLAGS = ("metric", "mode", "test_metric", "select", "k")  # the flags of the `Objective` to report


def main(argv: list[str] | None = None, prog: str = "python -m analysis") -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if args.provenance:  # analysis/reading/provenance.py; reads no trial files
        from analysis.reading.provenance import print_provenance

        return print_provenance(args.experiment)
    try:
        check_select(args.select, args.k)
    except ExperimentError as error:
        parser.exit(2, f"error: {error}\n")
    if args.json and args.paper:
        parser.exit(2, "error: --json prints the summary table; use it without --paper\n")
    if args.watch is not None or args.status:
        return _status(parser, args)
    return _report(args)


def _parser(prog: str = "python -m analysis") -> argparse.ArgumentParser:
    """The flags of ``python -m analysis`` (no pandas, matplotlib or scipy imported); `prog`: how it
    was called (``raysweep analyze``, ``raysweep status``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "experiment",
        nargs="+",
        help="Ray Tune experiment folder(s) or URI(s) (s3://..., gs://...); several are compared",
    )
    add_objective_flags(
        parser,
        OBJECTIVE_FLAGS,
        later={
            "metric": "the sweep's, else val/acc",
            "mode": "the sweep's, for its metric; else loss, err, nll, perplexity: min, others max",
            "test_metric": "the sweep's, else test/acc when reported; a sweep without one: the tables show "
            "the metric and say so",
        },
    )
    parser.add_argument("--out", help="report folder (default: EXPERIMENT/report; several: reports/A+B)")
    parser.add_argument("--svg", action="store_true", help="also write SVG figures")
    parser.add_argument("--paper", action="store_true", help="write only paper_table.md/.tex/.csv and print it")
    parser.add_argument(
        "--rows",
        nargs="+",
        metavar="KEY",
        help="config keys that make a method row (default: every varying key but noise and seed)",
    )
    parser.add_argument(
        "--baseline", default="auto", help="method row to test the others against (default: the ce row when present)"
    )
    parser.add_argument(
        "--status",
        action="store_true",
        help="print the sweep's status (running, pending, done..., ETA, driver alive) and write nothing; "
        "exit 1 when its driver is gone with trials left",
    )
    parser.add_argument(
        "--watch", type=float, metavar="N", help="with --status: print it again every N seconds until the sweep ends"
    )
    parser.add_argument(
        "--bootstrap",
        action="store_true",
        help="add a BCa bootstrap 95%% interval of each paper-table cell's mean beside mean ± std "
        "(scipy.stats.bootstrap; docs/analysis-statistics.md)",
    )
    parser.add_argument(
        "--provenance", action="store_true", help="print what ran: command, commit, diff, versions, nodes"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary table (with --status: the status) as one JSON document and write nothing",
    )
    return parser


def _report(args) -> int:
    """The write-up in the report folder (or with --paper only the paper table): written, its summary printed."""
    warnings.formatwarning = lambda message, *_, **__: f"warning: {message}\n"
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede any figure
    source = args.experiment if len(args.experiment) > 1 else args.experiment[0]
    try:
        if args.json:
            return _json_summary(source, args)
        if args.paper:
            return _paper(source, args)
        from analysis.writeup import write_up

        out = write_up(
            source,
            args.out,
            _asked(args),
            formats=("png", "svg") if args.svg else ("png",),
            rows=args.rows,
            baseline=args.baseline,
            bootstrap=args.bootstrap,
        )
    except (ExperimentError, FileNotFoundError, PermissionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = out / "summary.txt"
    print((text if text.exists() else out / "best_runs.txt").read_text(), end="")
    print(f"report: {out / 'report.md'}")
    return 0


def _status(parser: argparse.ArgumentParser, args) -> int:
    """`--status [--watch N]`: the status block of one experiment (`analysis/status.py`)."""
    if len(args.experiment) > 1:
        parser.exit(2, f"error: --status takes one experiment, not {len(args.experiment)}\n")
    if args.watch is not None and not args.watch > 0:
        parser.exit(2, f"error: --watch={args.watch:g} must be > 0 seconds\n")
    from analysis.status import watch

    try:
        return watch(args.experiment[0], args.watch, as_json=args.json)
    except (ExperimentError, FileNotFoundError, PermissionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def _json_summary(source, args) -> int:
    """`--json`: the summary table as a `raysweep.summary/2` document on stdout (`analysis/tables/json_output.py`),
    also when no trial reported the metric (every trial errored): then its `problem` says so and the exit code
    is 1, as when no cell has a usable value."""
    from analysis.reading.load import load_experiment, resolve_objective
    from analysis.tables.json_output import dumps, summary_document

    trials, history = load_experiment(source)
    # no test metric: the cells are the metric's; a metric no trial reported: the document says so
    objective = resolve_objective(trials, history, _asked(args), reported=False)
    document = summary_document(trials, history, objective, rows=args.rows)
    print(dumps(document))
    return 1 if document["problem"] else 0


def _paper(source, args) -> int:
    """Only the paper table: written to --out (default: the report folder) and printed."""
    from pathlib import Path

    from analysis.reading.load import duplicates_line, load_experiment, resolve_objective
    from analysis.tables.paper import paper_table
    from analysis.tables.paper_format import format_paper_table, write_paper_table
    from analysis.writeup import writeup_folder

    trials, history = load_experiment(source)
    objective = resolve_objective(trials, history, _asked(args))  # no test metric: the metric's table, as said
    table = paper_table(trials, history, objective, rows=args.rows, baseline=args.baseline, bootstrap=args.bootstrap)
    out = Path(args.out) if args.out else writeup_folder(trials)
    written = write_paper_table(table, out / "paper_table")
    print(format_paper_table(table, "markdown"), end="")
    if duplicates_line(trials):
        print(duplicates_line(trials))
    print("paper table: " + ", ".join(str(p) for p in written))
    return 0


def _asked(args) -> dict:
    """The objective's fields given on the command line (None: the sweep's; see `resolve_objective`)."""
    return {name: getattr(args, name) for name in OBJECTIVE_FLAGS}


if __name__ == "__main__":
    sys.exit(main())

"""Write the report of a Ray Tune experiment and print its best-run table.

    python -m analysis runs/noise_grid [--metric val/acc --mode max --out DIR --svg]
"""

from __future__ import annotations

import argparse
import sys
import warnings

import matplotlib

matplotlib.use("Agg")  # no display needed; must precede any figure

from analysis.load import ExperimentError  # noqa: E402
from analysis.report import write_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="Ray Tune experiment folder or URI (s3://..., gs://...)")
    parser.add_argument("--metric", help="metric to rank by (default: the sweep's, else val/acc)")
    parser.add_argument("--mode", choices=("max", "min"), help="max or min (default: the sweep's)")
    parser.add_argument("--out", help="report folder (default: EXPERIMENT/report)")
    parser.add_argument("--svg", action="store_true", help="also write SVG figures")
    args = parser.parse_args(argv)

    warnings.formatwarning = lambda message, *_, **__: f"warning: {message}\n"
    try:
        out = write_report(args.experiment, args.out, args.metric, args.mode,
                           formats=("png", "svg") if args.svg else ("png",))
    except (ExperimentError, FileNotFoundError, PermissionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print((out / "best_runs.txt").read_text(), end="")
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

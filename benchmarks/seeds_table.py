"""The words and tables of `benchmarks/seeds_auto.py`'s side-by-side rows: one line per row while it runs,
and the Markdown tables of docs/seeds-auto.md (`--markdown`)."""

from __future__ import annotations


def _cell(result: dict, effect: float, decimals: int = 3) -> str:
    """`0.512, 8.4`: power (or false-claim rate) and seeds per method."""
    value = f"{result['rate']:.4f}" if effect == 0 else f"{result['rate']:.{decimals}f}"
    return f"{value}, {result['seeds']:.1f}"


def row_line(row: dict) -> str:
    """One side-by-side row in words, for the console."""
    what = "false claims" if row["effect_sd"] == 0 else "power"
    ada = row["adastop"]
    adastop = "; ".join(f"alpha {a}: {_cell(ada[a], row['effect_sd'])}" for a in ada)
    missed = f"; MISSED: {row['goals_missed']}" if row.get("goals_missed") else ""
    return (
        f"{row['noise']}, rho {row['rho']:g}, effect {row['effect_sd']:g} sd ({row['draws']} draws): {what}, seeds "
        f"per method: rule {_cell(row['rule_combined'], row['effect_sd'])} (paired "
        f"{_cell(row['rule_paired'], row['effect_sd'])}, unpaired {_cell(row['rule_unpaired'], row['effect_sd'])}); "
        f"AdaStop {adastop}; fixed 10 seeds: paired t {row['fixed_paired']['rate']:.3f}, "
        f"Welch t {row['fixed_welch']['rate']:.3f}{missed}"
    )


def markdown(result: dict) -> str:
    """The side-by-side tables: normal noise with every pair test, then every noise with the default."""
    ada = result["adastop"]
    nominal, matched = str(ada["alpha_nominal"]), str(ada["alpha_matched"])
    rows = result["rows"]
    lines = [
        "| rho | effect (sd) | raysweep (combined) | paired | unpaired | AdaStop, alpha "
        f"{matched} (matched) | AdaStop, alpha {nominal} | fixed 10: paired t | Welch t | goals |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted((r for r in rows if r["noise"] == "normal"), key=lambda r: (r["rho"], r["effect_sd"])):
        e = r["effect_sd"]
        lines.append(
            f"| {r['rho']:g} | {e:g}{' (error)' if e == 0 else ''} | {_cell(r['rule_combined'], e)} | "
            f"{_cell(r['rule_paired'], e)} | {_cell(r['rule_unpaired'], e)} | {_cell(r['adastop'][matched], e)} | "
            f"{_cell(r['adastop'][nominal], e)} | {r['fixed_paired']['rate']:.3f} | {r['fixed_welch']['rate']:.3f} | "
            f"{r['goals_missed'] or 'met'} |"
        )
    others = [r for r in rows if r["noise"] != "normal"]
    if others:
        lines += [
            "",
            f"| noise | rho | effect (sd) | raysweep (combined) | AdaStop, alpha {matched} | AdaStop, alpha {nominal} "
            "| fixed 10: paired t | Welch t | goals |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(others, key=lambda r: (r["noise"], r["rho"], r["effect_sd"])):
            e = r["effect_sd"]
            lines.append(
                f"| {r['noise']} | {r['rho']:g} | {e:g}{' (error)' if e == 0 else ''} | {_cell(r['rule_combined'], e)} "
                f"| {_cell(r['adastop'][matched], e)} | {_cell(r['adastop'][nominal], e)} | "
                f"{r['fixed_paired']['rate']:.3f} | {r['fixed_welch']['rate']:.3f} | {r['goals_missed'] or 'met'} |"
            )
    if result.get("sweeps"):
        lines += ["", *sweep_table(result["sweeps"])]
    return "\n".join(lines) + "\n"


def sweep_table(rows: list[dict]) -> list[str]:
    """The sweep rows (12 cells x 3 methods) as Markdown lines: the rule against the fixed 10-seed grids (paired
    t-tests and Welch's; rows of before round 4 have no Welch grid and show "-" there)."""
    lines = [
        "| rho | effect (sd) | false claims per cell, rule | fixed paired | power, rule | fixed paired | fixed Welch "
        "| ratio to the better | seeds per cell, rule | fixed | goals |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        welch, ratio = r.get("fixed_welch_power"), r.get("power_ratio")
        power = (
            "- | - | - | -"
            if not r["effect_sd"]
            else f"{r['sequential_power']:.3f} | {r['fixed_power']:.3f} | "
            + (f"{welch:.3f} | {ratio:.3f}x" if welch is not None else "- | -")
        )
        lines.append(
            f"| {r['rho']:g} | {r['effect_sd']:g} | {r['sequential_fwer']:.4f} | {r['fixed_fwer']:.4f} | {power} | "
            f"{r['sequential_seeds_per_cell']:.1f} | {r['fixed_seeds_per_cell']:.0f} | "
            f"{r.get('goals_missed', '-') or 'met'} |"
        )
    return lines

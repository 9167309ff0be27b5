"""The table (case, figure, ratio, target, met?), the JSON results and the chart."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.freshness import PATHS

GIB = 1024 ** 3

# the targets (2 cores, 24 GiB): (name, comparison, bound)
TARGETS = {
    "bulk_vs_floor": ("<=", 2.5),
    "handler_calls_per_s": (">=", 300_000),
    "incremental_ratio": ("<=", 1.2),
    "prior_art_ratio": (">=", 100),
    "peak_rss_gib": ("<=", 6.0),
    "scaling_ratio": ("<=", 1.3),
    # issue 35: warm by default
    "freshness_cli_warm_s": ("<=", 3.0),
    "freshness_cli_first_s": ("<=", 12.0),
    "freshness_dagster_s": ("<=", 5.0),
    "state_peer_ratio": (">=", 2.0),
    # issue 22, side by side with c8cd829 (bench/studies/side_by_side.py): new / old, and the new side's driver
    "wide_pass_1m_ratio": ("<=", 0.3),
    "wide_pass_600k_ratio": ("<=", 0.5),
    "wide_pass_driver_rss_gib": ("<=", 1.0),
    "store_growth_ratio": ("<=", 1.2),
}


def met(key: str, value: float | None) -> bool | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    op, bound = TARGETS[key]
    return value <= bound if op == "<=" else value >= bound


def target_text(key: str) -> str:
    op, bound = TARGETS[key]
    return f"{'≤' if op == '<=' else '≥'} {bound:,g}"


def summarise(results: dict) -> dict:
    """Per case, the figures the table shows, from the workers' raw results."""
    sizes = sorted((t for w in results["workers"] for t in w["tasks"] if t["kind"] == "size"),
                   key=lambda t: t["events"])
    prior = next((t for w in results["workers"] for t in w["tasks"] if t["kind"] == "prior_art"), None)
    tick = next((t for w in results["workers"] for t in w["tasks"] if t["kind"] == "tick"), None)
    freshness = next((t for w in results["workers"] for t in w["tasks"] if t["kind"] == "freshness"), None)
    largest = sizes[-1] if sizes else None
    cases: dict = {}
    cases["bulk"] = [{"events": s["events"], **{k: s["bulk"][k] for k in (
        "wall_s", "spark_start_s", "wall_with_start_s", "ingest_s", "spark_s", "commit_s", "events_per_s",
        "events_per_s_with_start", "handler_calls", "handler_calls_per_s", "handler_calls_per_core_s",
        "handler_calls_per_s_walk_wall", "handler_calls_per_wall_s", "peak_rss_bytes", "cores")},
        "conserved": all(v["conserved"] for v in s["bulk"]["views"].values())} for s in sizes
        if s["events"] in (sizes[0]["events"], largest["events"])]
    cases["floor"] = [{"events": s["events"], "bulk_s": s["bulk"]["wall_s"], "floor_s": s["floor"]["wall_s"],
                       "ratio": s["floor"]["ratio"]} for s in sizes]
    cases["duckdb_peer"] = [{"events": s["events"], "inorder_ordering_s": s["peer"]["inorder"]["wall_s"],
                             "duckdb_s": s["peer"]["duckdb"]["wall_s"], "ratio": s["peer"]["ratio"],
                             "counts_match": s["peer"]["counts_match"], "inorder_counts": s["peer"]["inorder"]["counts"],
                             "duckdb_counts": s["peer"]["duckdb"]["counts"]} for s in sizes if "peer" in s]
    cases["spark_state_peer"] = [_spark_peer_case(s["events"], s["state_peer"]) for s in sizes if "state_peer" in s]
    if prior:
        inorder_rate = largest["bulk"]["events_per_s"] if largest else float("nan")
        cases["prior_art"] = {
            "sample_events": prior["sample_events"], "events_per_s": prior["prior_art"]["events_per_s"],
            "wall_s": prior["prior_art"]["wall_s"], "inorder_bulk_events": largest["events"] if largest else None,
            "inorder_bulk_events_per_s": inorder_rate, "ratio": inorder_rate / prior["prior_art"]["events_per_s"],
            "inorder_on_sample_events_per_s": prior["inorder_on_sample"]["events_per_s"],
            "ratio_on_sample": prior["ratio_on_sample"],
            "counts_match": all(c["match"] for c in prior["check"].values()), "check": prior["check"]}
    cases["incremental"] = [{"store_events": s["events"], "batch_events": s["incremental"]["full"]["events"],
                             "empty_s": s["incremental"]["empty"]["latency_s"],
                             "onto_store_s": s["incremental"]["full"]["latency_s"], "ratio": s["incremental"]["ratio"],
                             "rounds": s["incremental"]["rounds"], "empty_samples_s": s["incremental"]["empty"]["samples_s"],
                             "onto_store_samples_s": s["incremental"]["full"]["samples_s"]}
                            for s in sizes if "incremental" in s]
    if tick:
        cases["tick"] = {k: tick[k] for k in ("blocked_streams", "blocked_pairs", "latency_s", "spark_s", "commit_s",
                                               "gaps_skipped", "timed_out_as_expected", "blocked_pairs_per_s")}
    if freshness:
        cases["freshness"] = {k: v for k, v in freshness.items() if k != "kind"}
    cases["scaling"] = [{"events": s["events"], "s_per_million": s["bulk"]["wall_s"] / (s["events"] / 1e6),
                         "floor_s_per_million": s["floor"]["wall_s"] / (s["events"] / 1e6)} for s in sizes]
    return cases


def _spark_peer_case(events: int, result: dict) -> dict:
    peer = result["peer"]
    return {"events": events, "inorder_ordering_s": result["inorder"]["wall_s"], "peer_s": peer["wall_s"],
            "ratio": result["ratio"], "equal": result["equal"], "streams_differing": result["streams_differing"],
            "micro_batches": peer["micro_batches"], "entries": peer["entries"],
            "inorder_counts": result["inorder"]["counts"], "peer_counts": peer["counts"],
            "not_expressed": result["not_expressed"]}


def table_rows(cases: dict) -> list[dict]:
    rows: list[dict] = []

    def row(case: str, figure: str, ratio: float | None = None, key: str | None = None) -> None:
        ok = met(key, ratio) if key else None
        rows.append({"case": case, "figure": figure, "ratio": ratio, "target": target_text(key) if key else "",
                     "met": ok, "target_key": key})

    bulk = cases.get("bulk", [])
    for i, b in enumerate(bulk):
        last = i == len(bulk) - 1
        n = f"{b['events']:,}"
        row(f"1 bulk {n}", f"{b['wall_s']:.1f} s ({b['wall_with_start_s']:.1f} s with Spark start "
                           f"{b['spark_start_s']:.1f} s); {b['events_per_s']:,.0f} events/s"
                           f"{'' if b['conserved'] else '; NOT CONSERVED'}")
        row(f"1 bulk {n}", f"handler calls/s ({b['handler_calls']:,} calls; per walk CPU-second × {b['cores']} "
                           f"cores; {b['handler_calls_per_s_walk_wall']:,.0f}/s by the walks' wall time, "
                           f"{b['handler_calls_per_wall_s']:,.0f}/s of the whole run)",
            b["handler_calls_per_s"], "handler_calls_per_s" if last else None)
        row(f"1 bulk {n}", "peak RSS GiB (driver + JVM + Python workers)", b["peak_rss_bytes"] / GIB,
            "peak_rss_gib" if last else None)
    for i, f in enumerate(cases.get("floor", [])):
        last = i == len(cases["floor"]) - 1
        row(f"2 floor {f['events']:,}", f"bulk {f['bulk_s']:.1f} s / Spark floor {f['floor_s']:.1f} s", f["ratio"],
            "bulk_vs_floor" if last else None)
    for p in cases.get("duckdb_peer", []):
        row(f"3 DuckDB peer {p['events']:,}", f"inorder ordering {p['inorder_ordering_s']:.1f} s / DuckDB "
                                              f"{p['duckdb_s']:.1f} s; counts match: {p['counts_match']}", p["ratio"])
    for p in cases.get("spark_state_peer", []):
        row(f"8 Spark peer {p['events']:,}", f"peer / inorder: transformWithStateInPandas {p['peer_s']:.1f} s / "
                                             f"inorder ordering {p['inorder_ordering_s']:.1f} s; counts and "
                                             f"watermarks equal: {p['equal']}", p["ratio"], "state_peer_ratio")
    if "prior_art" in cases:
        p = cases["prior_art"]
        row(f"4 prior art {p['sample_events']:,}",
            f"{p['events_per_s']:,.0f} events/s per-message vs inorder {p['inorder_bulk_events_per_s']:,.0f} "
            f"(bulk {p['inorder_bulk_events']:,}); on the sample {p['ratio_on_sample']:.1f}×; "
            f"counts match: {p['counts_match']}", p["ratio"], "prior_art_ratio")
    inc = cases.get("incremental", [])
    if inc:
        row("5 incremental onto 0", f"{inc[0]['batch_events']:,} events: {inc[0]['empty_s']:.2f} s")
    for i, r in enumerate(inc):
        row(f"5 incremental onto {r['store_events']:,}",
            f"{r['onto_store_s']:.2f} s / empty {r['empty_s']:.2f} s (medians of {r['rounds']} interleaved "
            f"rounds, same session)", r["ratio"],
            "incremental_ratio" if i == len(inc) - 1 else None)
    if "tick" in cases:
        t = cases["tick"]
        row(f"6 tick {t['blocked_streams']:,} blocked",
            f"{t['latency_s']:.2f} s; {t['blocked_pairs_per_s']:,.0f} blocked (view, stream)/s; "
            f"half timed out: {t['timed_out_as_expected']}")
    scaling = cases.get("scaling", [])
    for s in scaling:
        row(f"7 scaling {s['events']:,}", f"{s['s_per_million']:.1f} s per million events "
                                          f"(floor {s['floor_s_per_million']:.1f})")
    if len(scaling) >= 2:
        row("7 scaling", f"s/M at {scaling[-1]['events']:,} / at {scaling[0]['events']:,}",
            scaling[-1]["s_per_million"] / scaling[0]["s_per_million"], "scaling_ratio")
    fresh = cases.get("freshness")
    for key, label, target, median in PATHS if fresh else ():
        if key in fresh:
            result = fresh[key]
            parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in result["parts_median"].items())
            row(f"9 freshness {fresh['batch_events']:,} onto {fresh['store_events']:,}",
                f"{label}: median of {fresh['rounds']} s ({parts})", result[median], target)
    return rows


def format_table(rows: list[dict]) -> str:
    def cell_ratio(r):
        v = r["ratio"]
        return "" if v is None else (f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.2f}")

    def cell_met(r):
        return "" if r["met"] is None else ("yes" if r["met"] else "no")

    header = ("case", "figure", "ratio", "target", "met?")
    body = [(r["case"], r["figure"], cell_ratio(r), r["target"], cell_met(r)) for r in rows]
    widths = [max(len(str(x[i])) for x in [header, *body]) for i in range(5)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, body)])


def chart(cases: dict, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,g}")

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    scaling = cases.get("scaling", [])
    if scaling:
        x = [s["events"] for s in scaling]
        left.plot(x, [s["s_per_million"] for s in scaling], "o-", label="inorder run (3 views)")
        left.plot(x, [s["floor_s_per_million"] for s in scaling], "s--", label="bare Spark floor")
        left.set_xscale("log")
        left.set_xticks(x)
        left.xaxis.set_major_formatter(plain)
        left.xaxis.set_minor_formatter(NullFormatter())
        left.set_xlabel("events")
        left.set_ylabel("seconds per million events")
        left.set_ylim(bottom=0)
        left.set_title("Scaling")
        left.legend()
    targeted = [r for r in rows if r["target_key"] and r["ratio"] is not None]
    if targeted:
        labels = [f"{r['case']}\n{r['target_key']}" for r in targeted]
        # headroom: bound / figure for a ≤ target, figure / bound for a ≥ target, so ≥ 1 is met for all
        values = [(TARGETS[r["target_key"]][1] / r["ratio"] if TARGETS[r["target_key"]][0] == "<=" else
                   r["ratio"] / TARGETS[r["target_key"]][1]) if r["ratio"] else float("nan") for r in targeted]
        colours = ["tab:green" if r["met"] else "tab:red" for r in targeted]
        right.barh(labels, values, color=colours)
        right.axvline(1.0, color="black", linewidth=1)
        right.set_xscale("log")
        right.xaxis.set_major_formatter(plain)
        right.xaxis.set_minor_formatter(NullFormatter())
        right.set_xlabel("headroom against the target (≥ 1: met)")
        right.set_title("Targets")
        right.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict, folder: Path, stamp: str, latest: str = "latest.json") -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stamp}.json"
    text = json.dumps(results, indent=1, default=str)
    path.write_text(text)
    (folder / latest).write_text(text)
    return path, folder / latest

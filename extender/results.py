"""The rows of a benchmark run and how they read: result files and the text table.

The bottom of the benchmark's layers (`.importlinter`): `benchmarking` (the
simulator bench and the `bench`/`check` commands) and `clusterbench` (the same
on a cluster), `reporting` (pictures, report.md) and the demo all build on it,
and it imports none of them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from extender.planner import metrics, model, simulating


@dataclass
class Row:
    scenario: model.Scenario
    policy: str
    metrics: metrics.Metrics
    plan_ms: dict[str, float]
    run: simulating.Run | None = None
    extra: dict[str, Any] | None = None


def result_document(row: Row) -> dict[str, Any]:
    """MODEL.md's result file, version 1 (plus optional extra fields)."""
    assert row.run is not None
    m = row.metrics
    doc: dict[str, Any] = {
        "version": 1,
        "scenario": row.scenario.name,
        "policy": row.policy,
        "gpus": row.scenario.cluster.gpus,
        "steps": row.scenario.duration_steps,
        "grid": row.run.named_grid(),
        "metrics": m.result_block(),
        "plan_ms": row.plan_ms,
        "waits": [w.__dict__ for w in m.waits],
    }
    if row.extra:
        doc.update(row.extra)
    return doc


def format_table(rows: list[Row], cluster_gap: dict[tuple[str, str], Row] | None = None) -> str:
    head = (
        f"{'scenario':19s} {'policy':15s} {'util%':>6s} {'Δpts':>6s} {'value':>9s} {'Δ%':>7s} "
        f"{'RT SL':>6s} {'done':>6s} {'p95wait':>7s} {'plan p50':>9s} {'p99 ms':>7s}"
    )
    lines = [head, "-" * len(head)]
    fifo = {r.scenario.name: r for r in rows if r.policy == "fifo"}
    last = None
    for r in rows:
        if last is not None and r.scenario.name != last:
            lines.append("")
        last = r.scenario.name
        base = fifo.get(r.scenario.name)
        m = r.metrics
        dp = f"{m.utilization - base.metrics.utilization:+6.1f}" if base else "     -"
        dv = (
            f"{100 * (m.value / base.metrics.value - 1):+6.1f}%"
            if base and base.metrics.value
            else "      -"
        )
        lines.append(
            f"{r.scenario.name:19s} {r.policy:15s} {m.utilization:6.1f} {dp} {m.value:9.0f} {dv} "
            f"{100 * m.realtime_service_level:5.1f}% {m.jobs_completed:>3d}/{m.jobs_total:<2d} "
            f"{m.top_priority_p95_wait():7.1f} {_ms(r.plan_ms, 'p50', 9)} "
            f"{_ms(r.plan_ms, 'p99', 7)}"
        )
    return "\n".join(lines)


def _ms(plan_ms: dict[str, float], key: str, width: int) -> str:
    """A plan-time cell; blank where no plan was timed here (cluster replays)."""
    if not plan_ms.get("max"):
        return " " * (width - 1) + "-"
    return f"{plan_ms[key]:{width}.3f}"


def summary(rows: list[Row]) -> str:
    """Mean gains of gpuroster over fifo, and where it does not beat every peer."""
    out = []
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.scenario.name, {})[r.policy] = r
    gains = []
    for name, pols in by.items():
        g, f = pols.get("gpuroster"), pols.get("fifo")
        if not g or not f:
            continue
        gain = 100 * (g.metrics.value / f.metrics.value - 1) if f.metrics.value else 0.0
        gains.append(gain)
        beaten = [
            p
            for p, r in pols.items()
            if p not in ("gpuroster", "gpuroster-full") and r.metrics.value >= g.metrics.value
        ]
        if beaten:
            out.append(f"  {name}: gpuroster's value does not beat {', '.join(beaten)}")
    if gains:
        out.insert(
            0,
            f"gpuroster vs fifo: mean value gain {statistics.mean(gains):+.1f}% over "
            f"{len(gains)} scenarios (min {min(gains):+.1f}%, max {max(gains):+.1f}%)",
        )
    return "\n".join(out)


# --- Markdown: the tables the README and docs/benchmarks.md carry ---------------------------
# `make results` writes these between marker comments, and tests/test_results.py fails when
# a published table differs from what they print now, so no figure is typed by hand.

PEERS_EXCLUDED = ("fifo", "gpuroster", "gpuroster-full")


def _gain(m: metrics.Metrics, base: metrics.Metrics) -> str:
    return f"{100 * (m.value / base.value - 1):+.1f}%" if base.value else "-"


def _by_scenario(rows: list[Row]) -> dict[str, dict[str, Row]]:
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.scenario.name, {})[r.policy] = r
    return by


def best_peer(pols: dict[str, Row]) -> Row | None:
    """The policy other than fifo and gpuroster with the highest value (ties: the first)."""
    peers = [r for p, r in pols.items() if p not in PEERS_EXCLUDED]
    return max(peers, key=lambda r: r.metrics.value, default=None)


def markdown_headline(rows: list[Row]) -> str:
    """fifo, the best peer and gpuroster per scenario: utilization, value, service level."""
    lines = [
        "| scenario | GPUs | fifo util | fifo value | fifo RT SL | best peer | peer util "
        "| peer value (vs fifo) | peer RT SL | gpuroster util | gpuroster value (vs fifo) "
        "| gpuroster RT SL |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    gains: dict[str, list[float]] = {}
    for name, pols in _by_scenario(rows).items():
        f, g, peer = pols.get("fifo"), pols.get("gpuroster"), best_peer(pols)
        if f is None or g is None or peer is None:
            continue
        fm, gm, pm = f.metrics, g.metrics, peer.metrics
        lines.append(
            f"| {name} | {f.scenario.cluster.gpus} | {fm.utilization:.1f}% | {fm.value:.0f} "
            f"| {100 * fm.realtime_service_level:.1f}% | {peer.policy} "
            f"| {pm.utilization:.1f}% | {pm.value:.0f} ({_gain(pm, fm)}) "
            f"| {100 * pm.realtime_service_level:.1f}% | **{gm.utilization:.1f}%** "
            f"| **{gm.value:.0f} ({_gain(gm, fm)})** | {100 * gm.realtime_service_level:.1f}% |"
        )
        for r in pols.values():
            if fm.value and r.policy != "fifo":
                gains.setdefault(r.policy, []).append(100 * (r.metrics.value / fm.value - 1))
    if gains:
        lines.append("")
        lines.append("Mean value gain over fifo: " + ", ".join(
            f"{p} {statistics.mean(v):+.1f}%" for p, v in gains.items()) + ".")
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    """Every policy on every scenario, MODEL.md's metrics (no plan times: they vary by run)."""
    lines = [
        "| scenario | policy | util | Δ points | value | vs fifo | RT SL | jobs done "
        "| p95 wait, top priority (steps) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pols in _by_scenario(rows).values():
        f = pols.get("fifo")
        for r in pols.values():
            m = r.metrics
            dp = f"{m.utilization - f.metrics.utilization:+.1f}" if f else "-"
            dv = _gain(m, f.metrics) if f and r is not f else ""
            lines.append(
                f"| {r.scenario.name} | {r.policy} | {m.utilization:.1f}% | {dp} "
                f"| {m.value:.0f} | {dv} | {100 * m.realtime_service_level:.1f}% "
                f"| {m.jobs_completed}/{m.jobs_total} | {m.top_priority_p95_wait():.1f} |"
            )
    return "\n".join(lines)


def markdown_scenarios(rows: list[Row]) -> str:
    """What each scenario is: its size and the description its file gives."""
    lines = ["| scenario | GPUs | jobs | services | what it stresses |", "|---|---:|---:|---:|---|"]
    for pols in _by_scenario(rows).values():
        s = next(iter(pols.values())).scenario
        lines.append(f"| {s.name} | {s.cluster.gpus} | {len(s.jobs)} | {len(s.services)} "
                     f"| {s.description} |")
    return "\n".join(lines)

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

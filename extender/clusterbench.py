"""`gpuroster bench --cluster local | --kubeconfig PATH`: the scenarios on a real cluster.

For each scenario and policy (fifo and gpuroster by default) the scenario is
replayed into the cluster in compressed time with the real kube-scheduler and
the peer of that name deciding (`extender.replay`); the grid read back
is checked for legality, judged by the same metrics as the simulator, written
as a version-1 result file, and compared with the simulator's run of the same
policy: the agreement columns show the gap and the notes say where and why.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extender import replay, reporting, scenarios
from extender.planner import legality, metrics, model, policies, simulating
from extender.replay import Replay, peers

UTIL_POINTS = 2.0  # agreement with the simulator: utilization points, value percent
VALUE_PERCENT = 3.0
DEFAULT_STEP_SECONDS = 2.0


@dataclass
class ClusterRow:
    scenario: model.Scenario
    policy: str
    cluster: metrics.Metrics
    sim: metrics.Metrics | None  # None for a peer the simulator does not run
    replay: Replay
    illegal: list[str]
    seconds: float

    @property
    def util_gap(self) -> float:
        return self.cluster.utilization - self.sim.utilization if self.sim else 0.0

    @property
    def value_gap(self) -> float:
        if self.sim is None or not self.sim.value:
            return 0.0
        return 100 * (self.cluster.value / self.sim.value - 1)

    @property
    def agrees(self) -> bool:
        """Within the bounds of the simulator's run; a peer it does not run (the stock
        scheduler, Kueue) is scored, rules broken included, not compared."""
        if self.sim is None:
            return True
        return (
            not self.illegal
            and abs(self.util_gap) <= UTIL_POINTS
            and abs(self.value_gap) <= VALUE_PERCENT
        )


def cluster_violations(s: model.Scenario, rep: Replay) -> list[str]:
    """MODEL.md's rules on the grid read back, with the swap cap judged on what the
    cluster does: service pods carry no GPU identity (the scheduler counts GPUs per
    node), so a service's swaps are its pods in plus pods out between steps; which
    GPU index a pod is drawn on in the rebuilt grid is bookkeeping."""
    return legality.violations(s, rep.grid, churn=rep.churn)


def run(
    s: model.Scenario,
    policy: str,
    kubeconfig: str,
    port: int,
    step_seconds: float,
    work_dir: Path,
    progress: bool,
) -> ClusterRow:
    label = f"{s.name} / {policy} (cluster)"

    def tick(done: int, total: int) -> None:
        if progress:
            sys.stderr.write(f"\r  {label:44s} step {done}/{total}")
            sys.stderr.flush()

    t = time.time()
    rep = replay.play(
        s, policy, kubeconfig, port, step_seconds=step_seconds, work_dir=work_dir, progress=tick
    )
    if progress:
        sys.stderr.write("\r" + " " * 80 + "\r")
    illegal = cluster_violations(s, rep)
    sim = (
        metrics.compute(s, simulating.simulate(s, policy).grid)
        if policy in policies.names()
        else None
    )
    return ClusterRow(s, policy, metrics.compute(s, rep.grid), sim, rep, illegal, time.time() - t)


def format_table(rows: list[ClusterRow]) -> str:
    head = (
        f"{'scenario':19s} {'policy':14s} {'util%':>6s} {'Δpts':>6s} {'value':>8s} {'Δ%':>7s} "
        f"{'RT SL':>6s} {'done':>6s} {'sim util':>8s} {'gap':>6s} {'sim value':>9s} "
        f"{'gap':>7s} {'ok':>3s}"
    )
    lines = [head, "-" * len(head)]
    fifo = {r.scenario.name: r for r in rows if r.policy == "fifo"}
    for r in rows:
        m, base = r.cluster, fifo.get(r.scenario.name)
        dp = f"{m.utilization - base.cluster.utilization:+6.1f}" if base else "     -"
        dv = (
            f"{100 * (m.value / base.cluster.value - 1):+6.1f}%"
            if base and base.cluster.value
            else "      -"
        )
        sim = (
            f"{r.sim.utilization:8.1f} {r.util_gap:+6.1f} {r.sim.value:9.0f} {r.value_gap:+6.1f}% "
            if r.sim
            else f"{'-':>8s} {'-':>6s} {'-':>9s} {'-':>7s} "
        )
        lines.append(
            f"{r.scenario.name:19s} {r.policy:14s} {m.utilization:6.1f} {dp} {m.value:8.0f} {dv} "
            f"{100 * m.realtime_service_level:5.1f}% {m.jobs_completed:>3d}/{m.jobs_total:<2d} "
            f"{sim}{'yes' if r.agrees else 'NO':>3s}"
        )
    return "\n".join(lines)


def result_document(r: ClusterRow) -> dict[str, Any]:
    m = r.cluster
    doc: dict[str, Any] = {
        "version": 1,
        "scenario": r.scenario.name,
        "policy": r.policy,
        "gpus": r.scenario.cluster.gpus,
        "steps": r.scenario.duration_steps,
        "grid": [
            [r.replay.names[i] if i >= 0 else None for i in row] for row in r.replay.grid.tolist()
        ],
        "metrics": m.result_block(),
        "source": "cluster",
        # per service and step: pods in plus pods out since the step before (the swap
        # cap as the cluster can show it; `gpuroster check` judges it from here)
        "service_churn": r.replay.churn,
        "step_seconds": r.replay.step_seconds,
        "notes": r.replay.notes + r.illegal,
    }
    if r.replay.plan_ms is not None:
        # the peer's re-plans (several a step on a cluster), as `/plan` timed them
        doc["plan_ms"] = r.replay.plan_ms
        doc["plan_rounds"] = r.replay.plan_rounds
    if r.sim is not None:
        doc["simulator"] = {"utilization": r.sim.utilization, "value": r.sim.value}
    if r.replay.held is not None:
        # GPUs held for a gang whose pods did not all run: allocated, not useful (empty
        # in `grid`, so worth nothing); docs/benchmarks.md, "How the peers are configured"
        doc["held"] = [
            [r.replay.names[i] if i >= 0 else None for i in row] for row in r.replay.held.tolist()
        ]
    if r.replay.setup:
        doc["peer"] = r.replay.setup
    return doc


CONTENDED = ("training-heavy", "mixed-control", "priority-inversion", "fragmentation",
             "forecast-error")


def _cells(r: ClusterRow, fifo: ClusterRow | None) -> dict[str, float]:
    m = r.cluster
    held = r.replay.held
    return {
        "util": m.utilization,
        "vs_fifo": 100 * (m.value / fifo.cluster.value - 1) if fifo and fifo.cluster.value else 0,
        "rt": 100 * m.realtime_service_level,
        "done": float(m.jobs_completed),
        "p95": m.top_priority_p95_wait(),
        "held": float((held >= 0).sum()) if held is not None else 0.0,
        "illegal": float(len(r.illegal)),
    }


def peers_table(rows: list[ClusterRow]) -> str:
    """Markdown, every policy side by side: utilization, value vs fifo, real-time service
    level, jobs completed, p95 wait of the top priority, GPU-steps held by partial gangs
    and model rules broken; then the mean over the five contended scenarios present."""
    fifo = {r.scenario.name: r for r in rows if r.policy == "fifo"}
    out = [
        "| scenario | policy | util | value vs fifo | RT service level | jobs done | "
        "p95 wait, top priority (steps) | held by partial gangs (GPU-steps) | rules broken |",
        "|" + "---|" * 9,
    ]
    contended: dict[str, list[dict[str, float]]] = {}
    for r in rows:
        c = _cells(r, fifo.get(r.scenario.name))
        if r.scenario.name in CONTENDED:
            contended.setdefault(r.policy, []).append(c)
        vs = f"{c['vs_fifo']:+.1f}%" if r.policy != "fifo" else ""
        out.append(
            f"| {r.scenario.name} | {r.policy} | {c['util']:.1f}% | {vs} | {c['rt']:.1f}% | "
            f"{r.cluster.jobs_completed}/{r.cluster.jobs_total} | {c['p95']:.0f} | "
            f"{c['held']:.0f} | {c['illegal']:.0f} |"
        )
    for p, cells in contended.items():
        mean = {k: statistics.mean(c[k] for c in cells) for k in cells[0]}
        vs = f"{mean['vs_fifo']:+.1f}%" if p != "fifo" else ""
        out.append(
            f"| mean of {len(cells)} contended | {p} | {mean['util']:.1f}% | {vs} | "
            f"{mean['rt']:.1f}% | {mean['done']:.1f} | {mean['p95']:.1f} | {mean['held']:.0f} | "
            f"{mean['illegal']:.1f} |"
        )
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    replay.exit_on_termination()  # before the local cluster chains its own handlers
    try:
        paths = [scenarios.resolve(n) for n in (args.scenarios or scenarios.builtin_names())]
        loaded = scenarios.load_all(paths)  # all validated, names apart, before anything runs
    except scenarios.ScenarioError as e:
        print(f"gpuroster bench: {e}", file=sys.stderr)
        return 2
    # by default the two peers the simulator runs as they are
    wanted = [p.strip() for p in (args.policies or "fifo,gpuroster").split(",") if p.strip()]
    known = peers.names()
    bad = [p for p in wanted if p not in known]
    if bad:
        print(
            f"gpuroster bench: on a cluster only the peers {', '.join(known)} run, not {bad}",
            file=sys.stderr,
        )
        return 2
    S = args.step_seconds or DEFAULT_STEP_SECONDS
    out = args.out or Path("out/bench-cluster")
    out.mkdir(parents=True, exist_ok=True)
    progress = not args.quiet and sys.stderr.isatty()
    rows: list[ClusterRow] = []
    started = time.time()

    def go(kubeconfig: str, port: int) -> None:
        for s in loaded:
            for p in wanted:
                r = run(s, p, kubeconfig, port, S, out, progress)
                rows.append(r)
                (out / f"{s.name}.{p}.cluster.json").write_text(
                    json.dumps(result_document(r)) + "\n", encoding="utf-8"
                )
                sim = f" (sim {r.sim.utilization:.1f}%)" if r.sim else ""
                sys.stderr.write(
                    f"  {s.name} / {p}: {r.seconds:.0f}s, util {r.cluster.utilization:.1f}%{sim}\n"
                )

    if args.kubeconfig:
        go(args.kubeconfig, args.extender_port)
    else:
        with replay.local_cluster() as (kubeconfig, port):
            go(kubeconfig, port)
    print(format_table(rows))
    if any(r.sim is None for r in rows):
        table = peers_table(rows)
        print("\n" + table)
        (out / "peers.md").write_text(table + "\n", encoding="utf-8")
        reporting.write_peer_grids(
            [(r.scenario, r.policy, r.replay.grid, r.replay.held, r.cluster) for r in rows], out)
    disagree = [r for r in rows if not r.agrees]
    for r in rows:
        for note in (r.illegal + r.replay.notes)[:8]:
            print(f"  {r.scenario.name} / {r.policy}: {note}")
    print(
        f"\n{len(rows)} replays in {time.time() - started:.0f}s wall, step = {S:g}s; "
        f"result files in {out}"
    )
    if disagree:
        print(
            f"{len(disagree)} replay(s) outside the agreement bounds "
            f"({UTIL_POINTS} points, {VALUE_PERCENT}% value) or illegal",
            file=sys.stderr,
        )
        return 1
    return 0

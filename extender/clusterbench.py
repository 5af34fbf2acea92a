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
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extender import replay, scenarios
from extender.planner import legality, metrics, model, simulating
from extender.replay import Replay, peers

UTIL_POINTS = 2.0  # agreement bounds of issue 5
VALUE_PERCENT = 3.0
DEFAULT_STEP_SECONDS = 2.0


@dataclass
class ClusterRow:
    scenario: model.Scenario
    policy: str
    cluster: metrics.Metrics
    sim: metrics.Metrics
    replay: Replay
    illegal: list[str]
    seconds: float

    @property
    def util_gap(self) -> float:
        return self.cluster.utilization - self.sim.utilization

    @property
    def value_gap(self) -> float:
        return 100 * (self.cluster.value / self.sim.value - 1) if self.sim.value else 0.0

    @property
    def agrees(self) -> bool:
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
    sim = simulating.simulate(s, policy)
    return ClusterRow(
        s,
        policy,
        metrics.compute(s, rep.grid),
        metrics.compute(s, sim.grid),
        rep,
        illegal,
        time.time() - t,
    )


def format_table(rows: list[ClusterRow]) -> str:
    head = (
        f"{'scenario':19s} {'policy':10s} {'util%':>6s} {'Δpts':>6s} {'value':>8s} {'Δ%':>7s} "
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
        lines.append(
            f"{r.scenario.name:19s} {r.policy:10s} {m.utilization:6.1f} {dp} {m.value:8.0f} {dv} "
            f"{100 * m.realtime_service_level:5.1f}% {m.jobs_completed:>3d}/{m.jobs_total:<2d} "
            f"{r.sim.utilization:8.1f} {r.util_gap:+6.1f} {r.sim.value:9.0f} {r.value_gap:+6.1f}% "
            f"{'yes' if r.agrees else 'NO':>3s}"
        )
    return "\n".join(lines)


def result_document(r: ClusterRow) -> dict[str, Any]:
    m = r.cluster
    return {
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
        "simulator": {"utilization": r.sim.utilization, "value": r.sim.value},
        "notes": r.replay.notes + r.illegal,
    }


def main(args: argparse.Namespace) -> int:
    replay.exit_on_termination()  # before the local cluster chains its own handlers
    try:
        paths = [scenarios.resolve(n) for n in (args.scenarios or scenarios.builtin_names())]
        loaded = [scenarios.load(p) for p in paths]
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
                sys.stderr.write(
                    f"  {s.name} / {p}: {r.seconds:.0f}s, "
                    f"util {r.cluster.utilization:.1f}% (sim {r.sim.utilization:.1f}%)\n"
                )

    if args.kubeconfig:
        go(args.kubeconfig, args.extender_port)
    else:
        with replay.local_cluster() as (kubeconfig, port):
            go(kubeconfig, port)
    print(format_table(rows))
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

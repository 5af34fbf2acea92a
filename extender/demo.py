"""`gpuroster demo` (`make demo`): the point of gpuroster in a few minutes, on a real control plane.

Brings up the local control plane with fake GPU nodes (KWOK), replays a
contended scenario (training-heavy by default, shipped in the package) in
compressed time, once under fifo and once under gpuroster, with the real
kube-scheduler calling the extender; prints a live line per step, the URLs of
the plan page and metrics while gpuroster runs, and ends with the side-by-side
summary and the pictures it wrote. Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from extender import replay, reporting, results, scenarios
from extender.planner import legality, metrics, model, simulating


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // max(1, total)
    return "#" * filled + "." * (width - filled)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="gpuroster demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--scenario",
        default="training-heavy",
        help="shipped scenario name or scenario file (default: training-heavy)",
    )
    ap.add_argument(
        "--step-seconds",
        type=float,
        default=2.5,
        help="wall seconds per one-hour step (default 2.5)",
    )
    ap.add_argument("--out", type=Path, default=Path("out/demo"), help="where pictures go")
    args = ap.parse_args(list(argv))
    try:
        s = scenarios.load(scenarios.resolve(args.scenario))
    except scenarios.ScenarioError as e:
        print(f"gpuroster demo: {e}", file=sys.stderr)
        return 2
    S = args.step_seconds
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"gpuroster demo: {s.name} - {s.description}")
    print(
        f"  {s.cluster.nodes} node(s) x {s.cluster.gpus_per_node} GPUs, {len(s.jobs)} jobs, "
        f"{len(s.services)} real-time service(s), {s.duration_steps} steps of "
        f"{s.step_minutes} min replayed at {S:g} s each; fifo first, then gpuroster."
    )
    started = time.time()
    rows: list[results.Row] = []
    replay.exit_on_termination()  # before the local cluster chains its own handlers
    print(
        "  starting the local control plane (etcd, kube-apiserver, controller-manager, "
        "kube-scheduler, KWOK)...",
        flush=True,
    )
    try:
        with replay.local_cluster() as (kubeconfig, port):
            print(f"  control plane ready in {time.time() - started:.0f}s", flush=True)
            for policy in ("fifo", "gpuroster"):
                rows.append(_run(s, policy, kubeconfig, port, S, args.out))
    except KeyboardInterrupt:
        print("\ninterrupted: everything started by the demo has been stopped", file=sys.stderr)
        return 130
    print()
    print(results.format_table(rows))
    fifo, ours = rows[0].metrics, rows[1].metrics
    print(
        f"\ngpuroster vs fifo on the cluster: utilization {ours.utilization:.1f}% vs "
        f"{fifo.utilization:.1f}% ({ours.utilization - fifo.utilization:+.1f} points), "
        f"value {ours.value:.0f} vs {fifo.value:.0f} "
        f"({100 * (ours.value / fifo.value - 1):+.1f}%), real-time service level "
        f"{100 * ours.realtime_service_level:.1f}% vs {100 * fifo.realtime_service_level:.1f}%"
    )
    written = reporting.write_report(rows, args.out)
    print("pictures: " + ", ".join(str(p) for p in written if p.suffix == ".png"))
    print(f"report: {args.out / 'report.md'}   ({time.time() - started:.0f}s in all)")
    return 0


def _run(
    s: model.Scenario, policy: str, kubeconfig: str, port: int, S: float, out: Path
) -> results.Row:
    print(f"\n== {policy} ==", flush=True)
    totals = {"useful": 0, "value": 0.0, "steps": 0}

    def announce(p: int) -> None:
        if policy == "gpuroster":
            print(
                f"  plan page: http://127.0.0.1:{p}/plan/view   plan JSON: "
                f"http://127.0.0.1:{p}/plan   metrics: http://127.0.0.1:{p}/metrics",
                flush=True,
            )

    def line(v: replay.StepView) -> None:
        totals["useful"] += v.useful
        totals["value"] += v.value
        totals["steps"] += 1
        util = 100 * totals["useful"] / (v.gpus * totals["steps"])
        svc = "  ".join(f"{name} {v.replicas[name]}/{v.demand[name]}" for name in v.demand)
        print(
            f"  step {v.step + 1:3d}/{v.steps} [{_bar(v.step + 1, v.steps)}] "
            f"util {util:5.1f}%  value {totals['value']:7.0f}  running {v.job_gpus:3d} GPUs  "
            f"queue {v.queued_jobs:3d}  replicas/demand: {svc}",
            flush=True,
        )

    rep = replay.play(
        s,
        policy,
        kubeconfig,
        port,
        step_seconds=S,
        work_dir=out,
        observe=line,
        on_extender=announce,
    )
    # The swap cap judged on pod churn, as the cluster bench and `gpuroster check` do:
    # which GPU index a service pod is drawn on in the rebuilt grid is bookkeeping.
    problems = legality.violations(s, rep.grid, churn=rep.churn)
    for p in problems:
        print(f"  illegal: {p}")
    run = simulating.Run(s, policy, rep.grid, rep.names)
    # the extender's own re-plans, timed by `/plan` (several a step on the cluster)
    plan_ms = rep.plan_ms or metrics.percentiles_ms([])
    return results.Row(s, policy, metrics.compute(s, rep.grid), plan_ms, run)

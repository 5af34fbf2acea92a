"""Scenario files at the edges of what MODEL.md allows, through every policy.

    python bench/extremes.py                 # seeds 0-199
    python bench/extremes.py --seeds 0-19 --slow-ms 5

Each seed draws a legal version-1 scenario with shapes the shipped files never
have: 1 to 8 nodes of 1 to 16 GPUs; steps of 5 minutes to a day; windows of 1 to
150 steps and horizons of 1 to 300; up to 120 jobs, some of them far longer than
the window or with estimates off by 1,000 steps; services whose demand is zero or
twice the cluster, swap caps of 0 to 100, forecasts that are noise or a flat peak.
Every policy runs on it in the simulator; its grid must pass the legality check and
its metrics must compute. It prints the plans slower than `--slow-ms`, then the
slowest re-plan per policy, and exits 1 if any run raised or broke a rule.

Run on the planner before the screen in `trading.drain_trade` (2026-12-05), the
200 default seeds took 578 s of CPU, and gpuroster's slowest re-plan 4.3 s (seed 135:
32 GPUs, 120 jobs, a 300-step horizon; nine seeds over 100 ms): each job past the
starvation bound priced every start ahead of it. With the screen: 16 s, 23 ms (seed
151), the grids unchanged; every run legal either way.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from typing import Any

from orders import parse_seeds  # bench/, the script's folder

from extender import benchmarking
from extender.planner import legality, metrics, scenario, simulating

POLICIES = benchmarking.DEFAULT_POLICIES  # the ones `gpuroster bench` runs


def document(seed: int) -> dict[str, Any]:
    """The scenario of `seed`, as a version-1 mapping."""
    rnd = random.Random(seed)
    nodes = rnd.choice([1, 1, 2, 3, 4, 8])
    per_node = rnd.choice([1, 2, 4, 8, 8, 16])
    gpus = nodes * per_node
    window = rnd.choice([1, 2, 5, 24, 48, 96, 150])
    sizes = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= gpus]
    jobs = []
    for i in range(rnd.choice([0, 1, 3, 10, 40, 120])):
        d = rnd.choice([1, 1, 2, 5, 20, 100, 500])
        job: dict[str, Any] = {
            "name": f"j{i}", "type": rnd.choice(["training", "batch-inference", "quantization"]),
            "gpus": rnd.choice(sizes), "duration_steps": d,
            "arrival_step": rnd.choice([0, 0, rnd.randrange(0, window + 5)]),
            "priority": rnd.choice([1, 2, 0.001, 1000, 3.5])}
        if rnd.random() < 0.5:
            job["estimate_steps"] = rnd.choice([1, d, d * 3, 1000])
        jobs.append(job)
    services = []
    for k in range(rnd.choice([0, 1, 1, 2, 3])):
        length = window + rnd.choice([0, 0, 5, 400])
        peak = rnd.choice([0, 1, gpus // 2, gpus, gpus * 2])
        demand = [rnd.randint(0, peak) for _ in range(length)]
        svc: dict[str, Any] = {"name": f"s{k}", "priority": rnd.choice([1, 5, 10, 0.01]),
                               "max_swap": rnd.choice([0, 1, 2, 8, 100]), "demand": demand}
        if rnd.random() < 0.6:
            svc["forecast"] = ([max(0, x + rnd.randint(-2, 2)) for x in demand]
                               if rnd.random() < 0.5 else
                               [rnd.choice([0, peak]) for _ in demand])
        services.append(svc)
    return {"version": 1, "name": f"extreme-{seed}", "description": "bench/extremes.py",
            "cluster": {"nodes": nodes, "gpus_per_node": per_node},
            "step_minutes": rnd.choice([5, 15, 30, 60, 60, 120, 1440]),
            "horizon_steps": rnd.choice([1, 2, 6, 24, 48, 100, 300]),
            "duration_steps": window, "jobs": jobs, "services": services}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/extremes.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=parse_seeds, default=range(200), help="LO-HI (0-199)")
    p.add_argument("--slow-ms", type=float, default=10.0,
                   help="print the runs whose slowest re-plan took longer (10)")
    args = p.parse_args(argv)
    slowest = dict.fromkeys(POLICIES, (0.0, -1))
    broken = 0
    for seed in args.seeds:
        s = scenario.parse(document(seed), f"extreme-{seed}")
        for policy in POLICIES:
            try:
                run = simulating.simulate(s, policy)
                legality.check(s, run.grid)
                metrics.compute(s, run.grid)
            except Exception:
                broken += 1
                print(f"seed {seed} {policy}: FAILED", file=sys.stderr)
                traceback.print_exc()
                continue
            worst = 1000 * max(run.plan_seconds, default=0.0)
            slowest[policy] = max(slowest[policy], (worst, seed))
            if worst > args.slow_ms:
                print(f"seed {seed:4d} {policy:14s} slowest re-plan {worst:8.2f} ms  "
                      f"({s.cluster.gpus} GPUs, {len(s.jobs)} jobs, {len(s.services)} "
                      f"services, horizon {s.horizon_steps}, {s.duration_steps} steps)")
    print(f"{len(args.seeds)} scenarios x {len(POLICIES)} policies, "
          f"{time.process_time():.1f} s CPU; runs that raised or broke a rule: {broken}")
    for policy, (worst, seed) in slowest.items():
        print(f"  {policy:14s} slowest re-plan {worst:8.2f} ms (seed {seed})")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

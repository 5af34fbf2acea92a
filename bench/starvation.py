"""A wide job against a stream of small work: does the starvation bound hold?

    python bench/starvation.py                   # seeds 0-79
    python bench/starvation.py --seeds 0-9 --steps 300

Each seeded scenario has one or two nodes of 8 GPUs, maybe a real-time service
with a daily trough (swap cap 1 or 2), one wide job (half or all of the
cluster) that comes at step 2, and one or two small jobs arriving every step
(1 to 4 GPUs; true durations off their estimates by a lognormal error of
sigma 0.3, as in the generator's held-out instances; `--additive` makes them
0 to 2 steps longer instead), so that some running job always holds a GPU of
any block. It counts the wide jobs
that should start: those that fit a trough beside the service's curve, or are
worth the shortfall a trade causes at the default `realtime_penalty` (the
others wait by the operator's price). Of those it lists the ones that started
later than the starvation bound (`Options.wait_steps`, hourly steps) + 30 steps after
they came, or never.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from typing import Any

from orders import parse_seeds, parse_variant  # bench/, the script's folder

from extender.planner import allocating, legality, model, scenario, simulating

GPUS_PER_NODE = 8
ARRIVAL = 2


def make(seed: int, steps: int, additive: bool = False) -> model.Scenario:
    rnd = random.Random(seed)
    nodes = rnd.choice([1, 2])
    gpus = nodes * GPUS_PER_NODE
    services: list[dict[str, Any]] = []
    if rnd.random() < 0.7:
        low, high = rnd.choice([(0, 2), (1, 3), (0, 4), (2, 2)])
        trough = rnd.choice([4, 6, 8])
        day = [low] * trough + [high] * (24 - trough)
        services.append({"name": "chat", "priority": rnd.choice([1, 2, 5]),
                         "max_swap": rnd.choice([1, 2]),
                         "demand": (day * (steps // 24 + 1))[:steps]})
    jobs: list[dict[str, Any]] = [{
        "name": "wide", "type": "training", "gpus": rnd.choice([gpus, gpus // 2, gpus]),
        "duration_steps": rnd.choice([2, 4, 8]), "arrival_step": ARRIVAL,
        "priority": rnd.choice([1, 5, 20]),
    }]
    for t in range(steps):
        for i in range(rnd.choice([1, 1, 2])):
            estimate = rnd.choice([3, 5, 8])
            duration = (estimate + rnd.choice([0, 0, 1, 2]) if additive
                        else max(1, round(estimate * rnd.lognormvariate(0.0, 0.3))))
            jobs.append({
                "name": f"small-{t:03d}-{i}", "type": "training", "gpus": rnd.choice([1, 1, 2, 4]),
                "duration_steps": duration, "estimate_steps": estimate,
                "arrival_step": t, "priority": rnd.choice([3, 9]),
            })
    return scenario.parse({
        "version": 1, "name": f"starve-{seed}", "description": "a wide job against a stream",
        "cluster": {"nodes": nodes, "gpus_per_node": GPUS_PER_NODE}, "step_minutes": 60,
        "horizon_steps": 24, "duration_steps": steps, "jobs": jobs, "services": services,
    }, f"<seed {seed}>")


def should_start(s: model.Scenario, penalty: float) -> bool:
    """The wide job fits a trough beside the service's curve, or is worth its trade."""
    wide = s.jobs[0]
    if not s.services:
        return True
    v = s.services[0]
    day = list(v.demand[:24])
    # The trough less the steps the service takes to shed down into it and to grow back out
    # of it at its swap cap; the job needs its estimate and a step either side.
    depth = max(day) - min(day)
    ramp = 2 * (math.ceil(depth / max(1, v.max_swap)) - 1) if depth else 0
    trough = day.count(min(day)) - ramp
    fits = min(day) + wide.gpus <= s.cluster.gpus and trough >= wide.estimate_steps + 2
    short = max(0, max(v.demand) + wide.gpus - s.cluster.gpus)
    return fits or wide.priority * wide.gpus > penalty * v.priority * short


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/starvation.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0-79", type=parse_seeds,
                   help="seed range, inclusive (default 0-79)")
    p.add_argument("--steps", type=int, default=200, help="window length (default 200)")
    p.add_argument("--additive", action="store_true",
                   help="true durations 0-2 steps over the estimate, not lognormal")
    p.add_argument("--variant", default={}, type=parse_variant, help="an allocating.Options "
                   "field=value (Python literal) to run instead of the default")
    args = p.parse_args(argv)
    variant: dict[str, object] = args.variant
    options = allocating.Options(**variant)  # type: ignore[arg-type]
    late_after = ARRIVAL + options.wait_steps(24) + 30  # (its scenarios have hourly steps)
    counted = late = never = 0
    t0 = time.perf_counter()
    for seed in args.seeds:
        s = make(seed, args.steps, args.additive)
        if not should_start(s, options.realtime_penalty):
            continue
        counted += 1
        run = simulating.simulate(s, allocating.Gpuroster(**variant))
        legality.check(s, run.grid)
        start = run.starts.get("wide", (None, None))[0]
        if start is None or start > late_after:
            never += start is None
            late += start is not None
            wide = s.jobs[0]
            print(f"{s.name}: {s.cluster.nodes} node(s), wide {wide.gpus} GPUs x "
                  f"{wide.estimate_steps} steps priority {wide.priority:g}, services "
                  f"{[(v.priority, v.max_swap, v.demand[:24]) for v in s.services]}: "
                  f"{'never started' if start is None else f'started at step {start}'}")
    print(f"{counted} scenarios where the wide job should start: {never} never started, "
          f"{late} started after step {late_after} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What keeping replicas whole costs: one service's set for one step (`scaling.assign`).

    python bench/replicas.py                       # `make bench-replicas`
    python bench/replicas.py --nodes 64,512 --calls 300

For each cluster size (8-GPU nodes) and GPUs per replica, a seeded series of
calls like the planner's: half the GPUs free in a random pattern, a service
growing from nothing to a quarter of the cluster, then steady steps that keep
its set, shed or grow by the swap cap and move off a planned block. Prints
p50 / p99 / max microseconds per call. One GPU per replica is the planner's
old path, the baseline for the others.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.planner import blocks, scaling  # noqa: E402

PER_NODE = 8


def series(nodes: int, unit: int, calls: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    gpus = nodes * PER_NODE
    current: frozenset[int] = frozenset()
    took: list[float] = []
    for k in range(calls):
        free = rng.getrandbits(gpus) | blocks.mask_of(current)
        target = gpus // 4 if k == 0 else max(0, len(current) + rng.choice((-4, 0, 4)))
        cap = None if k == 0 else 8
        planned = rng.getrandbits(gpus) & rng.getrandbits(gpus) & rng.getrandbits(gpus)
        t0 = time.perf_counter()
        current = scaling.assign(current, target, free, cap, (planned,), unit, PER_NODE)
        took.append((time.perf_counter() - t0) * 1e6)
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/replicas.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="64,512", help="cluster sizes in 8-GPU nodes")
    p.add_argument("--calls", type=int, default=300, help="calls per size and replica width")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    print(f"{'GPUs':>6} {'per replica':>11} {'p50 us':>8} {'p99 us':>8} {'max us':>8}")
    for nodes in (int(x) for x in args.nodes.split(",")):
        for unit in (1, 2, 4, 8):
            took = sorted(series(nodes, unit, args.calls, args.seed))
            p99 = took[min(len(took) - 1, int(0.99 * len(took)))]
            print(f"{nodes * PER_NODE:>6} {unit:>11} {statistics.median(took):>8.1f} "
                  f"{p99:>8.1f} {took[-1]:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

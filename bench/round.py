"""One controller round, without the API server: snapshot, plan input, plan, commit.

    python bench/round.py                      # `make bench-round`
    python bench/round.py --sizes 64:500,512:5000 --rounds 15

Each size is NODES:PODS: that many 8-GPU nodes (tainted like KWOK's) and that many
pending GPU pods (single-pod gangs of 1 to 8 GPUs, a quarter of them with a
`nodeSelector` naming half the nodes, all tolerating the taint). The controller is the
real one (`controller.main.build`) over a static in-memory cluster whose writes succeed
and change nothing, so every round re-plans the same cluster with every pod queued: the
worst case of a busy step. Prints p50 / p99 / max of `Controller.run_step()` and of its
parts that do no I/O: `snapshot.build` and the policy call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from extender import config  # noqa: E402
from extender.api import loadbench  # noqa: E402
from extender.controller import main as controller_main  # noqa: E402


def cluster(nodes: int, pods: int) -> Any:
    c = loadbench._StaticCluster(nodes)
    for i, n in enumerate(c.items["nodes"]):
        n["metadata"]["labels"]["gpu"] = "h100" if i % 2 else "a100"
    items = []
    for i in range(pods):
        p = loadbench._pod(f"p-{i}", f"g-{i}", 1)
        gpus = str(1 << (i % 4))
        p["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": gpus},
                                                   "limits": {"nvidia.com/gpu": gpus}}
        if i % 4 == 0:
            p["spec"]["nodeSelector"] = {"gpu": "h100"}
        items.append(p)
    c.items["pods"] = items
    return c


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/round.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="64:500,512:5000", help="NODES:PODS, comma-separated")
    p.add_argument("--rounds", type=int, default=15, help="timed rounds per size")
    args = p.parse_args(argv)
    print(f"{'nodes':>6} {'pods':>6}  {'part':<14} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for size in args.sizes.split(","):
        nodes, pods = (int(x) for x in size.split(":"))
        settings = config.Settings(step_seconds=3600)
        controller, _ = controller_main.build(settings, client=cluster(nodes, pods))
        for inf in controller.cache.all():
            inf.relist()
        controller.run_step()  # warm: caches, first plan
        rounds, snaps, plans = [], [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            controller.run_step()
            rounds.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            snap = controller.take_snapshot()
            snaps.append(time.perf_counter() - t0)
            inp, _ = controller.plan_input(snap, 1)
            t0 = time.perf_counter()
            controller.policy.plan(inp)
            plans.append(time.perf_counter() - t0)
        for part, xs in (("round", rounds), ("snapshot", snaps), ("plan", plans)):
            print(f"{nodes:>6} {pods:>6}  {part:<14} {statistics.median(xs) * 1000:>8.1f} "
                  f"{loadbench.pct(xs, 0.99):>8.1f} {max(xs) * 1000:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Many pods through the real kube-scheduler: every pod placed per the plan, and what
the extender adds per pod.

    python bench/cluster_scale.py --pods 5000 --nodes 512     # the published figure (slow)
    python bench/cluster_scale.py --pods 500 --nodes 64       # CI size (e2e/test_load.py)

A scenario of single-pod gangs (1, 2, 4 or 8 GPUs, 1-2 steps, arrivals spread
so the cluster runs ~70% full) is replayed (`extender.replay`) into
a local control plane of its own with KWOK nodes; `gpuroster serve` decides.
Checked: the grid read back is legal, every job ran, and every pod is bound to
the node its admission annotation names, inside its block. Reported: the
extender's own handler time per pod (filter + prioritize + bind, from its
request-duration histogram) and the wall time from a pod's admission to its
binding.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from extender import replay
from extender.localcluster import Cluster, binaries_dir
from extender.planner import legality, model
from extender.planner import scenario as scenario_doc
from extender.replay import world


def build(pods: int, nodes: int, arrival_steps: int, seed: int = 1) -> model.Scenario:
    rng = random.Random(seed)
    jobs = []
    for i in range(pods):
        jobs.append({"name": f"p{i:05d}", "type": "batch-inference",
                     "gpus": rng.choice([1, 1, 2, 2, 4, 8]), "duration_steps": rng.choice([1, 2]),
                     "arrival_step": i * arrival_steps // pods, "priority": rng.choice([1, 2, 4])})
    return scenario_doc.parse({
        "version": 1, "name": f"scale-{pods}-{nodes}", "description": "scale",
        "cluster": {"nodes": nodes, "gpus_per_node": 8}, "step_minutes": 60,
        "horizon_steps": 6, "duration_steps": arrival_steps + 5, "jobs": jobs, "services": []},
        "<scale>")


def histogram(text: str, name: str) -> dict[str, tuple[float, float]]:
    """verb -> (sum seconds, count) of `name` summed over outcomes."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for part, idx in (("_sum{", 0), ("_count{", 1)):
            if line.startswith(name + part):
                verb = line.split('verb="')[1].split('"')[0]
                out.setdefault(verb, [0.0, 0.0])[idx] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def run(pods: int, nodes: int, step_seconds: float, arrival_steps: int,
        work_dir: Path) -> dict[str, Any]:
    s = build(pods, nodes, arrival_steps)
    cluster = Cluster(nodes=0, bin_dir=binaries_dir(build=True), verbosity=0)
    cluster.up()
    placed: dict[str, tuple[str, str, str, float]] = {}  # pod -> (node, ann node, block, delay)
    scraped: dict[str, str] = {}
    ns = "scale"
    try:
        core = cluster.core()

        def on_step(t: int, peer: replay.Peer) -> None:
            for p in core.list_namespaced_pod(ns, label_selector="gpuroster.io/bench=job").items:
                a = p.metadata.annotations or {}
                if p.spec.node_name and p.metadata.name not in placed:
                    sched = [c.last_transition_time.timestamp() for c in p.status.conditions or []
                             if c.type == "PodScheduled" and c.status == "True"]
                    adm = a.get("gpuroster.io/admitted-at")
                    delay = (sched[0] - world.ts(adm)) if sched and adm else float("nan")
                    placed[p.metadata.name] = (p.spec.node_name, a.get("gpuroster.io/node", ""),
                                               a.get("gpuroster.io/block", ""), delay)
            if t == s.duration_steps - 1:
                url = f"http://127.0.0.1:{cluster.extender_port}/metrics"
                with urllib.request.urlopen(url, timeout=10) as r:
                    scraped["metrics"] = r.read().decode()

        def tick(done: int, total: int) -> None:
            print(f"\r  step {done}/{total}, pods bound so far {len(placed)}", end="",
                  file=sys.stderr, flush=True)

        t0 = time.time()
        rep = replay.play(s, "gpuroster", str(cluster.kubeconfig), cluster.extender_port,
                          step_seconds=step_seconds, namespace=ns, work_dir=work_dir,
                          on_step=on_step, progress=tick)
        print(file=sys.stderr)
        wall = time.time() - t0
    finally:
        cluster.down(remove=True)
    illegal = legality.violations(s, rep.grid)
    off_plan = [p for p, (node, want, block, _) in placed.items()
                if not want or node != want or not block]
    h = histogram(scraped.get("metrics", ""), "gpuroster_extender_request_duration_seconds")
    per_pod_ms = sum(v[0] for v in h.values()) / max(1, len(placed)) * 1000
    delays = sorted(d for *_, d in placed.values() if d == d)
    late = [n for n in rep.notes if "bound in step" in n]
    other_notes = [n for n in rep.notes if "bound in step" not in n]
    out = {
        "pods": pods, "nodes": nodes, "gpus": s.cluster.gpus, "steps": s.duration_steps,
        "step_seconds": step_seconds, "wall_seconds": round(wall, 1),
        "jobs_ran": len(rep.starts), "pods_bound": len(placed),
        "bound_off_plan": len(off_plan), "legality_violations": len(illegal),
        "extender_ms_per_pod": round(per_pod_ms, 2),
        "per_verb": {v: {"calls": int(c), "mean_ms": round(t / c * 1000, 2) if c else 0}
                     for v, (t, c) in sorted(h.items())},
        "admitted_to_bound_s": {"p50": round(delays[len(delays) // 2], 2) if delays else None,
                                "p99": round(delays[int(len(delays) * .99)], 2)
                                if delays else None},
        "bound_a_step_after_admission": len(late), "notes": other_notes[:10],
        "illegal": illegal[:10], "off_plan": off_plan[:10],
    }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", type=int, default=500)
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--step-seconds", type=float, default=8.0)
    p.add_argument("--arrival-steps", type=int, default=10)
    p.add_argument("--work-dir", default="/tmp/gpuroster-scale")
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    out = run(args.pods, args.nodes, args.step_seconds, args.arrival_steps, Path(args.work_dir))
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    ok = (out["pods_bound"] == args.pods and out["bound_off_plan"] == 0
          and out["legality_violations"] == 0 and out["jobs_ran"] == args.pods)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

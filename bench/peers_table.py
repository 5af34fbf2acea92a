"""The peers' table (`make bench-peers`' last output) from the result files of a run.

    python bench/peers_table.py out/bench-peers [--pictures]

Reads every `<scenario>.<policy>.cluster.json` in the directory, re-derives
MODEL.md's metrics from each grid (as `gpuroster check` does) and prints the
markdown table: utilization, value vs fifo, real-time service level, jobs
completed, p95 wait of the top priority, GPU-steps held by partial gangs and
model rules broken, per scenario and policy, then the mean over the five
contended scenarios present; with --pictures, also writes each scenario's
grids side by side (`<scenario>.peers.png`) into the directory. For a run
stopped part way, or results gathered from several runs.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

from extender import reporting, scenarios
from extender.planner import legality, metrics, model

CONTENDED = ("training-heavy", "mixed-control", "priority-inversion", "fragmentation",
             "forecast-error")
ORDER = ("fifo", "default", "kueue", "kueue-reactive", "gpuroster")


def main(argv: list[str]) -> int:
    pictures = "--pictures" in argv
    args = [a for a in argv if a != "--pictures"]
    if len(args) != 1 or not Path(args[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(args[0])
    docs = [json.loads(p.read_text()) for p in sorted(out.glob("*.cluster.json"))]
    docs.sort(key=lambda d: ORDER.index(d["policy"]) if d["policy"] in ORDER else 99)
    by: dict[str, dict[str, dict[str, float]]] = {}
    runs: list[tuple[model.Scenario, str, np.ndarray, np.ndarray | None, metrics.Metrics]] = []
    for d in docs:
        s = scenarios.load(scenarios.resolve(d["scenario"]))
        grid, _ = metrics.index_grid(s, d["grid"])
        m = metrics.compute(s, grid)
        held = d.get("held")
        held_grid = metrics.index_grid(s, held)[0] if held else None
        runs.append((s, d["policy"], grid, held_grid, m))
        broken = legality.violations(s, grid, churn=d.get("service_churn"))
        by.setdefault(s.name, {})[d["policy"]] = {
            "util": m.utilization, "value": m.value, "rt": 100 * m.realtime_service_level,
            "done": float(m.jobs_completed), "total": float(m.jobs_total),
            "p95": m.top_priority_p95_wait(),
            "held": float((np.asarray(held, dtype=object) != None).sum()) if held else 0.0,  # noqa: E711
            "broken": float(len(broken)),
        }
    print("| scenario | policy | util | value vs fifo | RT service level | jobs done | "
          "p95 wait, top priority (steps) | held by partial gangs (GPU-steps) | rules broken |")
    print("|" + "---|" * 9)
    means: dict[str, list[dict[str, float]]] = {}
    for name, pols in by.items():
        fifo = pols.get("fifo")
        for p in sorted(pols, key=lambda x: ORDER.index(x) if x in ORDER else 99):
            c = dict(pols[p])
            c["vs"] = 100 * (c["value"] / fifo["value"] - 1) if fifo and fifo["value"] else 0.0
            if name in CONTENDED:
                means.setdefault(p, []).append(c)
            vs = f"{c['vs']:+.1f}%" if p != "fifo" else ""
            print(f"| {name} | {p} | {c['util']:.1f}% | {vs} | {c['rt']:.1f}% | "
                  f"{c['done']:.0f}/{c['total']:.0f} | {c['p95']:.0f} | {c['held']:.0f} | "
                  f"{c['broken']:.0f} |")
    for p in sorted(means, key=lambda x: ORDER.index(x) if x in ORDER else 99):
        cs = means[p]
        mean = {k: statistics.mean(c[k] for c in cs) for k in cs[0]}
        vs = f"{mean['vs']:+.1f}%" if p != "fifo" else ""
        print(f"| mean of {len(cs)} contended | {p} | {mean['util']:.1f}% | {vs} | "
              f"{mean['rt']:.1f}% | {mean['done']:.1f} | {mean['p95']:.1f} | "
              f"{mean['held']:.0f} | {mean['broken']:.1f} |")
    if pictures:
        for path in reporting.write_peer_grids(runs, out):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

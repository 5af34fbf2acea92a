"""Load, CI-sized: the figures of bench/load.py and bench/cluster_scale.py, bounded.

- the verbs over loopback at 50, 200 and 1,000 concurrent keep-alive
  connections (1,000 nodes, a separate uvicorn process): zero errors;
- 500 single-pod gangs over 64 KWOK nodes through the real kube-scheduler
  (a control plane of its own): every pod bound to the node its admission
  names, the grid read back legal, the extender's time per pod reported.

The full-size runs (`python bench/load.py --seconds 20`, `make soak`,
`python bench/cluster_scale.py --pods 5000 --nodes 512 --step-seconds 20`)
are not run in CI; their last figures are in the README.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_verbs_hold_50_200_and_1000_connections_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, "bench/load.py", "--levels", "50,200,1000",
                        "--seconds", "4", "--json", str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=180)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    figures = json.loads(out.read_text())
    for level, f in figures.items():
        assert f["errors"] == 0, (level, f)
        assert f["requests"] > 0, (level, f)


def test_500_pods_over_64_nodes_all_placed_per_the_plan(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    r = subprocess.run([sys.executable, "bench/cluster_scale.py", "--pods", "500", "--nodes",
                        "64", "--step-seconds", "8", "--work-dir", str(tmp_path),
                        "--json", str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=420)
    assert out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    f = json.loads(out.read_text())
    print(f"[load] {f['pods']} pods over {f['nodes']} nodes: {f['pods_bound']} bound, "
          f"{f['bound_off_plan']} off the plan, {f['legality_violations']} legality "
          f"violations; extender time per pod {f['extender_ms_per_pod']} ms "
          f"({f['per_verb']}); admission to binding p50 {f['admitted_to_bound_s']['p50']}s "
          f"p99 {f['admitted_to_bound_s']['p99']}s; wall {f['wall_seconds']}s")
    assert f["pods_bound"] == f["pods"] == f["jobs_ran"]
    assert f["bound_off_plan"] == 0, f["off_plan"]
    assert f["legality_violations"] == 0, f["illegal"]
    assert r.returncode == 0, r.stdout[-3000:]

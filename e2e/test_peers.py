"""The replay peers on the real control plane: CI's check of `make bench-peers`.

One small scenario (two 4-GPU nodes: a whole-cluster gang, jobs of 1, 2 and 4
GPUs, a service) replayed under the stock kube-scheduler (`default`) and under
Kueue v0.17.0 in front of it (`kueue`), each on a control plane of its own
(the replay creates its nodes). Asserted: the replay ran to its last step, every
pod the cluster ran is in the grid read back (or held, for a partial gang), the
grid was scored and its result file re-derives to the same metrics. Nothing is
asserted about who wins.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from extender import clusterbench, replay
from extender.planner import metrics, model
from tests.builders import scenario

STEP_SECONDS = 3.0


@pytest.fixture(scope="module")
def bench_cluster() -> object:
    with replay.local_cluster() as (kubeconfig, port):
        yield kubeconfig, port


def _small() -> model.Scenario:
    return (
        scenario("peers-small").nodes(2, 4).window(8)
        .job("whole", gpus=8, d=2, arrival=0, priority=4)
        .job("half", gpus=2, d=2, arrival=2, priority=2)
        .job("one", gpus=1, d=1, arrival=2, priority=1)
        .job("four", gpus=4, d=2, arrival=3, priority=8)
        .service("chat", [1] * 8)
        .build()
    )


@pytest.mark.parametrize("policy", ["default", "kueue"])
def test_a_peer_replays_a_scenario_and_its_grid_is_scored(
    bench_cluster: tuple[str, int], policy: str, tmp_path: Path
) -> None:
    kubeconfig, port = bench_cluster
    s = _small()
    row = clusterbench.run(s, policy, kubeconfig, port, STEP_SECONDS, tmp_path, progress=False)
    print(clusterbench.format_table([row]))
    for note in row.replay.notes + row.illegal:
        print("  note:", note)
    rep = row.replay
    assert rep.held is not None and row.sim is None
    # every pod the samples saw is drawn somewhere: nothing was left without GPUs
    lost = [n for n in rep.notes if "free for a pod's whole life" in n or "no free GPU" in n]
    assert not lost, lost
    for name, start in rep.starts.items():
        j = next(x for x in s.jobs if x.name == name)
        assert int((rep.grid[:, start] == s.jobs.index(j)).sum()) == j.gpus, name
    # the service ran every step at its peak (default, kueue: a fixed reservation)
    svc = len(s.jobs)
    assert [int((rep.grid[:, t] == svc).sum()) for t in range(s.duration_steps)] == [1] * 8
    # scored, and the result file re-derives to the same metrics
    doc = clusterbench.result_document(row)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    back = json.loads(path.read_text())
    grid, _ = metrics.index_grid(s, back["grid"])
    assert metrics.compute(s, grid).result_block() == back["metrics"]
    assert back["policy"] == policy and np.asarray(back["held"], dtype=object).shape == (8, 8)
    assert row.cluster.jobs_total == 4
    if policy == "kueue":
        assert back["peer"]["kueue"] == "v0.17.0"
        assert back["peer"]["cluster_queue_quota"] == 8 - 1

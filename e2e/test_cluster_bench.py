"""The benchmark on the real control plane: CI's subset of `make bench-cluster`.

Training-heavy (the inference reservation dominates) and forecast-error (the
forecasts are wrong both ways), each under fifo and gpuroster, replayed in
compressed time into a control plane of their own (the replay creates one
KWOK node per scenario node, so it must not share nodes with other tests),
with the real kube-scheduler calling a `gpuroster serve` process. The grid
read back must be legal, its result file must pass `gpuroster check`, and
it must agree with the simulator: utilization within 2 points, value
within 3% (`clusterbench.UTIL_POINTS`, `VALUE_PERCENT`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from extender import cli, clusterbench, replay, scenarios
from extender.planner import metrics, simulating
from extender.replay import world

SCENARIOS = ["training-heavy", "forecast-error"]
# Longer than the bench's 2.5 s: CI shares its 2 cores with the other tests, and
# binding latency must stay a small part of a step for the step grid to hold.
STEP_SECONDS = 4.0


@pytest.fixture(scope="module")
def bench_cluster() -> Iterator[tuple[str, int]]:
    with replay.local_cluster() as (kubeconfig, port):
        yield kubeconfig, port


@pytest.mark.parametrize("policy", ["fifo", "gpuroster"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_cluster_run_agrees_with_the_simulator(
    bench_cluster: tuple[str, int], name: str, policy: str, tmp_path: Path
) -> None:
    kubeconfig, port = bench_cluster
    s = scenarios.load(scenarios.resolve(name))
    row = clusterbench.run(
        s, policy, kubeconfig, port, STEP_SECONDS, tmp_path, progress=False
    )
    print(clusterbench.format_table([row]))
    for note in row.replay.notes:
        print("  note:", note)
    assert not row.illegal, row.illegal
    assert row.sim is not None  # fifo and gpuroster both run in the simulator
    result = tmp_path / f"{name}.{policy}.cluster.json"
    doc = clusterbench.result_document(row)
    result.write_text(json.dumps(doc))
    assert cli.main(["check", name, str(result)]) == 0
    # MODEL.md's plan_ms, from the extender's own timing of its re-plans: a round at
    # every step boundary at least, more where the cluster changed within a step
    plan_ms = doc["plan_ms"]
    print(f"  plan ms over {doc['plan_rounds']} re-plans: {plan_ms}")
    assert set(plan_ms) == {"p50", "p99", "max"}
    assert 0 < plan_ms["p50"] <= plan_ms["p99"] <= plan_ms["max"]
    assert doc["plan_rounds"] >= s.duration_steps
    assert abs(row.util_gap) <= clusterbench.UTIL_POINTS, (
        f"utilization {row.cluster.utilization:.1f}% vs simulator {row.sim.utilization:.1f}%"
    )
    assert abs(row.value_gap) <= clusterbench.VALUE_PERCENT, (
        f"value {row.cluster.value:.0f} vs simulator {row.sim.value:.0f}"
    )
    if policy == "gpuroster":
        # the point of it, on the real thing: gpuroster beats fifo's simulated value
        fifo = simulating.simulate(s, "fifo")
        assert row.cluster.value > metrics.compute(s, fifo.grid).value


def _name(meta: k8s.V1ObjectMeta | None) -> str:
    assert meta is not None and meta.name is not None  # the API names every object it lists
    return meta.name


def test_a_replay_starts_without_the_last_replays_node_leases(
    bench_cluster: tuple[str, int],
) -> None:
    # A lease left from an earlier bench node of the same name keeps KWOK from
    # heartbeating the new node, which then goes NotReady 50 s into the replay.
    kubeconfig, _ = bench_cluster
    api = world.api(kubeconfig)
    core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
    leases = k8s.CoordinationV1Api(api)
    name = f"{world.NODE_PREFIX}0"
    leases.create_namespaced_lease(world.NODE_LEASE_NAMESPACE, k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1LeaseSpec(holder_identity=name, lease_duration_seconds=40),
    ))
    world.wipe(core, apps, "gpuroster-bench")
    left = [_name(x.metadata) for x in
            leases.list_namespaced_lease(world.NODE_LEASE_NAMESPACE).items]
    assert not [n for n in left if n.startswith(world.NODE_PREFIX)], left


def test_cluster_bench_refuses_unsupported_policies() -> None:
    args = argparse.Namespace(
        scenarios=["training-heavy"],
        policies="priority-skip",
        step_seconds=None,
        out=None,
        quiet=True,
        kubeconfig=None,
        extender_port=8888,
    )
    assert clusterbench.main(args) == 2

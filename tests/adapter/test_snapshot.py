"""Cluster objects -> GPUs, gangs and services as the planner sees them."""

from __future__ import annotations

from typing import Any

import pytest

from extender import config
from extender.adapter import annotations as ann
from extender.adapter import snapshot
from extender.planner import model
from tests.kubefake import deployment, make_pod, node

S = config.Settings()


def build(nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
          deps: list[dict[str, Any]] | None = None,
          **kw: object) -> snapshot.Snapshot:
    return snapshot.build(nodes, pods, deps or [], [], S, **kw)  # type: ignore[arg-type]


def test_nodes_in_topology_order_and_down_nodes_unavailable() -> None:
    n = [node(2), node(0), node(1, ready=False), node(3, gpus=4)]
    s = build(n, [])
    assert s.nodes == ["gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"]
    assert s.cluster == model.Cluster(4, 8)
    assert set(range(8, 16)) <= s.unavailable  # not ready
    assert set(range(28, 32)) <= s.unavailable  # only 4 of 8 allocatable
    assert not s.unavailable & set(range(0, 8))


def test_gang_collects_its_pods_and_sums_gpus() -> None:
    pods = [make_pod(f"g-{i}").gpus(2).gang("g", 4).created(f"2023-11-14T22:13:2{i}Z").build()
            for i in range(4)]
    s = build([node(0)], pods)
    g = s.gangs["ns/g"]
    assert g.gpus == 8 and g.error is None and g.waiting_for is None
    assert g.arrival == snapshot.parse_time("2023-11-14T22:13:23Z")


@pytest.mark.parametrize(("pods", "needle"), [
    ([make_pod("a").gpus(2).gang("g", 2).priority("high"), make_pod("b").gpus(2).gang("g", 2)],
     "disagree on priority"),
    ([make_pod(f"p{i}").gpus(2).gang("g", 2) for i in range(3)], "has 3 pods"),
    ([make_pod("a").gpus(16)], "more GPUs than the cluster"),
    ([make_pod(f"p{i}").gpus(6 if i < 2 else 2).gang("g", 4) for i in range(4)],
     "cannot be packed"),
], ids=["disagree", "too-many", "too-big", "straddle"])
def test_broken_gangs_are_named(pods: list[Any], needle: str) -> None:
    s = build([node(0), node(1)], [p.build() for p in pods])
    (g,) = s.gangs.values()
    assert g.error is not None
    assert needle in g.error or (needle == "more GPUs than the cluster" and "GPUs" in g.error)


def test_admitted_gang_is_rebuilt_from_annotations() -> None:
    notes = {ann.BLOCK: "gpu-node-1:0-3", ann.ADMITTED_AT: "2023-11-14T22:13:20Z",
             ann.NODE: "gpu-node-1"}
    pods = [make_pod(f"g-{i}").gpus(2).gang("g", 2).annotate(**notes).build() for i in range(2)]
    pods[0]["spec"]["nodeName"] = "gpu-node-1"
    s = build([node(0), node(1)], pods)
    a = s.gangs["ns/g"].admission
    assert a is not None and a.block == model.Block(8, 4)
    assert a.nodes == {"ns/g-0": "gpu-node-1", "ns/g-1": "gpu-node-1"}


def test_finished_gang_frees_its_block() -> None:
    notes = {ann.BLOCK: "gpu-node-0:0-1", ann.ADMITTED_AT: "2023-11-14T22:13:20Z"}
    pods = [make_pod("done").gpus(2).annotate(**notes).on("gpu-node-0", "Succeeded").build()]
    assert build([node(0)], pods).gangs == {}


def test_pods_bound_outside_the_plan_hold_gpus() -> None:
    pods = [make_pod("other").gpus(3).on("gpu-node-1").build()]
    s = build([node(0), node(1)], pods)
    assert s.foreign == {"gpu-node-1": 3}
    assert s.gangs == {}


def test_service_pods_are_counted_per_node() -> None:
    dep = deployment("chat", notes={"gpuroster.io/demand-configmap": "c"})
    pods = [make_pod("chat-abc12-1").gpus(1).owned_by_deployment("chat").on("gpu-node-0").build(),
            make_pod("chat-abc12-2").gpus(1).owned_by_deployment("chat").build()]
    s = build([node(0)], pods, [dep])
    sv = s.services["ns/chat"]
    assert sv.gpus_by_node == {"gpu-node-0": 1}
    assert [p["metadata"]["name"] for p in sv.pending] == ["chat-abc12-2"]
    assert s.pod_service == {"ns/chat-abc12-1": "ns/chat", "ns/chat-abc12-2": "ns/chat"}


def test_unmanaged_namespaces_are_foreign() -> None:
    pods = [make_pod("x", "elsewhere").gpus(1).on("gpu-node-0").build(),
            make_pod("y", "elsewhere").gpus(1).build()]
    s = build([node(0)], pods, namespaces=["ns"])
    assert s.gangs == {} and s.foreign == {"gpu-node-0": 1}


def test_layout_packs_largest_first_inside_nodes() -> None:
    c = model.Cluster(2, 8)
    out = snapshot.layout([("a", 4), ("b", 8), ("c", 4)], model.Block(0, 16), c,
                          ["n0", "n1"])
    assert out == {"b": "n0", "a": "n1", "c": "n1"}

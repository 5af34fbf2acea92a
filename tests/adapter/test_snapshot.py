"""Cluster objects -> GPUs, gangs and services as the planner sees them."""

from __future__ import annotations

from typing import Any

import pytest

from extender import config
from extender.adapter import annotations as ann
from extender.adapter import gangs, snapshot
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
    assert g.arrival == ann.parse_time("2023-11-14T22:13:23Z")


@pytest.mark.parametrize(("pods", "needle"), [
    ([make_pod("a").gpus(2).gang("g", 2).priority("high"), make_pod("b").gpus(2).gang("g", 2)],
     "disagree on priority"),
    ([make_pod(f"p{i}").gpus(2).gang("g", 2) for i in range(3)], "has 3 pods"),
    ([make_pod("a").gpus(16)], "asks for more GPUs than a node has"),
    ([make_pod(f"p{i}").gpus(6 if i < 2 else 2).gang("g", 4) for i in range(4)],
     "cannot be packed"),
], ids=["disagree", "too-many", "too-big", "straddle"])
def test_broken_gangs_are_named(pods: list[Any], needle: str) -> None:
    s = build([node(0), node(1)], [p.build() for p in pods])
    (g,) = s.gangs.values()
    assert g.error is not None
    assert needle in g.error


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


ADMITTED = {ann.ADMITTED_AT: "2023-11-14T22:13:20Z"}


def member(name: str, gpus: int, size: int, block: str, node: str, phase: str = "Running",
           **kw: str) -> dict[str, Any]:
    b = make_pod(name).gpus(gpus).gang("g", size)
    if kw:
        b.annotate(**kw)
    return b.annotate(**{ann.BLOCK: block, ann.NODE: node}, **ADMITTED).on(node, phase).build()


def test_a_pod_replacing_an_ended_member_takes_its_place_in_the_block() -> None:
    # A 16-GPU gang of two 8-GPU pods on nodes 1 and 2; the pod on node 2 failed and the
    # Job made a new one: it goes to node 2, where the failed pod left 8 GPUs of the block.
    pods = [member("g-0", 8, 2, "gpu-node-1..gpu-node-2", "gpu-node-1"),
            member("g-1", 8, 2, "gpu-node-1..gpu-node-2", "gpu-node-2", "Failed"),
            make_pod("g-1-retry").gpus(8).gang("g", 2).build()]
    g = build([node(i) for i in range(3)], pods).gangs["ns/g"]
    assert g.error is None and g.admission is not None
    assert g.admission.block == model.Block(8, 16)
    assert g.refill == {"ns/g-1-retry": "gpu-node-2"}
    assert "ns/g-1-retry" in g.pod_keys()


def test_replacements_fill_the_nodes_their_gang_left_room_on() -> None:
    # 4 x 2 GPUs in gpu-node-0:0-7, two of them ended: the two new pods go there too.
    block = "gpu-node-0:0-7"
    pods = [member(f"g-{i}", 2, 4, block, "gpu-node-0", "Failed" if i < 2 else "Running")
            for i in range(4)]
    pods += [make_pod(f"g-{i}-retry").gpus(2).gang("g", 4).build() for i in range(2)]
    g = build([node(0), node(1)], pods).gangs["ns/g"]
    assert g.error is None
    assert g.refill == {"ns/g-0-retry": "gpu-node-0", "ns/g-1-retry": "gpu-node-0"}


@pytest.mark.parametrize(("late", "needle"), [
    (make_pod("g-2").gpus(2).gang("g", 2), "2 of its 2 pods still run"),
    (make_pod("g-2").gpus(2).gang("g", 2).priority("critical"), "disagrees with its running"),
    (make_pod("g-2").gpus(2).gang("g", 2).priority("!"), "neither a positive number"),
], ids=["no-member-ended", "disagrees", "bad-annotation"])
def test_a_late_pod_that_replaces_nobody_waits_and_says_why(late: Any, needle: str) -> None:
    block = "gpu-node-0:0-3"
    pods = [member(f"g-{i}", 2, 2, block, "gpu-node-0") for i in range(2)] + [late.build()]
    g = build([node(0)], pods).gangs["ns/g"]
    assert g.error is not None and needle in g.error, g.error
    assert g.refill == {} and g.admission is not None  # the running pods keep their block


def test_a_late_pod_wider_than_the_room_an_ended_member_left_waits() -> None:
    block = "gpu-node-0:0-3"
    pods = [member("g-0", 2, 2, block, "gpu-node-0"),
            member("g-1", 2, 2, block, "gpu-node-0", "Failed"),
            make_pod("g-2").gpus(4).gang("g", 2).build()]
    g = build([node(0)], pods).gangs["ns/g"]
    assert g.error is not None and "no room left" in g.error
    assert g.refill == {}


def test_a_gang_whose_admitted_pods_all_ended_is_queued_again_with_their_replacements() -> None:
    block = "gpu-node-0:0-3"
    pods = [member(f"g-{i}", 2, 2, block, "gpu-node-0", "Failed") for i in range(2)]
    pods += [make_pod(f"g-{i}-retry").gpus(2).gang("g", 2).build() for i in range(2)]
    g = build([node(0)], pods).gangs["ns/g"]
    assert g.admission is None and g.error is None and g.waiting_for is None
    assert g.requeued is not None and "queued again" in g.requeued
    assert g.pod_keys() == ["ns/g-0-retry", "ns/g-1-retry"] and g.gpus == 4
    # One replacement so far: a new gang that waits for the rest.
    g = build([node(0)], pods[:3]).gangs["ns/g"]
    assert g.admission is None and g.waiting_for is not None and "1 of 2" in g.waiting_for


def test_a_gang_on_a_node_that_went_keeps_the_gpus_its_other_pods_hold() -> None:
    # A 16-GPU gang on nodes 1 and 2; node 2 is deleted. The gang is out of the plan,
    # but its pod on node 1 still runs there: those 8 GPUs are not free to plan.
    block = "gpu-node-1..gpu-node-2"
    pods = [member("g-0", 8, 2, block, "gpu-node-1"), member("g-1", 8, 2, block, "gpu-node-2")]
    s = build([node(0), node(1)], pods)
    g = s.gangs["ns/g"]
    assert g.admission is None and g.error is not None
    assert g.error.startswith(gangs.NODE_LOST) and "gpu-node-2" in g.error
    assert s.foreign == {"gpu-node-1": 8}
    pods[0]["status"]["phase"] = "Failed"  # once it ends, they are free again
    assert build([node(0), node(1)], pods).foreign == {}


def labelled(i: int, **labels: str) -> dict[str, Any]:
    n = node(i)
    n["metadata"]["labels"].update(labels)
    return n


def test_a_gang_is_limited_to_the_nodes_its_pods_may_use() -> None:
    nodes = [labelled(0, gpu="a100"), labelled(1, gpu="h100"), labelled(2, gpu="h100"),
             labelled(3, gpu="a100")]
    nodes[2]["spec"]["taints"] = [{"key": "team", "value": "vision", "effect": "NoSchedule"}]
    pods = [make_pod(f"g-{i}").gpus(4).gang("g", 2).build() for i in range(2)]
    for p in pods:
        p["spec"]["nodeSelector"] = {"gpu": "h100"}
    s = build(nodes, [*pods, make_pod("free").gpus(8).build()])
    assert s.gangs["ns/g"].nodes == frozenset({1})  # node 2: a taint it does not tolerate
    assert s.gangs["ns/pod:free"].nodes == frozenset({0, 1, 3})  # every node but the tainted one
    assert build(nodes[:2], [make_pod("free").gpus(8).build()]).gangs["ns/pod:free"].nodes is None
    for p in pods:
        p["spec"]["tolerations"] = [{"key": "team", "operator": "Exists"}]
    assert build(nodes, pods).gangs["ns/g"].nodes == frozenset({1, 2})


def test_a_gang_no_node_can_take_waits_and_says_why() -> None:
    nodes = [labelled(0, gpu="a100"), labelled(1, gpu="h100"), labelled(2, gpu="a100")]
    pod = make_pod("none").gpus(8).build()
    pod["spec"]["nodeSelector"] = {"gpu": "b200"}
    g = build(nodes, [pod]).gangs["ns/pod:none"]
    assert g.waiting_for is not None and "no GPU node fits" in g.waiting_for
    # 16 GPUs need two consecutive nodes: a100 nodes 0 and 2 are not.
    wide = [make_pod(f"w-{i}").gpus(8).gang("w", 2).build() for i in range(2)]
    for p in wide:
        p["spec"]["nodeSelector"] = {"gpu": "a100"}
    g = build(nodes, wide).gangs["ns/w"]
    assert g.waiting_for is not None and "2 consecutive nodes" in g.waiting_for
    assert "gpu-node-0, gpu-node-2" in g.waiting_for


def test_a_service_is_limited_to_the_nodes_its_pod_template_may_use() -> None:
    nodes = [labelled(0, gpu="l4"), labelled(1, gpu="h100")]
    dep = deployment("chat", notes={"gpuroster.io/demand-configmap": "c"})
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "l4"}
    assert build(nodes, [], [dep]).services["ns/chat"].nodes == frozenset({0})
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "b200"}
    s = build(nodes, [], [dep])
    assert "ns/chat" not in s.services
    assert "no GPU node fits its pod template" in s.service_errors["ns/chat"]
    del dep["spec"]["template"]["spec"]["nodeSelector"]
    assert build(nodes, [], [dep]).services["ns/chat"].nodes is None


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
    out = gangs.layout([("a", 4), ("b", 8), ("c", 4)], model.Block(0, 16), c,
                          ["n0", "n1"])
    assert out == {"b": "n0", "a": "n1", "c": "n1"}


def test_pods_of_a_deployment_with_a_misspelt_workload_are_not_planned_as_training() -> None:
    dep = deployment("chat", notes={"gpuroster.io/workload": "realtime-inferense",
                                    "gpuroster.io/demand-configmap": "c"})
    pods = [make_pod("chat-abc12-1").gpus(1).owned_by_deployment("chat").build(),
            make_pod("chat-abc12-2").gpus(1).owned_by_deployment("chat").on("gpu-node-0").build()]
    s = build([node(0)], pods, [dep])
    assert "unknown workload type 'realtime-inferense'" in s.service_errors["ns/chat"]
    g = s.gangs["ns/chat-abc12-1"]  # broken, as for any bad Deployment: never planned
    assert g.work is None and g.error is not None
    assert g.error.startswith("Deployment ns/chat: gpuroster.io/workload: unknown workload")
    assert s.foreign == {"gpu-node-0": 1}  # the running replica is left alone
    assert [k for k in s.gangs if "abc12-2" in k] == []


def test_pods_of_a_deployment_of_batch_work_are_read_as_batch_pods() -> None:
    dep = deployment("jobs", notes={"gpuroster.io/workload": "batch-inference"})
    pod = make_pod("jobs-abc12-1").gpus(2).owned_by_deployment("jobs").build()
    g = build([node(0)], [pod], [dep]).gangs["ns/pod:jobs-abc12-1"]
    # As before: the pod's own annotations (none here), not the Deployment's, give its type.
    assert g.error is None and g.work is not None and g.work.workload == "training"


def test_an_admitted_pod_keeps_its_block_when_its_deployment_turns_bad() -> None:
    dep = deployment("jobs", notes={"gpuroster.io/workload": "trainning"})
    pod = (make_pod("jobs-abc12-1").gpus(2).owned_by_deployment("jobs")
           .annotate(**{ann.BLOCK: "gpu-node-0:0-1", ann.NODE: "gpu-node-0"}, **ADMITTED)
           .on("gpu-node-0").build())
    s = build([node(0)], [pod], [dep])
    g = s.gangs["ns/pod:jobs-abc12-1"]
    assert g.admission is not None and g.admission.block == model.Block(0, 2)
    assert s.foreign == {}


def test_a_lone_pod_and_a_gang_of_its_name_are_not_merged() -> None:
    pods = [make_pod("llm").gpus(2).build(),
            *(make_pod(f"llm-{i}").gpus(2).gang("llm", 2).build() for i in range(2))]
    s = build([node(0)], pods)
    assert sorted(s.gangs) == ["ns/llm", "ns/pod:llm"]
    assert all(g.error is None and g.waiting_for is None for g in s.gangs.values())
    assert (s.gangs["ns/llm"].gpus, s.gangs["ns/pod:llm"].gpus) == (4, 2)
    # A lone pod whose annotations do not parse is its own gang too.
    bad = make_pod("llm").gpus(2).priority("urgent!").build()
    s = build([node(0)], [bad, *pods[1:]])
    assert s.gangs["ns/llm"].error is None and s.gangs["ns/pod:llm"].error is not None


def unlabelled(name: str) -> dict[str, Any]:
    n = node(0)
    n["metadata"] = {"name": name, "labels": {}}
    return n


def test_unlabelled_nodes_are_ordered_by_the_numbers_in_their_names() -> None:
    names = ["gpu-node-10", "gpu-node-2", "gpu-node-1", "gpu-node-0"]
    assert build([unlabelled(n) for n in names], []).nodes == [
        "gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-10"]
    # Labelled nodes first, in their order, as before.
    first = labelled(5, **{ann.TOPOLOGY_ORDER: "0"})
    s = build([unlabelled("gpu-node-10"), first, unlabelled("gpu-node-9")], [])
    assert s.nodes == ["gpu-node-5", "gpu-node-9", "gpu-node-10"]
    # A record of two nodes still reads as those two once a tenth node joins.
    block = "gpu-node-1..gpu-node-2"
    pods = [member("g-0", 8, 2, block, "gpu-node-1"), member("g-1", 8, 2, block, "gpu-node-2")]
    s = build([unlabelled(f"gpu-node-{i}") for i in range(11)], pods)
    a = s.gangs["ns/g"].admission
    assert a is not None and a.block == model.Block(8, 16)


@pytest.mark.parametrize("names", [
    ["gpu-node-0", "gpu-node-1", "gpu-node-9"],
    ["gpu-01", "gpu-02", "gpu-10", "gpu-11"],  # zero-padded
    ["a100-0", "a100-1", "h100-0", "rack1-n1", "rack2-n1"],
    ["n1", "n1-a", "n1a", "n1b", "node-01", "node-1"],
    ["gpu.b", "gpu-a", "gpu1", "gpua"],  # a run of digits against no digits
])
def test_names_that_sort_alike_as_text_and_as_numbers_keep_their_order(
        names: list[str]) -> None:
    # The GPU indices of such a cluster, and so what its block records read as, do not move.
    assert sorted(names, key=snapshot.natural) == sorted(names)
    assert build([unlabelled(n) for n in reversed(names)], []).nodes == sorted(names)


def test_a_multi_node_block_over_a_node_that_came_between_is_held_not_taken() -> None:
    # Recorded on gpu-node-1 and gpu-node-2; since, two nodes (topology order 1 and 2)
    # came between them: the label reads as a legal 32-GPU block over GPUs it never held.
    block = "gpu-node-1..gpu-node-2"
    pods = [member("g-0", 8, 2, block, "gpu-node-1"), member("g-1", 8, 2, block, "gpu-node-2")]
    nodes = [labelled(0, **{ann.TOPOLOGY_ORDER: "0"}), labelled(1, **{ann.TOPOLOGY_ORDER: "1"}),
             labelled(8, **{ann.TOPOLOGY_ORDER: "1"}), labelled(9, **{ann.TOPOLOGY_ORDER: "1"}),
             labelled(2, **{ann.TOPOLOGY_ORDER: "2"})]
    s = build(nodes, pods)
    assert s.nodes[1:] == ["gpu-node-1", "gpu-node-8", "gpu-node-9", "gpu-node-2"]
    g = s.gangs["ns/g"]
    # Out of the plan, never admitted again; its running pods hold their GPUs where they are.
    assert g.admission is None and g.requeued is None and g.error is not None
    assert "now spans gpu-node-1, gpu-node-8, gpu-node-9, gpu-node-2" in g.error
    assert s.foreign == {"gpu-node-1": 8, "gpu-node-2": 8}
    # One node between: 24 GPUs, no legal block at all.
    s = build(nodes[:3] + nodes[4:], pods)
    assert s.gangs["ns/g"].admission is None
    assert "not a legal block" in (s.gangs["ns/g"].error or "")
    assert s.foreign == {"gpu-node-1": 8, "gpu-node-2": 8}
    # Once the order is back, so is the gang, with the block it was admitted to.
    a = build(nodes[:2] + nodes[4:], pods).gangs["ns/g"].admission
    assert a is not None and a.block == model.Block(8, 16)


def test_a_block_whose_pods_are_recorded_outside_it_is_held_not_taken() -> None:
    # Recorded on four nodes, gpu-node-0..gpu-node-3; a new topology order put gpu-node-3
    # next to gpu-node-0: the label reads as a legal two-node block without two of its nodes.
    block = "gpu-node-0..gpu-node-3"
    pods = [member(f"g-{i}", 8, 4, block, f"gpu-node-{i}") for i in range(4)]
    nodes = [labelled(0), labelled(3, **{ann.TOPOLOGY_ORDER: "1"}), labelled(1, **{
        ann.TOPOLOGY_ORDER: "7"}), labelled(2, **{ann.TOPOLOGY_ORDER: "8"})]
    s = build(nodes, pods)
    g = s.gangs["ns/g"]
    assert g.admission is None and g.error is not None and "now spans" in g.error
    assert s.foreign == {f"gpu-node-{i}": 8 for i in range(4)}

"""DRA objects read as GPUs and GPU requests, and the allocation written for a plan."""

from __future__ import annotations

import pytest

from extender.adapter import dra
from tests.kubefake import claim, dra_node, make_pod, resource_slice

Obj = dict[str, object]


def test_a_nodes_devices_come_in_index_order_from_the_newest_pool_generation() -> None:
    old = resource_slice(0, 2)
    new = resource_slice(0, 4)
    new["spec"]["pool"]["generation"] = 2
    other = resource_slice(1, 8)
    other["spec"]["driver"] = "example.com/other"
    devices = dra.node_devices([old, new, other])
    assert list(devices) == ["gpu-node-0"]
    assert [d["name"] for d in devices["gpu-node-0"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert {d["pool"] for d in devices["gpu-node-0"]} == {"gpu-node-0"}


def test_nvlink_domains_are_read_when_devices_name_them() -> None:
    (devs,) = dra.node_devices([resource_slice(0, 8, nvlink=4)]).values()
    assert dra.nvlink_domains(devs) == [0, 0, 0, 0, 1, 1, 1, 1]
    (devs,) = dra.node_devices([resource_slice(0, 8)]).values()
    assert dra.nvlink_domains(devs) is None


def test_a_domains_gpus_are_consecutive_offsets_so_aligned_blocks_stay_in_one() -> None:
    s = resource_slice(0, 8)
    for d in s["spec"]["devices"]:  # two domains, interleaved: even and odd indices
        d["attributes"]["nvlinkDomain"] = {"int": d["attributes"]["index"]["int"] % 2}
    (devs,) = dra.node_devices([s]).values()
    assert [d["name"] for d in devs] == [f"gpu-{i}" for i in (0, 2, 4, 6, 1, 3, 5, 7)]
    domains = dra.nvlink_domains(devs)
    assert domains is not None
    for size in (1, 2, 4):  # every aligned block of at most a domain's size
        for start in range(0, 8, size):
            assert len(set(domains[start:start + size])) == 1


def test_the_view_gives_nodes_their_device_count_and_pods_their_claimed_gpus() -> None:
    pod = make_pod("p").claims(4).build()
    plain = make_pod("q").build()
    nodes, pods, problems = dra.view([dra_node(0), dra_node(1)], [pod, plain],
                                     [resource_slice(0, 8)], [claim("p", 4)])
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert "nvidia.com/gpu" not in nodes[1]["status"]["allocatable"]  # no slice: no GPUs
    assert pods[0]["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}
    assert pods[1] == plain and not problems
    assert "requests" not in pod["spec"]["containers"][0]["resources"]  # copied, not changed


def test_a_pod_whose_claim_does_not_exist_yet_has_no_gpus() -> None:
    _, (pod,), _ = dra.view([], [make_pod("p").claims(4).build()], [], [])
    assert "requests" not in pod["spec"]["containers"][0]["resources"]


@pytest.mark.parametrize(("exactly", "why"), [
    ({"allocationMode": "All"}, "allocationMode All"),
    ({"selectors": [{"cel": {"expression": "true"}}]}, "selectors"),
], ids=["all-devices", "own-selectors"])
def test_a_claim_gpuroster_cannot_plan_is_a_named_problem(exactly: Obj, why: str) -> None:
    c = claim("p", 2)
    c["spec"]["devices"]["requests"][0]["exactly"].update(exactly)
    _, (pod,), problems = dra.view([], [make_pod("p").claims(2).build()], [], [c])
    assert why in problems["ns/p"]
    assert "requests" not in pod["spec"]["containers"][0]["resources"]


def test_the_allocation_names_the_planned_devices_and_pins_the_node() -> None:
    (devs,) = dra.node_devices([resource_slice(3, 8)]).values()
    patch = dra.allocation(claim("p", 2), "gpu-node-3", devs[4:6])
    alloc = patch["status"]["allocation"]
    assert alloc["devices"]["results"] == [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-node-3", "device": "gpu-4"},
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-node-3", "device": "gpu-5"}]
    assert alloc["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-node-3"]}]}]}
    with pytest.raises(dra.ClaimError, match="requests 2 GPUs, the plan gives 3"):
        dra.allocation(claim("p", 2), "gpu-node-3", devs[4:7])


def test_allocated_devices_are_read_back_per_claim() -> None:
    (devs,) = dra.node_devices([resource_slice(0, 8)]).values()
    c = claim("p", 2)
    c["status"] = dra.allocation(c, "gpu-node-0", devs[2:4])["status"]
    assert dra.held_by(c) == ["gpu-node-0/gpu-2", "gpu-node-0/gpu-3"]
    assert dra.allocated([c, claim("q", 1)]) == {"gpu-node-0/gpu-2": "ns/p-gpus",
                                                 "gpu-node-0/gpu-3": "ns/p-gpus"}

"""DRA mode: an admitted gang's claims are allocated its planned devices before its
gates lift; a planned device held outside the plan stops the admission, with an Event."""

from __future__ import annotations

from typing import Any

import pytest

from extender.adapter import annotations as ann
from extender.adapter import dra
from tests.controller.test_stepping import Rig, end
from tests.kubefake import FakeKube, claim, dra_node, make_pod, resource_slice

Obj = dict[str, Any]
GATE = "gpuroster.io/admission"


def dra_rig(nodes: int = 2) -> Rig:
    fake = FakeKube()
    for i in range(nodes):
        fake.add("nodes", dra_node(i))
        fake.add("resourceslices", resource_slice(i))
    return Rig(fake=fake, gpus="dra")


def dra_gang(fake: FakeKube, name: str, pods: int, gpus: int) -> list[str]:
    keys = []
    for i in range(pods):
        pod = f"{name}-{i}"
        fake.add("pods", make_pod(pod).claims(gpus).gang(name, pods).duration("60s")
                 .gated(GATE).build())
        fake.add("resourceclaims", claim(pod, gpus))
        keys.append(f"ns/{pod}")
    return keys


def devices(fake: FakeKube, pod_key: str) -> list[str]:
    return dra.held_by(fake.objects["resourceclaims"][f"{pod_key}-gpus"])


def test_an_admitted_gangs_claims_hold_its_planned_devices_before_its_gates_lift() -> None:
    rig = dra_rig()
    order: list[tuple[str, ...]] = []
    keys = dra_gang(rig.fake, "g", 2, 2)
    rig.fake.calls = order
    rig.step()
    for k in keys:
        notes = rig.notes(k)
        assert ann.BLOCK in notes and "schedulingGates" not in rig.fake.pod(k)["spec"]
        node = notes[ann.NODE]
        assert {d.split("/")[0] for d in devices(rig.fake, k)} == {node}
        # each claim written before its pod's gate was lifted
        assert order.index(("claim", f"{k}-gpus")) < order.index(("patch", k))
        c = rig.fake.objects["resourceclaims"][f"{k}-gpus"]
        assert c["metadata"]["finalizers"] == [dra.FINALIZER]
        assert c["status"]["allocation"]["allocationTimestamp"].endswith("Z")
    held = devices(rig.fake, keys[0]) + devices(rig.fake, keys[1])
    assert len(set(held)) == 4
    # the block's four GPUs, in device index order: the plan's offsets are the devices
    block = ann.parse_block(rig.notes(keys[0])[ann.BLOCK], {"gpu-node-0": 0, "gpu-node-1": 1}, 8)
    assert held == [f"gpu-node-{i // 8}/gpu-{i % 8}" for i in block.gpus()]


@pytest.mark.parametrize(("with_pod", "held", "block"), [
    (False, 1, 4),  # unseen before: a claim of no pod was not even counted
    (True, 5, 0),  # a count per node made gpu-0 the held one, and the plan took 4-7
], ids=["claim-alone", "bound-pod"])
def test_gpus_held_outside_the_plan_are_planned_around_by_identity(with_pod: bool, held: int,
                                                                   block: int) -> None:
    rig = dra_rig(nodes=1)
    other = claim("elsewhere", 1, namespace="other")
    (devs,) = dra.node_devices(rig.fake.objects["resourceslices"].values()).values()
    other["status"] = dra.allocation(other, "gpu-node-0", devs[held:held + 1])["status"]
    rig.fake.add("resourceclaims", other)
    if with_pod:
        rig.fake.add("pods", make_pod("elsewhere", "other").claims(1).on("gpu-node-0").build())
    (k,) = dra_gang(rig.fake, "four", 1, 4)
    rig.step()
    assert rig.notes(k)[ann.BLOCK] == f"gpu-node-0:{block}-{block + 3}"
    assert devices(rig.fake, k) == [f"gpu-node-0/gpu-{i}" for i in range(block, block + 4)]
    assert not [e for e in rig.fake.events if e["reason"] == "ClaimNotAllocated"]


def test_a_planned_device_held_outside_the_plan_stops_the_admission_and_says_so() -> None:
    # The writer's own check, for a claim allocated after the round's snapshot was taken.
    rig = dra_rig(nodes=1)
    (k,) = dra_gang(rig.fake, "big", 1, 8)
    rig.sync()
    other = claim("elsewhere", 1)
    (devs,) = dra.node_devices(rig.fake.objects["resourceslices"].values()).values()
    other["status"] = dra.allocation(other, "gpu-node-0", devs[0:1])["status"]
    rig.fake.add("resourceclaims", other)
    rig.sync()
    with pytest.raises(dra.ClaimError, match=r"gpu-node-0/gpu-0 \(claim ns/elsewhere-gpus\)"):
        rig.ctl.writer._allocate(rig.fake.pod(k), "gpu-node-0", range(8))
    assert not devices(rig.fake, k)


def test_a_claim_left_allocated_by_a_half_done_admission_is_given_the_planned_devices() -> None:
    rig = dra_rig(nodes=1)
    (k,) = dra_gang(rig.fake, "g", 1, 2)
    c = rig.fake.objects["resourceclaims"][f"{k}-gpus"]
    (devs,) = dra.node_devices(rig.fake.objects["resourceslices"].values()).values()
    c["status"] = dra.allocation(c, "gpu-node-0", devs[6:8])["status"]  # not reserved
    rig.step()
    assert ann.BLOCK in rig.notes(k)
    block = ann.parse_block(rig.notes(k)[ann.BLOCK], {"gpu-node-0": 0}, 8)
    assert devices(rig.fake, k) == [f"gpu-node-0/gpu-{i}" for i in block.gpus()]


def test_a_pod_asking_nvidia_gpu_on_a_dra_cluster_is_admitted_with_no_claim_written() -> None:
    # the extended-resource mapping: kube-scheduler makes its claim in PreBind
    rig = dra_rig(nodes=1)
    rig.fake.add("pods", make_pod("p").gpus(2).gang("p", 1).duration("60s").build())
    rig.step()
    assert ann.BLOCK in rig.notes("ns/p")
    assert not any(c[0] == "claim" for c in rig.fake.calls)


def test_device_plugin_mode_writes_no_claim() -> None:
    plain = Rig()
    plain.fake.add("pods", make_pod("p").gpus(2).gang("p", 1).duration("60s").build())
    plain.step()
    assert not any(c[0] == "claim" for c in plain.fake.calls)
    assert ann.BLOCK in plain.notes("ns/p")


def test_a_pod_whose_claim_gpuroster_cannot_plan_is_told_why_and_nothing_else_moves() -> None:
    rig = dra_rig(nodes=1)
    rig.fake.add("pods", make_pod("all").claims(1).gang("all", 1).duration("60s")
                 .gated(GATE).build())
    bad = claim("all", 1)
    bad["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    rig.fake.add("resourceclaims", bad)
    (k,) = dra_gang(rig.fake, "g", 1, 2)
    rig.step()
    assert ann.BLOCK in rig.notes(k)  # the good gang is admitted as ever
    assert ann.BLOCK not in rig.notes("ns/all")
    assert rig.fake.pod("ns/all")["spec"]["schedulingGates"] == [{"name": GATE}]
    assert not dra.held_by(rig.fake.objects["resourceclaims"]["ns/all-gpus"])
    told = [e["message"] for e in rig.fake.events
            if e["involvedObject"]["name"] == "all"]
    assert any("allocationMode All" in m for m in told), told


def test_the_plan_shows_each_running_pods_devices_and_a_move_off_the_block_is_logged(
        caplog: Any) -> None:
    rig = dra_rig(nodes=1)
    keys = dra_gang(rig.fake, "g", 2, 1)
    rig.step()
    for k in keys:  # kube-scheduler binds them where the plan said
        pod = rig.fake.pod(k)
        pod["spec"]["nodeName"], pod["status"]["phase"] = "gpu-node-0", "Running"
        rig.fake.add("pods", pod)
    rig.advance()
    job = rig.ctl.view["jobs"]["ns/g"]
    assert job["planned_devices"] == sorted(d for k in keys for d in devices(rig.fake, k))
    assert job["devices"] == {k: devices(rig.fake, k) for k in keys}
    assert not [r for r in caplog.records if "outside its block" in r.message]
    # the claim reallocated elsewhere on the node (kube-scheduler's PostFilter may)
    c = rig.fake.objects["resourceclaims"][f"{keys[0]}-gpus"]
    (devs,) = dra.node_devices(rig.fake.objects["resourceslices"].values()).values()
    c["status"] = dra.allocation(c, "gpu-node-0", devs[7:8])["status"]
    rig.fake.add("resourceclaims", c)
    rig.advance()
    (warn,) = [r for r in caplog.records if "outside its block" in r.message]
    assert "gpu-node-0/gpu-7" in warn.getMessage()


def test_a_replacement_gets_the_devices_its_ended_member_left_in_the_block() -> None:
    rig = dra_rig(nodes=1)
    keys = dra_gang(rig.fake, "g", 2, 2)
    rig.step()
    left = devices(rig.fake, keys[0])
    for k, phase in ((keys[0], "Failed"), (keys[1], "Running")):
        end(rig, k, phase)
    # kube-controller-manager deletes the claim of a pod that is done
    rig.fake.delete("resourceclaims", f"{keys[0]}-gpus")
    rig.fake.add("pods", make_pod("g-0-retry").claims(2).gang("g", 2).duration("60s")
                 .gated(GATE).build())
    rig.fake.add("resourceclaims", claim("g-0-retry", 2))
    rig.advance()
    assert rig.notes("ns/g-0-retry")[ann.BLOCK] == rig.notes(keys[1])[ann.BLOCK]
    assert devices(rig.fake, "ns/g-0-retry") == left


def test_a_refused_claim_write_admits_nothing_and_the_next_round_tries_again() -> None:
    rig = dra_rig(nodes=1)
    (k,) = dra_gang(rig.fake, "g", 1, 2)
    rig.fake.fail_claim.add(f"{k}-gpus")
    r = rig.step()
    assert "ns/g" not in r.admitted and ann.BLOCK not in rig.notes(k)
    assert rig.fake.pod(k)["spec"]["schedulingGates"] == [{"name": GATE}]
    assert not devices(rig.fake, k)
    rig.fake.fail_claim.clear()
    assert rig.advance().admitted == ["ns/g"]
    assert len(devices(rig.fake, k)) == 2


def test_a_block_lies_in_one_nvlink_domain_even_when_domains_interleave() -> None:
    fake = FakeKube()
    fake.add("nodes", dra_node(0))
    s = resource_slice(0)
    for d in s["spec"]["devices"]:  # domain 0: even indices, domain 1: odd
        d["attributes"]["nvlinkDomain"] = {"int": d["attributes"]["index"]["int"] % 2}
    fake.add("resourceslices", s)
    rig = Rig(fake=fake, gpus="dra")
    (one,) = dra_gang(fake, "one", 1, 1)
    rig.step()
    (four,) = dra_gang(fake, "four", 1, 4)
    rig.advance()
    held = devices(fake, four)
    assert len(held) == 4
    parity = {int(d.rsplit("-", 1)[1]) % 2 for d in held}
    assert len(parity) == 1, held  # one domain, not index order's 1-4 or 4-7
    assert devices(fake, one)[0] not in held


def test_a_two_node_gang_gets_every_device_of_both_nodes() -> None:
    rig = dra_rig(nodes=3)
    keys = dra_gang(rig.fake, "wide", 2, 8)
    rig.step()
    nodes = {rig.notes(k)[ann.NODE] for k in keys}
    assert len(nodes) == 2
    for k in keys:
        node = rig.notes(k)[ann.NODE]
        assert devices(rig.fake, k) == [f"{node}/gpu-{i}" for i in range(8)]

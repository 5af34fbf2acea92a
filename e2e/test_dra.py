"""GPUs through DRA on a real control plane: the fake DRA driver's ResourceSlices, the
real kube-scheduler's DRA plugin, and gpuroster allocating an admitted gang's claims.

A control plane of this module's own, built with `gpus="dra"`: its nodes advertise no
nvidia.com/gpu; the fake driver (extender.localcluster.dradriver) publishes each
node's GPUs as devices of driver gpu.nvidia.com (two NVLink domains of four a node)
and the DeviceClass gpu.nvidia.com.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import accounts, clusters
from e2e.test_extender import Extender
from extender.localcluster import Cluster, dradriver, objects
from extender.localcluster.waiting import wait_for

GATE = "gpuroster.io/admission"


@pytest.fixture(scope="module")
def dra_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with clusters.running(request, "dra", nodes=2, gpus="dra", nvlink_domain_size=4) as c:
        yield c


def resource(cluster: Cluster) -> Any:
    from kubernetes import client

    return client.ResourceV1Api(cluster.api())


def claim_of(cluster: Cluster, ns: str, pod: str) -> Any:
    """The pod's generated ResourceClaim, as a dict (None until it exists)."""
    p = cluster.core().read_namespaced_pod(pod, ns)
    statuses = p.status.resource_claim_statuses or []
    if not statuses or not statuses[0].resource_claim_name:
        return None
    c = resource(cluster).read_namespaced_resource_claim(statuses[0].resource_claim_name, ns)
    return cluster.api().sanitize_for_serialization(c)  # type: ignore[no-untyped-call]


def allocated(claim: Any) -> list[tuple[str, str]]:
    """(pool, device) of each device the claim holds."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in alloc["devices"]["results"]]


def test_the_fake_driver_publishes_each_nodes_gpus_as_a_resource_slice(
        dra_cluster: Cluster) -> None:
    res = resource(dra_cluster)
    slices = {s.spec.node_name: s for s in res.list_resource_slice().items}
    assert set(slices) == set(dra_cluster.node_names())
    for s in slices.values():
        assert s.spec.driver == "gpu.nvidia.com" and len(s.spec.devices) == 8
        assert s.metadata.owner_references[0].kind == "Node"
        # two NVLink domains of four: GPUs 0-3 and 4-7
        assert [d.attributes["nvlinkDomain"].int for d in s.spec.devices] == [0] * 4 + [1] * 4
    assert res.read_device_class("gpu.nvidia.com").spec.selectors
    for n in dra_cluster.core().list_node().items:
        assert "nvidia.com/gpu" not in (n.status.allocatable or {})


def test_a_claim_template_pod_gets_its_gpus_allocated_by_kube_scheduler(
        dra_cluster: Cluster, request: pytest.FixtureRequest) -> None:
    ns = dra_cluster.create_namespace("dra-plain")
    res = resource(dra_cluster)
    res.create_namespaced_resource_claim_template(ns, dradriver.render_claim_template("four", 4))
    body = dradriver.claim_pod(objects.pod("solo"), "four")
    dra_cluster.core().create_namespaced_pod(ns, body)
    pod = wait_for(lambda: (p := dra_cluster.core().read_namespaced_pod("solo", ns))
                   .spec.node_name and p, 60, "pod solo bound by kube-scheduler")
    claim = wait_for(lambda: claim_of(dra_cluster, ns, "solo"), 10, "the claim of pod solo")
    devices = allocated(claim)
    assert len(devices) == 4 and len(set(devices)) == 4
    assert {pool for pool, _ in devices} == {pod.spec.node_name}  # a node-local pool
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod.metadata.uid]
    clusters.say(request, f"[dra] pod solo (template asks 4 GPUs): kube-scheduler bound it "
                 f"to {pod.spec.node_name} and allocated {len(devices)} devices: "
                 f"{', '.join(d for _, d in devices)}")


def chart_account(cluster: Cluster, ns: str, tmp_path: Path) -> Path:
    """The chart's ServiceAccount and RBAC for `gpus: dra` watching `ns` (rendered by
    helm, applied as they are); a kubeconfig that authenticates as that account."""
    import yaml

    from tests.helm import rendering

    r = rendering.template({"gpus": "dra", "config": {"namespaces": [ns]}}, namespace=ns)
    wanted = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    docs = [d for d in r.objects if d["kind"] in wanted
            and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "scheduler"]
    rbac = tmp_path / "dra-rbac.yaml"
    rbac.write_text(yaml.safe_dump_all(docs))
    cluster.kubectl("apply", "-f", str(rbac))
    return accounts.service_account_kubeconfig(cluster, ns, "gr-gpuroster",
                                               tmp_path / "dra.kubeconfig")


def gang_pod(cluster: Cluster, ns: str, gang: str, i: int, size: int, template: str,
             node: str) -> str:
    notes = {"gpuroster.io/gang": gang, "gpuroster.io/gang-size": str(size),
             "gpuroster.io/expected-duration": "10m", "gpuroster.io/workload": "training"}
    body = dradriver.claim_pod(objects.pod(f"{gang}-{i}", annotations=notes), template)
    body["spec"]["schedulingGates"] = [{"name": GATE}]
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    cluster.core().create_namespaced_pod(ns, body)
    return f"{gang}-{i}"


def bound(cluster: Cluster, ns: str, names: list[str]) -> list[Any] | None:
    pods = [cluster.core().read_namespaced_pod(n, ns) for n in names]
    return pods if all(p.spec.node_name for p in pods) else None


def idle_node(cluster: Cluster) -> str:
    """A node none of whose devices any claim holds."""
    claims = cluster.api().sanitize_for_serialization(  # type: ignore[no-untyped-call]
        resource(cluster).list_resource_claim_for_all_namespaces())
    busy = {pool for c in claims["items"] if (c.get("status") or {}).get("allocation")
            for pool, _ in allocated(c)}
    return next(n for n in cluster.node_names() if n not in busy)


def test_an_admitted_gangs_claims_hold_exactly_its_planned_devices(
        dra_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    ns = dra_cluster.create_namespace("dra-gang")
    res = resource(dra_cluster)
    node = idle_node(dra_cluster)  # both gangs there (nodeSelector): a known start
    for n in (1, 2):
        res.create_namespaced_resource_claim_template(
            ns, dradriver.render_claim_template(f"gpus-{n}", n))
    # gpuroster runs as the chart's account for `gpus: dra`: what DRA mode needs is granted
    kc = chart_account(dra_cluster, ns, tmp_path)
    ext = Extender(dra_cluster, ns, tmp_path, GPUROSTER_GPUS="dra", GPUROSTER_KUBECONFIG=str(kc))
    ext.start()
    try:
        # One GPU first: a first-fit allocator would then give the 4-GPU gang devices
        # 1..4; the plan gives it an aligned block of four.
        one = [gang_pod(dra_cluster, ns, "one", 0, 1, "gpus-1", node)]
        wait_for(lambda: bound(dra_cluster, ns, one), 60, "gang one bound", every=0.5)
        four = [gang_pod(dra_cluster, ns, "four", i, 2, "gpus-2", node) for i in range(2)]
        pods = wait_for(lambda: bound(dra_cluster, ns, four), 60, "gang four bound",
                        every=0.5)

        def shown() -> Any:  # the plan reads the devices back from the claims
            job = ext.get("/plan")["jobs"].get(f"{ns}/four") or {}
            held = job.get("devices") or {}
            return job if len(held) == 2 and all(held.values()) else None

        job = wait_for(shown, 20, "GET /plan showing gang four's devices", every=0.5)
    except AssertionError:
        raise AssertionError(f"gpuroster log:\n{ext.log()}") from None
    finally:
        ext.stop()
    label = pods[0].metadata.annotations["gpuroster.io/block"]
    m = re.fullmatch(r"(.+):(\d+)-(\d+)", label)
    assert m, label
    assert m.group(1) == node
    lo, hi = int(m.group(2)), int(m.group(3))
    planned = {(node, f"gpu-{i}") for i in range(lo, hi + 1)}
    (first,) = allocated(claim_of(dra_cluster, ns, "one-0"))
    # what a first-fit allocator would have given: the four lowest free devices
    first_fit = [f"gpu-{i}" for i in range(8) if f"gpu-{i}" != first[1]][:4]
    got: list[tuple[str, str]] = []
    for p in pods:
        assert p.spec.node_name == node
        claim = claim_of(dra_cluster, ns, p.metadata.name)
        devices = allocated(claim)
        assert len(devices) == 2
        # gpuroster wrote the allocation; kube-scheduler kept it and only reserved it
        writers = {f["manager"] for f in claim["metadata"]["managedFields"]
                   if f.get("subresource") == "status" and "f:allocation" in
                   str(f.get("fieldsV1"))}
        assert writers == {"gpuroster"}, writers
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [p.metadata.uid]
        got += devices
    same = planned & set(got)
    shown_devices = sorted(d for held in job["devices"].values() for d in held)
    assert shown_devices == sorted(job["planned_devices"]) == sorted(f"{p}/{d}" for p, d in got)
    clusters.say(request, f"[dra] gang four (2 pods x 2 GPUs): planned block {label}: "
                 f"{len(planned)} devices planned, {len(got)} allocated, {len(same)} the same "
                 f"({', '.join(d for _, d in sorted(got))}); /plan shows "
                 f"{len(shown_devices)} held, {len(job['planned_devices'])} planned; gang one "
                 f"holds {first[1]}, first-fit would give {', '.join(first_fit)}")
    assert len(got) == len(set(got)) == len(planned) == len(same) == 4
    assert lo % 4 == 0 and sorted(d for _, d in got) != first_fit  # an aligned block
    assert len({int(d.split("-")[1]) // 4 for _, d in got}) == 1  # in one NVLink domain


def test_a_pod_asking_nvidia_gpu_is_served_by_dra_on_the_planned_node(
        dra_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The extended-resource mapping (beta in 1.36): a plain `nvidia.com/gpu: 2` pod on
    nodes that advertise none goes through gpuroster (extender) to the planned node, and
    kube-scheduler makes and allocates its claim with 2 devices there."""
    ns = dra_cluster.create_namespace("dra-extended")
    notes = {"gpuroster.io/gang": "plain", "gpuroster.io/gang-size": "1",
             "gpuroster.io/expected-duration": "10m", "gpuroster.io/workload": "training"}
    ext = Extender(dra_cluster, ns, tmp_path, GPUROSTER_GPUS="dra")
    ext.start()
    try:
        dra_cluster.core().create_namespaced_pod(ns, objects.pod("plain", gpus=2,
                                                                 annotations=notes))
        (pod,) = wait_for(lambda: bound(dra_cluster, ns, ["plain"]), 60, "pod plain bound",
                          every=0.5)
    except AssertionError:
        raise AssertionError(f"gpuroster log:\n{ext.log()}") from None
    finally:
        ext.stop()
    assert pod.spec.node_name == pod.metadata.annotations["gpuroster.io/node"]
    status = dra_cluster.api().sanitize_for_serialization(pod.status)  # type: ignore[no-untyped-call]
    name = status["extendedResourceClaimStatus"]["resourceClaimName"]
    claim = dra_cluster.api().sanitize_for_serialization(  # type: ignore[no-untyped-call]
        resource(dra_cluster).read_namespaced_resource_claim(name, ns))
    devices = allocated(claim)
    assert len(devices) == 2 and {pool for pool, _ in devices} == {pod.spec.node_name}
    clusters.say(request, f"[dra] pod plain (nvidia.com/gpu: 2): planned and bound to "
                 f"{pod.spec.node_name}; kube-scheduler's claim holds {len(devices)} devices: "
                 f"{', '.join(d for _, d in devices)}")

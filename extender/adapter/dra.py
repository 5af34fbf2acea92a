"""GPUs through Dynamic Resource Allocation: ResourceSlices and ResourceClaims as the
planner's GPUs and demands, and the allocation that makes a claim hold the plan's GPUs.

Pure functions on plain objects (no I/O). In DRA mode (`Settings.gpus == "dra"`):

- a node's GPUs are the devices of driver ``gpu.nvidia.com`` its ResourceSlices list
  (in the node-local pools of the driver), grouped by NVLink domain when the devices
  name one, ordered by their ``index`` attribute: the plan's in-node offset ``i`` is
  the ``i``-th of them;
- a pod's GPUs are the counts its ResourceClaims request from the GPU DeviceClass
  (the claims kube-controller-manager makes from the pod's ResourceClaimTemplates,
  found through ``status.resourceClaimStatuses``);
- `view` presents both in the device-plugin shape (``nvidia.com/gpu`` allocatable on
  the node, requested by the pod), so the snapshot and everything after it read a
  DRA cluster as they read any other;
- `allocation` is the claim status that gives a pod of an admitted gang its planned
  devices. Written before the pod's scheduling gate is lifted, it is an allocation
  kube-scheduler keeps (its DRA plugin only reserves an allocated claim and places
  the pod on the node the allocation's nodeSelector names).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from extender.adapter import annotations as ann

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
# What kube-scheduler puts on a claim it allocates: kube-controller-manager clears the
# allocation of an unreserved claim, and lets a claim go, only with it.
FINALIZER = "resource.kubernetes.io/delete-protection"
DEVICE_CLASS = "gpu.nvidia.com"
# Devices that share this (int) attribute share an NVLink domain.
NVLINK_ATTRIBUTE = "nvlinkDomain"


class ClaimError(ValueError):
    """A claim gpuroster cannot give planned devices to (says why)."""


def _attr(device: Obj, name: str) -> Any:
    a = (device.get("attributes") or {}).get(name) or (
        (device.get("attributes") or {}).get(f"{DRIVER}/{name}") or {})
    for kind in ("int", "string", "bool", "version"):
        if kind in a:
            return a[kind]
    return None


def node_devices(slices: Iterable[Obj]) -> dict[str, list[Obj]]:
    """node -> its GPU devices in the plan's offset order, each with its pool: by NVLink
    domain when the devices say (the ``nvlinkDomain`` attribute), then by ``index``
    (then by name).

    Grouping a domain's devices together is how a block stays in one domain: the
    planner's blocks are aligned powers of two, so with domains of one power-of-two
    size every block no larger than a domain lies inside one, whichever GPU indices
    the domain has. Only the newest generation of each pool counts (a driver
    replacing its slices leaves older ones behind for a while)."""
    newest: dict[tuple[str, str], int] = {}
    kept: list[Obj] = []
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != DRIVER or not spec.get("nodeName"):
            continue
        pool = spec.get("pool") or {}
        k = (str(spec["nodeName"]), str(pool.get("name", "")))
        gen = int(pool.get("generation") or 0)
        if gen > newest.get(k, -1):
            newest[k] = gen
        kept.append(s)
    out: dict[str, list[Obj]] = {}
    for s in kept:
        spec = s["spec"]
        pool = spec.get("pool") or {}
        if int(pool.get("generation") or 0) != newest[(str(spec["nodeName"]),
                                                        str(pool.get("name", "")))]:
            continue
        for d in spec.get("devices") or []:
            if _attr(d, "type") not in (None, "gpu"):
                continue
            out.setdefault(str(spec["nodeName"]), []).append({**d, "pool": pool.get("name")})
    for devices in out.values():
        devices.sort(key=_order)
    return out


def _order(device: Obj) -> tuple[int, int, str]:
    domain, index = _attr(device, NVLINK_ATTRIBUTE), _attr(device, "index")
    return (domain if isinstance(domain, int) else -1,
            index if isinstance(index, int) else 1 << 30, str(device.get("name")))


def device_ids(slices: Iterable[Obj]) -> dict[str, list[str]]:
    """node -> its GPU devices as "pool/device", in offset order."""
    return {n: [f"{d['pool']}/{d['name']}" for d in ds] for n, ds in node_devices(slices).items()}


def pod_devices(pods: Iterable[Obj], claims: Iterable[Obj]) -> dict[str, list[str]]:
    """pod key -> the GPU devices its claims hold (pods that hold some), the claim
    kube-scheduler made for an ``nvidia.com/gpu`` request served by DRA included."""
    by_key = {ann.key(c): c for c in claims}
    out = {}
    for p in pods:
        held = [d for c in claims_of(p, by_key) + _extended_claim(p, by_key)
                for d in held_by(c)]
        if held:
            out[ann.key(p)] = held
    return out


def _extended_claim(pod: Obj, claims: Mapping[str, Obj]) -> list[Obj]:
    ns = (pod.get("metadata") or {}).get("namespace", "")
    st = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    name = st.get("resourceClaimName")
    return [claims[f"{ns}/{name}"]] if name and f"{ns}/{name}" in claims else []


def held_outside(pods: Iterable[Obj], claims: Iterable[Obj], slices: Iterable[Obj],
                 planned: set[str]) -> tuple[dict[str, list[int]], dict[str, int]]:
    """The GPUs allocated to claims that are not the plan's, by identity:
    (node -> their offsets, node -> how many of them bound pods hold).

    ``planned``: the pods (keys) whose GPUs the plan already counts (gangs, services);
    every other allocated claim holds GPUs the plan must leave alone, a claim of no
    pod (allocated by hand, or whose pod is gone) included."""
    claims = list(claims)
    pods = list(pods)
    where: dict[str, tuple[str, int]] = {}
    for node, ids in device_ids(slices).items():
        for i, d in enumerate(ids):
            where[d] = (node, i)
    by_pod = pod_devices(pods, claims)
    bound = {ann.key(p) for p in pods
             if (p.get("spec") or {}).get("nodeName")
             and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
    ours = {d for k, ds in by_pod.items() if k in planned for d in ds}
    of_bound = {d for k, ds in by_pod.items() if k in bound and k not in planned for d in ds}
    offsets: dict[str, list[int]] = {}
    counted: dict[str, int] = {}
    for d in sorted(allocated(claims)):
        if d in ours or d not in where:
            continue
        node, i = where[d]
        offsets.setdefault(node, []).append(i)
        if d in of_bound:
            counted[node] = counted.get(node, 0) + 1
    return offsets, counted


def nvlink_domains(devices: list[Obj]) -> list[int] | None:
    """Each device's NVLink domain, in order; None when no device says."""
    domains = [_attr(d, NVLINK_ATTRIBUTE) for d in devices]
    if all(x is None for x in domains):
        return None
    return [x if isinstance(x, int) else -1 for x in domains]


def claims_of(pod: Obj, claims: Mapping[str, Obj]) -> list[Obj]:
    """The pod's ResourceClaims (``claims`` by "namespace/name") that exist."""
    ns = (pod.get("metadata") or {}).get("namespace", "")
    out = []
    for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        name = st.get("resourceClaimName")
        if name and f"{ns}/{name}" in claims:
            out.append(claims[f"{ns}/{name}"])
    for rc in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = rc.get("resourceClaimName")  # a claim shared by name
        if name and f"{ns}/{name}" in claims:
            out.append(claims[f"{ns}/{name}"])
    return out


def gpu_requests(claim: Obj) -> list[tuple[str, int]]:
    """(request name, GPUs) of each of the claim's requests for the GPU DeviceClass."""
    out = []
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        exactly = r.get("exactly") or {}
        if exactly.get("deviceClassName") != DEVICE_CLASS:
            continue
        if exactly.get("allocationMode", "ExactCount") != "ExactCount":
            raise ClaimError(f"claim {ann.key(claim)} request {r.get('name')}: allocationMode "
                             f"{exactly.get('allocationMode')} (gpuroster plans exact counts)")
        if exactly.get("selectors"):
            raise ClaimError(f"claim {ann.key(claim)} request {r.get('name')}: selectors "
                             "(gpuroster gives the planned GPUs, whichever they are)")
        out.append((str(r.get("name")), int(exactly.get("count") or 1)))
    return out


def pod_gpus(pod: Obj, claims: Mapping[str, Obj]) -> int:
    return sum(n for c in claims_of(pod, claims) for _, n in gpu_requests(c))


def view(nodes: Iterable[Obj], pods: Iterable[Obj], slices: Iterable[Obj],
         claims: Iterable[Obj]) -> tuple[list[Obj], list[Obj], dict[str, str]]:
    """(nodes, pods, pod key -> problem): the DRA cluster in the device-plugin shape.

    A node gets ``nvidia.com/gpu`` allocatable = its GPU devices; a pod whose claims
    request GPUs gets that count as an ``nvidia.com/gpu`` request of its first
    container. Objects are copied, never changed. A pod whose claim gpuroster cannot
    plan is left as it is (no GPUs) and named in the problems."""
    devices = node_devices(slices)
    by_key = {ann.key(c): c for c in claims}
    out_nodes = []
    for n in nodes:
        name = str((n.get("metadata") or {}).get("name"))
        if name in devices:
            n = copy.deepcopy(n)
            st = n.setdefault("status", {})
            st.setdefault("allocatable", {})[ann.GPU_RESOURCE] = str(len(devices[name]))
            st.setdefault("capacity", {})[ann.GPU_RESOURCE] = str(len(devices[name]))
        out_nodes.append(n)
    out_pods = []
    problems: dict[str, str] = {}
    for p in pods:
        if (p.get("spec") or {}).get("resourceClaims"):
            try:
                gpus = pod_gpus(p, by_key)
            except ClaimError as e:
                problems[ann.key(p)] = str(e)
                gpus = 0
            if gpus:
                p = copy.deepcopy(p)
                containers = p["spec"].get("containers") or [{}]
                res = containers[0].setdefault("resources", {})
                res.setdefault("requests", {})[ann.GPU_RESOURCE] = str(gpus)
                res.setdefault("limits", {})[ann.GPU_RESOURCE] = str(gpus)
        out_pods.append(p)
    return out_nodes, out_pods, problems


def allocated(claims: Iterable[Obj]) -> dict[str, str]:
    """"pool/device" -> the claim ("namespace/name") it is allocated to."""
    out = {}
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            if r.get("driver") == DRIVER:
                out[f"{r.get('pool')}/{r.get('device')}"] = ann.key(c)
    return out


def held_by(claim: Obj) -> list[str]:
    """The devices ("pool/device") allocated to the claim."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [f"{r.get('pool')}/{r.get('device')}"
            for r in (alloc.get("devices") or {}).get("results") or []
            if r.get("driver") == DRIVER]


def finalizer_patch(claim: Obj) -> Obj | None:
    """The metadata patch adding `FINALIZER` (None: it is there)."""
    have = list((claim.get("metadata") or {}).get("finalizers") or [])
    if FINALIZER in have:
        return None
    return {"metadata": {"finalizers": [*have, FINALIZER],
                         "resourceVersion": (claim.get("metadata") or {}).get("resourceVersion")}}


def allocation(claim: Obj, node: str, devices: list[Obj], when: str | None = None) -> Obj:
    """The status patch that allocates ``devices`` (on ``node``, in order) to the claim's
    GPU requests, in the order of its requests. ``when``: the allocation time (RFC 3339);
    kube-scheduler sets one when it reserves a claim that has none, which the API
    server refuses as a change to the allocation, so an allocation must carry it."""
    results = []
    at = 0
    for request, count in gpu_requests(claim):
        for d in devices[at:at + count]:
            results.append({"request": request, "driver": DRIVER, "pool": d["pool"],
                            "device": d["name"]})
        at += count
    if at != len(devices):
        raise ClaimError(f"claim {ann.key(claim)} requests {at} GPUs, the plan gives "
                         f"{len(devices)}")
    out: Obj = {
        "devices": {"results": results},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }
    if when is not None:
        out["allocationTimestamp"] = when
    return {"status": {"allocation": out}}

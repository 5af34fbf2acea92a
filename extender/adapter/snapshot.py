"""Cluster objects -> what the planner needs: GPUs, gangs, services, held GPUs.

`build` reads plain objects (from the cache) and returns a `Snapshot`:
the GPU grid's nodes in topology order, every gang (queued, admitted or
broken), every real-time service with its pods, and the GPUs something else
holds. It does no I/O; the controller turns a snapshot into a
`model.PlanInput` and the plan back into writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender import config
from extender.adapter import annotations as ann
from extender.adapter import gangs, nodefit
from extender.planner import model

Obj = dict[str, Any]


@dataclass
class ServiceInfo:
    spec: ann.ServiceSpec
    deployment: Obj
    replicas: int
    # GPUs in use (bound or assumed, not terminal) per node name
    gpus_by_node: dict[str, int] = field(default_factory=dict)
    counted: set[str] = field(default_factory=set)  # the pods (keys) gpus_by_node counts
    pending: list[Obj] = field(default_factory=list)
    # The nodes (indices) its pod template may run on; None: all of them.
    nodes: frozenset[int] | None = None
    # Its pods' required anti-affinity keeps them one to a node.
    apart: bool = False


@dataclass
class Snapshot:
    cluster: model.Cluster
    nodes: list[str]  # topology order; node i holds GPUs i*G .. (i+1)*G-1
    node_index: dict[str, int]
    gangs: dict[str, gangs.Gang]
    services: dict[str, ServiceInfo]
    service_errors: dict[str, str]  # deployment key -> problem
    pod_service: dict[str, str]  # pod key -> service name
    unavailable: frozenset[int]  # GPUs not usable by the plan (down nodes, missing)
    foreign: dict[str, int]  # node -> GPUs held by pods outside the plan
    configmaps: dict[str, Obj]
    pods: dict[str, Obj]
    # DRA mode: each node's GPU devices ("pool/device") in offset order, and the devices
    # each pod's claims hold.
    node_devices: dict[str, list[str]] = field(default_factory=dict)
    devices: dict[str, list[str]] = field(default_factory=dict)
    # DRA mode: GPUs (grid indices) that claims outside the plan hold, by identity; the
    # pods among them are no longer in `foreign`, which can only count.
    held: frozenset[int] = frozenset()

    def block_devices(self, block: model.Block) -> list[str]:
        """DRA mode: the devices a block stands for (those the nodes list)."""
        g = self.cluster.gpus_per_node
        out = []
        for i in block.gpus():
            listed = self.node_devices.get(self.nodes[i // g], []) if i // g < len(
                self.nodes) else []
            if i % g < len(listed):
                out.append(listed[i % g])
        return out

    def node_gpus(self, node: str) -> range:
        i = self.node_index[node]
        g = self.cluster.gpus_per_node
        return range(i * g, (i + 1) * g)


def _allocatable_gpus(node: Obj) -> int:
    st = node.get("status") or {}
    v = (st.get("allocatable") or {}).get(ann.GPU_RESOURCE)
    if v is None:
        return 0
    try:
        return int(float(str(v)))
    except ValueError:
        return 0


def node_usable(node: Obj) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    if (node.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


_DIGITS = re.compile(r"[0-9]+")


def natural(name: str) -> str:
    """`name` with each run of digits padded to 20 places: sorts gpu-node-2 before
    gpu-node-10. Two names sort as their text does unless runs of digits of different
    widths meet at the same place, so a cluster whose names already sort the same either
    way keeps its order (and the GPU indices its block records were read with)."""
    return _DIGITS.sub(lambda d: d.group().zfill(20), name)


def _order(node: Obj) -> tuple[int, str, str]:
    m = node.get("metadata") or {}
    labels = m.get("labels") or {}
    try:
        o = int(labels.get(ann.TOPOLOGY_ORDER, ""))
    except ValueError:
        o = 1 << 30
    name = str(m.get("name", ""))
    return (o, natural(name), name)  # the name itself: "node-01" and "node-1" both exist


def deployment_of(pod: Obj) -> str | None:
    m = pod.get("metadata") or {}
    h = (m.get("labels") or {}).get("pod-template-hash")
    if not h:
        return None
    for ref in m.get("ownerReferences") or []:
        if ref.get("kind") == "ReplicaSet" and str(ref.get("name", "")).endswith("-" + h):
            return f"{m.get('namespace', '')}/{str(ref['name'])[: -len(h) - 1]}"
    return None


def build(nodes: Iterable[Obj], pods: Iterable[Obj], deployments: Iterable[Obj],
          configmaps: Iterable[Obj], settings: config.Settings,
          assumed: Mapping[str, str] | None = None,
          namespaces: Iterable[str] = (), priority_classes: Iterable[Obj] = (),
          problems: Mapping[str, str] | None = None) -> Snapshot:
    """`problems`: pod key -> why the pod's GPUs cannot be read (its DRA claims): a
    pending such pod is a broken gang of its own, told why and never planned."""
    assumed = assumed or {}
    problems = problems or {}
    pcs = {str((pc.get("metadata") or {}).get("name")): pc for pc in priority_classes}
    managed = set(namespaces)
    gpu_nodes = sorted((n for n in nodes if _allocatable_gpus(n) > 0), key=_order)
    g = settings.gpus_per_node or max((_allocatable_gpus(n) for n in gpu_nodes), default=8)
    names = [str((n.get("metadata") or {}).get("name")) for n in gpu_nodes]
    index = {n: i for i, n in enumerate(names)}
    cluster = model.Cluster(nodes=len(names), gpus_per_node=g)
    unavailable: set[int] = set()
    for i, n in enumerate(gpu_nodes):
        have = min(g, _allocatable_gpus(n)) if node_usable(n) else 0
        unavailable.update(range(i * g + have, (i + 1) * g))

    def in_scope(obj: Obj) -> bool:
        return not managed or (obj.get("metadata") or {}).get("namespace") in managed

    fitting: dict[str, frozenset[int]] = {}  # pods' node constraints -> nodes that pass
    # Real-time services.
    services: dict[str, ServiceInfo] = {}
    service_errors: dict[str, str] = {}
    for d in deployments:
        if not in_scope(d):
            continue
        try:
            spec = ann.service_spec(d, settings, pcs)
        except ann.AnnotationError as e:
            service_errors[ann.key(d)] = str(e)
            continue
        if spec is not None:
            template = ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
            fit = _fitting_nodes(template, gpu_nodes, fitting)
            if gpu_nodes and not fit:
                service_errors[ann.key(d)] = ("no GPU node fits its pod template's "
                                              "nodeSelector, node affinity and tolerations")
                continue
            replicas = int(((d.get("spec") or {}).get("replicas")) or 0)
            services[spec.name] = ServiceInfo(
                spec, d, replicas, nodes=None if len(fit) == len(gpu_nodes) else fit,
                apart=nodefit.one_per_node((d.get("spec") or {}).get("template") or {}))

    all_pods = {ann.key(p): p for p in pods}
    pod_service: dict[str, str] = {}
    gang_pods: dict[str, list[Obj]] = {}
    works: dict[str, ann.PodWork | ann.AnnotationError] = {}
    foreign: dict[str, int] = {}
    broken: dict[str, gangs.Gang] = {}
    for k, p in all_pods.items():
        pspec = p.get("spec") or {}
        if k in problems and in_scope(p) and gangs.pod_live(p) and not pspec.get("nodeName"):
            broken[k] = gangs.Gang(name=k, pods=[p], error=problems[k])
            continue
        try:
            gpus = ann.pod_gpus(pspec)
        except ann.AnnotationError:
            gpus = 0
        if gpus <= 0:
            continue
        node = pspec.get("nodeName") or assumed.get(k)
        live = gangs.pod_live(p)
        dep = deployment_of(p)
        if dep is not None and dep in services:
            pod_service[k] = dep
            if live and node:
                sv = services[dep]
                sv.gpus_by_node[node] = sv.gpus_by_node.get(node, 0) + gpus
                sv.counted.add(k)
            elif live:
                services[dep].pending.append(p)
            continue
        # A pod that carries an admission record is an admitted gang's, whatever its
        # Deployment says now: the record is durable, never forgotten.
        if dep is not None and dep in service_errors and ann.BLOCK not in ann.annotations_of(p):
            if live and not node:  # a broken real-time service: say why, never plan as batch
                broken[k] = gangs.Gang(name=k, pods=[p],
                                 error=f"Deployment {dep}: {service_errors[dep]}")
            elif live and node:
                foreign[node] = foreign.get(node, 0) + gpus
            continue
        a = ann.annotations_of(p)
        admitted = ann.BLOCK in a
        # Shadow mode: the cluster's own scheduler places every pod; a job's placed pods
        # are its gang running, not GPUs lost to the plan for the whole horizon.
        elsewhere = settings.shadow and not admitted and bool(node) and live
        if not in_scope(p) or (not admitted and node and not elsewhere):
            if live and node:
                foreign[node] = foreign.get(node, 0) + gpus  # placed outside the plan
            continue
        if not admitted and not live:
            continue
        try:
            w: ann.PodWork | ann.AnnotationError = ann.pod_work(p, settings)
        except ann.AnnotationError as e:
            if elsewhere:  # running with annotations the plan cannot read: just held
                foreign[str(node)] = foreign.get(str(node), 0) + gpus
                continue
            w = e
        works[k] = w
        gname = w.gang if isinstance(w, ann.PodWork) else gangs.fallback_gang(p)
        gang_pods.setdefault(gname, []).append(p)

    found: dict[str, gangs.Gang] = {}
    for name, members in gang_pods.items():
        members.sort(key=ann.key)
        gang = gangs.read(name, members, works, cluster, names, index, settings)
        if gang is None:
            continue
        found[name] = gang
        if settings.shadow and gang.admission is None:
            _placed(gang, index)
        if gang.placed is not None:
            continue  # its GPUs are blocks of the grid, given out below
        if gang.admission is None:
            if not gang.error and not gang.waiting_for:
                _limit_nodes(gang, gpu_nodes, names, cluster, fitting)
            # Out of the plan (its block names a node that is gone, say), yet some of
            # its pods run on nodes that are there: the GPUs they hold are nobody's to plan.
            for p in members:
                node = (p.get("spec") or {}).get("nodeName")
                if node in index and gangs.pod_live(p):
                    foreign[node] = foreign.get(node, 0) + ann.pod_gpus(p.get("spec") or {})
    _place_blocks(found, cluster, index, foreign)
    found.update(broken)
    return Snapshot(cluster=cluster, nodes=names, node_index=index, gangs=found,
                    services=services, service_errors=service_errors, pod_service=pod_service,
                    unavailable=frozenset(unavailable), foreign=foreign,
                    configmaps={ann.key(c): c for c in configmaps}, pods=all_pods)


PIECE = "~"  # a placed gang's second and later pieces: `<gang>~1`, `<gang>~2`, ...


def piece_name(gang: str, j: int) -> str:
    return gang if j == 0 else f"{gang}{PIECE}{j}"


def gang_of_piece(name: str) -> str:
    """The gang a running job's name stands for (a placed gang's piece, or itself)."""
    base, sep, tail = name.rpartition(PIECE)
    return base if sep and tail.isdigit() else name


def started_at(pod: Obj) -> float | None:
    """When a pod was placed: its PodScheduled condition, else its start time."""
    st = pod.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            t = ann.parse_time(c.get("lastTransitionTime"))
            if t is not None:
                return t
    return ann.parse_time(st.get("startTime"))


def _placed(gang: gangs.Gang, index: Mapping[str, int]) -> None:
    """Shadow mode: mark a whole, valid gang whose every pod is bound as placed. A gang
    only partly placed keeps `waiting_for` (its bound pods' GPUs are held, foreign)."""
    bound = {ann.key(p): str(n) for p in gang.pods
             if (n := (p.get("spec") or {}).get("nodeName"))}
    if not bound:
        return
    whole = (gang.work is not None and not gang.error and not gang.waiting_for
             and len(bound) == len(gang.pods) == gang.work.gang_size
             and all(n in index for n in bound.values()))
    if not whole:
        if not gang.error:
            gang.waiting_for = (f"waiting: {len(bound)} of {len(gang.pods)} pods of gang "
                                f"{gang.name} placed by the cluster's scheduler")
        return
    gang.placed = bound
    # It started when its last pod was placed (another scheduler may place one at a time).
    times = [t for p in gang.pods if (t := started_at(p)) is not None]
    gang.placed_at = max(times) if times else gang.arrival


def _place_blocks(by_name: Mapping[str, gangs.Gang], cluster: model.Cluster,
                  index: Mapping[str, int], foreign: dict[str, int]) -> None:
    """Give each placed gang blocks of the grid where its pods run: per node, its GPUs
    there split into powers of two, each on the lowest aligned GPUs free of admitted
    blocks and earlier pieces (largest first, so the pieces pack). What does not fit
    (a node that shrank) is held as foreign."""
    g = cluster.gpus_per_node
    taken = 0
    for gang in by_name.values():
        if gang.admission is not None and gang.admission.block.end <= cluster.gpus:
            taken |= gang.admission.block.mask
    pieces: list[tuple[int, int, str, str]] = []  # (-size, node index, gang, node)
    for name, gang in sorted(by_name.items()):
        if gang.placed is None:
            continue
        per_node: dict[str, int] = {}
        for p in gang.pods:
            node = gang.placed[ann.key(p)]
            per_node[node] = per_node.get(node, 0) + ann.pod_gpus(p.get("spec") or {})
        for node, n in per_node.items():
            bit = 1
            while n:
                if n & bit:
                    pieces.append((-bit, index[node], name, node))
                    n -= bit
                bit <<= 1
    for neg, i, name, node in sorted(pieces):
        size = -neg
        block = None
        for at in range(i * g, (i + 1) * g - size + 1, size):
            b = model.Block(at, size)
            if not taken & b.mask:
                block = b
                break
        if block is None:
            foreign[node] = foreign.get(node, 0) + size
            continue
        taken |= block.mask
        by_name[name].placed_blocks.append(block)


def _fitting_nodes(spec: Obj, gpu_nodes: list[Obj],
                   fitting: dict[str, frozenset[int]]) -> frozenset[int]:
    """The nodes (indices) a pod spec may run on; `fitting` remembers each distinct set
    of constraints, so pods of one template are checked against the nodes once."""
    # repr, not a canonical form: pods made from one template list their fields alike.
    key = repr((spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")))
    ok = fitting.get(key)
    if ok is None:
        ok = fitting[key] = frozenset(i for i, n in enumerate(gpu_nodes) if nodefit.fits(spec, n))
    return ok


def _limit_nodes(gang: gangs.Gang, gpu_nodes: list[Obj], names: list[str], cluster: model.Cluster,
                 fitting: dict[str, frozenset[int]]) -> None:
    """Set `gang.nodes` to the nodes all its pods may run on, or say why it cannot run.

    Pods of one template share their constraints: each distinct set is checked against
    the nodes once per snapshot (`fitting`), which keeps this flat at thousands of pods.
    """
    allowed: frozenset[int] | None = None
    for p in gang.pods:
        ok = _fitting_nodes(p.get("spec") or {}, gpu_nodes, fitting)
        allowed = ok if allowed is None else allowed & ok
    if allowed is None or len(allowed) == len(gpu_nodes):
        return
    why = "their nodeSelector, node affinity and tolerations"
    if not allowed:
        gang.waiting_for = f"waiting: no GPU node fits the pods of gang {gang.name} ({why})"
        return
    g = cluster.gpus_per_node
    need = max(1, gang.gpus // g)  # whole consecutive nodes for a gang wider than one
    if not any(all(i + k in allowed for k in range(need)) for i in allowed):
        may = ", ".join(names[i] for i in sorted(allowed))
        gang.waiting_for = (f"waiting: gang {gang.name} needs {need} consecutive nodes its pods "
                            f"may use ({why}); they may use {may}")
        return
    gang.nodes = allowed

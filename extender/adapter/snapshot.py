"""Cluster objects -> what the planner needs: GPUs, gangs, services, held GPUs.

`build` reads plain objects (from the cache) and returns a `Snapshot`:
the GPU grid's nodes in topology order, every gang (queued, admitted or
broken), every real-time service with its pods, and the GPUs something else
holds. It does no I/O; the controller turns a snapshot into a
`model.PlanInput` and the plan back into writes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from extender import config
from extender.adapter import annotations as ann
from extender.adapter import nodefit
from extender.planner import model

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
NODE_LOST = "node lost"  # prefix of a Gang.error: its block names a node that is gone


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(t: float) -> str:
    # Sub-second: steps may be seconds long, and admitted-at fixes a gang's start step.
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Admission:
    block: model.Block
    admitted_at: float
    nodes: dict[str, str]  # pod key -> node


@dataclass
class Gang:
    name: str  # "<namespace>/<gang>"
    pods: list[Obj]
    work: ann.PodWork | None = None
    gpus: int = 0
    arrival: float = 0.0
    admission: Admission | None = None
    error: str | None = None  # bad annotations: never planned
    waiting_for: str | None = None  # incomplete gang: not planned yet
    # Admitted to a node that went before any of its pods bound, or every admitted pod
    # ended and new ones came (a Job retrying): queued again, and its next admission
    # overwrites the old one. Says why.
    requeued: str | None = None
    # Pods that replace ended members of a running gang (a Job retrying a failed pod):
    # pod key -> the node of the gang's block where an ended member left room for it.
    refill: dict[str, str] = field(default_factory=dict)
    # The nodes (indices) every pod of a queued gang may run on, by their node selector,
    # affinity and tolerations; None: all of them.
    nodes: frozenset[int] | None = None
    # Shadow mode: a gang whose every pod another scheduler placed (pod key -> node),
    # since when, and the blocks it holds in the plan's grid, one per power-of-two
    # piece of its GPUs on each node (the device plugin picks the real GPUs: a block
    # is the plan's accounting, as an admission's is).
    placed: dict[str, str] | None = None
    placed_at: float = 0.0
    placed_blocks: list[model.Block] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.name.split("/", 1)[0]

    def pod_keys(self) -> list[str]:
        return [ann.key(p) for p in self.pods]


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
    gangs: dict[str, Gang]
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


def layout(pods: list[tuple[str, int]], block: model.Block, cluster: model.Cluster,
           nodes: list[str]) -> dict[str, str]:
    """Each pod of a gang gets a node inside `block`: largest first, packed in order.

    Raises AnnotationError if some pod would straddle two nodes.
    """
    return {k: nodes[i // cluster.gpus_per_node] for k, i in slots(pods, block, cluster).items()}


def slots(pods: list[tuple[str, int]], block: model.Block,
          cluster: model.Cluster) -> dict[str, int]:
    """The grid index of each pod's first GPU inside `block` (`layout`'s packing); the
    pod holds that GPU and the next ones on its node. Raises AnnotationError if some
    pod would straddle two nodes."""
    g = cluster.gpus_per_node
    out: dict[str, int] = {}
    at = block.start
    for key, gpus in sorted(pods, key=lambda p: (-p[1], p[0])):
        first, last = at // g, (at + gpus - 1) // g
        if first != last:
            raise ann.AnnotationError(
                f"the gang's pods ({', '.join(str(n) for _, n in pods)} GPUs) cannot be "
                f"packed into whole nodes of {g} GPUs")
        out[key] = at
        at += gpus
    return out


def deployment_of(pod: Obj) -> str | None:
    m = pod.get("metadata") or {}
    h = (m.get("labels") or {}).get("pod-template-hash")
    if not h:
        return None
    for ref in m.get("ownerReferences") or []:
        if ref.get("kind") == "ReplicaSet" and str(ref.get("name", "")).endswith("-" + h):
            return f"{m.get('namespace', '')}/{str(ref['name'])[: -len(h) - 1]}"
    return None


def pod_live(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL


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
    broken: dict[str, Gang] = {}
    for k, p in all_pods.items():
        pspec = p.get("spec") or {}
        if k in problems and in_scope(p) and pod_live(p) and not pspec.get("nodeName"):
            broken[k] = Gang(name=k, pods=[p], error=problems[k])
            continue
        try:
            gpus = ann.pod_gpus(pspec)
        except ann.AnnotationError:
            gpus = 0
        if gpus <= 0:
            continue
        node = pspec.get("nodeName") or assumed.get(k)
        live = pod_live(p)
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
                broken[k] = Gang(name=k, pods=[p],
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
        gname = w.gang if isinstance(w, ann.PodWork) else _fallback_gang(p)
        gang_pods.setdefault(gname, []).append(p)

    gangs: dict[str, Gang] = {}
    for name, members in gang_pods.items():
        members.sort(key=ann.key)
        gang = _gang(name, members, works, cluster, names, index, settings)
        if gang is None:
            continue
        gangs[name] = gang
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
                if node in index and pod_live(p):
                    foreign[node] = foreign.get(node, 0) + ann.pod_gpus(p.get("spec") or {})
    _place_blocks(gangs, cluster, index, foreign)
    gangs.update(broken)
    return Snapshot(cluster=cluster, nodes=names, node_index=index, gangs=gangs,
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
            t = parse_time(c.get("lastTransitionTime"))
            if t is not None:
                return t
    return parse_time(st.get("startTime"))


def _placed(gang: Gang, index: Mapping[str, int]) -> None:
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


def _place_blocks(gangs: Mapping[str, Gang], cluster: model.Cluster,
                  index: Mapping[str, int], foreign: dict[str, int]) -> None:
    """Give each placed gang blocks of the grid where its pods run: per node, its GPUs
    there split into powers of two, each on the lowest aligned GPUs free of admitted
    blocks and earlier pieces (largest first, so the pieces pack). What does not fit
    (a node that shrank) is held as foreign."""
    g = cluster.gpus_per_node
    taken = 0
    for gang in gangs.values():
        if gang.admission is not None and gang.admission.block.end <= cluster.gpus:
            taken |= gang.admission.block.mask
    pieces: list[tuple[int, int, str, str]] = []  # (-size, node index, gang, node)
    for name, gang in sorted(gangs.items()):
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
        gangs[name].placed_blocks.append(block)


def _fallback_gang(pod: Obj) -> str:
    """The gang of a pod whose annotations do not parse, as `pod_work` would name it."""
    m = pod.get("metadata") or {}
    return ann.gang_key(str(m.get("namespace") or "default"),
                        ann.annotations_of(pod).get(ann.GANG), str(m.get("name", "")))


def _disagreement(a: ann.PodWork, b: ann.PodWork) -> str | None:
    """What two pods of one gang must agree on and do not (the first such), or None."""
    for attr in ("gang_size", "workload", "priority", "duration_seconds"):
        if getattr(a, attr) != getattr(b, attr):
            return attr.replace("_", " ")
    return None


def _refill(gang: Gang, running: list[Obj], late: list[Obj],
            works: Mapping[str, ann.PodWork | ann.AnnotationError], cluster: model.Cluster,
            nodes: list[str]) -> None:
    """Pods that came after their gang was admitted take the places of ended members.

    A Job replaces a failed pod with a new one; the gang still runs and holds its
    block, so the newcomer goes where the ended member was: to a node of the block
    with that many GPUs not held by the gang's running pods. Sets `gang.refill`,
    or `gang.error` (saying why the newcomers wait) when they do not fit.
    """
    assert gang.admission is not None
    keys = ", ".join(ann.key(p) for p in late)
    if gang.work is None:  # the running pods' annotations no longer parse
        gang.error = f"gang {gang.name} was already admitted; pods {keys} came late"
        return
    for p in late:
        w = works.get(ann.key(p))
        if isinstance(w, ann.AnnotationError):
            gang.error = str(w)
            return
        differ = "its gang" if w is None else _disagreement(w, gang.work)
        if differ:
            gang.error = (f"pod {ann.key(p)} of admitted gang {gang.name} disagrees with "
                          f"its running pods on {differ}")
            return
    size = gang.work.gang_size
    if len(running) + len(late) > size:
        gang.error = (f"gang {gang.name} was already admitted and {len(running)} of its "
                      f"{size} pods still run; pods {keys} came late and wait for one to end")
        return
    g = cluster.gpus_per_node
    block = gang.admission.block
    free: dict[str, int] = {}
    for i in range(block.start // g, (block.end - 1) // g + 1):
        if i < len(nodes):
            lo, hi = max(block.start, i * g), min(block.end, (i + 1) * g)
            free[nodes[i]] = hi - lo
    for p in running:
        n = gang.admission.nodes.get(ann.key(p))
        if n in free:
            free[n] -= ann.pod_gpus(p.get("spec") or {})
    refill: dict[str, str] = {}
    needs = {ann.key(p): ann.pod_gpus(p.get("spec") or {}) for p in late}
    for key in sorted(needs, key=lambda k: (-needs[k], k)):
        need = needs[key]
        room = [n for n, f in free.items() if f >= need]
        if not room:
            gang.error = (f"gang {gang.name} was already admitted; pods {keys} came late and "
                          "its block has no room left for them")
            return
        n = min(room, key=lambda n: free[n])  # the fullest node that fits
        free[n] -= need
        refill[key] = n
    gang.refill = refill


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


def _limit_nodes(gang: Gang, gpu_nodes: list[Obj], names: list[str], cluster: model.Cluster,
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


def _check_span(label: str, block: model.Block, admitted: list[Obj], nodes: list[str],
                g: int) -> None:
    """Raise AnnotationError unless `block` (read from `label` with today's node order)
    spans exactly the nodes its pods were admitted to. A multi-node label names only its
    first and last node, so a node that came between them since would widen the block
    over GPUs the gang never held, and its replacements would go there."""
    recorded = {str(n) for p in admitted
                if (pa := ann.annotations_of(p)).get(ann.BLOCK) == label
                and (n := pa.get(ann.NODE))}
    span = nodes[block.start // g:(block.end - 1) // g + 1]
    outside = recorded - set(span)
    # Every node of a multi-node block got pods: one none of them names came since.
    unnamed = [n for n in span if n not in recorded] if block.size > g and recorded else []
    if outside or unnamed:
        raise ann.AnnotationError(
            f"{ann.BLOCK}: {label!r} now spans {', '.join(span)}, but its pods were admitted "
            f"to {', '.join(sorted(recorded))}")


def _last_created(pods: list[Obj]) -> float:
    """When a gang arrived: its last pod's creation time (0.0 if none carries one)."""
    created = [parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in pods]
    return max((c for c in created if c is not None), default=0.0)


def _gang(name: str, members: list[Obj], works: Mapping[str, ann.PodWork | ann.AnnotationError],
          cluster: model.Cluster, nodes: list[str], index: Mapping[str, int],
          settings: config.Settings) -> Gang | None:
    admitted = [p for p in members if ann.BLOCK in ann.annotations_of(p)]
    gang = Gang(name=name, pods=members)
    running = [p for p in admitted if pod_live(p)]
    if admitted and not running:
        if not any(pod_live(p) for p in members):
            return None  # finished: its block is free
        # Every admitted pod ended and new ones came (a Job retrying after its pods
        # failed): they are a new gang, planned and admitted whole.
        gang.requeued = "its admitted pods ended; the pods that replace them are queued again"
        admitted = []
    if admitted:
        a = ann.annotations_of(running[0])
        t = parse_time(a.get(ann.ADMITTED_AT)) or 0.0
        try:
            block = ann.parse_block(a[ann.BLOCK], index, cluster.gpus_per_node)
            _check_span(a[ann.BLOCK], block, admitted, nodes, cluster.gpus_per_node)
        except ann.AnnotationError as e:
            gone = sorted({str(n) for p in admitted
                           if (n := (p.get("spec") or {}).get("nodeName")) and n not in index})
            missing = [n for n in ann.block_nodes(a[ann.BLOCK]) if n not in index]
            bound = any((p.get("spec") or {}).get("nodeName") for p in members)
            if not (missing and not bound):
                gang.error = (f"{NODE_LOST}: gang {name} ran on {', '.join(gone)}, which is "
                              "gone; its pods stay out of the plan" if gone else str(e))
                return gang
            # Nothing of it runs: plan it again like a new gang (below).
            gang.requeued = (f"admitted to {', '.join(missing)}, which went before any of "
                             "its pods bound; queued again")
            admitted = []
    if admitted:
        per_pod = {}
        for p in admitted:
            k = ann.key(p)
            per_pod[k] = (p.get("spec") or {}).get("nodeName") or ann.annotations_of(p).get(
                ann.NODE) or nodes[block.start // cluster.gpus_per_node]
        w0 = works.get(ann.key(admitted[0]))
        gang.work = w0 if isinstance(w0, ann.PodWork) else None
        gang.gpus = block.size
        gang.admission = Admission(block=block, admitted_at=t, nodes=per_pod)
        # Kept for admitted gangs too: a later round in the step re-plans the step's
        # admissions as the queue they came from.
        gang.arrival = _last_created(members)
        late = [p for p in members if ann.BLOCK not in ann.annotations_of(p)]
        gang.pods = admitted + late
        if late:
            _refill(gang, running, late, works, cluster, nodes)
        return gang
    live = [p for p in members if pod_live(p)]
    if not live:
        return None
    gang.pods = live
    errors = [str(w) for p in live if isinstance(w := works[ann.key(p)], ann.AnnotationError)]
    if errors:
        gang.error = errors[0]
        return gang
    ws = [w for p in live if isinstance(w := works[ann.key(p)], ann.PodWork)]
    first = ws[0]
    for w in ws[1:]:
        if differ := _disagreement(w, first):
            gang.error = f"pods of gang {name} disagree on {differ}"
            return gang
    gang.work = first
    gang.gpus = sum(w.gpus for w in ws)
    gang.arrival = _last_created(live)
    if len(live) > first.gang_size:
        gang.error = f"gang {name} has {len(live)} pods but {ann.GANG_SIZE} is {first.gang_size}"
        return gang
    if cluster.gpus and first.gang_size * min(w.gpus for w in ws) > cluster.gpus:
        gang.error = (f"gang {name} has {ann.GANG_SIZE} {first.gang_size}: at least "
                      f"{first.gang_size * min(w.gpus for w in ws)} GPUs; the cluster has "
                      f"{cluster.gpus}")
        return gang
    if len(live) < first.gang_size:
        gang.waiting_for = f"waiting for the gang: {len(live)} of {first.gang_size} pods exist"
        return gang
    if not model.is_power_of_two(gang.gpus):
        gang.error = (f"gang {name} asks for {gang.gpus} GPUs in total; "
                      "a block must be a power of two")
        return gang
    if cluster.gpus and gang.gpus > cluster.gpus:
        gang.error = f"gang {name} asks for {gang.gpus} GPUs; the cluster has {cluster.gpus}"
        return gang
    if gang.gpus > cluster.gpus_per_node and gang.gpus % cluster.gpus_per_node:
        gang.error = f"gang {name}: {gang.gpus} GPUs is not a whole number of nodes"
        return gang
    if any(w.gpus > cluster.gpus_per_node for w in ws):
        gang.error = f"a pod of gang {name} asks for more GPUs than a node has"
        return gang
    try:
        layout([(ann.key(p), w.gpus) for p, w in zip(live, ws, strict=True)],
               model.Block(0, gang.gpus), cluster, nodes or ["?"] * max(1, math.ceil(
                   gang.gpus / max(1, cluster.gpus_per_node))))
    except ann.AnnotationError as e:
        gang.error = str(e)
    return gang

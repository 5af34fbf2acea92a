"""A gang as its pods make it: the pods' work, its admission (the durable record its
pods' annotations hold), and what keeps it out of the plan or waiting.

`read` turns the pods of one gang into a `Gang`; `snapshot.build` calls it for every
gang. Pure functions over plain dicts (an object's JSON), as `snapshot` is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender import config
from extender.adapter import annotations as ann
from extender.planner import model

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
NODE_LOST = "node lost"  # prefix of a Gang.error: its block names a node that is gone


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


def pod_live(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL


def fallback_gang(pod: Obj) -> str:
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
    created = [ann.parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in pods]
    return max((c for c in created if c is not None), default=0.0)


def read(name: str, members: list[Obj], works: Mapping[str, ann.PodWork | ann.AnnotationError],
         cluster: model.Cluster, nodes: list[str], index: Mapping[str, int],
         settings: config.Settings) -> Gang | None:
    """The gang `name` of `members` (its pods, sorted by key; `works`: each pod's work or
    why it has none), or None when it has finished."""
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
        t = ann.parse_time(a.get(ann.ADMITTED_AT)) or 0.0
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

"""What users read about the plan: why a pod waits, and the Events that say so.

Owns:
- the waiting reasons (`waiting`, pure): the text kube-scheduler shows in
  `FailedScheduling` and the verbs send back for every node;
- `Explainer`: an Event and the `gpuroster.io/Planned` condition on a pod whose
  story changed (admitted, waiting, a bad annotation, a lost node, a broken
  demand source), each told once, with the memory of what was last told.

May not touch: a decision. It reads the plan, the snapshot and the admissions
the writers made; it never plans, admits, scales, moves, binds or writes an
annotation. Its only writes are Events and the pod condition, and a failed one
changes nothing but a retry of the same message next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from typing import Any

from extender import metrics
from extender.adapter import annotations as ann
from extender.adapter import gangs, kube, objects, snapshot
from extender.controller import clock
from extender.planner import model

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def waiting(snap: snapshot.Snapshot, plan: model.Plan,
            admitted: Mapping[str, gangs.Admission], failed: Mapping[str, str],
            refused: Mapping[str, str], step_start: Callable[[int], float],
            step_seconds: float, completing: Set[str] = frozenset()) -> dict[str, str]:
    """Pod key -> why it waits, for every pod of a gang that is not admitted and every
    late pod of one that is (a replacement, or in `completing`, one its gang's admission
    stopped before).

    `failed`: gang -> why its admission write failed this round; `refused`: pod key ->
    why a late pod's did; `step_start`: the time a step begins."""
    out: dict[str, str] = {}
    for name, g in snap.gangs.items():
        if g.placed is not None:  # shadow mode: running where another scheduler put it
            continue
        adm = g.admission or admitted.get(name)
        if adm is not None:
            for k in g.pod_keys():  # late pods of an admitted gang
                if k in adm.nodes:
                    continue
                node = g.refill.get(k)
                story = (f"completes the admission of gang {name} ({len(adm.nodes)} of "
                         f"{len(g.pod_keys())} pods written) on {node}" if k in completing
                         else f"replaces an ended pod of gang {name} on {node}")
                out[k] = error_reason(g.error) if g.error else (
                    f"waiting: {story}; " + (f"{refused[k]}; retrying next step"
                                             if k in refused else "the leader admits it"))
            continue
        why = gang_reason(snap, plan, g, failed, step_start, step_seconds)
        out.update({k: why for k in g.pod_keys()})
    return out


def gang_reason(snap: snapshot.Snapshot, plan: model.Plan, g: gangs.Gang,
                failed: Mapping[str, str], step_start: Callable[[int], float],
                step_seconds: float) -> str:
    """Why a gang that is not admitted waits: its error, what it waits for, or the plan's
    start for it."""
    if g.error:
        return error_reason(g.error)
    if g.waiting_for:
        return g.waiting_for
    why = f"{g.requeued}; " if g.requeued else ""
    if g.name in failed:
        return f"waiting: {why}{failed[g.name]}; retrying next step"
    start = plan.planned_start.get(g.name)
    if start is None:
        return f"waiting: {why}not in the plan's horizon"
    block = plan.planned_block.get(g.name)
    where = f" on {block.label(snap.cluster, snap.nodes).split(':')[0]}" if block else ""
    when = clock.wall_time(step_start(start), step_seconds)
    return f"waiting: {why}planned start {when}{where} (step {start})"


def error_reason(error: str) -> str:
    """What a pod of a gang with `error` is told: a lost node as it is, anything else as
    bad annotations (a Warning InvalidAnnotations, counted; docs/annotations.md)."""
    return error if error.startswith(gangs.NODE_LOST) else f"bad annotations: {error}"


class Explainer:
    """Tells each pod its story once: an Event and the Planned condition per change."""

    def __init__(self, client: kube.Kube) -> None:
        self.client = client
        self._explained: dict[str, str] = {}  # pod key -> last message told
        # pod key -> an Admitted message whose Event failed: the gang is running by the
        # next round, so nothing recomputes it; it is told again from here until it lands.
        self._owed: dict[str, str] = {}

    def explain(self, snap: snapshot.Snapshot, step: int, now: float,
                admitted: Mapping[str, gangs.Admission], problems: Mapping[str, str],
                waiting: Mapping[str, str]) -> None:
        """Tell the pods of this round: the admitted, the waiting (`waiting`: the table's
        reasons), those of running gangs on a node that went down, and the pending pods
        of services whose demand could not be read (`problems`)."""
        seen: set[str] = set()
        for name, g in snap.gangs.items():
            if name in admitted:
                for p in g.pods:
                    k = ann.key(p)
                    seen.add(k)
                    node = admitted[name].nodes.get(k, "")
                    msg = (f"admitted at step {step}: block "
                           f"{admitted[name].block.label(snap.cluster, snap.nodes)}, node {node}")
                    self.tell(p, "Admitted", msg, now, True, False)
                continue
            if g.admission is not None and not g.error:
                seen.update(g.pod_keys())
                for p in g.pods:
                    owed = self._owed.get(ann.key(p))
                    if owed is not None:
                        self.tell(p, "Admitted", owed, now, True, False)
                self._report_down_nodes(snap, g, now)
                continue
            for p in g.pods:
                k = ann.key(p)
                seen.add(k)
                if g.admission is not None and k in g.admission.nodes:
                    continue
                reason = waiting.get(k)
                if reason is None:
                    continue
                bad = reason.startswith("bad annotations")
                lost = reason.startswith(gangs.NODE_LOST)
                if bad and self._explained.get(k) != reason:
                    metrics.ANNOTATION_ERRORS.inc()
                self.tell(p, "NodeLost" if lost else "InvalidAnnotations" if bad else "Waiting",
                          reason, now, False, bad or lost)
        for name, problem in problems.items():
            sv = snap.services.get(name)
            if sv is None:
                continue
            for p in sv.pending:
                seen.add(ann.key(p))
                self.tell(p, "InvalidDemand", f"service {name}: {problem}", now, False, True)
        for k in [k for k in self._explained if k not in seen]:
            del self._explained[k]
        for k in [k for k in self._owed if k not in seen]:
            del self._owed[k]

    def _report_down_nodes(self, snap: snapshot.Snapshot, g: gangs.Gang, now: float) -> None:
        """A running gang on a node that is not Ready: its GPUs leave the plan; say so."""
        assert g.admission is not None
        per = snap.cluster.gpus_per_node
        down = sorted({snap.nodes[gpu // per] for gpu in g.admission.block.gpus()
                       if gpu in snap.unavailable and gpu // per < len(snap.nodes)})
        if not down:
            return
        msg = (f"gang {g.name} runs on {', '.join(down)}, which is not Ready: its GPUs are out "
               "of the plan until the node is back; nothing else moves")
        if all(self._explained.get(ann.key(p)) == msg for p in g.pods):
            return
        log.warning("%s", msg)
        for p in g.pods:
            self.tell(p, "NodeNotReady", msg, now, True, True)

    def tell(self, pod: Obj, reason: str, message: str, now: float, status: bool,
             warning: bool) -> None:
        """An Event and the Planned condition (`status`) on `pod`, unless it was told
        `message` last; a `warning` Event for trouble."""
        k = ann.key(pod)
        if self._explained.get(k) == message:
            return
        self._explained[k] = message
        m = pod.get("metadata") or {}
        ns, name = str(m.get("namespace")), str(m.get("name"))
        try:
            self.client.create_event(ns, objects.event(pod, reason, message, now, warning))
        except kube.ApiError as e:
            # Not told: try again next round (a slow API server must not eat the Event).
            self._explained.pop(k, None)
            if reason == "Admitted":
                self._owed[k] = message
            log.info("event on %s not written (%s); retrying next round", k, e)
            return
        self._owed.pop(k, None)
        try:
            self.client.patch_pod_status(ns, name,
                                         objects.condition_patch(status, reason, message, now))
        except kube.ApiError as e:
            log.info("condition on %s not written: %s", k, e)

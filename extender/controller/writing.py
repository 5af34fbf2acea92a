"""The writers: what the leader does to the cluster so that it runs the current step.

Owns, for the decisions of a round's plan:
- **admit** a gang whose planned start is now: write its admission on every pod
  (`gpuroster.io/block`, `admitted-at`, `node`; the scheduling gate lifted; in DRA
  mode, before those, its GPU claims allocated the block's devices). A
  written record is never undone: kube-scheduler may bind that pod at once. If a
  later pod's write fails, the gang is admitted all the same and its unwritten
  pods are written by the refill (this round and the next ones). A write with no
  answer (a timeout) may have landed: when it was the gang's first, the gang and
  its block are held back until the watch shows the record or `UNSURE_SECONDS`;
- **refill** the replacement of an ended member of a running gang in its place,
  and the pods a gang's admission did not reach;
- **scale** each service's Deployment to the plan's replica count (scale
  subresource), steering which pods go first (`pod-deletion-cost`), held to the
  swap budget left in the step;
- **move** a service's replicas where the plan moved its GPUs at the same count
  (Eviction API), at most half the swap budget left, in a step's first half;
- **wake** the pending pods of a service when the plan holds room for them;
- and the memory these need between rounds: the replicas added and removed per
  service in the step, the pods woken, when each gang was first promised a start,
  the admissions whose outcome is unknown.

May not touch: the plan (it carries out what the round hands it, never
re-plans), the verbs' table, or what users are told beyond the Event of an
admitted replacement (through `explaining.Explainer`). Every write is the
leader's: the round calls none of this on a follower, and each write (every pod
patch, scale and eviction; Events are best effort) asks `leader` again first, so
a Lease lost in the middle of a round stops the writes that follow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from extender import config, metrics
from extender.adapter import annotations as ann
from extender.adapter import dra, gangs, kube, objects, snapshot, watching
from extender.controller import clock as clock_mod
from extender.controller import explaining
from extender.planner import model

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# How long an admission write with no answer may still land: the API server's default
# --request-timeout (60 s) cuts a request off, plus room for the watch to show it.
UNSURE_SECONDS = 90.0


def unknown_outcome(e: kube.ApiError) -> bool:
    """A write that got no answer (0: a timeout, a dropped connection) or a gateway
    timeout may have been applied: neither done nor failed."""
    return e.status in (0, 504)


class Writer:
    """Carries a plan's current step out on the cluster (the leader only)."""

    def __init__(self, settings: config.Settings, client: kube.Kube, cache: watching.Cache,
                 clock: clock_mod.Clock, explainer: explaining.Explainer,
                 leader: Callable[[], bool] = lambda: True) -> None:
        self.settings = settings
        self.client = client
        self.cache = cache
        self.clock = clock
        self.explainer = explainer
        self.leader = leader  # asked before every write
        self._first_planned: dict[str, float] = {}  # gang -> the start it was first promised
        self._woken: dict[str, int] = {}  # pod key -> step it was woken in
        # service -> (step, replicas added this step, replicas removed this step)
        self._moved: dict[str, tuple[int, int, int]] = {}
        # gang -> (its block, the pod whose admission write got no answer, until when
        # the gang and the block wait for the watch to show whether it landed)
        self._unsure: dict[str, tuple[model.Block, str, float]] = {}
        self._completing: set[str] = set()  # pods an admission stopped before: refilled

    # --- gangs --------------------------------------------------------------------

    def admit(self, snap: snapshot.Snapshot, plan: model.Plan, step: int,
              now: float) -> tuple[dict[str, gangs.Admission], dict[str, str]]:
        """Admit the gangs the plan starts now: (gang -> admission, gang -> why it failed).

        A gang whose admission reached some of its pods but not all (a write failed,
        the Lease was lost) is admitted all the same: its records stay (kube-scheduler
        may already have bound those pods) and are the gang's durable admission, as a
        restart reads them. It is left in `snap` as the next snapshot will read it,
        admitted with its other pods to refill, which `refill` then writes. It is not
        in the returned admissions (those are told of whole), so its written pods are
        told here.
        """
        admitted: dict[str, gangs.Admission] = {}
        failed: dict[str, str] = {}
        held = self._held(snap, now)
        for name, block in sorted(plan.starts.items()):
            gang = snap.gangs.get(name)
            if gang is None or gang.admission is not None or gang.work is None:
                continue
            if not self.leader():
                break  # the Lease was lost: the writes are the next leader's
            unsure = next((k for g, (b, k, _) in held.items()
                           if g == name or b.mask & block.mask), None)
            if unsure is not None:
                failed[name] = (f"the admission write on {unsure} got no answer; its block "
                                "is not given out until it is known whether it was applied")
                continue
            try:
                sizes = [(ann.key(p), ann.pod_gpus(p.get("spec") or {})) for p in gang.pods]
                per_pod = gangs.layout(sizes, block, snap.cluster, snap.nodes)
                slot = gangs.slots(sizes, block, snap.cluster)
            except ann.AnnotationError as e:
                failed[name] = str(e)
                continue
            adm = gangs.Admission(block=block, admitted_at=now, nodes=per_pod)
            label = block.label(snap.cluster, snap.nodes)
            done: dict[str, str] = {}
            error = None
            lost = False
            for pod in gang.pods:
                k = ann.key(pod)
                if done and not self.leader():
                    error, lost = "the Lease was lost", True
                    break
                try:
                    if self.settings.dra:  # the claims first: the gate lifts after them
                        at = slot[k] % snap.cluster.gpus_per_node
                        self._allocate(pod, per_pod[k], range(at, at + dict(sizes)[k]))
                    self._write_admission(pod, label, now, per_pod[k])
                    done[k] = per_pod[k]
                except dra.ClaimError as e:
                    error = f"admission of {k} refused: {e}"
                    self.explainer.tell(pod, "ClaimNotAllocated", str(e), now, False, True)
                    break
                except kube.ApiError as e:
                    error = f"admission write failed on {k}: {e}"
                    if unknown_outcome(e) and not done:
                        # It may have landed: neither the gang nor its block is given
                        # out again until the watch tells.
                        self._unsure[name] = (block, k, now + UNSURE_SECONDS)
                        held[name] = self._unsure[name]
                        error = (f"the admission write on {k} got no answer ({e}); waiting "
                                 "to see whether it was applied")
                    break
            if error is not None and not done:
                failed[name] = error
                metrics.GANG_ADMISSIONS.labels(outcome="failed").inc()
                log.warning("gang %s not admitted: %s", name, error)
                continue
            if error is not None:  # part of it: admitted, the rest is refilled
                adm.nodes = done
                gang.admission = adm
                gang.refill = {k: n for k, n in per_pod.items() if k not in done}
                self._completing.update(gang.refill)
                log.warning("gang %s admitted on %s, %d of %d pods written (%s); the others "
                            "are written next", name, label, len(done), len(per_pod), error)
                for pod in gang.pods:
                    if ann.key(pod) in done and not lost:
                        self.explainer.tell(pod, "Admitted", f"admitted at step {step}: block "
                                            f"{label}, node {done[ann.key(pod)]}", now, True,
                                            False)
            else:
                admitted[name] = adm
                log.info("admitted gang %s on %s at step %d", name, label, step)
            metrics.GANG_ADMISSIONS.labels(outcome="admitted").inc()
            w = gang.work
            metrics.QUEUE_WAIT.labels(priority=self.settings.priority_label(w.priority)).observe(
                max(0.0, now - gang.arrival))
            first = self._first_planned.pop(name, None)
            if first is not None:
                metrics.PLANNED_START_DELAY.observe(now - first)
            if lost:
                break
        return admitted, failed

    def _held(self, snap: snapshot.Snapshot,
              now: float) -> dict[str, tuple[model.Block, str, float]]:
        """The gangs whose first admission write got no answer and is still unsure,
        having dropped those the snapshot settles: the record is in the cache (the gang
        is admitted: the snapshot holds its block), the pod is gone, or the write has
        been cut off long enough that it never landed."""
        for name, (_, k, until) in list(self._unsure.items()):
            gang = snap.gangs.get(name)
            if (gang is None or gang.admission is not None or k not in snap.pods
                    or now >= until):
                del self._unsure[name]
        return dict(self._unsure)

    def promised(self, snap: snapshot.Snapshot, plan: model.Plan,
                 admitted: Mapping[str, gangs.Admission]) -> None:
        """Remember the first start the plan promised each waiting gang (for the delay
        between that promise and the admission, a metric)."""
        for name in plan.planned_start:
            if name not in admitted and name in snap.gangs:
                self._first_planned.setdefault(
                    name, self.settings.step_start(plan.planned_start[name]))

    @property
    def completing(self) -> frozenset[str]:
        """The pods whose gang's admission stopped before their records were written
        (this replica's writes: a restarted or new leader tells them as replacements)."""
        return frozenset(self._completing)

    def refill(self, snap: snapshot.Snapshot, now: float) -> dict[str, str]:
        """Admit the pods that replace ended members of running gangs, in their places,
        and those a gang's admission did not reach (`admit`).

        Returns pod key -> why its admission write failed (tried again next round).
        """
        failed: dict[str, str] = {}
        for name, gang in sorted(snap.gangs.items()):
            adm = gang.admission
            if adm is None or not gang.refill:
                continue
            label = adm.block.label(snap.cluster, snap.nodes)
            for pod in gang.pods:
                k = ann.key(pod)
                node = gang.refill.get(k)
                if node is None or k in adm.nodes:
                    continue
                if not self.leader():
                    return failed
                try:
                    if self.settings.dra:
                        gpus = ann.pod_gpus(pod.get("spec") or {})
                        self._allocate(pod, node,
                                       self._refill_offsets(adm.block, node, snap, gpus))
                    self._write_admission(pod, label, adm.admitted_at, node)
                except dra.ClaimError as e:
                    failed[k] = f"admission of {k} refused: {e}"
                    log.warning("replacement %s of gang %s not admitted: %s", k, name, e)
                    continue
                except kube.ApiError as e:
                    failed[k] = f"admission write failed on {k}: {e}"
                    log.warning("replacement %s of gang %s not admitted: %s", k, name, e)
                    continue
                adm.nodes[k] = node
                if k in self._completing:  # its gang's admission stopped before it
                    self._completing.discard(k)
                    self.explainer.tell(pod, "Admitted", f"completes the admission of gang "
                                        f"{name}: block {label}, node {node}", now, True, False)
                    log.info("pod %s of gang %s admitted on %s", k, name, node)
                    continue
                metrics.GANG_ADMISSIONS.labels(outcome="replaced").inc()
                self.explainer.tell(pod, "Admitted", f"replaces an ended pod of gang {name}: "
                                    f"block {label}, node {node}", now, True, False)
                log.info("pod %s replaces an ended pod of gang %s on %s", k, name, node)
        return failed

    def _refill_offsets(self, block: model.Block, node: str, snap: snapshot.Snapshot,
                        gpus: int) -> list[int]:
        """DRA mode: the first ``gpus`` GPUs of ``block`` on ``node`` that no claim holds
        (an ended member's), as in-node offsets."""
        g = snap.cluster.gpus_per_node
        base = snap.node_index[node] * g
        devices = dra.node_devices(self.cache.items("resourceslices")).get(node, [])
        held = dra.allocated(self.cache.items("resourceclaims"))
        free = [i - base for i in block.gpus() if base <= i < base + g and i - base < len(
            devices) and f"{devices[i - base]['pool']}/{devices[i - base]['name']}" not in held]
        return free[:gpus]

    def _allocate(self, pod: Obj, node: str, offsets: Sequence[int]) -> None:
        """DRA mode: allocate the pod's GPU claims the devices at ``offsets`` of ``node``
        (its GPU devices in offset order: `dra.node_devices`), before its gate is lifted.

        Idempotent: a claim that already holds exactly those devices is left alone; one
        allocated elsewhere but not yet reserved by a pod (an admission that failed
        half way) is deallocated first. Devices another claim holds, or a claim that a
        pod already uses, raise ClaimError and nothing is written."""
        claims = {ann.key(c): c for c in self.cache.items("resourceclaims")}
        mine = [c for c in dra.claims_of(pod, claims) if dra.gpu_requests(c)]
        if not mine:
            # nvidia.com/gpu served through DRA: kube-scheduler makes and allocates the
            # claim itself in PreBind; the plan holds the node, not the devices.
            return
        devices = dra.node_devices(self.cache.items("resourceslices")).get(node, [])
        gpus = sum(n for c in mine for _, n in dra.gpu_requests(c))
        if len(offsets) != gpus or any(i >= len(devices) for i in offsets):
            raise dra.ClaimError(f"{node} lists {len(devices)} GPU devices; the plan gives "
                                 f"the pod's {gpus} GPUs at {list(offsets)}")
        want = [devices[i] for i in offsets]
        held = dra.allocated(claims.values())
        at = 0
        for claim in mine:
            n = sum(c for _, c in dra.gpu_requests(claim))
            part = want[at:at + n]
            at += n
            ck = ann.key(claim)
            ids = [f"{d['pool']}/{d['name']}" for d in part]
            if dra.held_by(claim) == ids:
                continue
            other = next((f"{i} (claim {held[i]})" for i in ids if held.get(i, ck) != ck), None)
            if other is not None:
                raise dra.ClaimError(f"the planned device {other} on {node} is allocated "
                                     "outside the plan")
            m = claim.get("metadata") or {}
            ns, name = str(m.get("namespace")), str(m.get("name"))
            if dra.held_by(claim):
                if (claim.get("status") or {}).get("reservedFor"):
                    raise dra.ClaimError(f"claim {ck} is allocated other devices and in use")
                self.client.patch_claim_status(ns, name, {"status": {"allocation": None}})
            fin = dra.finalizer_patch(claim)
            if fin is not None:  # before the allocation, as kube-scheduler does
                claim = self.client.patch_claim(ns, name, fin)
            new = self.client.patch_claim_status(
                ns, name, dra.allocation(claim, node, part,
                                         ann.format_time(self.clock.now())[:19] + "Z"))
            if isinstance(new, dict) and new.get("metadata"):
                self.cache.put("resourceclaims", new)
            log.info("claim %s of pod %s allocated %s", ck, ann.key(pod), ", ".join(ids))

    def _write_admission(self, pod: Obj, label: str, at: float, node: str) -> None:
        """Write a pod's admission record (and lift its scheduling gate); ApiError on failure."""
        gates = (pod.get("spec") or {}).get("schedulingGates")
        self._patch(pod, objects.admission_patch(label, at, node, gates))

    def _patch(self, pod: Obj, patch: Obj) -> None:
        """Patch a pod and put the answer in the cache, so the next round sees the write."""
        m = pod.get("metadata") or {}
        new = self.client.patch_pod(str(m.get("namespace")), str(m.get("name")), patch)
        if isinstance(new, dict) and new.get("metadata"):
            self.cache.put("pods", new)

    # --- services -----------------------------------------------------------------

    def scale(self, snap: snapshot.Snapshot, plan: model.Plan, step: int,
              planned: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
        """Give each service the plan's replica count: service -> replicas it was scaled to.

        `planned`: service -> node -> GPUs, the round's published table."""
        scaled: dict[str, int] = {}
        for name, gpus in sorted(plan.service_gpus.items()):
            sv = snap.services.get(name)
            if sv is None:
                continue
            per = sv.spec.gpus_per_replica
            want = self._within_swap_budget(sv, len(gpus) // per, step)
            ns, dep = name.split("/", 1)
            if want < sv.replicas:
                self._steer_scale_down(snap, sv, planned.get(name, {}))
            elif want == sv.replicas:
                self._move(snap, sv, planned.get(name, {}), step)
            if want != sv.replicas and self.leader():
                try:
                    self.client.scale(ns, dep, want)
                    scaled[name] = want
                    up, down = self.moves_in(name, step)
                    self._moved[name] = (step, up + max(0, want - sv.replicas),
                                         down + max(0, sv.replicas - want))
                    log.info("service %s: %d -> %d replicas at step %d", name, sv.replicas,
                             want, step)
                except kube.ApiError as e:
                    log.warning("scaling %s to %d failed: %s", name, want, e)
            # Pending pods of the service may now fit: wake them once per step.
            free = sum(max(0, n - sv.gpus_by_node.get(node, 0))
                       for node, n in planned.get(name, {}).items())
            if free > 0:
                for p in sv.pending:
                    self._wake(p, step)
        return scaled

    def moves_in(self, service: str, step: int) -> tuple[int, int]:
        """(replicas added, replicas removed) for `service` so far in `step`."""
        st, up, down = self._moved.get(service, (step, 0, 0))
        return (up, down) if st == step else (0, 0)

    def _within_swap_budget(self, sv: snapshot.ServiceInfo, want: int, step: int) -> int:
        """A re-plan mid-step may undo part of the step's first scaling (a gang ended
        just after the boundary and freed GPUs). The plan's swap count is taken from
        the step's starting set, but pods removed earlier in the step are gone: growing
        back costs new pods. So a scale-up after a scale-down in the same step is held
        to what is left of max_swap; a scale-down is never held back (a gang may have
        been promised those GPUs)."""
        up, down = self.moves_in(sv.spec.name, step)
        if down == 0 or want <= sv.replicas:
            return want
        left = max(0, sv.spec.max_swap // sv.spec.gpus_per_replica - up - down)
        held = min(want, sv.replicas + left)
        if held < want:
            log.info("service %s: held at %d replicas (plan %d): %d removed earlier in "
                     "step %d, max_swap %d", sv.spec.name, held, want, down, step,
                     sv.spec.max_swap)
        return held

    def _move(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo,
              planned: Mapping[str, int], step: int) -> None:
        """The plan moved some of the service's GPUs to another node at the same count
        (a gang took the ones it had, or will soon). A replica count cannot say that:
        evict the pods on nodes holding more than the plan gives them there. The
        Deployment replaces each, and the filter puts the new pod where the plan has
        room. A move is one pod out and one in, so at most half of what is left of
        max_swap this step; a disruption budget may refuse (then the next round tries).
        Only in a step's first half: the new pod binds a little after the old one goes,
        and late in a step it would land in the next one, on top of that step's own
        swaps. A later move waits for the next boundary plan."""
        if self.clock.now() - self.settings.step_start(step) > self.settings.step_seconds / 2:
            return
        name, per = sv.spec.name, sv.spec.gpus_per_replica
        up, down = self.moves_in(name, step)
        budget = max(0, sv.spec.max_swap // per - up - down) // 2
        # Room where the plan holds GPUs the service's pods do not use yet, less what
        # its pending pods (replacements on their way) will take.
        room = sum(max(0, n - sv.gpus_by_node.get(node, 0))
                   for node, n in planned.items()) // per - len(sv.pending)
        if budget <= 0 or room <= 0:
            return
        on_node: dict[str, list[Obj]] = {}
        leaving: dict[str, int] = {}
        for k, svc in snap.pod_service.items():
            pod = snap.pods.get(k)
            if svc != name or pod is None or not gangs.pod_live(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                leaving[node] = leaving.get(node, 0) + per
            else:
                on_node.setdefault(node, []).append(pod)
        victims: list[Obj] = []
        for node, pods in sorted(on_node.items()):
            surplus = sv.gpus_by_node.get(node, 0) - leaving.get(node, 0) - planned.get(node, 0)
            # The newest pods go first: the least warmed up.
            pods.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")),
                      reverse=True)
            victims += pods[:max(0, -(-surplus // per))]
        moved = 0
        for pod in victims[:min(budget, room)]:
            m = pod.get("metadata") or {}
            if not self.leader():
                break
            try:
                self.client.evict(str(m.get("namespace")), str(m.get("name")))
            except kube.ApiError as e:
                log.info("service %s: could not move pod %s off %s: %s", name, m.get("name"),
                         (pod.get("spec") or {}).get("nodeName"), e)
                break
            moved += 1
        if moved:
            self._moved[name] = (step, up + moved, down + moved)
            log.info("service %s: moved %d pod(s) to where the plan holds its GPUs at step %d",
                     name, moved, step)

    def _steer_scale_down(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo,
                          planned: Mapping[str, int]) -> None:
        """Pods on nodes the plan took GPUs from go first (pod-deletion-cost)."""
        for k, svc in snap.pod_service.items():
            if svc != sv.spec.name:
                continue
            pod = snap.pods.get(k)
            if pod is None or not gangs.pod_live(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            surplus = sv.gpus_by_node.get(node or "", 0) - planned.get(node or "", 0)
            cost = -100 if (not node or surplus > 0) else 100
            current = ann.annotations_of(pod).get(objects.DELETION_COST)
            if current == str(cost):
                continue
            m = pod.get("metadata") or {}
            if not self.leader():
                return
            try:
                self.client.patch_pod(str(m.get("namespace")), str(m.get("name")),
                                      objects.deletion_cost_patch(cost))
            except kube.ApiError as e:
                log.debug("deletion cost on %s: %s", k, e)

    def _wake(self, pod: Obj, step: int) -> None:
        k = ann.key(pod)
        if self._woken.get(k) == step or not self.leader():
            return
        self._woken[k] = step
        m = pod.get("metadata") or {}
        try:
            self.client.patch_pod(str(m.get("namespace")), str(m.get("name")),
                                  objects.wake_patch(step))
        except kube.ApiError as e:
            log.debug("wake %s: %s", k, e)

    # --- memory -------------------------------------------------------------------

    def forget_gone(self, snap: snapshot.Snapshot) -> None:
        """Forget gangs and pods that are gone, so memory follows the cluster."""
        for name in [n for n in self._first_planned if n not in snap.gangs]:
            del self._first_planned[name]
        for k in [k for k in self._woken if k not in snap.pods]:
            del self._woken[k]
        self._completing &= snap.pods.keys()

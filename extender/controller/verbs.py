"""The extender verbs kube-scheduler calls: filter, prioritize, bind (and the verdict
the HTTP layer asks before a filter).

Owns: the last published `table.Table` and, between two rounds, the GPUs each
service's pods took on each node (bindings count against the plan's room at
once, before the watch shows the pod bound, and a binding made while a round
planned still counts after that round publishes). `Verbs` is what
`extender.api` serves (its `Verbs` protocol).

May not touch: the plan or the round. The verbs read the last Table and the
admission annotations of the pod in hand; they never plan, never wait for a
round, and write nothing but the binding itself (assumed in the cache first,
forgotten if the API refuses it). They import neither the round, the writers
nor the explanations (`.importlinter`).

In shadow mode (`Settings.shadow`) they answer as if the extender were absent:
filter keeps every node, prioritize scores none (every node equal), and bind is
refused: shadow mode writes nothing, and its scheduler configuration names no
bindVerb, so kube-scheduler binds by itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from extender import config, metrics
from extender.adapter import annotations as ann
from extender.adapter import kube, snapshot, watching
from extender.controller import clock, table

Obj = dict[str, Any]


def admitted_node(pod: Obj) -> str | None:
    """The node the admission annotations give this pod, if the pod is admitted.

    The annotations are the durable record: a follower replica, or this one
    between its writes and its next published table, has them before its table
    does, and kube-scheduler calls filter as soon as it sees the update."""
    a = ann.annotations_of(pod)
    node = a.get(ann.NODE)
    return node if node and ann.BLOCK in a else None


SURGE_HINT = ("; a rolling update's extra (surge) pod gets no GPU from the plan: give a "
              "real-time Deployment strategy.rollingUpdate.maxSurge: 0 and maxUnavailable: 1, "
              "or strategy Recreate (docs/annotations.md)")

SHADOW_BIND = ("gpuroster is in shadow mode and binds nothing: remove bindVerb from the "
               "scheduler's extender configuration (the chart does with shadow: true)")


class _Bound(NamedTuple):
    """A service pod this process bound: the `seq`-th such binding."""
    seq: int
    pod: str
    service: str
    node: str
    gpus: int


class Verbs:
    """Answers kube-scheduler from the last published table."""

    def __init__(self, settings: config.Settings, client: kube.Kube,
                 cache: watching.Cache) -> None:
        self.settings = settings
        self.client = client
        self.cache = cache
        self.table = table.Table()
        self._lock = threading.Lock()
        self._svc_used: dict[str, dict[str, int]] = {}  # service -> node -> GPUs its pods hold
        self._bound: list[_Bound] = []  # service bindings a snapshot may not have seen yet
        self._seq = 0  # the next service binding's number

    def mark(self) -> int:
        """Where the service bindings stand; a round asks just before its snapshot and
        hands the answer to `publish`."""
        with self._lock:
            return self._seq

    def publish(self, t: table.Table, services: Mapping[str, snapshot.ServiceInfo],
                since: int) -> None:
        """Answer from `t` from now on. What each service's pods hold per node is what
        the round's snapshot counted (`services`, taken after `mark` said `since`), plus
        the bindings from `since` on that it did not count: a pod bound while the round
        planned holds its GPUs, and forgetting it until the next round would let a
        second pod bind where the plan holds one."""
        with self._lock:
            used = {n: dict(sv.gpus_by_node) for n, sv in services.items()}
            # A binding before `since` was assumed in the cache before the snapshot was
            # taken (`bind` assumes under the lock): the snapshot counts it, or its pod
            # has gone.
            self._bound = [b for b in self._bound if b.seq >= since]
            for b in self._bound:
                sv = services.get(b.service)
                if sv is not None and b.pod not in sv.counted:
                    on = used[b.service]
                    on[b.node] = on.get(b.node, 0) + b.gpus
            self._svc_used = used
            self.table = t

    def filter(self, pod: Obj, nodes: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """(nodes that pass, failed node -> reason)."""
        if self.settings.shadow:
            return list(nodes), {}
        t = self.table
        k = ann.key(pod)
        node = t.assigned.get(k) or admitted_node(pod)
        if node is not None:
            if node in nodes:
                return [node], {}  # the others simply drop out; no reasons needed
            why = f"the plan assigns this pod to {node}"
            return [], dict.fromkeys(nodes, why)
        svc = t.pod_service.get(k) or snapshot.deployment_of(pod)
        if svc is not None and svc in t.service_planned:
            return self._filter_service(pod, svc, nodes, t)
        reason = self._waiting(pod, k, t)
        if reason is None:
            return list(nodes), {}
        return [], dict.fromkeys(nodes, reason)

    def verdict(self, pod: Obj) -> str | None:
        """The reason every node fails `pod` for, or None when it depends on the node.

        The filter of a waiting pod sends one reason per candidate node; the HTTP
        layer asks this first and writes that answer without building it per node.
        """
        if self.settings.shadow:
            return None
        t = self.table
        k = ann.key(pod)
        if t.assigned.get(k) or admitted_node(pod):
            return None
        svc = t.pod_service.get(k) or snapshot.deployment_of(pod)
        if svc is not None and svc in t.service_planned:
            return None
        return self._waiting(pod, k, t)

    def _waiting(self, pod: Obj, k: str, t: table.Table) -> str | None:
        """Why a pod with no block and no service waits; None if it is not ours."""
        reason = t.waiting.get(k)
        if reason is None:
            ns = (pod.get("metadata") or {}).get("namespace")
            if self.settings.namespaces and ns not in self.settings.namespaces:
                return None
            when = clock.wall_time(t.next_step_at, self.settings.step_seconds)
            reason = f"waiting: not planned yet (next step at {when})"
        return reason

    def _filter_service(self, pod: Obj, svc: str, nodes: Sequence[str],
                        t: table.Table) -> tuple[list[str], dict[str, str]]:
        try:
            need = ann.pod_gpus(pod.get("spec") or {})
        except ann.AnnotationError as e:
            return [], {n: str(e) for n in nodes}
        planned = t.service_planned.get(svc, {})
        used = self._svc_used.get(svc, {})
        passed, failed = [], {}
        for n in nodes:
            free = planned.get(n, 0) - used.get(n, 0)
            if free >= need:
                passed.append(n)
            else:
                failed[n] = (f"service {svc}: the plan holds {planned.get(n, 0)} GPUs here "
                             f"for it, {used.get(n, 0)} in use")
        if not passed and failed and self._surges(svc, planned, used):
            failed = {n: why + SURGE_HINT for n, why in failed.items()}
        return passed, failed

    def _surges(self, svc: str, planned: Mapping[str, int], used: Mapping[str, int]) -> bool:
        """Whether a pod of `svc` that fits nowhere may be a rolling update's surge pod:
        its pods hold every GPU the plan gives it and its Deployment may surge (the
        default: maxSurge 25%, at least one pod). Looked up only when no node passes."""
        if sum(used.values()) < sum(planned.values()):
            return False
        dep = self.cache.get("deployments", svc)
        strategy = ((dep or {}).get("spec") or {}).get("strategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return False  # Recreate: the old pods go first
        surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
        return str(surge).strip() not in ("0", "0%")

    def prioritize(self, pod: Obj, nodes: Sequence[str]) -> list[tuple[str, int]]:
        """Non-zero scores only: kube-scheduler adds nothing for a host left out."""
        if self.settings.shadow:
            return []  # every node scores the same: the scheduler's own scores decide
        t = self.table
        k = ann.key(pod)
        node = t.assigned.get(k) or admitted_node(pod)
        if node is not None:
            return [(node, 10)] if node in nodes else []
        svc = t.pod_service.get(k) or snapshot.deployment_of(pod)
        if svc is not None and svc in t.service_planned:
            planned = t.service_planned[svc]
            used = self._svc_used.get(svc, {})
            free = {n: planned.get(n, 0) - used.get(n, 0) for n in planned}
            top = max(free.values(), default=0)
            candidates = set(nodes)
            return [(n, 10 if f == top else 5) for n, f in free.items()
                    if f > 0 and n in candidates]
        return []

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> str | None:
        """Assume, bind, undo on failure. Returns an error message or None."""
        if self.settings.shadow:
            metrics.BINDINGS.labels(outcome="refused").inc()
            return SHADOW_BIND
        k = f"{namespace}/{name}"
        t = self.table
        pod = self.cache.get("pods", k)
        svc = t.pod_service.get(k) or (snapshot.deployment_of(pod) if pod else None)
        want = t.assigned.get(k) or (admitted_node(pod) if pod else None)
        gpus = 0
        seq = -1  # a service binding's number
        if want is not None:
            if want != node:
                metrics.BINDINGS.labels(outcome="refused").inc()
                return f"pod {k} is assigned to {want} by the plan, not {node}"
        elif svc is not None and svc in t.service_planned:
            gpus = ann.pod_gpus((pod or {}).get("spec") or {}) if pod else 1
            with self._lock:
                used = self._svc_used.setdefault(svc, {})
                free = t.service_planned[svc].get(node, 0) - used.get(node, 0)
                if free < gpus:
                    metrics.BINDINGS.labels(outcome="refused").inc()
                    return f"service {svc}: no planned GPU free on {node}"
                used[node] = used.get(node, 0) + gpus
                seq = self._seq
                self._seq += 1
                self._bound.append(_Bound(seq, k, svc, node, gpus))
                # Under the lock: a round that marks after this sees it assumed.
                self.cache.assume(k, node)
        elif not (self.settings.namespaces and namespace not in self.settings.namespaces):
            metrics.BINDINGS.labels(outcome="refused").inc()
            return f"pod {k} is not admitted by the plan"
        if seq < 0:  # (a service binding was assumed under the lock, above)
            self.cache.assume(k, node)
        try:
            self.client.bind(namespace, name, uid, node)
        except kube.ApiError as e:
            self.cache.forget(k)
            if seq >= 0:
                # Counted once, by the snapshot or as bound since: taken back once.
                with self._lock:
                    self._bound = [b for b in self._bound if b.seq != seq]
                    used = self._svc_used.setdefault(svc or "", {})
                    used[node] = max(0, used.get(node, 0) - gpus)
            metrics.BINDINGS.labels(outcome="failed").inc()
            return f"binding {k} to {node} failed: {e}"
        metrics.BINDINGS.labels(outcome="bound").inc()
        return None

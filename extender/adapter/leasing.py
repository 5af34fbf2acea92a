"""Leader election on a coordination.k8s.io Lease (client-go's algorithm, simplified).

Every replica answers kube-scheduler from its own cache; only the holder of the
Lease commits (admits gangs, scales Deployments, writes Events). A holder that
cannot renew within `renew_deadline` stops committing before its Lease can
expire, so two replicas never commit at once (its writers ask `is_leader` before
each write). A holder that shuts down (SIGTERM, a rolling update) releases the
Lease once it has stopped committing (its step loop has ended), so a follower
takes over at its next retry instead of waiting the Lease out (client-go's
ReleaseOnCancel). If the loop does not end in time, it only `stop`s renewing and
the Lease runs out.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from extender.adapter import kube

log = logging.getLogger(__name__)


def _micro(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseStore(Protocol):
    def get(self) -> dict[str, Any] | None: ...

    def create(self, body: dict[str, Any]) -> None: ...

    def update(self, body: dict[str, Any]) -> None: ...


def with_owner(lease: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """`lease` with `owner` among its ownerReferences (a copy; `lease` itself if it is
    there already)."""
    meta = lease.get("metadata") or {}
    refs = list(meta.get("ownerReferences") or [])
    if any(r.get("uid") == owner["uid"] for r in refs):
        return lease
    return {**lease, "metadata": {**meta, "ownerReferences": [*refs, owner]}}


def owned_by(lease: dict[str, Any], deployment: str) -> bool:
    refs = (lease.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("kind") == "Deployment" and r.get("name") == deployment for r in refs)


class ApiLeaseStore:
    """The Lease through the API server (raises kube.ApiError, 409 on a lost race).

    With `owner` (a Deployment in the Lease's namespace: gpuroster's own, as the chart
    sets it) the Lease is written owned by it, so the garbage collector deletes the
    Lease with the Deployment (`helm uninstall`), even one a dying replica wrote last.
    A replica whose Deployment is gone creates no Lease.
    """

    def __init__(self, client: kube.Client, namespace: str, name: str, owner: str = "") -> None:
        from kubernetes import client as k8s

        self.api: Any = k8s.CoordinationV1Api(client.api)
        self.apps: Any = client.apps
        self.namespace, self.name, self.owner = namespace, name, owner
        self._warned = False  # renewals retry the owner every 2 s: say so once

    def _owned(self, lease: dict[str, Any], creating: bool) -> dict[str, Any]:
        if not self.owner or owned_by(lease, self.owner):
            return lease
        try:
            with kube._errors():
                r = self.apps.read_namespaced_deployment(self.owner, self.namespace,
                                                         _preload_content=False,
                                                         _request_timeout=5)
        except kube.ApiError as e:
            if creating and e.status == 404:
                raise kube.ApiError(404, f"Deployment {self.namespace}/{self.owner}, the "
                                         "Lease's owner, is gone: no Lease is created") from e
            # Renewals never wait on the owner; a Lease without one is only left behind.
            (log.debug if self._warned else log.warning)(
                "lease %s/%s: cannot read its owner Deployment %s (%s); written without it",
                self.namespace, self.name, self.owner, e)
            self._warned = True
            return lease
        uid = json.loads(r.data)["metadata"]["uid"]
        return with_owner(lease, {"apiVersion": "apps/v1", "kind": "Deployment",
                                  "name": self.owner, "uid": uid})

    def get(self) -> dict[str, Any] | None:
        with kube._errors():
            try:
                r = self.api.read_namespaced_lease(self.name, self.namespace,
                                                   _preload_content=False, _request_timeout=5)
            except Exception as e:
                if getattr(e, "status", None) == 404:
                    return None
                raise
            doc: dict[str, Any] = json.loads(r.data)
            return doc

    def create(self, body: dict[str, Any]) -> None:
        body = self._owned(body, creating=True)
        with kube._errors():
            self.api.create_namespaced_lease(self.namespace, body, _preload_content=False,
                                             _request_timeout=5)

    def update(self, body: dict[str, Any]) -> None:
        body = self._owned(body, creating=False)  # an older Lease gets its owner here
        with kube._errors():
            self.api.replace_namespaced_lease(self.name, self.namespace, body,
                                              _preload_content=False, _request_timeout=5)


class Elector:
    def __init__(self, store: LeaseStore, identity: str, *, name: str, namespace: str,
                 lease_seconds: float = 15.0, renew_deadline: float = 10.0,
                 retry_seconds: float = 2.0, now: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.identity = identity
        self.name, self.namespace = name, namespace
        self.lease_seconds = lease_seconds
        self.renew_deadline = renew_deadline
        self.retry_seconds = retry_seconds
        self._now = now
        self._mono = monotonic
        self._leader_until = 0.0  # monotonic deadline of our leadership
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def is_leader(self) -> bool:
        return self._mono() < self._leader_until

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        t = _micro(self._now())
        return {"holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": acquired or t, "renewTime": t, "leaseTransitions": transitions}

    def try_once(self) -> bool:
        """One acquire-or-renew attempt; True if we hold the Lease afterwards."""
        started = self._mono()
        try:
            lease = self.store.get()
            if lease is None:
                self.store.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                   "metadata": {"name": self.name, "namespace": self.namespace},
                                   "spec": self._spec(0, None)})
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                seen = (holder, str(spec.get("renewTime")))
                if seen != self._observed:
                    self._observed, self._observed_at = seen, started
                duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
                expired = started - self._observed_at > duration
                if holder and holder != self.identity and not expired:
                    self._leader_until = 0.0
                    return False
                transitions = int(spec.get("leaseTransitions") or 0)
                mine = holder == self.identity
                lease["spec"] = self._spec(transitions if mine else transitions + 1,
                                           spec.get("acquireTime") if mine else None)
                self.store.update(lease)
        except kube.ApiError as e:
            if self.is_leader() and started < self._leader_until:
                log.warning("lease renewal failed (%s); still leader until the deadline", e)
                return self.is_leader()
            self._leader_until = 0.0
            return False
        if not self.is_leader():
            log.info("became leader (lease %s/%s)", self.namespace, self.name)
        self._leader_until = started + self.renew_deadline
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            self.try_once()
            self._stop.wait(self.retry_seconds)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> bool:
        """Stop electing and, if we lead, give the Lease up: stop committing first, then
        clear its holder (a follower then acquires it at once). True if released. A
        failed release is logged and left to the Lease's expiry, as after a crash.
        Call it only once nothing writes any more (the step loop has ended): a follower
        writes as soon as it holds the Lease."""
        self.stop()
        if self._thread is not None:
            self._thread.join(10.0)  # no renewal may land after the release
        if not self.is_leader():
            return False
        self._leader_until = 0.0
        try:
            lease = self.store.get()
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.identity:
                return False
            t = _micro(self._now())
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                             "acquireTime": t, "renewTime": t}
            self.store.update(lease)
        except kube.ApiError as e:
            log.warning("could not release the lease %s/%s (%s); it expires in %gs",
                        self.namespace, self.name, e, self.lease_seconds)
            return False
        log.info("released the lease %s/%s", self.namespace, self.name)
        return True

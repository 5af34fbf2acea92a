"""Informer-style caches: list, then watch from the list's resourceVersion.

Each `Informer` keeps one kind (in one namespace, or all) in a dict of plain
objects. Its thread relists on start, on `410 Gone` (an ERROR event or an
error status), and every `resync_seconds`; it reconnects after any other
failure with a capped backoff. `Cache` groups the informers the controller
needs and adds the scheduler-style assumed bindings (a pod we bound but whose
watch event has not arrived yet).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from extender import metrics
from extender.adapter import annotations as ann
from extender.adapter import kube

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _rv(obj: Obj) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Informer:
    def __init__(self, client: kube.Kube, kind: str, namespace: str | None = None, *,
                 resync_seconds: float = 300.0, watch_seconds: int = 240,
                 on_change: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.resync_seconds = resync_seconds
        self.watch_seconds = watch_seconds
        self.on_change = on_change or (lambda kind: None)
        self._sleep = sleep
        self._lock = threading.Lock()
        self._items: dict[str, Obj] = {}
        self._rv = ""
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.relists = 0
        self.restarts = 0

    # --- reading ----------------------------------------------------------------

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._items.values())

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._items.get(key)

    def put(self, obj: Obj) -> None:
        """Write-through after our own write, so the next step does not wait for the watch."""
        k = ann.key(obj)
        with self._lock:
            old = self._items.get(k)
            if old is None or _rv(obj) >= _rv(old):
                self._items[k] = obj
        self.on_change(self.kind)

    # --- the loop ---------------------------------------------------------------

    def relist(self) -> None:
        items, rv = self.client.list(self.kind, self.namespace)
        with self._lock:
            self._items = {ann.key(o): o for o in items}
            self._rv = rv
        self.relists += 1
        self.synced.set()
        self.on_change(self.kind)

    def apply(self, event: Obj) -> bool:
        """Apply one watch event; False when the watch must relist (410 Gone)."""
        typ = event.get("type")
        obj = event.get("object") or {}
        if typ == "ERROR":
            code = obj.get("code")
            if code == 410:
                return False
            raise kube.ApiError(int(code or 0), str(obj.get("message", "watch error")))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if typ == "BOOKMARK":
            if rv:
                self._rv = str(rv)
            return True
        k = ann.key(obj)
        with self._lock:
            if typ == "DELETED":
                self._items.pop(k, None)
            elif typ in ("ADDED", "MODIFIED"):
                old = self._items.get(k)
                if old is None or _rv(obj) >= _rv(old):
                    self._items[k] = obj
            if rv:
                self._rv = str(rv)
        self.on_change(self.kind)
        return True

    def run_once(self) -> None:
        """One list-or-watch round; raises on failures (the loop backs off)."""
        if not self.synced.is_set() or not self._rv:
            self.relist()
        deadline = time.monotonic() + self.resync_seconds
        while not self._stop.is_set():
            timeout = max(1, min(self.watch_seconds, int(deadline - time.monotonic()) + 1))
            for event in self.client.watch(self.kind, self.namespace, self._rv, timeout):
                if self._stop.is_set():
                    return
                if not self.apply(event):
                    log.info("%s watch: 410 Gone, relisting", self.kind)
                    metrics.WATCH_RESTARTS.labels(kind=self.kind, reason="gone").inc()
                    self.relist()
                    break
            if time.monotonic() >= deadline:
                metrics.WATCH_RESTARTS.labels(kind=self.kind, reason="resync").inc()
                self.relist()
                deadline = time.monotonic() + self.resync_seconds

    def run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                self.run_once()
                backoff = 0.2
            except kube.ApiError as e:
                self.restarts += 1
                reason = "gone" if e.status == 410 else "error"
                metrics.WATCH_RESTARTS.labels(kind=self.kind, reason=reason).inc()
                if e.status == 410:
                    self._rv = ""  # next round relists
                    continue
                log.warning("%s watch failed (%s); reconnecting in %.1fs", self.kind, e, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception:  # noqa: BLE001 - a cache thread must never die
                self.restarts += 1
                metrics.WATCH_RESTARTS.labels(kind=self.kind, reason="error").inc()
                log.exception("%s watch crashed; reconnecting in %.1fs", self.kind, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"watch-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


class Cache:
    """Nodes, Pods, Deployments and ConfigMaps (and, with ``priority_classes``, the
    cluster's PriorityClasses; with ``dra``, ResourceSlices and ResourceClaims), plus
    assumed bindings."""

    def __init__(self, client: kube.Kube, namespaces: Iterable[str] = (), *,
                 resync_seconds: float = 300.0,
                 on_change: Callable[[str], None] | None = None,
                 priority_classes: bool = False, dra: bool = False) -> None:
        ns: list[str | None] = list(namespaces) or [None]
        self.namespaces = tuple(n for n in ns if n)
        kw: dict[str, Any] = {"resync_seconds": resync_seconds, "on_change": on_change}
        self.informers: dict[str, list[Informer]] = {
            "nodes": [Informer(client, "nodes", None, **kw)],
            **{k: [Informer(client, k, n, **kw) for n in ns]
               for k in ("pods", "deployments", "configmaps")},
        }
        if priority_classes:
            self.informers["priorityclasses"] = [Informer(client, "priorityclasses", None, **kw)]
        if dra:
            self.informers["resourceslices"] = [Informer(client, "resourceslices", None, **kw)]
            # Every namespace's claims: the devices they hold are the whole cluster's, not
            # only the managed namespaces'.
            self.informers["resourceclaims"] = [Informer(client, "resourceclaims", None, **kw)]
        self._assumed: dict[str, str] = {}  # pod key -> node
        self._lock = threading.Lock()

    def all(self) -> list[Informer]:
        return [i for group in self.informers.values() for i in group]

    def start(self) -> None:
        for i in self.all():
            i.start()

    def stop(self) -> None:
        for i in self.all():
            i.stop()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.all())

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.all())

    def items(self, kind: str) -> list[Obj]:
        """The cached objects of ``kind`` (none for a kind this cache does not watch)."""
        out: list[Obj] = []
        for i in self.informers.get(kind, ()):
            out.extend(i.items())
        return out

    def get(self, kind: str, key: str) -> Obj | None:
        for i in self.informers[kind]:
            o = i.get(key)
            if o is not None:
                return o
        return None

    def put(self, kind: str, obj: Obj) -> None:
        ns = (obj.get("metadata") or {}).get("namespace")
        for i in self.informers[kind]:
            if i.namespace in (None, ns):
                i.put(obj)
                return

    # --- assumed bindings ---------------------------------------------------------

    def assume(self, pod_key: str, node: str) -> None:
        with self._lock:
            self._assumed[pod_key] = node

    def forget(self, pod_key: str) -> None:
        with self._lock:
            self._assumed.pop(pod_key, None)

    def assumed(self) -> dict[str, str]:
        """Assumed bindings not yet visible in the cache (those are dropped here)."""
        with self._lock:
            for k in list(self._assumed):
                pod = self.get("pods", k)
                if pod is None or (pod.get("spec") or {}).get("nodeName"):
                    del self._assumed[k]
            return dict(self._assumed)

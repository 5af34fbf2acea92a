"""An in-memory stand-in for `extender.adapter.kube.Kube`, for unit tests.

It keeps objects per kind, hands out resourceVersions, and feeds watch events
from a queue; tests can inject failures (`fail_patch`, `fail_bind`) and a 410.
It fakes the API server, never the code under test. As the API server does, a
watch begins at the resourceVersion it asks for: it replays what changed since,
so an event sent between two watches of an informer is not lost.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator
from typing import Any

from extender.adapter import kube

Obj = dict[str, Any]
_GONE: Obj = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}


def _key(obj: Obj) -> str:
    m = obj["metadata"]
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Obj]] = {k: {} for k in kube.KINDS}
        self.rv = 100
        self.lock = threading.Lock()
        self.watchers: dict[str, list[queue.Queue[Obj | None]]] = {k: [] for k in kube.KINDS}
        # Every event with its resourceVersion, for watches that start behind; and per
        # kind the version below which a watch is told 410 Gone (`gone`).
        self.history: dict[str, list[tuple[int, Obj]]] = {k: [] for k in kube.KINDS}
        self.expired: dict[str, int] = dict.fromkeys(kube.KINDS, 0)
        self.calls: list[tuple[str, ...]] = []
        self.events: list[Obj] = []
        self.fail_patch: set[str] = set()  # pod keys whose patch fails
        self.fail_bind: set[str] = set()
        self.fail_evict: set[str] = set()  # pod keys a disruption budget protects
        self.fail_claim: set[str] = set()  # claim keys whose status patch fails
        self.lists = 0

    # --- test helpers -------------------------------------------------------------

    def add(self, kind: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        with self.lock:
            self.rv += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            obj["metadata"].setdefault("uid", f"uid-{self.rv}")
            obj["metadata"].setdefault("creationTimestamp", "2023-11-14T22:13:20Z")
            k = _key(obj)
            typ = "MODIFIED" if k in self.objects[kind] else "ADDED"
            self.objects[kind][k] = obj
            self._emit(kind, {"type": typ, "object": copy.deepcopy(obj)})
        return obj

    def delete(self, kind: str, key: str) -> None:
        with self.lock:
            obj = self.objects[kind].pop(key)
            self.rv += 1  # a delete is a change too: it has its own version
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._emit(kind, {"type": "DELETED", "object": obj})

    def gone(self, kind: str) -> None:
        """Expire every resourceVersion of `kind` so far: open watches and any watch
        started from one of them are told 410 Gone."""
        with self.lock:
            self.rv += 1
            self.expired[kind] = self.rv
            for q in self.watchers[kind]:
                q.put(_GONE)

    def _emit(self, kind: str, event: Obj) -> None:
        """Record and send `event` (at the current version); called under `lock`, so a
        watch that starts at the same time gets it either replayed or sent, never both."""
        self.history[kind].append((self.rv, event))
        for q in self.watchers[kind]:
            q.put(event)

    def pod(self, key: str) -> Obj:
        return self.objects["pods"][key]

    # --- Kube ---------------------------------------------------------------------

    def list(self, kind: str, namespace: str | None) -> tuple[list[Obj], str]:
        with self.lock:
            self.lists += 1
            items = [copy.deepcopy(o) for o in self.objects[kind].values()
                     if namespace is None or o["metadata"].get("namespace") == namespace]
            return items, str(self.rv)

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              timeout_seconds: int) -> Iterator[Obj]:
        q: queue.Queue[Obj | None] = queue.Queue()
        since = int(resource_version or 0)
        with self.lock:
            if since < self.expired[kind]:
                q.put(_GONE)
            else:
                for rv, event in self.history[kind]:
                    if rv > since:
                        q.put(event)
            self.watchers[kind].append(q)
        try:
            while True:
                try:
                    ev = q.get(timeout=min(timeout_seconds, 0.5))
                except queue.Empty:
                    return
                if ev is None:
                    return
                yield ev
        finally:
            with self.lock:
                self.watchers[kind].remove(q)

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> None:
        k = f"{namespace}/{name}"
        self.calls.append(("bind", k, node))
        if k in self.fail_bind:
            raise kube.ApiError(409, "conflict")
        if k not in self.objects["pods"]:
            raise kube.ApiError(404, f"pods {name!r} not found")
        pod = copy.deepcopy(self.objects["pods"][k])
        if pod["spec"].get("nodeName"):
            raise kube.ApiError(409, f"pod {k} is already assigned to node")
        pod["spec"]["nodeName"] = node
        self.add("pods", pod)

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        k = f"{namespace}/{name}"
        self.calls.append(("patch", k))
        if k in self.fail_patch:
            raise kube.ApiError(500, "injected failure")
        if k not in self.objects["pods"]:
            raise kube.ApiError(404, f"pods {name} not found")
        pod = copy.deepcopy(self.objects["pods"][k])
        notes = pod["metadata"].setdefault("annotations", {})
        for a, v in (patch.get("metadata") or {}).get("annotations", {}).items():
            if v is None:
                notes.pop(a, None)
            else:
                notes[a] = v
        spec = patch.get("spec") or {}
        if "schedulingGates" in spec:  # merge patch: the list is replaced (null removes it)
            if spec["schedulingGates"] is None:
                pod["spec"].pop("schedulingGates", None)
            else:
                pod["spec"]["schedulingGates"] = spec["schedulingGates"]
        return self.add("pods", pod)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        k = f"{namespace}/{name}"
        self.calls.append(("status", k))
        if k not in self.objects["pods"]:
            raise kube.ApiError(404, f"pods {name!r} not found")
        pod = copy.deepcopy(self.objects["pods"][k])
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        for c in patch["status"]["conditions"]:
            conds[:] = [x for x in conds if x["type"] != c["type"]] + [c]
        self.add("pods", pod)

    def patch_claim_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        k = f"{namespace}/{name}"
        self.calls.append(("claim", k))
        if k in self.fail_claim:
            raise kube.ApiError(422, "injected failure")
        if k not in self.objects["resourceclaims"]:
            raise kube.ApiError(404, f"resourceclaims {name!r} not found")
        claim = copy.deepcopy(self.objects["resourceclaims"][k])
        status = claim.setdefault("status", {})
        new = patch["status"].get("allocation")
        if status.get("allocation") and new is not None:
            raise kube.ApiError(422, "status.allocation: field is immutable")
        if new is None and status.get("reservedFor"):
            raise kube.ApiError(422, "status.allocation: may not be cleared while reserved")
        status["allocation"] = new
        return self.add("resourceclaims", claim)

    def patch_claim(self, namespace: str, name: str, patch: Obj) -> Obj:
        k = f"{namespace}/{name}"
        self.calls.append(("claim-meta", k))
        claim = copy.deepcopy(self.objects["resourceclaims"][k])
        claim["metadata"]["finalizers"] = patch["metadata"]["finalizers"]
        return self.add("resourceclaims", claim)

    def create_event(self, namespace: str, body: Obj) -> None:
        self.events.append(body)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        self.calls.append(("scale", f"{namespace}/{name}", str(replicas)))
        dep = copy.deepcopy(self.objects["deployments"][f"{namespace}/{name}"])
        dep["spec"]["replicas"] = replicas
        self.add("deployments", dep)

    def evict(self, namespace: str, name: str) -> None:
        k = f"{namespace}/{name}"
        self.calls.append(("evict", k))
        if k in self.fail_evict:
            raise kube.ApiError(429, "Cannot evict pod as it would violate the pod's "
                                     "disruption budget.")
        if k not in self.objects["pods"]:
            raise kube.ApiError(404, f"pods {name!r} not found")
        self.delete("pods", k)

    def get_configmap(self, namespace: str, name: str) -> Obj | None:
        return self.objects["configmaps"].get(f"{namespace}/{name}")


# --- builders -----------------------------------------------------------------------


def node(index: int, gpus: int = 8, ready: bool = True) -> Obj:
    name = f"gpu-node-{index}"
    return {
        "metadata": {"name": name, "labels": {"gpuroster.io/topology-order": str(index)}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


class PodBuilder:
    def __init__(self, name: str, namespace: str = "ns") -> None:
        self.obj: Obj = {
            "metadata": {"name": name, "namespace": namespace, "annotations": {}},
            "spec": {"containers": [{"name": "main", "resources": {}}]},
            "status": {"phase": "Pending"},
        }

    def gpus(self, n: int) -> PodBuilder:
        self.obj["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": str(n)},
                                                         "limits": {"nvidia.com/gpu": str(n)}}
        return self

    def gang(self, name: str, size: int) -> PodBuilder:
        return self.annotate(**{"gpuroster.io/gang": name, "gpuroster.io/gang-size": str(size)})

    def priority(self, p: str) -> PodBuilder:
        return self.annotate(**{"gpuroster.io/priority": p})

    def duration(self, d: str) -> PodBuilder:
        return self.annotate(**{"gpuroster.io/expected-duration": d})

    def workload(self, w: str) -> PodBuilder:
        return self.annotate(**{"gpuroster.io/workload": w})

    def annotate(self, **notes: str) -> PodBuilder:
        self.obj["metadata"]["annotations"].update(notes)
        return self

    def created(self, ts: str) -> PodBuilder:
        self.obj["metadata"]["creationTimestamp"] = ts
        return self

    def gated(self, *names: str) -> PodBuilder:
        self.obj["spec"]["schedulingGates"] = [{"name": n} for n in names]
        return self

    def on(self, node: str, phase: str = "Running") -> PodBuilder:
        self.obj["spec"]["nodeName"] = node
        self.obj["status"]["phase"] = phase
        return self

    def owned_by_deployment(self, deployment: str, hash_: str = "abc12") -> PodBuilder:
        self.obj["metadata"]["labels"] = {"pod-template-hash": hash_}
        self.obj["metadata"]["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": f"{deployment}-{hash_}", "apiVersion": "apps/v1",
             "uid": "rs"}]
        return self

    def claims(self, gpus: int) -> PodBuilder:
        """A GPU claim from a template (status names the claim `<pod>-gpus`); add the
        claim itself with `claim(...)`."""
        name = self.obj["metadata"]["name"]
        self.obj["spec"]["resourceClaims"] = [{"name": "gpus",
                                               "resourceClaimTemplateName": f"gpus-{gpus}"}]
        self.obj["status"]["resourceClaimStatuses"] = [{"name": "gpus",
                                                        "resourceClaimName": f"{name}-gpus"}]
        return self

    def build(self) -> Obj:
        return copy.deepcopy(self.obj)


def claim(pod: str, gpus: int, namespace: str = "ns") -> Obj:
    """The ResourceClaim kube-controller-manager makes for `pod` from its template."""
    return {"metadata": {"name": f"{pod}-gpus", "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                "count": gpus}}]}}}


def resource_slice(index: int, gpus: int = 8, nvlink: int = 0) -> Obj:
    """The fake DRA driver's slice for gpu-node-<index>: devices in reverse name order,
    to show that the index attribute orders them."""
    name = f"gpu-node-{index}"
    devices = []
    for i in reversed(range(gpus)):
        attrs: Obj = {"type": {"string": "gpu"}, "index": {"int": i}}
        if nvlink:
            attrs["nvlinkDomain"] = {"int": i // nvlink}
        devices.append({"name": f"gpu-{i}", "attributes": attrs})
    return {"metadata": {"name": f"{name}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": name,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def dra_node(index: int) -> Obj:
    """A node whose GPUs are DRA devices only."""
    n = node(index)
    del n["status"]["allocatable"]["nvidia.com/gpu"]
    return n


def make_pod(name: str, namespace: str = "ns") -> PodBuilder:
    return PodBuilder(name, namespace)


def deployment(name: str, namespace: str = "ns", replicas: int = 0, gpus: int = 1,
               notes: dict[str, str] | None = None) -> Obj:
    return {
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"gpuroster.io/workload": "realtime-inference",
                                     **(notes or {})}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}},
    }


def configmap(name: str, namespace: str = "ns", **data: str) -> Obj:
    return {"metadata": {"name": name, "namespace": namespace}, "data": dict(data)}

"""A STAND-IN for kube-state-metrics, for the e2e tests only: never shipped, never in the product.

Why a stand-in: `gpuroster whatif` reads kube-state-metrics (KSM) v2 series, and the
real KSM would be built from its Go module by the control-plane build. On
this build machine the Go module proxy refuses k8s.io/kube-state-metrics/v2 (HTTP
403 for every version and for the version list; checked twice on 2026-12-04) and
Debian packages no KSM, so it cannot be built here. This exporter watches the real
API server (a list every `interval` seconds, where KSM keeps informers) and writes,
in the Prometheus text format, exactly the series `gpuroster whatif` reads, with
KSM v2's names, labels and values (internal/store/pod.go, node.go, deployment.go,
replicaset.go of kube-state-metrics v2):

  kube_pod_created, kube_pod_start_time, kube_pod_completion_time  (unix seconds:
      creationTimestamp, status.startTime, the latest terminated finishedAt)
  kube_pod_info{host_ip, pod_ip, node, created_by_kind, created_by_name,
      priority_class, host_network}
  kube_pod_owner{owner_kind, owner_name, owner_is_controller}  ("<none>" x3 if none)
  kube_pod_status_phase{phase}
  kube_pod_annotations{annotation_*}, kube_pod_labels{label_*}  (allowlisted only)
  kube_pod_container_resource_requests{container, node, resource, unit}
      (nvidia.com/gpu -> resource="nvidia_com_gpu", unit="integer")
  kube_node_status_capacity{node, resource, unit}, kube_node_labels{label_*}
  kube_deployment_spec_replicas, kube_deployment_status_replicas,
  kube_deployment_annotations{annotation_*}
  kube_replicaset_owner{owner_kind, owner_name, owner_is_controller}

every pod, node, Deployment and ReplicaSet series carrying KSM's identifying labels
(namespace, pod, uid / node / namespace, deployment / namespace, replicaset). The
allowlists are given in KSM's own flag syntax (`reading.KSM_ARGS`), so the test runs
with the flags the docs tell operators to set. Only this subset is written: KSM
writes many more series, none of which `whatif` reads.

The day KSM can be built, the control-plane build line is the only change: the
test starts KSM with the same flags instead of this class.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kubernetes import client as k8s

from e2e import exposition

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_ALLOW = re.compile(r"(\w+)=\[([^\]]*)\]")
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
GPU = "nvidia.com/gpu"


def allowlists(flags: Iterable[str]) -> dict[str, dict[str, set[str]]]:
    """KSM's --metric-annotations-allowlist / --metric-labels-allowlist, parsed:
    {"annotations": {"pods": {...}}, "labels": {"nodes": {...}}}."""
    out: dict[str, dict[str, set[str]]] = {"annotations": {}, "labels": {}}
    for flag in flags:
        name, _, value = flag.partition("=")
        kind = "annotations" if "annotations" in name else "labels"
        for resource, keys in _ALLOW.findall(value):
            out[kind][resource] = {k.strip() for k in keys.split(",") if k.strip()}
    return out


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _line(name: str, labels: Mapping[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value!r}"


def _unix(text: str | None) -> float | None:
    """A Kubernetes time as KSM writes it: whole unix seconds (Go's Time.Unix())."""
    if not text:
        return None
    return float(math.floor(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()))


def _sanitized(prefix: str, keys: Mapping[str, str], allowed: set[str]) -> dict[str, str]:
    return {prefix + _INVALID.sub("_", k): v for k, v in sorted(keys.items()) if k in allowed}


def _quantity(v: str) -> float:
    return float(v)  # GPU counts are plain integers


class KsmStandin:
    """Serves the series above on 127.0.0.1:`port` (0: any free port)."""

    def __init__(self, api_client: Any, flags: Iterable[str], interval: float = 0.25,
                 port: int = 0) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.allow = allowlists(flags)
        self.interval = interval
        self.text = ""
        self.errors = 0
        self._stop = threading.Event()
        self.httpd = exposition.text_server(lambda: self.text, port)
        self.port = int(self.httpd.server_address[1])

    def start(self) -> None:
        self.refresh()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self._loop, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception:  # the API server restarting: keep serving the last view
                self.errors += 1

    def _list(self, call: Any) -> list[dict[str, Any]]:
        return list(json.loads(call(_preload_content=False).data)["items"])

    def refresh(self) -> None:
        lines: list[str] = []
        pod_ann = self.allow["annotations"].get("pods", set())
        pod_lab = self.allow["labels"].get("pods", set())
        for p in self._list(self.core.list_pod_for_all_namespaces):
            m, spec, st = p["metadata"], p.get("spec", {}), p.get("status", {})
            ident = {"namespace": m["namespace"], "pod": m["name"], "uid": m["uid"]}
            node = spec.get("nodeName", "")
            owners = m.get("ownerReferences") or []
            created = _unix(m.get("creationTimestamp"))
            if created is not None:
                lines.append(_line("kube_pod_created", ident, created))
            started = _unix(st.get("startTime"))
            if started is not None:
                lines.append(_line("kube_pod_start_time", ident, started))
            finished = [_unix((cs.get("state") or {}).get("terminated", {}).get("finishedAt"))
                        for cs in st.get("containerStatuses") or []
                        if (cs.get("state") or {}).get("terminated")]
            done = [f for f in finished if f is not None]
            if done:
                lines.append(_line("kube_pod_completion_time", ident, max(done)))
            ctrl = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
            lines.append(_line("kube_pod_info", {
                **ident, "host_ip": st.get("hostIP", ""), "pod_ip": st.get("podIP", ""),
                "node": node, "created_by_kind": ctrl["kind"] if ctrl else "<none>",
                "created_by_name": ctrl["name"] if ctrl else "<none>",
                "priority_class": spec.get("priorityClassName", ""),
                "host_network": str(bool(spec.get("hostNetwork", False))).lower()}, 1.0))
            if not owners:
                lines.append(_line("kube_pod_owner", {
                    **ident, "owner_kind": "<none>", "owner_name": "<none>",
                    "owner_is_controller": "<none>"}, 1.0))
            for o in owners:
                lines.append(_line("kube_pod_owner", {
                    **ident, "owner_kind": o["kind"], "owner_name": o["name"],
                    "owner_is_controller": str(bool(o.get("controller"))).lower()}, 1.0))
            phase = st.get("phase", "")
            for ph in PHASES:
                lines.append(_line("kube_pod_status_phase", {**ident, "phase": ph},
                                   1.0 if ph == phase else 0.0))
            lines.append(_line("kube_pod_annotations", {
                **ident, **_sanitized("annotation_", m.get("annotations") or {}, pod_ann)}, 1.0))
            lines.append(_line("kube_pod_labels", {
                **ident, **_sanitized("label_", m.get("labels") or {}, pod_lab)}, 1.0))
            for c in spec.get("containers") or []:
                req = ((c.get("resources") or {}).get("requests") or {})
                if GPU in req:
                    lines.append(_line("kube_pod_container_resource_requests", {
                        **ident, "container": c["name"], "node": node,
                        "resource": "nvidia_com_gpu", "unit": "integer"}, _quantity(req[GPU])))
        node_lab = self.allow["labels"].get("nodes", set())
        for n in self._list(self.core.list_node):
            name = n["metadata"]["name"]
            cap = (n.get("status") or {}).get("capacity") or {}
            if GPU in cap:
                lines.append(_line("kube_node_status_capacity", {
                    "node": name, "resource": "nvidia_com_gpu", "unit": "integer"},
                    _quantity(cap[GPU])))
            lines.append(_line("kube_node_labels", {
                "node": name, **_sanitized("label_", n["metadata"].get("labels") or {},
                                           node_lab)}, 1.0))
        dep_ann = self.allow["annotations"].get("deployments", set())
        for d in self._list(self.apps.list_deployment_for_all_namespaces):
            m = d["metadata"]
            ident = {"namespace": m["namespace"], "deployment": m["name"]}
            lines.append(_line("kube_deployment_spec_replicas", ident,
                               float((d.get("spec") or {}).get("replicas", 1))))
            lines.append(_line("kube_deployment_status_replicas", ident,
                               float((d.get("status") or {}).get("replicas", 0))))
            lines.append(_line("kube_deployment_annotations", {
                **ident, **_sanitized("annotation_", m.get("annotations") or {}, dep_ann)}, 1.0))
        for rs in self._list(self.apps.list_replica_set_for_all_namespaces):
            m = rs["metadata"]
            ident = {"namespace": m["namespace"], "replicaset": m["name"]}
            owners = m.get("ownerReferences") or []
            if not owners:
                lines.append(_line("kube_replicaset_owner", {
                    **ident, "owner_kind": "<none>", "owner_name": "<none>",
                    "owner_is_controller": "<none>"}, 1.0))
            for o in owners:
                lines.append(_line("kube_replicaset_owner", {
                    **ident, "owner_kind": o["kind"], "owner_name": o["name"],
                    "owner_is_controller": str(bool(o.get("controller"))).lower()}, 1.0))
        # one family after another, each with its TYPE, as the text format wants
        families: dict[str, list[str]] = {}
        for line in lines:
            families.setdefault(line.split("{", 1)[0], []).append(line)
        self.text = "".join(f"# TYPE {name} gauge\n" + "\n".join(rows) + "\n"
                            for name, rows in families.items())

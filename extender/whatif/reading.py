"""What `gpuroster whatif` reads from Prometheus: kube-state-metrics v2 series, as KSM names them.

Every query is a PromQL text below (docs/try-it-first.md lists them). Pod series
are read once for the whole window: an instant query at the window's end over a
range as long as the window (`max_over_time(...[W])`), kept to GPU pods by
`and on (uid)` with their GPU requests, so a pod deleted mid-window is still
read. Series over time (a Deployment's replicas, a service's demand query) are
range queries, one point at the end of each step.

kube-state-metrics needs, beyond its defaults:
  --metric-annotations-allowlist=pods=[gpuroster.io/gang,gpuroster.io/gang-size,
      gpuroster.io/priority,gpuroster.io/workload,gpuroster.io/expected-duration],
      deployments=[gpuroster.io/workload,gpuroster.io/priority,gpuroster.io/max-swap,
      gpuroster.io/demand-query]
  --metric-labels-allowlist=nodes=[gpuroster.io/topology-order],
      pods=[jobset.sigs.k8s.io/jobset-name]
(KSM_ARGS below). Without them the annotations read as absent: each is reported.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from extender.adapter import annotations as ann
from extender.whatif import prom

POD_ANNOTATIONS = (ann.GANG, ann.GANG_SIZE, ann.PRIORITY, ann.WORKLOAD, ann.EXPECTED_DURATION)
DEPLOYMENT_ANNOTATIONS = (ann.WORKLOAD, ann.PRIORITY, ann.MAX_SWAP, ann.DEMAND_QUERY)
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
KSM_ARGS = (
    "--metric-annotations-allowlist=pods=[" + ",".join(POD_ANNOTATIONS) + "],"
    "deployments=[" + ",".join(DEPLOYMENT_ANNOTATIONS) + "]",
    f"--metric-labels-allowlist=nodes=[{ann.TOPOLOGY_ORDER}],pods=[{JOBSET_LABEL}]",
)

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def ksm_label(prefix: str, key: str) -> str:
    """The Prometheus label KSM makes of an annotation or label key (its sanitizeLabelName)."""
    return prefix + _INVALID.sub("_", key)


# {w}: the window as a PromQL range ("604800s"); {r}: a subquery resolution; {uids}: GPU
# pods' uids, `|`-joined (UID_BATCH at a time), {names}: Deployment or ReplicaSet names.
# Every per-pod query selects the GPU pods by uid, so the other pods' series (most of a
# week's samples) are never loaded.
GPU_PODS = ('sum by (namespace, pod, uid) (max by (namespace, pod, uid, container) ('
            'max_over_time(kube_pod_container_resource_requests{{resource="nvidia_com_gpu"}}'
            '[{w}])))')
_POD = "{{uid=~`{uids}`}}"  # a raw string: the regex's escapes reach it as written
QUERIES = {
    "any_nodes": "count(last_over_time(kube_node_status_capacity[{w}]))",
    "nodes": ('max by (node) (max_over_time('
              'kube_node_status_capacity{{resource="nvidia_com_gpu"}}[{w}]))'),
    "gpu_pods": GPU_PODS,
    "created": "max_over_time(kube_pod_created" + _POD + "[{w}])",
    "started": "max_over_time(kube_pod_start_time" + _POD + "[{w}])",
    "completed": "max_over_time(kube_pod_completion_time" + _POD + "[{w}])",
    "last_seen": "max_over_time(timestamp(kube_pod_created" + _POD + ")[{w}:{r}])",
    "info": "last_over_time(kube_pod_info" + _POD + "[{w}])",
    "owner": "last_over_time(kube_pod_owner" + _POD + "[{w}])",
    "pod_annotations": "last_over_time(kube_pod_annotations" + _POD + "[{w}])",
    "pod_labels": "last_over_time(kube_pod_labels" + _POD + "[{w}])",
    "node_labels": "last_over_time(kube_node_labels[{w}])",
    "replicaset_owner": ('last_over_time(kube_replicaset_owner{{owner_kind="Deployment", '
                         'replicaset=~`{names}`}}[{w}])'),
    "deployment_annotations": ('last_over_time(kube_deployment_annotations'
                               '{{deployment=~`{names}`}}[{w}])'),
}
UID_BATCH = 200
# Range queries, one point at the end of each step.
REPLICAS = ('max by (namespace, deployment) '
            '(kube_deployment_spec_replicas{{namespace="{ns}", deployment="{name}"}})')


def alternatives(values: Iterable[str]) -> str:
    """A regex matching exactly these values (for a PromQL raw string, in backticks)."""
    return "|".join(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", v) for v in sorted(set(values)))


class MissingSeries(RuntimeError):
    """A series the reconstruction cannot do without is not in Prometheus."""


@dataclass(frozen=True)
class Window:
    """Steps 0..steps-1 of `step` seconds from `origin` (unix time); `until` = its end."""

    origin: float
    step: float
    steps: int

    @property
    def until(self) -> float:
        return self.origin + self.steps * self.step

    def step_of(self, t: float) -> int:
        return math.floor((t - self.origin) / self.step + 1e-9)

    def range_text(self) -> str:
        return f"{math.ceil(self.steps * self.step)}s"

    def resolution_text(self) -> str:
        return f"{max(1, min(60, math.floor(self.step / 4)))}s"


@dataclass
class Pod:
    namespace: str
    name: str
    uid: str
    gpus: int
    created: float | None = None
    started: float | None = None
    completed: float | None = None
    last_seen: float | None = None
    node: str = ""
    priority_class: str = ""
    owner_kind: str = ""
    owner_name: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Deployment:
    namespace: str
    name: str
    annotations: dict[str, str] = field(default_factory=dict)
    replicas: list[int | None] = field(default_factory=list)  # per step; None: no point
    demand: list[float | None] | None = None  # the demand query, per step
    demand_error: str = ""


@dataclass
class History:
    window: Window
    nodes: dict[str, int]  # node -> GPUs
    node_order: dict[str, int]  # node -> gpuroster.io/topology-order, where labelled
    pods: list[Pod]
    deployments: dict[tuple[str, str], Deployment]  # (namespace, name)
    replicaset_owner: dict[tuple[str, str], str]  # (namespace, replicaset) -> deployment
    annotations_seen: bool  # any gpuroster.io annotation came through kube_pod_annotations


def _q(name: str, w: Window, uids: str = "", names: str = "") -> str:
    return QUERIES[name].format(w=w.range_text(), r=w.resolution_text(), uids=uids, names=names)


def read(client: prom.Client, w: Window, namespaces: tuple[str, ...] = ()) -> History:
    """Everything the reconstruction needs, or MissingSeries / prom.PrometheusError."""
    at = w.until
    if not client.instant(_q("any_nodes", w), at):
        raise MissingSeries(
            f"no kube_node_status_capacity series between {_iso(w.origin)} and {_iso(at)}: "
            f"is kube-state-metrics scraped by this Prometheus, and was it then?")
    nodes = {s.labels.get("node", ""): int(s.value) for s in client.instant(_q("nodes", w), at)
             if s.value > 0}
    nodes.pop("", None)
    if not nodes:
        raise MissingSeries(
            'no kube_node_status_capacity{resource="nvidia_com_gpu"} series in the window: '
            "no node had GPUs")
    by_uid: dict[str, Pod] = {}
    for s in client.instant(_q("gpu_pods", w), at):
        ns, name, uid = (s.labels.get(k, "") for k in ("namespace", "pod", "uid"))
        if s.value > 0 and uid and (not namespaces or ns in namespaces):
            by_uid[uid] = Pod(ns, name, uid, int(round(s.value)))
    if not by_uid:
        where = f" in namespaces {', '.join(namespaces)}" if namespaces else ""
        raise MissingSeries(
            f"no pod requested nvidia.com/gpu between {_iso(w.origin)} and {_iso(at)}{where}")
    batches = [alternatives(list(by_uid)[i:i + UID_BATCH])
               for i in range(0, len(by_uid), UID_BATCH)]

    def each(name: str) -> list[tuple[Pod, prom.Series]]:
        return [(by_uid[s.labels["uid"]], s) for b in batches
                for s in client.instant(_q(name, w, uids=b), at)
                if s.labels.get("uid") in by_uid]

    started = each("started")
    info = each("info")
    if not started and not info:
        raise MissingSeries("no kube_pod_start_time or kube_pod_info series for the GPU pods")
    for p, s in each("created"):
        p.created = s.value
    for p, s in started:
        p.started = s.value
    for p, s in each("completed"):
        p.completed = s.value
    for p, s in each("last_seen"):
        p.last_seen = s.value
    for p, s in info:
        if s.labels.get("node") or not p.node:
            p.node = s.labels.get("node", "")
            p.priority_class = s.labels.get("priority_class", "")
    for p, s in each("owner"):
        if s.labels.get("owner_is_controller", "true") == "true" or not p.owner_kind:
            p.owner_kind = s.labels.get("owner_kind", "")
            p.owner_name = s.labels.get("owner_name", "")
    annotations_seen = False
    for p, s in each("pod_annotations"):
        for key in POD_ANNOTATIONS:
            v = s.labels.get(ksm_label("annotation_", key))
            if v:
                p.annotations[key] = v
                annotations_seen = True
    for p, s in each("pod_labels"):
        v = s.labels.get(ksm_label("label_", JOBSET_LABEL))
        if v:
            p.labels[JOBSET_LABEL] = v
    order: dict[str, int] = {}
    for s in client.instant(_q("node_labels", w), at):
        raw = s.labels.get(ksm_label("label_", ann.TOPOLOGY_ORDER))
        if raw is not None and s.labels.get("node") in nodes:
            with contextlib.suppress(ValueError):  # unreadable: ordered by name, with a note
                order[s.labels["node"]] = int(raw)
    replicasets = {p.owner_name for p in by_uid.values() if p.owner_kind == "ReplicaSet"}
    rs_owner = {} if not replicasets else {
        (s.labels.get("namespace", ""), s.labels.get("replicaset", "")):
        s.labels.get("owner_name", "")
        for s in client.instant(_q("replicaset_owner", w, names=alternatives(replicasets)), at)}
    deployments: dict[tuple[str, str], Deployment] = {}
    for p in by_uid.values():
        if p.owner_kind == "ReplicaSet" and (p.namespace, p.owner_name) in rs_owner:
            dep = (p.namespace, rs_owner[(p.namespace, p.owner_name)])
            deployments.setdefault(dep, Deployment(*dep))
    if deployments:
        names = alternatives(name for _, name in deployments)
        for s in client.instant(_q("deployment_annotations", w, names=names), at):
            d = deployments.get((s.labels.get("namespace", ""), s.labels.get("deployment", "")))
            if d is None:
                continue
            for key in DEPLOYMENT_ANNOTATIONS:
                v = s.labels.get(ksm_label("annotation_", key))
                if v:
                    d.annotations[key] = v
        for d in deployments.values():
            d.replicas = [None if v is None else int(round(v)) for v in
                          _per_step(client, REPLICAS.format(ns=d.namespace, name=d.name), w)]
            query = d.annotations.get(ann.DEMAND_QUERY)
            if query:
                try:
                    d.demand = _per_step(client, query, w)
                except prom.PrometheusError as e:
                    d.demand_error = str(e)
    return History(w, nodes, order, sorted(by_uid.values(), key=lambda p: (p.namespace, p.name,
                                                                             p.uid)),
                   deployments, rs_owner, annotations_seen)


def _per_step(client: prom.Client, query: str, w: Window) -> list[float | None]:
    """One value per step (at its end), the first series' (a demand query gives one)."""
    got = client.range(query, w.origin + w.step, w.until, w.step)
    out: list[float | None] = [None] * w.steps
    if got:
        for t, v in got[0].values:
            k = round((t - w.origin) / w.step) - 1
            if 0 <= k < w.steps and math.isfinite(v):
                out[k] = v
    return out


def _iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

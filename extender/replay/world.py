"""The world around the scheduler under test: the objects every peer's replay shares.

Fake GPU nodes (one per scenario node, kept Ready by KWOK), the plain shape of a
job's pods and of a service's Deployment (a peer adds what its scheduler reads:
annotations, gates, priority classes, a scheduler name), the namespace wiped
before and after, and each job's completion time once its gang runs (KWOK's
pod-complete stage reads it). Labels here are the read-back's contract: every
pod of a job carries `BENCH_LABEL=job` and `JOB_LABEL=<job name>`, every pod
of a service `BENCH_LABEL=service` and `app=<service name>`, whoever creates
the pod (the replay itself, a Deployment, or a batch/v1 Job).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from extender import config
from extender.adapter import annotations as ann
from extender.planner import model

NODE_PREFIX = "bench-node-"
NODE_LEASE_NAMESPACE = "kube-node-lease"
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
SIMULATED_RUNTIME = "gpuroster.io/simulated-runtime"
BENCH_LABEL = "gpuroster.io/bench"
JOB_LABEL = "gpuroster.io/job"


def api(kubeconfig: str) -> Any:
    return k8s_config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]


def ts(value: Any) -> float:
    """A Kubernetes time (datetime or RFC 3339 text) as Unix seconds."""
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def node_body(index: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"{NODE_PREFIX}{index}",
            "labels": {
                ann.TOPOLOGY_ORDER: str(index),
                "type": "kwok",
                BENCH_LABEL: "true",
                "kubernetes.io/hostname": f"{NODE_PREFIX}{index}",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
        },
        "status": {
            "allocatable": {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "110",
                ann.GPU_RESOURCE: str(gpus),
            },
            "capacity": {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "110",
                ann.GPU_RESOURCE: str(gpus),
            },
        },
    }


def gang_shape(job: model.Job, g: int) -> tuple[int, int]:
    """(pods, GPUs per pod) of a job on nodes of G GPUs: one pod up to G GPUs, whole-node
    pods above. The read-back counts a gang bound only when this many pods are."""
    per_pod = min(job.gpus, g)
    count = max(1, job.gpus // g) if job.gpus > g else 1
    return count, per_pod


def job_pod_labels(job: model.Job) -> dict[str, str]:
    return {BENCH_LABEL: "job", JOB_LABEL: job.name}


def job_pod_spec(gpus: int) -> dict[str, Any]:
    """A job pod's spec, bare: KWOK's node toleration and the GPU request."""
    return {
        "restartPolicy": "Never",
        "tolerations": [TOLERATION],
        "containers": [
            {
                "name": "work",
                "image": "registry.invalid/work:1",
                "resources": {
                    "requests": {ann.GPU_RESOURCE: str(gpus)},
                    "limits": {ann.GPU_RESOURCE: str(gpus)},
                },
            }
        ],
    }


def job_pods(
    job: model.Job,
    g: int,
    namespace: str,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A job as bare pods `<job>-<i>`, each with `annotations` and `spec` added."""
    count, per_pod = gang_shape(job, g)
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job.name}-{i}",
                "namespace": namespace,
                "labels": job_pod_labels(job),
                "annotations": dict(annotations or {}),
            },
            "spec": {**(spec or {}), **job_pod_spec(per_pod)},
        }
        for i in range(count)
    ]


def service_deployment(
    v: model.Service, namespace: str, replicas: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A service as a Deployment of one-GPU replicas (`app=<name>`)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": v.name,
            "namespace": namespace,
            "labels": {BENCH_LABEL: "service"},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": v.name}},
            "template": {
                "metadata": {"labels": {"app": v.name, BENCH_LABEL: "service"}},
                "spec": {
                    "tolerations": [TOLERATION],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "serve",
                            "image": "registry.invalid/serve:1",
                            "resources": {
                                "requests": {ann.GPU_RESOURCE: "1"},
                                "limits": {ann.GPU_RESOURCE: "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


def ensure_namespace(core: Any, ns: str, timeout: float = 30.0) -> None:
    """The namespace, with its ``default`` ServiceAccount: until the controller-manager
    makes that account, the API server refuses every pod in the namespace (403)."""
    try:
        core.create_namespace({"metadata": {"name": ns, "labels": {BENCH_LABEL: "true"}}})
    except ApiException as e:
        if e.status != 409:
            raise
    deadline = time.time() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", ns)
            return
        except ApiException as e:
            if e.status != 404:
                raise
        if time.time() > deadline:
            raise RuntimeError(f"no default ServiceAccount in namespace {ns} after {timeout:.0f} s")
        time.sleep(0.1)


def _stale_leases(leases: Any) -> list[str]:
    return [x.metadata.name for x in leases.list_namespaced_lease(NODE_LEASE_NAMESPACE).items
            if x.metadata.name.startswith(NODE_PREFIX)]


def wipe(core: Any, apps: Any, ns: str, timeout: float = 60.0) -> None:
    """An empty namespace and no bench nodes: every replay starts from the same state.

    The bench nodes' leases go too. The next replay's nodes have the same names; a
    lease the garbage collector has not yet removed makes KWOK's lease create for
    the new node fail, the node is never heartbeated, and 50 s in the node
    controller marks it NotReady mid-replay (seen: mixed-control lost 7 points).
    """
    leases: Any = k8s.CoordinationV1Api(core.api_client)
    ensure_namespace(core, ns)
    for d in apps.list_namespaced_deployment(ns).items:
        apps.delete_namespaced_deployment(d.metadata.name, ns)
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    core.delete_collection_namespaced_config_map(ns, label_selector=BENCH_LABEL)
    for n in core.list_node(label_selector=BENCH_LABEL).items:
        core.delete_node(n.metadata.name)
    deadline = time.time() + timeout
    while time.time() < deadline:
        nodes_gone = not core.list_node(label_selector=BENCH_LABEL).items
        if nodes_gone:
            for name in _stale_leases(leases):  # KWOK may renew one until its node is gone
                try:
                    leases.delete_namespaced_lease(name, NODE_LEASE_NAMESPACE)
                except ApiException as e:
                    if e.status != 404:
                        raise
        if nodes_gone and not core.list_namespaced_pod(ns).items and not _stale_leases(leases):
            return
        for p in core.list_namespaced_pod(ns).items:  # KWOK may not finish deletions alone
            try:
                core.delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        time.sleep(0.5)
    raise RuntimeError(f"namespace {ns} did not empty within {timeout}s")


def create_nodes(core: Any, count: int, gpus: int) -> None:
    for i in range(count):
        core.create_node(node_body(i, gpus))
    wait_nodes_ready(core, count)


def wait_nodes_ready(core: Any, count: int, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready = 0
        for n in core.list_node(label_selector=BENCH_LABEL).items:
            for c in n.status.conditions or []:
                if c.type == "Ready" and c.status == "True":
                    ready += 1
        if ready >= count:
            return
        time.sleep(0.3)
    raise RuntimeError(f"bench nodes not Ready within {timeout}s")


def run_start(annotations: dict[str, str], bound: int, t0: float, S: float) -> int:
    """The step a job's true duration counts from: the step its gang was bound, or its
    admission's if that was the step before (its GPUs still held by a service's pods on
    their way out: seconds of an hour, made a step by compressed time; in the
    simulator a service gives up a GPU and a job starts on it in the same step)."""
    admitted = admitted_step(annotations, t0, S)
    return admitted if admitted == bound - 1 else bound


def admitted_step(annotations: dict[str, str], t0: float, S: float) -> int | None:
    """The step of the gpuroster.io/admitted-at annotation, None without one."""
    if not annotations.get(ann.ADMITTED_AT):
        return None
    return math.floor((ts(annotations[ann.ADMITTED_AT]) - t0) / S + 1e-9)


def schedule_ends(
    core: Any,
    ns: str,
    s: model.Scenario,
    t0: float,
    S: float,
    started: dict[str, int],
    notes: list[str],
) -> None:
    """Give each newly started job its completion time: just before the boundary of
    the step its true duration ends on, counted from the step its gang was bound,
    so the cluster's steps match the simulator's, or from its admission a step before
    (`run_start`): otherwise the job would hold its GPUs a step past the end the plans
    count on, and every plan after would differ. That is after the step's sample
    and inside the extender's quiet tail, so the boundary plan sees the job gone,
    as the simulator's does; just past the boundary, the boundary plan would still
    see it running and commit around it. KWOK's pod-complete stage reads the
    RFC 3339 time from the annotation."""
    jobs = {j.name: j for j in s.jobs}
    tail = config.quiet_tail_seconds(S)
    for p in core.list_namespaced_pod(ns, label_selector=f"{BENCH_LABEL}=job").items:
        a = p.metadata.annotations or {}
        name = (p.metadata.labels or {}).get(JOB_LABEL, "")
        j = jobs.get(name)
        if SIMULATED_RUNTIME in a or j is None or name not in started:
            continue
        start = run_start(a, started[name], t0, S)
        end = datetime.fromtimestamp(t0 + (start + j.duration_steps) * S - 0.8 * tail, UTC)
        try:
            core.patch_namespaced_pod(
                p.metadata.name,
                ns,
                {
                    "metadata": {
                        "annotations": {SIMULATED_RUNTIME: end.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
                    }
                },
            )
        except ApiException as e:
            notes.append(f"{j.name}: could not set its completion time: {e.status}")


def end_now(core: Any, ns: str, s: model.Scenario, t: int, started: dict[str, int],
            notes: list[str]) -> None:
    """For peers that act after the sample: right after step t's sample, end every job
    whose last step was t (KWOK completes its pods at once: the time is already past),
    so step t+1's sample sees its GPUs free and the peer has the rest of the step to
    use them. Decided from the samples, not the clock: a late sample cannot miss a
    job's last step."""
    jobs = {j.name: j for j in s.jobs}
    last = {n for n, st in started.items() if n in jobs and st + jobs[n].duration_steps - 1 == t}
    if not last:
        return
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for p in core.list_namespaced_pod(ns, label_selector=f"{BENCH_LABEL}=job").items:
        name = (p.metadata.labels or {}).get(JOB_LABEL, "")
        if name not in last or SIMULATED_RUNTIME in (p.metadata.annotations or {}):
            continue
        try:
            core.patch_namespaced_pod(
                p.metadata.name, ns, {"metadata": {"annotations": {SIMULATED_RUNTIME: now}}})
        except ApiException as e:
            if e.status != 404:
                notes.append(f"{name}: could not end it: {e.status}")

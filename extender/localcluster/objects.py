"""Kubernetes objects the harness and the e2e tests create, as plain dicts.

Fake GPU nodes carry the KWOK annotation and taint; test pods tolerate the
taint. Names and labels here are the interface other tests rely on.
"""

from __future__ import annotations

from typing import Any

from extender.localcluster import dradriver

GPU = "nvidia.com/gpu"
TOPOLOGY_ORDER_LABEL = "gpuroster.io/topology-order"
NOT_READY_LABEL = "gpuroster.io/simulate-not-ready"
RUNTIME_ANNOTATION = "gpuroster.io/simulated-runtime"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_TAINT_KEY = "kwok.x-k8s.io/node"

FAKE_NODE_TOLERATION: dict[str, str] = {
    "key": KWOK_TAINT_KEY,
    "operator": "Equal",
    "value": "fake",
    "effect": "NoSchedule",
}


def node_name(index: int) -> str:
    return f"gpu-node-{index}"


def fake_gpu_node(
    index: int,
    gpus: int = 8,
    *,
    name: str | None = None,
    labels: dict[str, str] | None = None,
    dra: bool = False,
) -> dict[str, Any]:
    """A Node that KWOK manages, with ``gpus`` nvidia.com/gpu, ordered by ``index``.

    With ``dra`` its GPUs are DRA devices instead (the fake DRA driver publishes them
    from the ``gpuroster.io/fake-gpus`` label): no nvidia.com/gpu in its status."""
    name = name or node_name(index)
    resources = {"cpu": "256", "memory": "2Ti", "pods": "1000", "ephemeral-storage": "10Ti"}
    if dra:
        labels = {dradriver.GPUS_LABEL: str(gpus), **(labels or {})}
    else:
        resources[GPU] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                TOPOLOGY_ORDER_LABEL: str(index),
                **(labels or {}),
            },
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": KWOK_TAINT_KEY, "value": "fake", "effect": "NoSchedule"}]},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def pod(
    name: str,
    *,
    gpus: int = 0,
    runtime: str | None = None,
    scheduler_name: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod that may land on fake nodes; ``runtime`` (e.g. "45s") makes KWOK
    complete it that long after it starts running."""
    notes = dict(annotations or {})
    if runtime is not None:
        notes[RUNTIME_ANNOTATION] = runtime
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/gpuroster/fake:1"}
    if gpus:
        container["resources"] = {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}
    spec: dict[str, Any] = {
        "containers": [container],
        "tolerations": [FAKE_NODE_TOLERATION],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": notes, "labels": dict(labels or {})},
        "spec": spec,
    }


def gang_job(name: str, *, pods: int, gpus: int, backoff_limit: int,
             duration: str = "10m") -> dict[str, Any]:
    """An Indexed Job ``name`` of ``pods`` training pods of ``gpus`` GPUs each, one gang
    (``gpuroster.io/gang: name``); its pods (label ``job-name: name``) run until deleted."""
    notes = {"gpuroster.io/gang": name, "gpuroster.io/gang-size": str(pods),
             "gpuroster.io/expected-duration": duration, "gpuroster.io/workload": "training"}
    template = pod(name, gpus=gpus)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods,
                     "backoffLimit": backoff_limit,
                     "template": {"metadata": {"annotations": notes},
                                  "spec": template["spec"]}}}


def inference_deployment(
    name: str,
    annotations: dict[str, str],
    *,
    replicas: int = 0,
    gpus: int = 1,
) -> dict[str, Any]:
    """A real-time inference Deployment ``name`` whose pods (label ``app: name``) each
    ask for ``gpus`` GPUs and run until deleted. ``annotations`` come on top of
    ``gpuroster.io/workload: realtime-inference``."""
    template = pod(name, gpus=gpus, labels={"app": name})
    template["spec"]["restartPolicy"] = "Always"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": {
            "gpuroster.io/workload": "realtime-inference", **annotations}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": template["spec"]}},
    }

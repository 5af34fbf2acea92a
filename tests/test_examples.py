"""The manifests in examples/ are what a newcomer copies: they must parse, and the
project's own parsers (annotations, gang checks, demand ConfigMap) must accept them.

The server-side check (`kubectl apply --dry-run=server`) is e2e/test_examples.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import config
from extender.adapter import annotations as ann
from extender.adapter import snapshot
from extender.planner import model

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))
USER_ANNOTATIONS = {ann.WORKLOAD, ann.PRIORITY, ann.GANG, ann.GANG_SIZE, ann.EXPECTED_DURATION,
                    ann.MAX_SWAP, ann.DEMAND_CONFIGMAP, ann.DEMAND_QUERY, ann.SERVICE_LEVEL}
# The local cluster of `make cluster-up` and the e2e tests: 4 nodes x 8 GPUs.
NODES, GPUS_PER_NODE = 4, 8


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def all_docs() -> list[dict[str, Any]]:
    return [d for f in FILES for d in docs(f)]


def pod_template(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj["kind"] == "Pod":
        return obj
    if obj["kind"] in ("Job", "Deployment", "StatefulSet"):
        return dict(obj["spec"]["template"])
    return None


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"allocatable": {ann.GPU_RESOURCE: str(GPUS_PER_NODE)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pods_of_job(job: dict[str, Any], namespace: str = "default") -> list[dict[str, Any]]:
    """The pods the Job controller would create at once (parallelism of them)."""
    t = pod_template(job)
    assert t is not None
    n = int(job["spec"].get("parallelism", 1))
    out = []
    for i in range(n):
        meta = dict(t.get("metadata") or {})
        meta.update(name=f"{job['metadata']['name']}-{i}-abcde", namespace=namespace,
                    creationTimestamp="2026-01-01T00:00:00Z")
        out.append({"metadata": meta, "spec": t["spec"], "status": {"phase": "Pending"}})
    return out


def test_there_are_examples_of_every_kind_of_work() -> None:
    kinds = set()
    for d in all_docs():
        t = pod_template(d)
        a = ann.annotations_of(d) if d["kind"] == "Deployment" else (
            ann.annotations_of(t) if t else {})
        if ann.WORKLOAD in a:
            kinds.add(a[ann.WORKLOAD])
    assert kinds == set(model.BATCH_TYPES) | {model.REALTIME_TYPE}


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_manifest_parses_and_explains_itself(path: Path) -> None:
    text = path.read_text()
    header = [line for line in text.splitlines()[:5] if line.startswith("# ")]
    assert len(header) >= 2, f"{path.name} needs a comment header saying what it shows"
    ds = docs(path)
    assert ds, f"{path.name} holds no object"
    for d in ds:
        assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name")
        # No namespace: `kubectl apply -n TEAM -f examples/...` must put it anywhere.
        assert "namespace" not in d["metadata"]


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_annotations_pass_the_projects_parser(path: Path) -> None:
    settings = config.Settings()
    by_name = {d["metadata"]["name"]: d for d in docs(path)}
    checked = 0
    for d in by_name.values():
        t = pod_template(d)
        if d["kind"] == "Deployment" and ann.annotations_of(d).get(ann.WORKLOAD):
            for k in ann.annotations_of(d):
                assert k in USER_ANNOTATIONS, f"unknown annotation {k}"
            spec = ann.service_spec({**d, "metadata": {**d["metadata"], "namespace": "default"}},
                                    settings)
            assert spec is not None
            assert spec.demand_configmap in by_name, "the demand ConfigMap ships in the same file"
            demand = ann.demand(by_name[spec.demand_configmap])
            if demand.curve:
                # One day of the default step, so curve[i] is hour i.
                assert len(demand.curve) % settings.steps_per_day() == 0
            checked += 1
        elif t is not None and ann.annotations_of(t).get(ann.WORKLOAD):
            for k in ann.annotations_of(t):
                assert k in USER_ANNOTATIONS, f"unknown annotation {k}"
            pods = pods_of_job(d)
            works = [ann.pod_work(p, settings) for p in pods]
            assert all(w.workload in model.BATCH_TYPES for w in works)
            # The gang checks kube-side: complete, power of two, packable into nodes.
            snap = snapshot.build([node(f"gpu-node-{i}") for i in range(NODES)], pods, [], [],
                                  settings)
            gang = snap.gangs[works[0].gang]
            assert gang.error is None, gang.error
            assert gang.waiting_for is None, gang.waiting_for
            assert model.is_power_of_two(gang.gpus)
            assert works[0].gang_size == len(pods)
            checked += 1
    assert checked, f"{path.name}: no gpuroster workload in it"


def test_the_multi_node_gang_takes_whole_nodes() -> None:
    job = docs(EXAMPLES / "training-multinode.yaml")[0]
    pods = pods_of_job(job)
    snap = snapshot.build([node(f"gpu-node-{i}") for i in range(NODES)], pods, [], [],
                          config.Settings())
    (gang,) = snap.gangs.values()
    assert gang.gpus == 16 and gang.gpus > GPUS_PER_NODE
    block = model.Block(0, gang.gpus)
    assert block.is_legal(snap.cluster)
    assert block.label(snap.cluster, snap.nodes) == "gpu-node-0..gpu-node-1"


def test_readme_lists_every_example() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for f in FILES:
        assert f.name in readme, f"examples/README.md does not mention {f.name}"

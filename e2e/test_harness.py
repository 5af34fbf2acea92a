"""The local control plane really routes GPU pods through the extender.

A recording extender (a real HTTP server speaking the extender v1 wire
format, PascalCase keys) stands in for gpuroster here: it allows exactly one
node, so a pod landing there proves the real kube-scheduler asked it.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from extender.localcluster import Cluster, objects

pytestmark = pytest.mark.e2e


@dataclass
class RecordingExtender:
    """Filter allows only ``allowed``; bind creates pods/binding via the API."""

    allowed: str
    core: Any
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def verbs_for(self, pod_name: str) -> list[str]:
        with self.lock:
            return [verb for verb, body in self.calls if _pod_name(verb, body) == pod_name]

    def handle(self, verb: str, body: dict[str, Any]) -> Any:
        with self.lock:
            self.calls.append((verb, body))
        if verb == "filter":
            if body.get("NodeNames") is not None:
                names = list(body["NodeNames"])
            else:
                names = [n["metadata"]["name"] for n in body["Nodes"]["items"]]
            failed = {n: "not the node this test allows" for n in names if n != self.allowed}
            result: dict[str, Any] = {"FailedNodes": failed, "Error": ""}
            kept = [n for n in names if n == self.allowed]
            if body.get("NodeNames") is not None:
                result["NodeNames"] = kept
            else:
                items = [n for n in body["Nodes"]["items"] if n["metadata"]["name"] in kept]
                result["Nodes"] = {**body["Nodes"], "items": items}
            return result
        if verb == "prioritize":
            names = body.get("NodeNames") or [n["metadata"]["name"]
                                              for n in body["Nodes"]["items"]]
            return [{"Host": n, "Score": 10 if n == self.allowed else 0} for n in names]
        if verb == "bind":
            binding = {
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": body["PodName"], "namespace": body["PodNamespace"],
                             "uid": body["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": body["Node"]},
            }
            # _preload_content=False: the client cannot deserialize the Status reply.
            self.core.create_namespaced_binding(body["PodNamespace"], binding,
                                                _preload_content=False)
            return {"Error": ""}
        raise ValueError(f"unknown verb {verb}")


def _pod_name(verb: str, body: dict[str, Any]) -> str | None:
    if verb == "bind":
        return str(body["PodName"])
    return str(body["Pod"]["metadata"]["name"])


def _serve(
    port: int, handle: Callable[[str, dict[str, Any]], Any], tls: ssl.SSLContext | None = None
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                payload = json.dumps(handle(self.path.strip("/"), body)).encode()
                status = 200
            except Exception as e:  # noqa: BLE001 - report any failure to the scheduler
                payload, status = json.dumps({"Error": repr(e)}).encode(), 500
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def recording_extender(cluster: Cluster) -> Iterator[RecordingExtender]:
    ext = RecordingExtender(allowed=cluster.node_names()[-1], core=cluster.core())
    server = _serve(cluster.extender_port, ext.handle)
    try:
        yield ext
    finally:
        server.shutdown()
        server.server_close()


def _wait_pod(core: Any, ns: str, name: str, phase: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        pod = core.read_namespaced_pod(name, ns)
        if pod.status.phase == phase:
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {ns}/{name} not {phase} after {timeout}s: "
                                 f"phase={pod.status.phase} node={pod.spec.node_name} "
                                 f"conditions={pod.status.conditions}")
        time.sleep(0.2)


def test_gpu_pod_is_placed_by_the_extender(
    cluster: Cluster, namespace: str, recording_extender: RecordingExtender
) -> None:
    core = cluster.core()
    core.create_namespaced_pod(namespace, objects.pod("gpu", gpus=1))
    pod = _wait_pod(core, namespace, "gpu", "Running")
    assert pod.spec.node_name == recording_extender.allowed
    assert pod.status.pod_ip  # KWOK's pod-ready stage assigned one
    verbs = recording_extender.verbs_for("gpu")
    assert "filter" in verbs
    assert "bind" in verbs


def test_gpuroster_profile_uses_the_extender_too(
    cluster: Cluster, namespace: str, recording_extender: RecordingExtender
) -> None:
    core = cluster.core()
    core.create_namespaced_pod(namespace, objects.pod("gpu", gpus=2, scheduler_name="gpuroster"))
    pod = _wait_pod(core, namespace, "gpu", "Running")
    assert pod.spec.node_name == recording_extender.allowed
    assert "filter" in recording_extender.verbs_for("gpu")


def test_pod_without_gpus_never_reaches_the_extender(
    cluster: Cluster, namespace: str, recording_extender: RecordingExtender
) -> None:
    core = cluster.core()
    core.create_namespaced_pod(namespace, objects.pod("cpu-only"))
    pod = _wait_pod(core, namespace, "cpu-only", "Running")
    assert pod.spec.node_name in cluster.node_names()
    assert recording_extender.verbs_for("cpu-only") == []


def test_gpu_pod_waits_while_the_extender_is_down(cluster: Cluster, namespace: str) -> None:
    # ignorable: false -- without the extender, no GPU pod is placed.
    core = cluster.core()
    core.create_namespaced_pod(namespace, objects.pod("gpu", gpus=1))
    time.sleep(3)
    pod = core.read_namespaced_pod("gpu", namespace)
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"


def _ready_changed(pod: Any) -> Any:
    """When the pod's Ready condition last changed (whole seconds, as the API keeps it)."""
    return next(c.last_transition_time for c in pod.status.conditions or []
                if c.type == "Ready")


def test_simulated_runtime_completes_the_pod(cluster: Cluster, namespace: str) -> None:
    core = cluster.core()
    core.create_namespaced_pod(namespace, objects.pod("short", runtime="3s"))
    running = _wait_pod(core, namespace, "short", "Running")
    done = _wait_pod(core, namespace, "short", "Succeeded", timeout=30)
    # 3 s from KWOK's view, read from the pod itself (Ready, then not), not from when this
    # test happened to see each phase; each time is cut to the second: at least 2 s apart.
    ran = (_ready_changed(done) - _ready_changed(running)).total_seconds()
    assert ran >= 2.0, ran
    assert running.spec.node_name == done.spec.node_name
    forever = objects.pod("forever")
    core.create_namespaced_pod(namespace, forever)
    _wait_pod(core, namespace, "forever", "Running")
    time.sleep(4)
    assert core.read_namespaced_pod("forever", namespace).status.phase == "Running"


def test_completed_pod_frees_its_gpus(
    cluster: Cluster, namespace: str, recording_extender: RecordingExtender
) -> None:
    # The benchmark relies on this: a Succeeded pod's GPUs go back to the
    # scheduler, and the waiting pod is retried without minutes of backoff.
    core = cluster.core()
    core.create_namespaced_pod(namespace, objects.pod("first", gpus=8, runtime="3s"))
    _wait_pod(core, namespace, "first", "Running")
    core.create_namespaced_pod(namespace, objects.pod("second", gpus=8))
    time.sleep(1)  # a negative check: the second pod has no GPUs while the first runs
    placed = core.read_namespaced_pod("second", namespace).spec.node_name
    # Read after it: on a slow machine the first may be done already, and then the
    # second's placement is right.
    still = core.read_namespaced_pod("first", namespace).status.phase == "Running"
    assert not (placed and still), f"second placed on {placed} while the first still ran"
    _wait_pod(core, namespace, "first", "Succeeded", timeout=30)
    done = time.monotonic()
    second = _wait_pod(core, namespace, "second", "Running", timeout=30)
    assert second.spec.node_name == recording_extender.allowed
    assert time.monotonic() - done < 15


def test_nodes_can_be_added_broken_and_removed(cluster: Cluster, nodes: list[str]) -> None:
    assert nodes == [objects.node_name(i) for i in range(len(nodes))]
    added = cluster.add_node(gpus=4)
    assert added == objects.node_name(len(nodes))
    node = cluster.core().read_node(added)
    assert node.status.allocatable[objects.GPU] == "4"
    assert node.metadata.labels[objects.TOPOLOGY_ORDER_LABEL] == str(len(nodes))
    cluster.set_node_ready(nodes[0], False)
    cluster.remove_node(added)
    assert cluster.node_names() == nodes
    cluster.set_node_ready(nodes[0], True)


def test_a_new_namespace_takes_pods_as_soon_as_the_harness_returns_it(cluster: Cluster) -> None:
    # The ServiceAccount admission plugin refuses pods (403) until the controller-manager
    # has made the namespace's `default` account; a CI run lost two tests to that lag.
    core = cluster.core()
    name = f"fresh-{int(time.time() * 1000) % 10**8}"
    cluster.create_namespace(name)
    try:
        assert core.read_namespaced_service_account("default", name).metadata.name == "default"
        core.create_namespaced_pod(name, objects.pod("cpu-only", gpus=0))
    finally:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)


def test_second_cluster_side_by_side_full_nodes_over_https(cluster: Cluster) -> None:
    # nodeCacheCapable: false sends whole Node objects, and enableHTTPS with the
    # cluster CA; this also proves two clusters run at once on their own ports.
    with Cluster(nodes=2, node_cache_capable=False, extender_tls=True,
                 bin_dir=cluster.bin_dir) as other:
        assert other.server != cluster.server
        assert other.extender_url.startswith("https://127.0.0.1:")
        assert other.pki is not None
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(other.pki.extender.cert, other.pki.extender.key)
        ext = RecordingExtender(allowed=objects.node_name(0), core=other.core())
        server = _serve(other.extender_port, ext.handle, tls)
        try:
            core = other.core()
            core.create_namespaced_pod("default", objects.pod("gpu", gpus=8))
            pod = _wait_pod(core, "default", "gpu", "Running")
            assert pod.spec.node_name == objects.node_name(0)
            with ext.lock:
                filters = [body for verb, body in ext.calls if verb == "filter"]
            assert filters and filters[0]["NodeNames"] is None
            assert {n["metadata"]["name"] for n in filters[0]["Nodes"]["items"]} == {
                objects.node_name(0), objects.node_name(1)}
        finally:
            server.shutdown()
            server.server_close()

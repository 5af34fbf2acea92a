"""gpuroster serve against the real control plane: kube-scheduler calls it over HTTP.

Each test runs its own `gpuroster serve` subprocess on the cluster's extender
port, managing only the test's namespace, with a 2-second step.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from extender.localcluster import Cluster, objects, processes
from extender.localcluster.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
STEP = 2.0
BLOCK = "gpuroster.io/block"
ADMITTED_AT = "gpuroster.io/admitted-at"
NODE = "gpuroster.io/node"

# The typed client calls take the model their signature names: a body from `objects` (a
# dict) goes as `V1Deployment.model_validate(body)`, which is what the client's own
# validate_call would make of the dict.


class Extender:
    def __init__(self, cluster: Cluster, namespace: str, log_dir: Path, **env: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        scheme = "https" if env.get("GPUROSTER_TLS_CERT_FILE") else "http"
        self.url = f"{scheme}://127.0.0.1:{cluster.extender_port}"
        self.tls = ssl._create_unverified_context() if scheme == "https" else None
        self.log_path = log_dir / "extender.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0
        # Steps count from one step before the first start (step 1 is the first), so a
        # test's demand curve starts where the test says; restarts keep the count.
        # (gpuroster's default epoch puts steps on the wall clock instead.)
        step = float(env.get("GPUROSTER_STEP_SECONDS", STEP))
        self.epoch = float(env.get("GPUROSTER_EPOCH") or 0) or time.time() - step

    def start(self, timeout: float = 30.0) -> None:
        env = dict(os.environ)
        env.update({
            "GPUROSTER_KUBECONFIG": str(self.cluster.kubeconfig),
            "GPUROSTER_PORT": str(self.cluster.extender_port),
            "GPUROSTER_BIND_ADDRESS": "127.0.0.1",
            "GPUROSTER_STEP_SECONDS": str(STEP),
            "GPUROSTER_NAMESPACES": self.namespace,
            "GPUROSTER_LOG_LEVEL": "INFO",
            "GPUROSTER_EPOCH": f"{self.epoch:.3f}",
            **self.env,
        })
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "extender.cli", "serve"], cwd=REPO,
                                     env=env, stdout=log, stderr=subprocess.STDOUT)
        self.started += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpuroster serve exited: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1,
                                            context=self.tls) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gpuroster serve not ready in {timeout}s: {self.log()}")

    def stop(self, hard: bool = False) -> None:
        if self.proc is not None:
            processes.stop_process(self.proc, hard=hard)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def post(self, verb: str, body: bytes) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(self.url + "/" + verb, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5, context=self.tls) as r:
            body = r.read()
            return json.loads(body) if path == "/plan" else body.decode()


@pytest.fixture
def extender(cluster: Cluster, namespace: str, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[Extender]:
    ext = Extender(cluster, namespace, tmp_path)
    failed_before = request.session.testsfailed
    ext.start()
    yield ext
    ext.stop()
    if request.session.testsfailed > failed_before:
        print(f"---- gpuroster serve log ----\n{ext.log()}")


# --- helpers -----------------------------------------------------------------------


def gang_pods(core: Any, ns: str, name: str, pods: int, gpus: int, *, runtime: str,
              duration: str, priority: str | None = None) -> list[str]:
    names = []
    for i in range(pods):
        notes = {"gpuroster.io/gang": name, "gpuroster.io/gang-size": str(pods),
                 "gpuroster.io/expected-duration": duration, "gpuroster.io/workload": "training"}
        if priority:
            notes["gpuroster.io/priority"] = priority
        body = objects.pod(f"{name}-{i}", gpus=gpus, runtime=runtime, annotations=notes)
        core.create_namespaced_pod(ns, body)
        names.append(f"{name}-{i}")
    return names


def pods_of(core: Any, ns: str, names: list[str]) -> list[Any]:
    return [core.read_namespaced_pod(n, ns) for n in names]


def all_bound(core: Any, ns: str, names: list[str]) -> list[Any] | None:
    pods = pods_of(core, ns, names)
    return pods if all(p.spec.node_name for p in pods) else None


def scheduled_at(pod: Any) -> float:
    for c in pod.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "True":
            return float(c.last_transition_time.timestamp())
    raise AssertionError(f"{pod.metadata.name} not scheduled")


def admitted_at(pod: Any) -> float:
    text = pod.metadata.annotations[ADMITTED_AT]
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def node_order(core: Any, name: str) -> int:
    return int(core.read_node(name).metadata.labels[objects.TOPOLOGY_ORDER_LABEL])


def replica_nodes(core: Any, ns: str, app: str, count: int) -> list[str] | None:
    """The nodes of the Deployment `app`'s bound pods, once `count` of them are bound."""
    pods = core.list_namespaced_pod(ns, label_selector=f"app={app}").items
    on = [p.spec.node_name for p in pods if p.spec.node_name]
    return on if len(on) == count else None


def events_for(core: Any, ns: str, pod: str) -> list[Any]:
    return [e for e in core.list_namespaced_event(ns).items if e.involved_object.name == pod]


# --- tests -------------------------------------------------------------------------


def test_gang_of_four_two_gpu_pods_lands_on_one_node_in_one_step(
        core: Any, namespace: str, extender: Extender) -> None:
    t0 = time.time()
    names = gang_pods(core, namespace, "g4", 4, 2, runtime="60s", duration="60s")
    pods = wait_for(lambda: all_bound(core, namespace, names), 30, "the gang to bind")
    took = time.time() - t0
    assert len({p.spec.node_name for p in pods}) == 1, [p.spec.node_name for p in pods]
    assert len({p.metadata.annotations[BLOCK] for p in pods}) == 1
    assert len({p.metadata.annotations[ADMITTED_AT] for p in pods}) == 1
    admitted = admitted_at(pods[0])
    bound = [scheduled_at(p) for p in pods]
    # none bound before admission (1 s timestamp resolution), all within one step of it
    assert min(bound) >= admitted - 1.0
    assert max(bound) - admitted <= STEP + 1.0, (admitted, bound)
    print(f"[e2e] 4x2 gang bound {took:.1f}s after creation; "
          f"spread of binding times {max(bound) - min(bound):.1f}s")


def test_sixteen_gpu_gang_gets_two_whole_consecutive_nodes(
        core: Any, namespace: str, extender: Extender) -> None:
    names = gang_pods(core, namespace, "big", 2, 8, runtime="60s", duration="60s")
    pods = wait_for(lambda: all_bound(core, namespace, names), 30, "the gang to bind")
    nodes = sorted({p.spec.node_name for p in pods})
    assert len(nodes) == 2
    orders = sorted(node_order(core, n) for n in nodes)
    assert orders[1] == orders[0] + 1
    assert ".." in pods[0].metadata.annotations[BLOCK]


def test_later_higher_priority_gang_starts_first_and_the_lower_one_still_runs(
        core: Any, namespace: str, extender: Extender) -> None:
    nodes = len(core.list_node(label_selector=objects.TOPOLOGY_ORDER_LABEL).items)
    blocker = gang_pods(core, namespace, "blocker", nodes, 8, runtime="8s", duration="10s")
    wait_for(lambda: all_bound(core, namespace, blocker), 30, "the blocker to bind")
    low = gang_pods(core, namespace, "low", nodes, 8, runtime="4s", duration="6s",
                    priority="low")
    time.sleep(1.0)
    high = gang_pods(core, namespace, "high", nodes, 8, runtime="4s", duration="6s",
                     priority="critical")
    # while the blocker runs, both wait and say why (the blocker read after the pod: on
    # a machine slow enough that it is done by now, low's binding is no fault)
    waiting = core.read_namespaced_pod(low[0], namespace)
    blocking = all(p.status.phase == "Running" for p in pods_of(core, namespace, blocker))
    assert not (waiting.spec.node_name and blocking), "low bound beside the blocker"
    high_pods = wait_for(lambda: all_bound(core, namespace, high), 60, "the high gang")
    low_pods = wait_for(lambda: all_bound(core, namespace, low), 60, "the low gang")
    # Read from the pods, not from when this test saw them bound: each gang takes every
    # node, so low is scheduled only once high has run its 4 s.
    assert min(scheduled_at(p) for p in low_pods) > max(scheduled_at(p) for p in high_pods), \
        "low started with or before high"
    assert admitted_at(low_pods[0]) > admitted_at(high_pods[0])
    msgs = " ".join(e.message or "" for e in events_for(core, namespace, low[0]))
    assert "planned start" in msgs, msgs


def test_a_jobs_replacement_for_a_failed_gang_pod_runs_in_its_place(
        core: Any, api_client: Any, namespace: str, extender: Extender) -> None:
    from kubernetes import client

    # A real Job: an Indexed 16-GPU gang of two 8-GPU pods that may retry once.
    client.BatchV1Api(api_client).create_namespaced_job(namespace, client.V1Job.model_validate(
        objects.gang_job("retry", pods=2, gpus=8, backoff_limit=1)))

    def job_pods() -> list[Any]:
        return list(core.list_namespaced_pod(namespace, label_selector="job-name=retry").items)

    first = wait_for(lambda: [p for p in job_pods() if p.spec.node_name] if len(
        [p for p in job_pods() if p.spec.node_name]) == 2 else None, 30, "the gang to bind")
    failing, other = sorted(first, key=lambda p: p.metadata.name)
    block = failing.metadata.annotations[BLOCK]
    # The pod fails (the test plays its kubelet); the Job controller makes a new one.
    core.patch_namespaced_pod_status(failing.metadata.name, namespace, {"status": {
        "phase": "Failed", "reason": "Error", "message": "the test failed it"}})
    t0 = time.monotonic()

    def replacement() -> Any:
        new = [p for p in job_pods() if p.metadata.name not in
               (failing.metadata.name, other.metadata.name)]
        return new[0] if new and new[0].spec.node_name else None

    new = wait_for(replacement, 60, "the replacement to bind")
    took = time.monotonic() - t0
    notes_now = new.metadata.annotations
    assert notes_now[BLOCK] == block
    assert notes_now[ADMITTED_AT] == failing.metadata.annotations[ADMITTED_AT]
    assert new.spec.node_name == failing.spec.node_name == notes_now[NODE]
    still = core.read_namespaced_pod(other.metadata.name, namespace)
    assert still.status.phase == "Running" and still.spec.node_name == other.spec.node_name
    # The Event follows the annotation that lets kube-scheduler bind: wait for it.
    wait_for(lambda: any("replaces an ended pod of gang" in (e.message or "")
                         for e in events_for(core, namespace, new.metadata.name)), 20,
             "the replacement's Admitted Event")
    print(f"[e2e] replacement of a failed gang pod bound to its node {took:.1f}s after "
          "the failure (the Job controller's retry delay included)")


def test_a_jobs_gang_whose_pods_all_failed_is_admitted_again_whole(
        core: Any, api_client: Any, namespace: str, extender: Extender) -> None:
    from kubernetes import client

    client.BatchV1Api(api_client).create_namespaced_job(namespace, client.V1Job.model_validate(
        objects.gang_job("again", pods=2, gpus=4, backoff_limit=2)))

    def bound_pods(exclude: set[str]) -> list[Any] | None:
        pods = [p for p in core.list_namespaced_pod(namespace, label_selector="job-name=again")
                .items if p.metadata.name not in exclude and p.spec.node_name]
        return pods if len(pods) == 2 else None

    first = wait_for(lambda: bound_pods(set()), 30, "the gang to bind")
    for p in first:  # the whole gang fails (the test plays its kubelet)
        core.patch_namespaced_pod_status(p.metadata.name, namespace, {"status": {
            "phase": "Failed", "reason": "Error", "message": "the test failed it"}})
    t0 = time.monotonic()
    old = {p.metadata.name for p in first}
    again = wait_for(lambda: bound_pods(old), 90, "the Job's two new pods to bind")
    took = time.monotonic() - t0
    blocks = {p.metadata.annotations[BLOCK] for p in again}
    stamps = {p.metadata.annotations[ADMITTED_AT] for p in again}
    assert len(blocks) == 1 and len(stamps) == 1, (blocks, stamps)  # one gang, one admission
    assert stamps != {first[0].metadata.annotations[ADMITTED_AT]}  # a new admission
    print(f"[e2e] a gang whose pods all failed: the Job's new pods admitted whole and bound "
          f"{took:.1f}s after the failure (the Job controller's retry delay included)")


@contextmanager
def node_label(core: Any, node: str, key: str, value: str) -> Iterator[None]:
    """`node` carries the label `key`=`value` inside the block, and not after it."""
    core.patch_node(node, {"metadata": {"labels": {key: value}}})
    try:
        yield
    finally:
        core.patch_node(node, {"metadata": {"labels": {key: None}}})


def test_a_gang_lands_on_the_node_its_node_selector_names(
        core: Any, namespace: str, nodes: list[str], extender: Extender) -> None:
    # The last node in topology order gets a label; the plan would otherwise put a
    # 4-GPU gang on the lowest free node, which kube-scheduler then refuses.
    target = max(nodes, key=lambda n: node_order(core, n))
    key = "gpuroster-e2e/gpu"
    with node_label(core, target, key, "h100"):
        notes = {"gpuroster.io/gang": "picky", "gpuroster.io/gang-size": "1",
                 "gpuroster.io/expected-duration": "60s"}
        body = objects.pod("picky-0", gpus=4, runtime="60s", annotations=notes)
        body["spec"]["nodeSelector"] = {key: "h100"}
        core.create_namespaced_pod(namespace, body)
        nowhere = objects.pod("nowhere-0", gpus=4, runtime="60s", annotations={
            **notes, "gpuroster.io/gang": "nowhere"})
        nowhere["spec"]["nodeSelector"] = {key: "b200"}
        core.create_namespaced_pod(namespace, nowhere)
        (pod,) = wait_for(lambda: all_bound(core, namespace, ["picky-0"]), 30,
                          "the gang with a nodeSelector to bind")
        assert pod.spec.node_name == target == pod.metadata.annotations[NODE]

        def told() -> bool:
            return any("no GPU node fits" in (e.message or "")
                       for e in events_for(core, namespace, "nowhere-0"))

        wait_for(told, 20, "gpuroster's Event saying why the unplaceable gang waits")
        assert not core.read_namespaced_pod("nowhere-0", namespace).spec.node_name


def test_inference_replicas_land_on_the_nodes_their_template_selects(
        core: Any, api_client: Any, namespace: str, nodes: list[str],
        extender: Extender) -> None:
    from kubernetes import client

    # Services grow into the highest GPUs; this one may use the first node only.
    first = min(nodes, key=lambda n: node_order(core, n))
    key = "gpuroster-e2e/gpu"
    with node_label(core, first, key, "l4"):
        core.create_namespaced_config_map(namespace, {
            "metadata": {"name": "l4-demand"}, "data": {"curve": json.dumps([3] * 24)}})
        dep = objects.inference_deployment("l4chat", {
            "gpuroster.io/demand-configmap": "l4-demand", "gpuroster.io/max-swap": "4"})
        dep["spec"]["template"]["spec"]["nodeSelector"] = {key: "l4"}
        client.AppsV1Api(api_client).create_namespaced_deployment(
            namespace, client.V1Deployment.model_validate(dep))
        on = wait_for(lambda: replica_nodes(core, namespace, "l4chat", 3), 10 * STEP,
                      "three replicas placed")
        assert set(on) == {first}, on


def test_a_two_gpu_inference_replica_gets_both_gpus_on_one_node(
        core: Any, api_client: Any, namespace: str, nodes: list[str],
        extender: Extender) -> None:
    """The highest free GPU (services grow into the top) is alone on the last node and
    the node below it is empty: the replica's two GPUs must both be on that node, or
    its pod fits nowhere and stays pending."""
    from kubernetes import client

    order = sorted(nodes, key=lambda n: node_order(core, n))
    top, below = order[-1], order[-2]
    key = "gpuroster-e2e/top"
    with node_label(core, top, key, "yes"):
        held = []
        for name, gpus in (("t4", 4), ("t2", 2), ("t1", 1)):  # 7 of the top node's 8
            notes = {"gpuroster.io/gang": name, "gpuroster.io/gang-size": "1",
                     "gpuroster.io/expected-duration": "120s"}
            body = objects.pod(f"{name}-0", gpus=gpus, runtime="120s", annotations=notes)
            body["spec"]["nodeSelector"] = {key: "yes"}
            core.create_namespaced_pod(namespace, body)
            held.append(f"{name}-0")
        for i in range(len(nodes) - 2):  # every node under `below`
            held += gang_pods(core, namespace, f"fill{i}", 1, 8, runtime="120s",
                              duration="120s")
        bound = wait_for(lambda: all_bound(core, namespace, held), 30, "the jobs to bind")
        on = {p.metadata.name: p.spec.node_name for p in bound}
        assert below not in on.values(), on
        assert [on[n] for n in ("t4-0", "t2-0", "t1-0")] == [top] * 3, on
        core.create_namespaced_config_map(namespace, {
            "metadata": {"name": "big-demand"}, "data": {"curve": json.dumps([2] * 24)}})
        client.AppsV1Api(api_client).create_namespaced_deployment(
            namespace, client.V1Deployment.model_validate(objects.inference_deployment("big", {
                "gpuroster.io/demand-configmap": "big-demand",
                "gpuroster.io/max-swap": "4"}, gpus=2)))
        at = wait_for(lambda: replica_nodes(core, namespace, "big", 1), 8 * STEP,
                      "the 2-GPU replica to bind")
        assert at == [below], at
        planned = extender.get("/plan")["services"][f"{namespace}/big"]
        print(f"[e2e] 2-GPU replica on {at[0]}; the plan's service entry: {planned}")


def test_inference_replicas_kept_apart_by_anti_affinity_each_get_a_node(
        core: Any, api_client: Any, namespace: str, nodes: list[str],
        extender: Extender) -> None:
    """Three replicas whose required pod anti-affinity keeps them one to a node: the
    plan holds one GPU on each of three nodes, and kube-scheduler binds all three (with
    the three packed at the top of one node it would refuse two of them)."""
    from kubernetes import client

    core.create_namespaced_config_map(namespace, {
        "metadata": {"name": "ha-demand"}, "data": {"curve": json.dumps([3] * 24)}})
    dep = objects.inference_deployment("ha", {
        "gpuroster.io/demand-configmap": "ha-demand", "gpuroster.io/max-swap": "4"})
    dep["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "ha"}}}]}}
    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, client.V1Deployment.model_validate(dep))
    on = wait_for(lambda: replica_nodes(core, namespace, "ha", 3), 10 * STEP,
                  "three replicas bound")
    assert len(set(on)) == 3 and set(on) <= set(nodes), on
    print(f"[e2e] anti-affine replicas on {sorted(on)}")


def test_inference_deployment_follows_its_curve_within_the_swap_cap(
        core: Any, api_client: Any, namespace: str, extender: Extender) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    curve = [1, 5, 5, 2, 2, 6]
    core.create_namespaced_config_map(namespace, {
        "metadata": {"name": "chat-demand"}, "data": {"curve": json.dumps(curve)}})
    apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(
        objects.inference_deployment("chat", {
            "gpuroster.io/demand-configmap": "chat-demand", "gpuroster.io/max-swap": "2"})))
    batch = gang_pods(core, namespace, "fill", 2, 8, runtime="30s", duration="30s")
    seen: list[tuple[int, int]] = []  # (step, replicas): the last count seen in each step
    deadline = time.monotonic() + 10 * STEP
    while time.monotonic() < deadline:
        step = int(extender.get("/plan")["step"])
        rep = int(apps.read_namespaced_deployment(name="chat",
                                                  namespace=namespace).spec.replicas or 0)
        if int(extender.get("/plan")["step"]) != step:
            continue  # a boundary passed between the reads
        if seen and seen[-1][0] == step:
            seen[-1] = (step, rep)
        else:
            seen.append((step, rep))
        time.sleep(STEP / 5)
    # The last step seen may have been cut short by the deadline right after its
    # boundary, before the controller scaled: its count is not the step's.
    seen = seen[:-1]
    values = [r for _, r in seen]
    assert max(values) == max(curve), seen
    assert min(values[2:]) <= 3, seen  # it sheds in the troughs
    # The first step has no previous set (MODEL.md); after it, the swap cap holds.
    # A sample taken right at a boundary may show the next step's count, so the cap is
    # checked on the sequence of changes.
    changes = [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
    for a, b in zip(changes[1:], changes[2:], strict=False):
        assert abs(a - b) <= 2, f"swap cap broken: {seen}"
    # Step to step: within the cap, and at least what the curve asks where the cap
    # lets it get there.
    for (s0, r0), (s1, r1) in zip(seen, seen[1:], strict=False):
        if s1 == s0 + 1 and r0 > 0:
            assert abs(r1 - r0) <= 2, f"swap cap broken: {seen}"
            assert r1 >= min(curve[s1 % len(curve)], r0 + 2), seen
    # batch work ran beside the service
    assert all_bound(core, namespace, batch)
    pods = core.list_namespaced_pod(namespace, label_selector="app=chat").items
    running = [p for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp]
    assert running, "no replica was placed"
    print(f"[e2e] replicas per step: {seen}")


def gauge(text: str, name: str, service: str) -> float | None:
    """A per-service gauge's value in a /metrics page, or None when it is not there."""
    prefix = f'{name}{{service="{service}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return None


def test_demand_above_its_forecast_for_several_steps_gets_headroom_and_the_gauge_shows_it(
        core: Any, api_client: Any, namespace: str, extender: Extender) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    svc = f"{namespace}/chat"
    core.create_namespaced_config_map(namespace, {
        "metadata": {"name": "chat-demand"}, "data": {"curve": "[2]"}})
    apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(
        objects.inference_deployment("chat", {
            "gpuroster.io/demand-configmap": "chat-demand", "gpuroster.io/max-swap": "4",
            "gpuroster.io/service-level": "0.99"})))

    def replicas() -> int:
        return int(apps.read_namespaced_deployment(name="chat",
                                                   namespace=namespace).spec.replicas or 0)

    # While the curve comes true, no headroom: the service holds its curve.
    wait_for(lambda: gauge(extender.get("/metrics"), "gpuroster_realtime_headroom_gpus", svc)
             == 0 and replicas() == 2, timeout=10 * STEP, what="the service on its curve")
    text = extender.get("/metrics")
    assert gauge(text, "gpuroster_realtime_service_level_objective", svc) == 0.99
    assert gauge(text, "gpuroster_realtime_service_level", svc) in (None, 1.0)
    # Monitoring now reports 5 GPUs of demand from this step on, against a curve of 2.
    since = int(extender.get("/plan")["step"])
    core.patch_namespaced_config_map("chat-demand", namespace, {"data": {
        "observed": json.dumps([2] * since + [5] * 1000)}})
    room = wait_for(
        lambda: (h if (h := gauge(extender.get("/metrics"), "gpuroster_realtime_headroom_gpus",
                                  svc)) else None),
        timeout=12 * STEP, what="headroom after demand ran above the forecast")
    assert room >= 2, room
    wait_for(lambda: replicas() >= 2 + room or None, timeout=6 * STEP,
             what="replicas for the forecast and its headroom")
    level = gauge(extender.get("/metrics"), "gpuroster_realtime_service_level", svc)
    assert level is not None and level < 0.99, level
    # The plan view says why the service holds more than its forecast.
    shown = wait_for(lambda: (v if (v := extender.get("/plan")["services"][svc])["headroom"]
                              >= 2 else None), timeout=4 * STEP, what="headroom in /plan")
    assert shown["service_level_objective"] == 0.99 and shown["forecast"][0] == 2, shown
    print(f"[e2e] headroom {room} GPUs after step {since}; service level {level:.3f}")


def test_bad_annotations_get_an_event_and_leave_the_rest_alone(
        core: Any, namespace: str, extender: Extender) -> None:
    bad = objects.pod("bad", gpus=2, runtime="30s",
                      annotations={"gpuroster.io/workload": "fishing"})
    core.create_namespaced_pod(namespace, bad)
    odd = gang_pods(core, namespace, "odd", 3, 2, runtime="30s", duration="30s")
    good = gang_pods(core, namespace, "good", 1, 2, runtime="30s", duration="30s")
    wait_for(lambda: all_bound(core, namespace, good), 30, "the good pod")

    def warned(pod: str, text: str) -> bool:
        return any(e.type == "Warning" and text in (e.message or "")
                   for e in events_for(core, namespace, pod))

    wait_for(lambda: warned("bad", "unknown workload type"), 20, "an Event on the bad pod")
    wait_for(lambda: warned(odd[0], "power of two"), 20, "an Event on the odd gang")
    assert not core.read_namespaced_pod("bad", namespace).spec.node_name
    assert not any(p.spec.node_name for p in pods_of(core, namespace, odd))
    cond = [c for c in core.read_namespaced_pod("bad", namespace).status.conditions or []
            if c.type == "gpuroster.io/Planned"]
    assert cond and cond[0].status == "False" and "fishing" in cond[0].message


@pytest.mark.parametrize(("verb", "body", "status", "needle"), [
    ("filter", b"{not json", 400, "malformed JSON"),
    ("filter", b"", 400, "empty request body"),
    ("filter", b"[]", 400, "ExtenderArgs"),
    ("filter", b'{"Pod": {}, "NodeNames": ["a"]}', 400, "metadata.name"),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}}}', 400, "NodeNames or Nodes"),
    ("prioritize", b'{"Pod": 3}', 400, "Pod"),
    ("bind", b'{"PodName": "p"}', 400, "PodNamespace"),
], ids=["garbage", "empty", "array", "no-name", "no-nodes", "pod-not-object", "bind-missing"])
def test_malformed_bodies_get_400_with_a_clear_message(
        extender: Extender, verb: str, body: bytes, status: int, needle: str) -> None:
    code, doc = extender.post(verb, body)
    assert code == status
    assert needle in doc["Error"]
    assert extender.get("/healthz") == "ok"


def test_restart_mid_run_loses_moves_or_readmits_nothing(
        core: Any, namespace: str, extender: Extender) -> None:
    nodes = len(core.list_node(label_selector=objects.TOPOLOGY_ORDER_LABEL).items)
    first = gang_pods(core, namespace, "first", nodes, 8, runtime="12s", duration="14s")
    wait_for(lambda: all_bound(core, namespace, first), 30, "the first gang")
    second = gang_pods(core, namespace, "second", 2, 4, runtime="10s", duration="12s")
    before = {p.metadata.name: (dict(p.metadata.annotations), p.spec.node_name)
              for p in pods_of(core, namespace, first)}
    time.sleep(STEP)
    extender.stop(hard=True)
    time.sleep(STEP)
    extender.start()
    time.sleep(2 * STEP)  # a negative check: two rounds of the restarted extender
    after = {p.metadata.name: (dict(p.metadata.annotations), p.spec.node_name)
             for p in pods_of(core, namespace, first)}
    assert after == before, "the running gang was touched by the restart"
    # The second gang has no room while the first runs (12 s); on a machine slow enough
    # that the first is done by now, its binding is right: read the first after it.
    placed = [p.spec.node_name for p in pods_of(core, namespace, second) if p.spec.node_name]
    running = all(p.status.phase == "Running" for p in pods_of(core, namespace, first))
    assert not (placed and running), f"the second gang bound on {placed} beside the first"
    pods = wait_for(lambda: all_bound(core, namespace, second), 60, "the second gang")
    assert admitted_at(pods[0]) >= max(admitted_at(p) for p in pods_of(core, namespace, first))
    # The Event follows the admission in the same round, and kube-scheduler may bind the
    # pods in between: wait for it, then a step more to see no second admission.
    def told(name: str) -> list[Any]:
        return [e for e in events_for(core, namespace, name) if e.reason == "Admitted"]
    wait_for(lambda: all(told(name) for name in second), 20, "the Admitted Events")
    time.sleep(2 * STEP)
    for name in second:
        assert len(told(name)) == 1, [e.message for e in told(name)]
    assert len({p.spec.node_name for p in pods}) == 1


def test_two_replicas_only_the_leader_commits_and_a_follower_takes_over(
        cluster: Cluster, core: Any, namespace: str, tmp_path: Path) -> None:
    from extender.localcluster import free_port

    lease = {"GPUROSTER_LEADER_ELECT": "true", "GPUROSTER_LEASE_NAMESPACE": namespace,
             "GPUROSTER_LEASE_NAME": "gpuroster-e2e"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    a = Extender(cluster, namespace, tmp_path / "a", POD_NAME="replica-a", **lease)
    a.start()
    b = Extender(cluster, namespace, tmp_path / "b", POD_NAME="replica-b",
                 GPUROSTER_PORT=str(free_port()), **lease)
    b.url = f"http://127.0.0.1:{b.env['GPUROSTER_PORT']}"
    c: Extender | None = None
    try:
        b.start()
        first = gang_pods(core, namespace, "one", 2, 2, runtime="60s", duration="60s")
        wait_for(lambda: all_bound(core, namespace, first), 40, "the first gang")
        assert "admitted gang" in a.log() and "admitted gang" not in b.log()
        a.stop(hard=True)  # the leader dies; its Lease runs out (15 s), b takes over
        t0 = time.time()
        second = gang_pods(core, namespace, "two", 1, 4, runtime="60s", duration="60s")
        wait_for(lambda: all(BLOCK in (p.metadata.annotations or {})
                             for p in pods_of(core, namespace, second)), 40,
                 "the follower to take over and admit")
        took = time.time() - t0
        # The leader logs an admission after writing it: wait for the line, not the write.
        wait_for(lambda: f"admitted gang {namespace}/two" in b.log(), 10,
                 "the follower's log line for the admission of 'two'")
        assert "became leader" in b.log()
        # kube-scheduler only calls the extender port: a new follower there binds it
        c = Extender(cluster, namespace, tmp_path / "c", POD_NAME="replica-c", **lease)
        c.start()
        wait_for(lambda: all_bound(core, namespace, second), 30, "the second gang")
        assert "admitted gang" not in c.log()
        def told() -> list[Any]:
            return [e for e in events_for(core, namespace, second[0]) if e.reason == "Admitted"]
        wait_for(told, 20, "the Admitted Event")
        time.sleep(2)
        assert len(told()) == 1
        print(f"[e2e] follower admitted {took:.1f}s after the leader was killed")
    finally:
        for ext in (a, b, c):
            if ext is not None:
                ext.stop()


def test_the_leader_lease_goes_with_the_deployment_that_owns_it(
        cluster: Cluster, api_client: Any, namespace: str, tmp_path: Path) -> None:
    """As the chart runs it (GPUROSTER_LEASE_OWNER: its own Deployment): the Lease is
    owned by that Deployment, so deleting it (`helm uninstall`) deletes the Lease, and
    a replica still running then does not write a new one."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    apps = client.AppsV1Api(api_client)
    leases = client.CoordinationV1Api(api_client)
    owner = apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="gpuroster"),
        spec=client.V1DeploymentSpec(
            replicas=0, selector=client.V1LabelSelector(match_labels={"app": "owner"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "owner"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="none")])))))
    assert owner.metadata is not None  # a created object comes back with its metadata
    ext = Extender(cluster, namespace, tmp_path, GPUROSTER_LEADER_ELECT="true",
                   GPUROSTER_LEASE_NAMESPACE=namespace, GPUROSTER_LEASE_NAME="gpuroster-e2e",
                   GPUROSTER_LEASE_OWNER="gpuroster")

    def lease() -> Any:
        try:
            return leases.read_namespaced_lease("gpuroster-e2e", namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    ext.start()
    try:
        held = wait_for(lambda: (x := lease()) and x.spec.holder_identity and x, 20,
                        "the replica to take the Lease")
        refs = [(r.kind, r.name, r.uid) for r in held.metadata.owner_references or []]
        assert refs == [("Deployment", "gpuroster", owner.metadata.uid)], refs
        apps.delete_namespaced_deployment("gpuroster", namespace)
        t0 = time.monotonic()
        wait_for(lambda: lease() is None, 30, "the garbage collector to delete the Lease")
        gone = time.monotonic() - t0
        time.sleep(3 * 2.0)  # three election retries of the replica still running
        assert lease() is None, "the running replica wrote the Lease again"
        assert ext.proc is not None and ext.proc.poll() is None
        print(f"[e2e] the Lease went {gone:.1f}s after its Deployment; not written again")
    finally:
        ext.stop()


def test_full_node_objects_over_https_with_a_second_cluster(cluster: Cluster,
                                                            tmp_path: Path) -> None:
    # nodeCacheCapable: false (whole Node objects, as Go writes them) and enableHTTPS.
    with Cluster(nodes=2, node_cache_capable=False, extender_tls=True,
                 bin_dir=cluster.bin_dir) as other:
        assert other.pki is not None
        core = other.core()
        ns = "full-nodes"
        other.create_namespace(ns)
        ext = Extender(other, ns, tmp_path,
                       GPUROSTER_TLS_CERT_FILE=str(other.pki.extender.cert),
                       GPUROSTER_TLS_KEY_FILE=str(other.pki.extender.key))
        ext.start()
        try:
            names = gang_pods(core, ns, "g", 2, 4, runtime="60s", duration="60s")
            pods = wait_for(lambda: all_bound(core, ns, names), 30, "the gang to bind")
            assert len({p.spec.node_name for p in pods}) == 1
            m = ext.get("/metrics")
            fast = [ln for ln in m.splitlines()
                    if ln.startswith('gpuroster_extender_nodelist_parses_total{path="fast"}')]
            assert fast and float(fast[0].split()[-1]) > 0, "Go's NodeList missed the fast path"
            assert 'gpuroster_extender_nodelist_parses_total{path="full"}' not in m
        finally:
            ext.stop()


def test_batch_work_fills_the_troughs_an_inference_service_leaves(
        core: Any, api_client: Any, namespace: str, extender: Extender) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    nodes = len(core.list_node(label_selector=objects.TOPOLOGY_ORDER_LABEL).items)
    total = nodes * 8
    peak = total // 2
    # Peak for 3 steps, trough for 9: a reservation at the peak would leave half the GPUs.
    # Steps count from the extender's start (its epoch), so the peak is now. The gangs last 6 steps:
    # two fit beside the peak, and the other two can only start in the trough, while the
    # first two still run. Created up to 6 steps late, all four still overlap in the
    # trough. (With 3-step gangs the plan may rightly run them two by two, and whether
    # four were ever bound at once was down to KWOK's timing.)
    curve = [peak] * 3 + [0] * 9
    core.create_namespaced_config_map(namespace, {
        "metadata": {"name": "demand"}, "data": {"curve": json.dumps(curve)}})
    apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(
        objects.inference_deployment("svc", {
            "gpuroster.io/demand-configmap": "demand", "gpuroster.io/max-swap": str(peak),
            "gpuroster.io/priority": "critical"})))
    # One node's worth of batch per gang, as many gangs as the cluster has nodes.
    gangs = [gang_pods(core, namespace, f"b{i}", 1, 8, runtime="12s", duration="12s")
             for i in range(nodes)]
    most_batch = most_service = 0
    deadline = time.monotonic() + len(curve) * STEP * 2.5
    while time.monotonic() < deadline:
        running = [p for p in core.list_namespaced_pod(namespace).items
                   if p.spec.node_name and p.status.phase in ("Pending", "Running")
                   and not p.metadata.deletion_timestamp]
        batch = sum(8 for p in running if p.metadata.name.startswith("b"))
        service = sum(1 for p in running if p.metadata.name.startswith("svc"))
        most_batch = max(most_batch, batch)
        most_service = max(most_service, service)
        assert batch + service <= total
        if (all(all_bound(core, namespace, g) for g in gangs) and most_batch > total - peak
                and most_service >= peak):
            break
        time.sleep(STEP / 4)
    print(f"[e2e] service peak {most_service} GPUs; "
          f"most batch GPUs running at once: {most_batch} of {total} "
          f"(a reservation at the service's peak leaves {total - peak})")
    assert most_service >= peak, f"the service never reached its peak ({most_service})"
    assert most_batch > total - peak, "batch never used the GPUs the service left in its trough"
    assert all(all_bound(core, namespace, g) for g in gangs)


def test_a_starving_job_only_a_trade_starts_gets_the_cluster_despite_a_stream(
        core: Any, api_client: Any, cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """A whole-cluster gang beside a service that never idles starts only by a trade, and a
    1-GPU job arriving every step keeps some GPU of the cluster busy: a trade that waits for
    a free block never comes. Past the starvation bound (3 steps here) the plan drains the
    cluster for it: newcomers stop starting where they would run into its start, the
    service's replica is evicted, and the gang binds on every node."""
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    nodes = len(core.list_node(label_selector=objects.TOPOLOGY_ORDER_LABEL).items)
    ext = Extender(cluster, namespace, tmp_path, GPUROSTER_MAX_WAIT_STEPS="3")
    try:
        ext.start()
        core.create_namespaced_config_map(namespace, {
            "metadata": {"name": "demand"}, "data": {"curve": json.dumps([1] * 500)}})
        apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(
            objects.inference_deployment("svc", {
                "gpuroster.io/demand-configmap": "demand", "gpuroster.io/max-swap": "2",
                "gpuroster.io/priority": "low"})))
        small = 0

        def arrive() -> None:  # one 1-GPU job of 3 steps
            nonlocal small
            gang_pods(core, namespace, f"s{small}", 1, 1, runtime=f"{3 * STEP:g}s",
                      duration=f"{3 * STEP:g}s", priority="high")
            small += 1

        for _ in range(3):  # the stream is running before the wide gang comes
            arrive()
            time.sleep(STEP)
        # Priority 8 on every GPU (8 x 8 a node a step) against 1 GPU short at 8 x 1.
        wide = gang_pods(core, namespace, "wide", nodes, 8, runtime=f"{3 * STEP:g}s",
                         duration=f"{3 * STEP:g}s", priority="critical")
        came = time.monotonic()
        reasons: set[str] = set()
        bound = None
        while time.monotonic() - came < 30 * STEP:
            arrive()
            job = ext.get("/plan")["jobs"].get(f"{namespace}/wide") or {}
            if job.get("reason"):
                reasons.add(job["reason"])
            bound = all_bound(core, namespace, wide)
            if bound:
                break
            time.sleep(STEP)
        waited = time.monotonic() - came
        print(f"[e2e] the wide gang ({nodes * 8} GPUs) "
              f"{'bound' if bound else 'still not bound'} {waited:.1f}s "
              f"({waited / STEP:.1f} steps) after it came, beside {small} small jobs; "
              f"its reasons: {sorted(reasons)}")
        assert bound, f"the wide gang never bound in 30 steps; reasons {sorted(reasons)}"
        assert any("waited past the starvation bound" in r for r in reasons), reasons
        assert {p.spec.node_name for p in bound} == {
            n.metadata.name for n in core.list_node(
                label_selector=objects.TOPOLOGY_ORDER_LABEL).items}
    finally:
        ext.stop()


def test_a_gang_that_fits_beside_the_curve_only_later_trades_to_start_now(
        core: Any, api_client: Any, cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """A whole-cluster gang of 6 steps beside a service that wants 1 GPU from 4 to 9 steps
    from now and none after: beside the curve it fits only from step +10. Starting now is
    worth more (priority 8 on every GPU for 6 steps against at most 3 GPU-steps short at
    8 x 1), so the plan trades: the gang binds on every node before the demand comes, and
    the service stays at 0 replicas while its curve asks for 1."""
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    nodes = len(core.list_node(label_selector=objects.TOPOLOGY_ORDER_LABEL).items)
    ext = Extender(cluster, namespace, tmp_path)
    try:
        ext.start()
        s = int(ext.get("/plan")["step"])
        curve = [1 if s + 4 <= k < s + 10 else 0 for k in range(400)]  # cyclic from the epoch
        core.create_namespaced_config_map(namespace, {
            "metadata": {"name": "demand"}, "data": {"curve": json.dumps(curve)}})
        apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(
            objects.inference_deployment("svc", {
                "gpuroster.io/demand-configmap": "demand", "gpuroster.io/max-swap": "2",
                "gpuroster.io/priority": "low"})))
        wide = gang_pods(core, namespace, "wide", nodes, 8, runtime=f"{6 * STEP:g}s",
                         duration=f"{6 * STEP:g}s", priority="critical")
        bound = wait_for(lambda: all_bound(core, namespace, wide), 30,
                         "the wide gang bound")
        at = int(ext.get("/plan")["step"]) - s
        print(f"[e2e] the wide gang ({nodes * 8} GPUs) bound in step +{at}; the service's "
              "demand comes at +4, and beside it the gang's first start is +10")
        assert at < 4, f"bound in step +{at}: it waited instead of trading"
        assert {p.spec.node_name for p in bound} == {
            n.metadata.name for n in core.list_node(
                label_selector=objects.TOPOLOGY_ORDER_LABEL).items}
        # It holds every GPU until at least step +6: the service gives its GPU up there.
        seen: list[tuple[int, int]] = []
        while (k := int(ext.get("/plan")["step"]) - s) < 6:
            rep = int(apps.read_namespaced_deployment(name="svc",
                                                      namespace=namespace).spec.replicas or 0)
            if int(ext.get("/plan")["step"]) - s == k:
                seen.append((k, rep))
            time.sleep(STEP / 4)
        print(f"[e2e] (step, replicas): {seen}")
        assert [r for k, r in seen if k in (4, 5)] and all(r == 0 for k, r in seen if k >= 4)
    finally:
        ext.stop()


def test_a_pods_priority_class_value_maps_to_a_configured_class(
        core: Any, api_client: Any, cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    """The real API server copies the PriorityClass's value into spec.priority; with
    GPUROSTER_PRIORITY_CLASS_VALUES the pod gets the class of that value, and a real-time
    Deployment whose pod template names the PriorityClass (no value there) gets it too,
    read from the PriorityClass itself."""
    from kubernetes import client

    sched = client.SchedulingV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    pc = f"e2e-{namespace}"[:63]  # cluster-scoped: unique per test
    sched.create_priority_class({"metadata": {"name": pc}, "value": 5000})  # type: ignore[arg-type]
    ext = Extender(cluster, namespace, tmp_path,
                   GPUROSTER_PRIORITY_CLASS_VALUES='{"critical": 1000000, "high": 1000}')
    try:
        ext.start()
        body = objects.pod("valued", gpus=1, runtime="30s",
                           annotations={"gpuroster.io/expected-duration": "30s"})
        body["spec"]["priorityClassName"] = pc
        core.create_namespaced_pod(namespace, body)
        assert core.read_namespaced_pod("valued", namespace).spec.priority == 5000
        job = wait_for(lambda: ext.get("/plan")["jobs"].get(f"{namespace}/pod:valued"), 20,
                       "the pod in the plan")
        assert job["priority"] == 4.0  # high: 1000 <= 5000 < 1000000
        core.create_namespaced_config_map(namespace, {
            "metadata": {"name": "valued-demand"}, "data": {"curve": "[1]"}})
        dep = objects.inference_deployment(
            "valued-svc", {"gpuroster.io/demand-configmap": "valued-demand"})
        dep["spec"]["template"]["spec"]["priorityClassName"] = pc
        apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(dep))
        svc = wait_for(lambda: ext.get("/plan")["services"].get(f"{namespace}/valued-svc"), 20,
                       "the Deployment in the plan")
        assert svc["priority"] == 4.0, svc  # the PriorityClass's 5000, as for its pods
    finally:
        ext.stop()
        sched.delete_priority_class(pc)

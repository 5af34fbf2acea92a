"""Faults against the real control plane: what breaks, what gpuroster keeps.

These tests stop and kill control-plane components, so they run on a control
plane of their own (module-scoped `faulty`), not the shared session cluster.
Each prints what it tried and what it saw.

1. `gpuroster serve` SIGKILLed and restarted at random moments of a scenario
   replay, several times: the grid read back is legal, every gang ran once on
   one block (annotations are the durable record), and the plan resumes
   within 10 s of each restart.
2. kube-apiserver stopped for 30 s mid-run: the extender answers filter from
   its cache (the admitted pod passes on its node, a waiting pod nowhere),
   its watches resume, and the run completes with the decisions it had.
3. Two replicas with leader election on one Lease: only the leader commits;
   killing it hands over; no gang is admitted twice. Stopped gracefully, the
   leader releases the Lease and the follower takes over at once.
4. kube-scheduler restarted while gangs bind: no pod bound twice.
5. A node NotReady, then deleted, under a running gang: the plan stops
   counting its GPUs, the gang is reported, nothing else moves.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pytest

from e2e import clusters
from extender.localcluster import Cluster, free_port, objects, processes
from extender.localcluster.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
BLOCK = "gpuroster.io/block"
ADMITTED_AT = "gpuroster.io/admitted-at"
NODE = "gpuroster.io/node"
STEP = 2.0


@pytest.fixture(scope="module")
def faulty(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A control plane of this module's own: these tests stop its components."""
    with clusters.running(request, "faults", nodes=0) as c:
        yield c


@pytest.fixture
def ns(faulty: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = re.sub(r"[^a-z0-9-]", "", request.node.name.lower().replace("_", "-"))[:40]
    name = f"{name.strip('-')}-{random.randrange(16**5):05x}"
    core = faulty.core()
    faulty.create_namespace(name)
    yield name
    if faulty.running():
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)


@pytest.fixture
def gpu_nodes(faulty: Cluster) -> Iterator[list[str]]:
    """Two fake 8-GPU nodes for the test; removed after it."""
    names = faulty.add_nodes(2)
    yield names
    for n in faulty.node_names():
        faulty.remove_node(n)


# --- a gpuroster serve process ----------------------------------------------------------


class Serve:
    """`gpuroster serve` on `port` (the scheduler's extender port unless told otherwise)."""

    def __init__(self, cluster: Cluster, namespace: str, log: Path, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.port = port or cluster.extender_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.env = {
            "GPUROSTER_KUBECONFIG": str(cluster.kubeconfig), "GPUROSTER_PORT": str(self.port),
            "GPUROSTER_BIND_ADDRESS": "127.0.0.1", "GPUROSTER_STEP_SECONDS": str(STEP),
            "GPUROSTER_NAMESPACES": namespace, "GPUROSTER_LOG_LEVEL": "INFO", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def identity(self) -> str:
        assert self.proc is not None
        return f"{socket.gethostname()}-{self.proc.pid}"

    def start(self, wait: str = "/readyz", timeout: float = 30.0) -> float:
        """Start; seconds until `wait` answers 200."""
        t0 = time.monotonic()
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "extender.cli", "serve"],
                                         cwd=REPO, env={**os.environ, **self.env}, stdout=out,
                                         stderr=subprocess.STDOUT)
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpuroster serve exited:\n{self.log()}")
            if self.status(wait) == 200:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise RuntimeError(f"gpuroster serve: {wait} not 200 after {timeout}s:\n{self.log()}")

    def kill(self) -> None:
        if self.proc is not None:
            processes.stop_process(self.proc, hard=True)

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop_process(self.proc)

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=5) as r:
            return str(r.read().decode())

    def post(self, verb: str, body: dict[str, Any]) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + "/" + verb, data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status), json.loads(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), json.loads(e.read() or b"{}")

    def metric(self, name: str, **labels: str) -> float:
        total = 0.0
        for line in self.get("/metrics").splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            if head.split("{")[0] != name:
                continue
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""


class Serves(Protocol):
    def __call__(self, log: str = "serve.log", *, port: int | None = None,
                 env: dict[str, str] | None = None, start: bool = True) -> Serve: ...


@pytest.fixture
def serve(faulty: Cluster, ns: str, tmp_path: Path) -> Iterator[Serves]:
    """Makes a Serve on the test's namespace, logging to tmp_path/``log``, started unless
    told otherwise; every one is stopped after the test."""
    made: list[Serve] = []

    def make(log: str = "serve.log", *, port: int | None = None,
             env: dict[str, str] | None = None, start: bool = True) -> Serve:
        s = Serve(faulty, ns, tmp_path / log, port=port, env=env)
        made.append(s)
        if start:
            s.start()
        return s

    yield make
    for s in made:
        s.stop()


# --- helpers ---------------------------------------------------------------------------


def gang(core: Any, ns: str, name: str, pods: int, gpus: int, *, runtime: str,
         duration: str, priority: str = "normal") -> list[str]:
    names = []
    for i in range(pods):
        notes = {"gpuroster.io/gang": name, "gpuroster.io/gang-size": str(pods),
                 "gpuroster.io/expected-duration": duration, "gpuroster.io/workload": "training",
                 "gpuroster.io/priority": priority}
        core.create_namespaced_pod(ns, objects.pod(f"{name}-{i}", gpus=gpus, runtime=runtime,
                                                   annotations=notes))
        names.append(f"{name}-{i}")
    return names


def bound(core: Any, ns: str, names: list[str]) -> list[Any] | None:
    pods = [core.read_namespaced_pod(n, ns) for n in names]
    return pods if all(p.spec.node_name for p in pods) else None


Record = dict[str, tuple[str | None, str | None, str | None]]  # pod -> block, admitted, node


def record(core: Any, ns: str) -> Record:
    """pod -> (block, admitted-at, node): the durable record of admission and binding."""
    out = {}
    for p in core.list_namespaced_pod(ns).items:
        a = p.metadata.annotations or {}
        out[p.metadata.name] = (a.get(BLOCK), a.get(ADMITTED_AT), p.spec.node_name)
    return out


def admitted_events(core: Any, ns: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in core.list_namespaced_event(ns).items:
        if e.reason == "Admitted":
            out[e.involved_object.name] = out.get(e.involved_object.name, 0) + 1
    return out


def check_record(core: Any, ns: str, history: list[Record]) -> None:
    """Every pod admitted at most once, never moved; every gang on one block, at one time."""
    final = history[-1]
    for pod in final:
        seen = [h[pod] for h in history if pod in h]
        admitted = {s[:2] for s in seen if s[0]}
        assert len(admitted) <= 1, f"{pod} admitted more than once: {sorted(admitted)}"
        nodes = {s[2] for s in seen if s[2]}
        assert len(nodes) <= 1, f"{pod} moved between nodes: {nodes}"
        if any(s[2] for s in seen):
            assert any(s[0] for s in seen), f"{pod} bound without an admission (outside the plan)"
    gangs: dict[str, set[tuple[str | None, str | None]]] = {}
    for pod, (blk, at, _) in final.items():
        if blk:
            gangs.setdefault(pod.rsplit("-", 1)[0], set()).add((blk, at))
    for g, adm in gangs.items():
        assert len(adm) == 1, f"gang {g} split over admissions {adm}"
    events = admitted_events(core, ns)
    twice = {p: n for p, n in events.items() if n > 1}
    assert not twice, f"Admitted events more than once: {twice}"


# --- 1. extender SIGKILLed and restarted during a replay -------------------------------


def test_extender_killed_and_restarted_during_a_replay_loses_nothing(
        faulty: Cluster, tmp_path: Path) -> None:
    from extender import replay
    from extender.planner import legality
    from extender.replay.peers.extender import ExtenderPeer
    from tests.builders import scenario

    rng = random.Random(int(os.environ.get("GPUROSTER_FAULT_SEED", "7")))
    S = 3.0
    b = scenario("kill-restart").nodes(4, 8).window(18, horizon=12)
    for i, (gpus, d, arrival, prio) in enumerate([
            (8, 3, 0, 2), (16, 3, 0, 4), (4, 2, 1, 1), (4, 4, 1, 2), (2, 2, 2, 8), (8, 3, 3, 1),
            (16, 2, 4, 2), (2, 3, 5, 4), (4, 2, 6, 1), (8, 2, 7, 8), (32, 2, 8, 2),
            (4, 3, 9, 4)]):
        b.job(f"j{i}", gpus=gpus, d=d, arrival=arrival, priority=prio)
    s = b.build()
    # one kill in each third of steps 1..12, so one restart is over before the next kill
    kill_steps = [rng.randrange(k, k + 2) for k in (1, 4, 7, 10)]
    namespace = f"faults-replay-{rng.randrange(16**4):04x}"
    core = faulty.core()
    history: list[Record] = []
    restarts: list[dict[str, float]] = []
    threads: list[threading.Thread] = []

    errors: list[str] = []

    def fault(control: ExtenderPeer, t: int) -> None:
        try:
            kill_and_restart(control, t)
        except Exception as e:  # noqa: BLE001 - reported by the test, not lost in a thread
            errors.append(f"step {t + 1}: {type(e).__name__}: {e}")

    def kill_and_restart(control: ExtenderPeer, t: int) -> None:
        time.sleep(rng.uniform(0.0, S))  # a random moment of the next step
        control.kill_extender()
        killed = time.monotonic()
        time.sleep(rng.uniform(0.2, 1.5))
        restarted = time.monotonic()
        healthy = control.start_extender()
        url = f"http://127.0.0.1:{faulty.extender_port}"
        steps0 = None
        while time.monotonic() - restarted < 30:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        ready = time.monotonic() - restarted
        # the next committed step: the step gauge moving past the one it resumed on
        with urllib.request.urlopen(url + "/plan", timeout=2) as r:
            steps0 = json.loads(r.read()).get("step")
        while time.monotonic() - restarted < 30:
            with urllib.request.urlopen(url + "/plan", timeout=2) as r:
                if json.loads(r.read()).get("step") != steps0:
                    break
            time.sleep(0.05)
        restarts.append({"step": t + 1, "down": restarted - killed, "healthz": healthy,
                         "readyz": ready, "next_commit": time.monotonic() - restarted})

    def on_step(t: int, control: ExtenderPeer) -> None:
        history.append(record(core, namespace))
        if t in kill_steps:
            th = threading.Thread(target=fault, args=(control, t))
            th.start()
            threads.append(th)
        if t == s.duration_steps - 1:
            check_record(core, namespace, history)
            for th in threads:
                th.join(30)

    print(f"[faults] replay {s.name}: {len(s.jobs)} gangs on {s.cluster.nodes}x"
          f"{s.cluster.gpus_per_node} GPUs, {s.duration_steps} steps of {S:g}s; SIGKILL in "
          f"steps {[k + 1 for k in kill_steps]}")
    rep = replay.play(s, "gpuroster", str(faulty.kubeconfig), faulty.extender_port,
                      step_seconds=S, namespace=namespace, work_dir=tmp_path,
                      on_step=on_step)
    for r in restarts:
        print(f"[faults]   kill in step {r['step']:.0f}: down {r['down']:.1f}s, restart -> "
              f"/healthz {r['healthz']:.1f}s, /readyz (first step committed) {r['readyz']:.1f}s, "
              f"next step committed {r['next_commit']:.1f}s")
    illegal = legality.violations(s, rep.grid)
    bad_notes = [n for n in rep.notes if any(w in n for w in (
        "partial gang", "without a", "before its arrival", "no free GPU", "after the last"))]
    print(f"[faults]   read back: {len(rep.starts)}/{len(s.jobs)} gangs ran, "
          f"{len(illegal)} legality violations, notes: {rep.notes}")
    assert not errors, errors
    assert len(restarts) == len(kill_steps), "a restart did not finish"
    assert not illegal, illegal
    assert not bad_notes, bad_notes
    assert sorted(rep.starts) == sorted(j.name for j in s.jobs), "a gang was lost"
    assert all(r["readyz"] <= 10.0 for r in restarts), restarts
    assert all(r["next_commit"] <= 10.0 for r in restarts), restarts


# --- 2. kube-apiserver stopped for 30 s ------------------------------------------------


def test_apiserver_down_for_30s_filter_answers_from_cache_and_watches_resume(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    core = faulty.core()
    ext = serve()
    running = gang(core, ns, "running", 1, 8, runtime="75s", duration="80s")
    pods = wait_for(lambda: bound(core, ns, running), 30, "the running gang")
    on = pods[0].spec.node_name
    waiting = gang(core, ns, "waiting", 2, 8, runtime="10s", duration="10s")
    # The answers during the outage come from what the extender has planned: wait until
    # its plan has the waiting gang (a round after the watch brought it), not a while.
    wait_for(lambda: f"{ns}/waiting" in json.loads(ext.get("/plan")).get("jobs", {}), 30,
             "the extender to plan the waiting gang before the outage")
    before = record(core, ns)
    assert not any(before[p][2] for p in waiting)
    restarts0 = {r: ext.metric("gpuroster_watch_restarts_total", reason=r)
                 for r in ("error", "gone", "resync")}

    def ask(pod: str) -> tuple[int, Any]:
        return ext.post("filter", {"Pod": {"metadata": {"name": pod, "namespace": ns}},
                                   "NodeNames": gpu_nodes, "Nodes": None})

    faulty.stop_process("kube-apiserver")
    down = time.monotonic()
    answers: dict[str, list[Any]] = {"running": [], "waiting": []}
    while time.monotonic() - down < 30:
        for label, pod in (("running", running[0]), ("waiting", waiting[0])):
            code, doc = ask(pod)
            answers[label].append((code, tuple(doc.get("NodeNames") or ()) if code == 200
                                   else doc.get("Error")))
        time.sleep(1.0)
    ready_during = ext.status("/readyz")
    faulty.start_process("kube-apiserver")
    back = time.monotonic()
    print(f"[faults] kube-apiserver down {back - down:.1f}s; /readyz during the outage: "
          f"{ready_during}")
    print(f"[faults]   filter for the running pod during it: "
          f"{sorted(set(answers['running']))} x{len(answers['running'])}")
    print(f"[faults]   filter for the waiting pod during it: "
          f"{sorted(set(answers['waiting']))} x{len(answers['waiting'])}")
    assert all(a == (200, (on,)) for a in answers["running"]), answers["running"]
    assert all(a == (200, ()) for a in answers["waiting"]), answers["waiting"]
    # watches resume: a change made now reaches the extender's plan
    probe = gang(core, ns, "probe", 1, 1, runtime="5s", duration="5s")
    t = wait_for(lambda: f"{ns}/probe" in json.loads(ext.get("/plan")).get("jobs", {}), 60,
                 "the extender to see a pod created after the outage")
    print(f"[faults]   a pod created after the outage is in the plan "
          f"{time.monotonic() - back:.1f}s after the API server came back ({t})")
    wait_for(lambda: bound(core, ns, waiting), 120, "the waiting gang after the outage")
    wait_for(lambda: bound(core, ns, probe), 60, "the probe pod")
    restarts = {r: ext.metric("gpuroster_watch_restarts_total", reason=r) - restarts0[r]
                for r in restarts0}
    informers = 4  # nodes, pods, deployments, configmaps (one namespace)
    print(f"[faults]   watch restarts over the outage by reason: {restarts} "
          f"({informers} informers); relists = 'gone', resumes = 'error'")
    after = record(core, ns)
    assert after[running[0]] == before[running[0]], "the running gang was touched"
    check_record(core, ns, [before, after])
    assert restarts["gone"] <= informers, "a relist storm: more than one relist per informer"
    log = ext.log_path.read_text(errors="replace")
    print(f"[faults]   over the run: {log.count('step failed')} step rounds failed, "
          f"{log.count('watch crashed')} watch crashes, "
          f"{log.count('unexpected error on')} unexpected verb errors")
    assert "watch crashed" not in log, "a watch crashed instead of resuming"
    assert "unexpected error on" not in log, "an extender verb failed during the outage"


# --- 3. two replicas, one Lease --------------------------------------------------------


def lease_holder(faulty: Cluster, ns: str, name: str) -> str | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        lease = client.CoordinationV1Api(faulty.api()).read_namespaced_lease(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    spec: Any = lease.spec
    return str(spec.holder_identity or "") or None


def leader_and_follower(faulty: Cluster, ns: str, serve: Serves) -> tuple[Serve, Serve]:
    """Two replicas on the Lease `gpuroster`: b starts first and leads; a then answers
    kube-scheduler (the extender port) as a follower. Returns (b, a)."""
    env = {"GPUROSTER_LEADER_ELECT": "true", "GPUROSTER_LEASE_NAMESPACE": ns,
           "GPUROSTER_LEASE_NAME": "gpuroster"}
    b = serve("b.log", port=free_port(), env=env)
    a = serve("a.log", env=env, start=False)
    wait_for(lambda: lease_holder(faulty, ns, "gpuroster") == b.identity, 20, "b to lead")
    a.start()
    return b, a


def test_two_replicas_only_the_leader_commits_and_a_killed_leader_hands_over(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    core = faulty.core()
    b, a = leader_and_follower(faulty, ns, serve)
    first = gang(core, ns, "first", 2, 4, runtime="6s", duration="6s")
    pods = wait_for(lambda: bound(core, ns, first), 40, "the first gang (via the follower)")
    assert "admitted gang" in b.log() and "admitted gang" not in a.log(), "the follower committed"
    print(f"[faults] leader {b.identity} admitted 'first'; follower {a.identity} answered the "
          f"scheduler: bound on {sorted({p.spec.node_name for p in pods})}")
    b.kill()
    killed = time.monotonic()
    wait_for(lambda: lease_holder(faulty, ns, "gpuroster") == a.identity, 40,
             "a to take the Lease")
    handover = time.monotonic() - killed
    second = gang(core, ns, "second", 1, 8, runtime="6s", duration="6s")
    wait_for(lambda: bound(core, ns, second), 40, "the second gang (new leader)")
    committed = time.monotonic() - killed
    print(f"[faults]   leader SIGKILLed: Lease handed over in {handover:.1f}s; the new leader "
          f"admitted and bound a new gang {committed:.1f}s after the kill")
    history = [record(core, ns)]
    time.sleep(2 * STEP)
    history.append(record(core, ns))
    check_record(core, ns, history)
    admitted_lines = [ln for ln in (a.log() + b.log()).splitlines() if "admitted gang" in ln]
    print(f"[faults]   admissions logged by both replicas: {len(admitted_lines)} "
          f"(gangs: 2)")
    assert len(admitted_lines) == 2, admitted_lines
    assert handover <= 15.0, f"handover took {handover:.1f}s"


def test_a_leader_stopped_gracefully_hands_over_at_once(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    """SIGTERM (a rolling update, a drain): the leader stops committing, releases the
    Lease, and the follower takes it at its next retry, not after the Lease's 10 s."""
    core = faulty.core()
    b, a = leader_and_follower(faulty, ns, serve)
    b.stop()
    stopped = time.monotonic()
    # a clean exit: uvicorn re-raises the SIGTERM after its graceful shutdown
    assert b.proc is not None and b.proc.returncode in (0, -15), b.log()
    assert "released the lease" in b.log(), b.log()
    wait_for(lambda: lease_holder(faulty, ns, "gpuroster") == a.identity, 20,
             "a to take the released Lease")
    handover = time.monotonic() - stopped
    late = gang(core, ns, "late", 1, 8, runtime="6s", duration="6s")
    wait_for(lambda: bound(core, ns, late), 40, "a gang admitted by the new leader")
    print(f"[faults] leader SIGTERMed: it released the Lease and the follower held it "
          f"{handover:.1f}s after the leader exited (Lease: 10s); the new leader admitted "
          f"and bound a gang {time.monotonic() - stopped:.1f}s after")
    assert handover <= 5.0, f"handover took {handover:.1f}s"


# --- 4. kube-scheduler restarted --------------------------------------------------------


def test_scheduler_restart_mid_run_binds_no_pod_twice(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    core = faulty.core()
    ext = serve()
    names: list[str] = []
    for i in range(4):
        names += gang(core, ns, f"g{i}", 4, 1, runtime="3s", duration="4s")
    time.sleep(0.5)
    faulty.stop_process("kube-scheduler", hard=True)
    down = time.monotonic()
    for i in range(4, 8):
        names += gang(core, ns, f"g{i}", 2, 2, runtime="3s", duration="4s")
    time.sleep(2 * STEP)
    faulty.start_process("kube-scheduler")
    print(f"[faults] kube-scheduler SIGKILLed while 4 gangs bound, 4 more created while down; "
          f"back after {time.monotonic() - down:.1f}s")
    history = [record(core, ns)]

    def done() -> bool:
        history.append(record(core, ns))
        return all(history[-1][n][2] for n in names)

    wait_for(done, 120, "every gang to bind", every=0.5)
    check_record(core, ns, history)
    bound_ok = ext.metric("gpuroster_bindings_total", outcome="bound")
    failed = ext.metric("gpuroster_bindings_total", outcome="failed")
    refused = ext.metric("gpuroster_bindings_total", outcome="refused")
    scheduled: dict[str, int] = {}
    for e in core.list_namespaced_event(ns).items:
        if e.reason == "Scheduled":
            scheduled[e.involved_object.name] = scheduled.get(e.involved_object.name, 0) + 1
    print(f"[faults]   {len(names)} pods: bindings made {bound_ok:.0f}, failed {failed:.0f}, "
          f"refused {refused:.0f}; pods with more than one Scheduled event: "
          f"{ {k: v for k, v in scheduled.items() if v > 1} }")
    assert bound_ok == len(names), (bound_ok, len(names))
    assert all(v == 1 for v in scheduled.values()), scheduled


# --- 5. a node NotReady, then gone, under a running gang ------------------------------


def test_node_not_ready_then_deleted_under_a_gang_is_reported_and_nothing_else_moves(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    core = faulty.core()
    spare = faulty.add_node()  # room for a gang created after the loss
    ext = serve()
    victim = gang(core, ns, "victim", 1, 8, runtime="120s", duration="120s")
    other = gang(core, ns, "other", 2, 4, runtime="120s", duration="120s")
    wait_for(lambda: bound(core, ns, victim + other), 30, "both gangs")
    nodes = {n: core.read_namespaced_pod(n, ns).spec.node_name for n in victim + other}
    bad = nodes[victim[0]]
    assert nodes[other[0]] != bad
    before = record(core, ns)
    gpus0 = wait_for(lambda: ext.metric("gpuroster_gpus"), 10, "the plan's GPU count")
    faulty.set_node_ready(bad, False)
    wait_for(lambda: ext.metric("gpuroster_gpus") == gpus0 - 8, 20,
             "the plan to stop counting the NotReady node's GPUs")
    print(f"[faults] {bad} NotReady under gang 'victim': plan GPUs {gpus0:.0f} -> "
          f"{ext.metric('gpuroster_gpus'):.0f}")

    def reported(reason: str) -> list[str]:
        return [f"{e.reason}: {e.message}" for e in core.list_namespaced_event(ns).items
                if e.involved_object.name == victim[0] and e.reason == reason]

    events = wait_for(lambda: reported("NodeNotReady"), 20,
                      "a NodeNotReady Event on the affected gang's pod")
    print(f"[faults]   reported on {victim[0]}: {events}")
    faulty.remove_node(bad)
    lost = wait_for(lambda: reported("NodeLost"), 20, "a NodeLost Event once the node is gone")
    print(f"[faults]   {bad} deleted: plan GPUs {ext.metric('gpuroster_gpus'):.0f}; {lost}")
    others = [e for e in core.list_namespaced_event(ns).items if e.involved_object.name in other
              and e.reason in ("NodeNotReady", "NodeLost", "Admitted")]
    assert len(others) == len(other), [(e.involved_object.name, e.reason) for e in others]
    after = record(core, ns)
    for p in other:
        assert after[p] == before[p], f"{p} moved or was re-admitted: {before[p]} -> {after[p]}"
    late = gang(core, ns, "late", 1, 4, runtime="5s", duration="5s")
    pods = wait_for(lambda: bound(core, ns, late), 30, "a new gang after the node loss")
    assert pods[0].spec.node_name == spare
    check_record(core, ns, [before, after, record(core, ns)])
    assert ext.status("/healthz") == 200


def test_a_multi_node_gang_that_loses_a_node_keeps_the_gpus_its_other_pod_holds(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    """A 16-GPU gang on two nodes loses one: it is out of the plan, but its pod on the
    other node still runs, so a new 8-GPU gang goes to the third node, not onto it."""
    core = faulty.core()
    third = faulty.add_node()
    serve()
    wide = gang(core, ns, "wide", 2, 8, runtime="300s", duration="300s")
    pods = wait_for(lambda: bound(core, ns, wide), 30, "the 16-GPU gang")
    used = sorted(p.spec.node_name for p in pods)
    spare = next(n for n in gpu_nodes + [third] if n not in used)
    survivor, gone = pods[0], pods[1]
    faulty.remove_node(gone.spec.node_name)

    def reported() -> list[str]:
        return [e.message for e in core.list_namespaced_event(ns).items
                if e.involved_object.name in wide and e.reason == "NodeLost"]

    wait_for(reported, 20, "a NodeLost Event once the node is gone")
    late = gang(core, ns, "late", 1, 8, runtime="5s", duration="5s")
    got = wait_for(lambda: bound(core, ns, late), 30, "a new 8-GPU gang")
    print(f"[faults] {gone.spec.node_name} deleted under a 16-GPU gang: the new 8-GPU gang went "
          f"to {got[0].spec.node_name}; {survivor.spec.node_name} kept for the gang's other pod")
    assert got[0].spec.node_name == spare
    still = core.read_namespaced_pod(survivor.metadata.name, ns)
    assert still.spec.node_name == survivor.spec.node_name and still.status.phase == "Running"


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- 6. a node gone under an admitted gang that never bound ------------------------------


def test_a_gang_whose_node_goes_before_it_binds_is_admitted_again_and_binds_elsewhere(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    core = faulty.core()
    serve()
    faulty.stop_process("kube-scheduler", hard=True)  # admitted, but nobody binds it
    try:
        names = gang(core, ns, "orphan", 2, 4, runtime="30s", duration="30s")

        def admitted_to() -> str | None:
            notes = core.read_namespaced_pod(names[0], ns).metadata.annotations or {}
            return notes.get(NODE)

        first = wait_for(admitted_to, 10 * STEP, "the gang's admission")
        assert not bound(core, ns, names) and not any(
            core.read_namespaced_pod(n, ns).spec.node_name for n in names)
        faulty.remove_node(first)
        second = wait_for(lambda: (n := admitted_to()) != first and n, 10 * STEP,
                          "a second admission on the node that is left")
        print(f"[faults] {first} deleted under gang 'orphan' before it bound: "
              f"admitted again on {second}")
    finally:
        faulty.start_process("kube-scheduler")
    pods = wait_for(lambda: bound(core, ns, names), 60, "the gang to bind after the restart")
    assert {p.spec.node_name for p in pods} == {second}
    assert {(p.metadata.annotations or {}).get(BLOCK, "").split(":")[0] for p in pods} == {
        second}


# --- 7. a real 410 Gone ------------------------------------------------------------------


def test_a_watch_older_than_the_restarted_api_server_gets_410_and_the_informer_relists_once(
        faulty: Cluster, ns: str, gpu_nodes: list[str]) -> None:
    """The informer's 410 path against the real kube-apiserver, not the fake: after a
    restart its watch cache starts at the current revision, so a watch from an older
    resourceVersion is answered 410 Gone; the informer relists once, misses nothing,
    and carries on watching."""
    from extender.adapter import kube, watching

    core = faulty.core()
    client = kube.Client(str(faulty.kubeconfig))
    try:
        inf = watching.Informer(client, "pods", ns, resync_seconds=300, watch_seconds=5)
        inf.relist()
        stale = inf._rv
        core.create_namespaced_pod(ns, objects.pod("while-away"))  # moves the revision on
        faulty.stop_process("kube-apiserver")
        faulty.start_process("kube-apiserver")
        try:
            answer = next(iter(client.watch("pods", ns, stale, 5)), {})
            said = f"{answer.get('type')} event, code {(answer.get('object') or {}).get('code')}"
        except kube.ApiError as e:
            said = f"error status {e.status}"
        print(f"[faults] a watch from before the API server's restart: {said}")
        assert said in ("ERROR event, code 410", "error status 410"), said
        thread = threading.Thread(target=inf.run, daemon=True)  # resumes from `stale`
        thread.start()
        try:
            wait_for(lambda: inf.get(f"{ns}/while-away"), 30, "the pod made while away")
            core.create_namespaced_pod(ns, objects.pod("after"))
            wait_for(lambda: inf.get(f"{ns}/after"), 30, "a pod made after the relist")
        finally:
            inf.stop()
            thread.join(10)
        assert inf.relists == 2, f"{inf.relists} lists: one at the start, one after the 410"
    finally:
        client.close()


# --- 8. a node NotReady under a real-time service ------------------------------------------


def test_a_service_on_a_node_gone_not_ready_keeps_its_replica_count(
        faulty: Cluster, ns: str, gpu_nodes: list[str], serve: Serves) -> None:
    """The GPUs of a NotReady node leave the plan at once. A service's replicas there are
    lost to it, not given up: its count must hold (before, the plan dropped them as swaps
    and, with max_swap 1, scaled the Deployment 2 -> 0), and the plan holds GPUs for it on
    the node that is left. (A move of its pods there costs two swaps per pod: with
    max_swap 1 they stay until Kubernetes evicts them from the NotReady node.)"""
    from kubernetes import client

    core = faulty.core()
    apps = client.AppsV1Api(faulty.api())
    ext = serve()
    core.create_namespaced_config_map(ns, {"metadata": {"name": "chat-demand"},
                                           "data": {"curve": "[2]"}})
    apps.create_namespaced_deployment(ns, client.V1Deployment.model_validate(
        objects.inference_deployment("chat", {
            "gpuroster.io/demand-configmap": "chat-demand", "gpuroster.io/max-swap": "1"})))

    def serving() -> list[str]:
        pods = core.list_namespaced_pod(ns, label_selector="app=chat").items
        return sorted(p.spec.node_name for p in pods if p.spec.node_name
                      and p.metadata.deletion_timestamp is None
                      and p.status.phase == "Running")

    def settled() -> list[str] | None:
        now = serving()
        return now if len(now) == 2 and len(set(now)) == 1 else None

    bad = wait_for(settled, 60, "2 chat replicas on one node")[0]
    faulty.set_node_ready(bad, False)
    counts: list[int] = []
    until = time.monotonic() + 6 * STEP
    while time.monotonic() < until:  # a negative check: never scaled down in 6 steps
        counts.append(int(apps.read_namespaced_deployment("chat", ns).spec.replicas or 0))
        time.sleep(STEP / 4)

    def held() -> list[str]:
        view = json.loads(ext.get("/plan"))
        return sorted(view["nodes"][g // view["gpus_per_node"]]
                      for g, row in enumerate(view["grid"]) if row[0] == f"{ns}/chat")

    print(f"[faults] {bad} NotReady under 2 chat replicas (max_swap 1): Deployment replicas "
          f"over 6 steps {sorted(set(counts))}; the plan holds its GPUs on {held()}")
    assert min(counts) == 2, counts  # not scaled down for the lost node
    # replaced on the node that is left (waited for, not read once: a round may be due)
    wait_for(lambda: (h := held()) and len(h) == 2 and bad not in h, 10 * STEP,
             f"the plan to hold chat's 2 GPUs off the NotReady {bad}")

"""Replay a scenario into a real cluster, in compressed time, and read back what it did.

The cluster decides: the real kube-scheduler calls a `gpuroster serve` process
(policy `gpuroster` or `fifo`) that this module starts on the extender port
kube-scheduler is configured with. This module only plays the world around it:

- one fake GPU node per scenario node (KWOK keeps them Ready);
- each job is submitted as annotated pods (a gang of `gpus / G` whole-node
  pods above G GPUs) at the start of its arrival step; KWOK completes each pod
  after its true duration, measured from when it runs;
- each service is a Deployment whose demand ConfigMap holds the forecast
  curve and the true demand observed so far (fed step by step, as a metrics
  pipeline would); the controller scales it;
- every step, late in the step, the pods are sampled; at the end the grid is
  rebuilt from bindings, admission annotations and the samples.

Time: step t spans [T0 + t*S, T0 + (t+1)*S) on the wall clock, S = step
seconds; the controller gets T0 as its epoch so both count the same steps.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from extender import config
from extender.adapter import annotations as ann
from extender.planner import model

log = logging.getLogger(__name__)

NODE_PREFIX = "bench-node-"
NODE_LEASE_NAMESPACE = "kube-node-lease"
TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
SIMULATED_RUNTIME = "gpuroster.io/simulated-runtime"
BENCH_LABEL = "gpuroster.io/bench"


@dataclass
class Sample:
    step: int
    at: float
    service_pods: dict[str, list[tuple[str, str]]]  # service -> [(pod uid, node)]
    bound_jobs: set[str] = field(default_factory=set)  # jobs whose whole gang is bound
    done_jobs: set[str] = field(default_factory=set)  # jobs whose pods all finished


@dataclass(frozen=True)
class StepView:
    """What the cluster looked like late in one step: for live tables and progress."""

    step: int
    steps: int
    job_gpus: int  # GPUs held by running job pods
    queued_jobs: int  # jobs submitted whose gang is not bound yet
    demand: dict[str, int]  # service -> true demand this step
    replicas: dict[str, int]  # service -> bound pods this step
    gpus: int
    useful: int  # job GPUs + per service min(replicas, demand)
    value: float  # MODEL.md's value of this step


@dataclass
class Replay:
    """What the cluster did, as the replay saw it."""

    scenario: model.Scenario
    policy: str
    t0: float
    step_seconds: float
    grid: np.ndarray
    names: list[str]
    starts: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extender_log: str = ""
    churn: dict[str, list[int]] = field(default_factory=dict)  # service -> pods in+out per step


def pod_churn(samples: list[Sample], services: list[str]) -> dict[str, list[int]]:
    """Per service and step: pods that appeared plus pods that went since the step
    before, by uid: what the swap cap means for pods, which carry no GPU identity."""
    out: dict[str, list[int]] = {}
    for name in services:
        prev: set[str] | None = None
        steps = []
        for sample in samples:
            now = {uid for uid, _ in sample.service_pods.get(name, [])}
            steps.append(0 if prev is None else len(now ^ prev))
            prev = now
        out[name] = steps
    return out


def _api(kubeconfig: str) -> Any:
    return k8s_config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]


def _ts(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def exit_on_termination() -> None:
    """Make SIGTERM and SIGHUP unwind like Ctrl-C, so a replay's `finally` stops its
    extender: in a session of its own, it would otherwise outlive a killed replay and
    retry a control plane that is gone, for ever. Main thread only; a handler the
    caller installed stays."""
    if threading.current_thread() is not threading.main_thread():
        return

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, leave)


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


def job_pods(job: model.Job, g: int, step_minutes: int, namespace: str) -> list[dict[str, Any]]:
    """A job as annotated pods: one pod up to G GPUs, whole-node pods above."""
    per_pod = min(job.gpus, g)
    count = max(1, job.gpus // g) if job.gpus > g else 1
    pods = []
    for i in range(count):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job.name}-{i}",
                    "namespace": namespace,
                    "labels": {BENCH_LABEL: "job", "gpuroster.io/job": job.name},
                    "annotations": {
                        ann.WORKLOAD: job.type,
                        ann.PRIORITY: f"{job.priority:g}",
                        ann.GANG: job.name,
                        ann.GANG_SIZE: str(count),
                        ann.EXPECTED_DURATION: f"{job.estimate_steps * step_minutes}m",
                    },
                },
                "spec": {
                    # held back from kube-scheduler until gpuroster admits the gang
                    "schedulingGates": [{"name": "gpuroster.io/admission"}],
                    "restartPolicy": "Never",
                    "tolerations": [TOLERATION],
                    "containers": [
                        {
                            "name": "work",
                            "image": "registry.invalid/work:1",
                            "resources": {
                                "requests": {ann.GPU_RESOURCE: str(per_pod)},
                                "limits": {ann.GPU_RESOURCE: str(per_pod)},
                            },
                        }
                    ],
                },
            }
        )
    return pods


def service_objects(v: model.Service, namespace: str, window: int) -> tuple[dict[str, Any], ...]:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{v.name}-demand",
            "namespace": namespace,
            "labels": {BENCH_LABEL: "service"},
        },
        "data": {"curve": json.dumps(list(v.forecast[:window])), "observed": "[]"},
    }
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": v.name,
            "namespace": namespace,
            "labels": {BENCH_LABEL: "service"},
            "annotations": {
                ann.WORKLOAD: model.REALTIME_TYPE,
                ann.PRIORITY: f"{v.priority:g}",
                ann.MAX_SWAP: str(v.max_swap),
                ann.DEMAND_CONFIGMAP: f"{v.name}-demand",
            },
        },
        "spec": {
            "replicas": 0,
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
    return cm, dep


class _Extender:
    """`gpuroster serve` as a child process, stopped with its process group."""

    def __init__(
        self,
        kubeconfig: str,
        port: int,
        policy: str,
        S: float,
        t0: float,
        namespace: str,
        horizon: int,
        gpus_per_node: int,
        log_path: Path,
        step_minutes: int = 60,
    ) -> None:
        env = dict(os.environ)
        env.update(
            {
                "GPUROSTER_KUBECONFIG": kubeconfig,
                "GPUROSTER_PORT": str(port),
                "GPUROSTER_BIND_ADDRESS": "127.0.0.1",
                "GPUROSTER_POLICY": policy,
                "GPUROSTER_STEP_SECONDS": f"{S:g}",
                # a step stands for the scenario's step: hours and days keep their meaning
                "GPUROSTER_STEP_MINUTES": str(step_minutes),
                "GPUROSTER_EPOCH": f"{t0:.3f}",
                "GPUROSTER_NAMESPACES": namespace,
                "GPUROSTER_HORIZON_STEPS": str(horizon),
                "GPUROSTER_GPUS_PER_NODE": str(gpus_per_node),
                "GPUROSTER_LOG_LEVEL": "INFO",
            }
        )
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "extender.cli", "serve"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.port = port

    def wait_ready(self, timeout: float = 30.0) -> None:
        import urllib.request

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"gpuroster serve exited ({self.proc.returncode}); log: {self.log_path}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"gpuroster serve not healthy after {timeout}s; log: {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self._log.close()


class ReplayControl:
    """Handed to `replay(on_step=...)`: lets a fault test kill and restart the extender.

    A restarted extender gets the same settings (port, epoch, namespace), so it
    counts the same steps and rebuilds its state from the cluster alone.
    """

    def __init__(self, start: Callable[[int], _Extender]) -> None:
        self._start = start
        self.starts = 1
        self.extender = start(0)
        self.killed = False

    def kill_extender(self) -> None:
        """SIGKILL `gpuroster serve` (its whole process group), no goodbye."""
        proc = self.extender.proc
        self.killed = True  # first: the replay loop must not take this death for a crash
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def start_extender(self, timeout: float = 30.0) -> float:
        """Start a new `gpuroster serve` (log `...-<n>.log`); seconds until /healthz."""
        self.extender.stop()
        started = time.time()
        self.extender = self._start(self.starts)
        self.starts += 1
        self.extender.wait_ready(timeout)
        self.killed = False
        return time.time() - started


def _ensure_namespace(core: Any, ns: str, timeout: float = 30.0) -> None:
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


def _wipe(core: Any, apps: Any, ns: str, timeout: float = 60.0) -> None:
    """An empty namespace and no bench nodes: every replay starts from the same state.

    The bench nodes' leases go too. The next replay's nodes have the same names; a
    lease the garbage collector has not yet removed makes KWOK's lease create for
    the new node fail, the node is never heartbeated, and 50 s in the node
    controller marks it NotReady mid-replay (seen: mixed-control lost 7 points).
    """
    leases: Any = k8s.CoordinationV1Api(core.api_client)
    _ensure_namespace(core, ns)
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


def _wait_nodes_ready(core: Any, count: int, timeout: float = 60.0) -> None:
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


# From submitting the scenario to step 0: the extender starts (about 2 s), syncs and
# scales the services, and their first replicas bind before step 0's sample.
START_SLACK_SECONDS = 5.0


def replay(
    s: model.Scenario,
    policy: str,
    kubeconfig: str,
    extender_port: int,
    *,
    step_seconds: float = 3.0,
    namespace: str = "gpuroster-bench",
    work_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    observe: Callable[[StepView], None] | None = None,
    on_extender: Callable[[int], None] | None = None,
    on_step: Callable[[int, ReplayControl], None] | None = None,
) -> Replay:
    """Run the scenario through the cluster under `policy` and rebuild its grid.

    `on_step(t, control)`, if given, runs late in each step (after the sample):
    fault tests kill and restart the extender through `control`.
    """
    api = _api(kubeconfig)
    core: Any = k8s.CoreV1Api(api)  # typed as Any: plain dict bodies, as the API takes them
    apps: Any = k8s.AppsV1Api(api)
    G, T, S = s.cluster.gpus_per_node, s.duration_steps, step_seconds
    work_dir = work_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    work_dir.mkdir(parents=True, exist_ok=True)
    _wipe(core, apps, namespace)
    for i in range(s.cluster.nodes):
        core.create_node(node_body(i, G))
    _wait_nodes_ready(core, s.cluster.nodes)
    for v in s.services:
        cm, dep = service_objects(v, namespace, T)
        core.create_namespaced_config_map(namespace, cm)
        apps.create_namespaced_deployment(namespace, dep)

    # Room for the extender to start, sync and place the first replicas. Whole
    # milliseconds: the extender gets it as its epoch in that form, and both sides
    # must put an admission right after a boundary in the same step.
    t0 = round(time.time() + START_SLACK_SECONDS, 3)
    log_name = f"extender-{s.name}-{policy}"
    control = ReplayControl(
        lambda n: _Extender(
            kubeconfig,
            extender_port,
            policy,
            S,
            t0,
            namespace,
            s.horizon_steps,
            G,
            work_dir / (f"{log_name}.log" if n == 0 else f"{log_name}-{n}.log"),
            s.step_minutes,
        )
    )
    ext = control.extender
    samples: list[Sample] = []
    notes: list[str] = []
    try:
        ext.wait_ready()
        if time.time() > t0 - 1.0:
            notes.append(f"the extender was ready only {t0 - time.time():.1f} s before step 0")
        by_arrival: dict[int, list[model.Job]] = {}
        for j in s.jobs:
            by_arrival.setdefault(j.arrival_step, []).append(j)
        if on_extender:
            on_extender(extender_port)
        submitted: set[str] = set()
        # What the simulator's plan for step t sees, the boundary plan must see too:
        # the jobs that arrive in step t and those that end with step t-1. Both land
        # in the extender's quiet tail of step t-1, after that step's sample: the
        # extender plans nothing there, so its first plan for step t is the first to
        # see them, as in the simulator.
        tail = config.quiet_tail_seconds(S)
        for t in range(T):
            _sleep_until(t0 + t * S - 0.9 * tail)
            for j in by_arrival.get(t, []):
                submitted.add(j.name)
                for pod in job_pods(j, G, s.step_minutes, namespace):
                    core.create_namespaced_pod(namespace, pod)
            _sleep_until(t0 + t * S + 0.85 * S)
            samples.append(_sample(core, namespace, t, s))
            # This step's true demand, as monitoring recorded it, lands before the next
            # boundary, so the next step's first plan sees every past step (the
            # controller reads `observed` only up to the step it plans, never this one's).
            # Written at the next step's start instead, the boundary plan would see one
            # step less than the re-plan a moment later, and the two would disagree.
            for v in s.services:
                core.patch_namespaced_config_map(
                    f"{v.name}-demand",
                    namespace,
                    {"data": {"observed": json.dumps(list(v.demand[: t + 1]))}},
                )
            _schedule_ends(core, namespace, s, t0, S, first_bound(samples), notes)
            ext = control.extender
            if ext.proc.poll() is not None and not control.killed:
                raise RuntimeError(f"gpuroster serve died at step {t}; log: {ext.log_path}")
            if progress:
                progress(t + 1, T)
            if observe:
                observe(_view(samples[-1], s, submitted, t))
            if on_step:
                on_step(t, control)
        pods = core.list_namespaced_pod(namespace, label_selector=f"{BENCH_LABEL}=job").items
    finally:
        ext = control.extender
        ext.stop()
    extender_log = ext.log_path.read_text(errors="replace")[-4000:]
    names = [j.name for j in s.jobs] + [v.name for v in s.services]
    grid, starts, ends = _rebuild(s, pods, samples, t0, S, notes)
    out = Replay(
        s,
        policy,
        t0,
        S,
        grid,
        names,
        starts,
        ends,
        notes,
        extender_log,
        pod_churn(samples, [v.name for v in s.services]),
    )
    _wipe(core, apps, namespace)
    return out


def _schedule_ends(
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
    so the cluster's steps match the simulator's. That is after the step's sample
    and inside the extender's quiet tail, so the boundary plan sees the job gone,
    as the simulator's does; just past the boundary, the boundary plan would still
    see it running and commit around it. KWOK's pod-complete stage reads the
    RFC 3339 time from the annotation."""
    jobs = {j.name: j for j in s.jobs}
    tail = config.quiet_tail_seconds(S)
    for p in core.list_namespaced_pod(ns, label_selector=f"{BENCH_LABEL}=job").items:
        a = p.metadata.annotations or {}
        name = (p.metadata.labels or {}).get("gpuroster.io/job", "")
        j = jobs.get(name)
        if SIMULATED_RUNTIME in a or j is None or name not in started:
            continue
        end = datetime.fromtimestamp(t0 + (started[name] + j.duration_steps) * S - 0.8 * tail, UTC)
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


def _sleep_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def _sample(core: Any, ns: str, t: int, s: model.Scenario) -> Sample:
    out: dict[str, list[tuple[str, str]]] = {v.name: [] for v in s.services}
    gangs: dict[str, list[bool]] = {}
    finished: dict[str, list[bool]] = {}
    for p in core.list_namespaced_pod(ns, label_selector=BENCH_LABEL).items:
        labels = p.metadata.labels or {}
        if labels.get(BENCH_LABEL) == "job":
            job = labels.get("gpuroster.io/job", "")
            gangs.setdefault(job, []).append(bool(p.spec.node_name))
            phase = p.status.phase if p.status else None
            finished.setdefault(job, []).append(phase in ("Succeeded", "Failed"))
            continue
        app = labels.get("app")
        if app in out and p.spec.node_name and p.metadata.deletion_timestamp is None:
            out[app].append((p.metadata.uid, p.spec.node_name))
    bound = {name for name, members in gangs.items() if members and all(members)}
    done = {name for name, members in finished.items() if members and all(members)}
    return Sample(t, time.time(), out, bound, done)


def _view(sample: Sample, s: model.Scenario, submitted: set[str], t: int) -> StepView:
    jobs = {j.name: j for j in s.jobs}
    running = {n for n in sample.bound_jobs - sample.done_jobs if n in jobs}
    replicas = {v.name: len(sample.service_pods.get(v.name, [])) for v in s.services}
    return StepView(
        step=t,
        steps=s.duration_steps,
        job_gpus=sum(jobs[n].gpus for n in running),
        queued_jobs=len(submitted - sample.bound_jobs),
        demand={v.name: v.demand[t] for v in s.services},
        replicas=replicas,
        gpus=s.cluster.gpus,
        useful=sum(jobs[n].gpus for n in running)
        + sum(min(replicas[v.name], v.demand[t]) for v in s.services),
        value=sum(jobs[n].gpus * jobs[n].priority for n in running)
        + sum(min(replicas[v.name], v.demand[t]) * v.priority for v in s.services),
    )


def first_bound(samples: list[Sample]) -> dict[str, int]:
    """The step each job really started: the first sample with its whole gang bound."""
    out: dict[str, int] = {}
    for sample in samples:
        for name in sample.bound_jobs:
            out.setdefault(name, sample.step)
    return out


def _free_run(grid: np.ndarray, g: int, steps: list[int], at: int) -> int:
    """How many of steps[at:] in a row GPU g is free for."""
    n = 0
    for t in steps[at:]:
        if grid[g, t] != -1:
            break
        n += 1
    return n


def _rebuild(
    s: model.Scenario, pods: list[Any], samples: list[Sample], t0: float, S: float, notes: list[str]
) -> tuple[np.ndarray, dict[str, int], dict[str, int]]:
    """The grid as the cluster ran it: job blocks from admission, services from samples."""
    G, N, T = s.cluster.gpus_per_node, s.cluster.gpus, s.duration_steps
    node_index = {f"{NODE_PREFIX}{i}": i for i in range(s.cluster.nodes)}
    bound_at = first_bound(samples)
    index = {j.name: i for i, j in enumerate(s.jobs)}
    nj = len(s.jobs)
    grid = np.full((N, T), -1, dtype=np.int32)
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    by_job: dict[str, list[Any]] = {}
    for p in pods:
        by_job.setdefault((p.metadata.labels or {}).get("gpuroster.io/job", ""), []).append(p)
    jobs = {j.name: j for j in s.jobs}
    for name, members in sorted(by_job.items()):
        j = jobs.get(name)
        if j is None:
            continue
        a = members[0].metadata.annotations or {}
        bound = [p for p in members if p.spec.node_name]
        if not bound:
            continue
        if len(bound) != len(members):
            notes.append(f"{name}: only {len(bound)} of {len(members)} pods bound (partial gang)")
        label = a.get(ann.BLOCK)
        if not label:
            notes.append(f"{name}: bound without a {ann.BLOCK} annotation")
            continue
        block = ann.parse_block(label, node_index, G)
        if name not in bound_at:
            notes.append(f"{name}: bound after the last sample")
            continue
        start = bound_at[name]
        if a.get(ann.ADMITTED_AT):
            admitted = int(np.floor((_ts(a[ann.ADMITTED_AT]) - t0) / S + 1e-9))
            if admitted != start:
                notes.append(
                    f"{name}: admitted in step {admitted}, its gang bound in step "
                    f"{start} (GPUs still held by pods on their way out)"
                )
        finished = [_finished_at(p) for p in members]
        end = start + j.duration_steps
        if all(f is not None for f in finished):
            observed = int(np.floor((max(f for f in finished if f) - t0) / S + 1e-9))
            if abs(observed - end) > 1:  # finishedAt has whole seconds: +-1 step is noise
                notes.append(f"{name}: ended in step {observed}, its true duration says {end}")
        if start >= T:
            continue
        starts[name], ends[name] = start, end
        if start < j.arrival_step:
            notes.append(f"{name}: admitted in step {start}, before its arrival {j.arrival_step}")
        grid[block.start : block.end, start : min(end, T)] = index[name]
    # Services: Kubernetes counts GPUs per node, not which ones. A pod never changes
    # node, so it is drawn on one GPU of its node that stays free (of job blocks and
    # other service pods) for its whole life, highest first; only where none does
    # is it drawn in runs: from each step, on the GPU that stays free the longest
    # (fewest moves for this pod; a move is bookkeeping, the pod never left).
    lives: dict[str, tuple[int, str, list[int]]] = {}  # uid -> (service, node, steps)
    for sample in samples:
        for k, v in enumerate(s.services):
            for uid, node in sample.service_pods.get(v.name, []):
                lives.setdefault(uid, (k, node, []))[2].append(sample.step)
    for _uid, (k, node, steps) in sorted(lives.items(), key=lambda x: (x[1][2][0], x[0])):
        i = node_index.get(node)
        if i is None:
            continue
        gpus = range(i * G + G - 1, i * G - 1, -1)
        whole = next((g for g in gpus if all(grid[g, t] == -1 for t in steps)), None)
        if whole is not None:
            grid[whole, steps] = nj + k
            continue
        at = 0
        while at < len(steps):
            run = {g: _free_run(grid, g, steps, at) for g in gpus}
            g = max(gpus, key=lambda x: run[x])  # ties: the highest GPU, as above
            if run[g] == 0:
                notes.append(
                    f"{s.services[k].name}: no free GPU on {node} at step {steps[at]} for a pod"
                )
                at += 1
                continue
            grid[g, steps[at : at + run[g]]] = nj + k
            at += run[g]
    return grid, starts, ends


def _finished_at(pod: Any) -> float | None:
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        term = cs.state.terminated if cs.state else None
        if term is not None and term.finished_at is not None:
            return _ts(term.finished_at)
    if pod.status and pod.status.phase == "Succeeded" and pod.status.conditions:
        times = [c.last_transition_time for c in pod.status.conditions if c.last_transition_time]
        if times:
            return max(_ts(x) for x in times)
    return None


@contextmanager
def local_cluster(nodes: int = 0) -> Iterator[tuple[str, int]]:
    """The repo's local control plane (e2e harness), started for the replay and stopped after.

    Yields (kubeconfig, extender_port). Needs a checkout of the repository:
    the harness and its build script live there, not in the package.
    """
    root = Path(__file__).resolve().parents[2]
    if not (root / "e2e" / "cluster.py").exists():
        raise RuntimeError(
            "--cluster local needs the gpuroster repository checkout "
            "(e2e/cluster.py); use --kubeconfig for any other cluster"
        )
    sys.path.insert(0, str(root))
    from e2e import cluster as harness

    c = harness.Cluster(nodes=nodes)
    c.up()
    try:
        yield str(c.kubeconfig), int(c.extender_port)
    finally:
        c.down(remove=True)

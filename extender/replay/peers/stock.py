"""Peer `default`: the stock kube-scheduler, no extender, no queue.

The local control plane's kube-scheduler sends every GPU pod through the
gpuroster extender (`ignorable: false`), so this peer runs a second
kube-scheduler of the same pinned build with one profile, `SCHEDULER_NAME`,
and nothing configured but its client and its retry backoff: default plugins,
default scoring (NodeResourcesFit LeastAllocated), no extenders. The backoff is
the one setting changed, for compressed time: the stock 1 s to 10 s between
retries of an unschedulable pod is nothing against a real hour, but three hours
of a 3-second step; it is 1 s here, as the gpuroster profile has it.

Each job's pods are created at its arrival (a gang as its pods, whole-node
pods above G GPUs, no gate) with a PriorityClass valued from the job's priority
and `preemptionPolicy: Never`; each service is a Deployment held at the peak of
its forecast (the static reservation most operators use). Gangs can run
partially, so the grid is read from the pods (`readback.rebuild_from_pods`).
The Kueue peers (`kueue`) build on this one.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from extender.planner import model
from extender.replay import readback, world
from extender.replay.peers import Context, Factory, Peer

SCHEDULER_NAME = "gpuroster-bench-stock"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bin_dir() -> Path:
    """The pinned build's binaries (the stock kube-scheduler, Kueue)."""
    from extender.localcluster import binaries_dir

    return binaries_dir()


def priority_class(priority: float) -> str:
    """The PriorityClass (and Kueue WorkloadPriorityClass) name of a scenario priority."""
    return f"gpuroster-bench-p{priority:g}".replace(".", "-")


def priority_value(priority: float) -> int:
    return round(priority * 1000)


def peak(v: model.Service, window: int) -> int:
    return max(v.forecast[:window], default=0)


def priority_classes(s: model.Scenario) -> list[dict[str, Any]]:
    prios = sorted({j.priority for j in s.jobs} | {v.priority for v in s.services})
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": priority_class(p), "labels": {world.BENCH_LABEL: "true"}},
            "value": priority_value(p),
            # batch-like work is not interruptible in this model
            "preemptionPolicy": "Never",
            "description": f"gpuroster bench: priority {p:g}",
        }
        for p in prios
    ]


def pod_extras(priority: float) -> dict[str, Any]:
    """What a peer pod names beyond `world`'s bare shape: the stock scheduler, its priority."""
    return {"schedulerName": SCHEDULER_NAME, "priorityClassName": priority_class(priority),
            "terminationGracePeriodSeconds": 0}


def service_deployment(v: model.Service, namespace: str, replicas: int) -> dict[str, Any]:
    dep = world.service_deployment(v, namespace, replicas)
    dep["spec"]["template"]["spec"].update(pod_extras(v.priority))
    return dep


def configuration(kubeconfig: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False},
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 1,
        "profiles": [{"schedulerName": SCHEDULER_NAME}],
    }


class Scheduler:
    """The stock kube-scheduler as a child process in its own session."""

    def __init__(self, binaries: Path, kubeconfig: str, work_dir: Path) -> None:
        self.binary = binaries / "kube-scheduler"
        self.kubeconfig = kubeconfig
        self.work_dir = work_dir
        self.log_path = work_dir / "kube-scheduler-stock.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        if not self.binary.is_file():
            raise RuntimeError(f"no kube-scheduler in {self.binary.parent}; run "
                               f"`gpuroster cluster build`")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.work_dir / "kube-scheduler-stock.yaml"
        cfg.write_text(yaml.safe_dump(configuration(self.kubeconfig), sort_keys=False))
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [str(self.binary), f"--config={cfg}", "--bind-address=127.0.0.1",
             f"--secure-port={self.port}", f"--cert-dir={self.work_dir / 'stock-certs'}",
             "--authorization-always-allow-paths=/healthz,/readyz,/livez", "--v=1"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        ctx = ssl._create_unverified_context()  # its own self-signed serving cert
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"stock kube-scheduler exited; log: {self.log_path}")
            try:
                url = f"https://127.0.0.1:{self.port}/healthz"
                with urllib.request.urlopen(url, timeout=1, context=ctx) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.time() > deadline:
                raise RuntimeError(f"stock kube-scheduler not healthy; log: {self.log_path}")
            time.sleep(0.2)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass


def delete_priority_classes(api: Any) -> None:
    sched: Any = k8s.SchedulingV1Api(api)
    for pc in sched.list_priority_class(label_selector=world.BENCH_LABEL).items:
        try:
            sched.delete_priority_class(pc.metadata.name)
        except ApiException as e:
            if e.status != 404:
                raise


class DefaultPeer(Peer):
    name = "default"
    scheduler_name = SCHEDULER_NAME
    after_sample = True

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None

    def run_dir(self, ctx: Context) -> Path:
        return ctx.work_dir / f"{ctx.scenario.name}.{self.name}"

    def service_replicas(self, ctx: Context, v: model.Service) -> int:
        return peak(v, ctx.scenario.duration_steps)

    def setup(self, ctx: Context) -> None:
        delete_priority_classes(ctx.api)
        sched: Any = k8s.SchedulingV1Api(ctx.api)
        for pc in priority_classes(ctx.scenario):
            sched.create_priority_class(pc)
        self.replicas: dict[str, int] = {}
        for v in ctx.scenario.services:
            self.replicas[v.name] = self.service_replicas(ctx, v)
            ctx.apps.create_namespaced_deployment(
                ctx.namespace, service_deployment(v, ctx.namespace, self.replicas[v.name]))
        ctx.setup.update({"scheduler": SCHEDULER_NAME, "step_seconds": ctx.step_seconds})

    def start(self, ctx: Context) -> None:
        self.scheduler = Scheduler(bin_dir(), ctx.kubeconfig, self.run_dir(ctx))
        self.scheduler.start()

    def submit(self, ctx: Context, job: model.Job, t: int) -> None:
        g = ctx.scenario.cluster.gpus_per_node
        for pod in world.job_pods(job, g, ctx.namespace, spec=pod_extras(job.priority)):
            ctx.core.create_namespaced_pod(ctx.namespace, pod)

    def check(self, ctx: Context, t: int) -> None:
        if self.scheduler is not None and not self.scheduler.alive():
            raise RuntimeError(f"stock kube-scheduler died at step {t}; "
                               f"log: {self.scheduler.log_path}")

    def stop(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()

    def cleanup(self, ctx: Context) -> None:
        delete_priority_classes(ctx.api)

    def read_back(
        self, s: model.Scenario, pods: list[Any], samples: list[readback.Sample], t0: float,
        S: float, notes: list[str],
    ) -> readback.Rebuilt:
        return readback.rebuild_from_pods(s, samples, notes)


PEERS: dict[str, Factory] = {"default": DefaultPeer}

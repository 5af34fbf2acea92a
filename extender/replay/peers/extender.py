"""Peers `gpuroster` and `fifo`: a `gpuroster serve` process behind the extender.

The control plane's kube-scheduler calls an extender on `ctx.extender_port`;
this peer starts `gpuroster serve` there with the policy, the replay's epoch
(so both count the same steps) and the scenario's horizon and step length.
Jobs are annotated pods held by a scheduling gate until gpuroster admits the
gang; each service is a Deployment gpuroster scales, whose demand ConfigMap
holds the forecast curve and the true demand observed so far (fed step by
step, as a metrics pipeline would). Only the annotation names of
`extender.adapter.annotations` (the adapter's public contract) are used.

A fault test drives the process through the peer handed to `on_step`:
`kill_extender()` and `start_extender()`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from extender.adapter import annotations as ann
from extender.planner import model
from extender.replay import world
from extender.replay.peers import Context, Factory, Peer


class ExtenderProcess:
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

    def plan_times(self) -> tuple[dict[str, float], int] | None:
        """`/plan`'s plan times: (p50, p99 and max in ms, rounds timed); None when the
        process does not answer or has planned nothing."""
        if self.proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/plan", timeout=5) as r:
                times = json.load(r).get("plan_ms")
        except (OSError, ValueError):
            return None
        if not isinstance(times, dict) or not times.get("rounds"):
            return None
        return {k: float(times[k]) for k in ("p50", "p99", "max")}, int(times["rounds"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self._log.close()


class ExtenderPeer(Peer):
    """gpuroster's extender running `policy` (`gpuroster` or `fifo`).

    A restarted extender gets the same settings (port, epoch, namespace), so it
    counts the same steps and rebuilds its state from the cluster alone.
    """

    def __init__(self, policy: str) -> None:
        self.name = policy
        self.policy = policy
        self.extender: ExtenderProcess | None = None
        self.starts = 0
        self.killed = False
        self._ctx: Context | None = None

    # --- the peer interface -----------------------------------------------------

    def setup(self, ctx: Context) -> None:
        for v in ctx.scenario.services:
            cm, dep = service_objects(v, ctx.namespace, ctx.scenario.duration_steps)
            ctx.core.create_namespaced_config_map(ctx.namespace, cm)
            ctx.apps.create_namespaced_deployment(ctx.namespace, dep)

    def start(self, ctx: Context) -> None:
        self._ctx = ctx
        self.extender = self._spawn()
        self.extender.wait_ready()
        if time.time() > ctx.t0 - 1.0:
            ctx.notes.append(
                f"the extender was ready only {ctx.t0 - time.time():.1f} s before step 0"
            )

    def submit(self, ctx: Context, job: model.Job, t: int) -> None:
        s = ctx.scenario
        for pod in job_pods(job, s.cluster.gpus_per_node, s.step_minutes, ctx.namespace):
            ctx.core.create_namespaced_pod(ctx.namespace, pod)

    def drive(self, ctx: Context, t: int) -> None:
        # This step's true demand, as monitoring recorded it, lands before the next
        # boundary, so the next step's first plan sees every past step (the
        # controller reads `observed` only up to the step it plans, never this one's).
        # Written at the next step's start instead, the boundary plan would see one
        # step less than the re-plan a moment later, and the two would disagree.
        for v in ctx.scenario.services:
            ctx.core.patch_namespaced_config_map(
                f"{v.name}-demand",
                ctx.namespace,
                {"data": {"observed": json.dumps(list(v.demand[: t + 1]))}},
            )

    def check(self, ctx: Context, t: int) -> None:
        ext = self.extender
        if ext is not None and ext.proc.poll() is not None and not self.killed:
            raise RuntimeError(f"gpuroster serve died at step {t}; log: {ext.log_path}")

    def stop(self) -> None:
        if self.extender is None:
            return
        # The plan times, before the process goes: its re-plans (several a step), timed
        # around the policy call as the simulator times its one plan a step.
        timed = self.extender.plan_times()
        ctx = self._ctx
        if ctx is not None:
            if timed is None:
                ctx.notes.append("no plan times: the extender did not answer /plan at the end")
            else:
                ctx.plan_ms, ctx.plan_rounds = timed
                if self.starts > 1:
                    ctx.notes.append(f"plan_ms covers the last of {self.starts} gpuroster serve "
                                     "processes (the extender was restarted)")
        self.extender.stop()

    def log_tail(self) -> str:
        if self.extender is None:
            return ""
        return self.extender.log_path.read_text(errors="replace")[-4000:]

    # --- faults: kill and restart the extender mid-replay --------------------------

    def kill_extender(self) -> None:
        """SIGKILL `gpuroster serve` (its whole process group), no goodbye."""
        assert self.extender is not None, "the extender was never started"
        proc = self.extender.proc
        self.killed = True  # first: the replay loop must not take this death for a crash
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def start_extender(self, timeout: float = 30.0) -> float:
        """Start a new `gpuroster serve` (log `...-<n>.log`); seconds until /healthz."""
        if self.extender is not None:
            self.extender.stop()
        started = time.time()
        self.extender = self._spawn()
        self.extender.wait_ready(timeout)
        self.killed = False
        return time.time() - started

    def _spawn(self) -> ExtenderProcess:
        ctx = self._ctx
        assert ctx is not None, "start() first"
        s = ctx.scenario
        n = self.starts
        self.starts += 1
        log_name = f"extender-{s.name}-{self.policy}"
        return ExtenderProcess(
            ctx.kubeconfig,
            ctx.extender_port,
            self.policy,
            ctx.step_seconds,
            ctx.t0,
            ctx.namespace,
            s.horizon_steps,
            s.cluster.gpus_per_node,
            ctx.work_dir / (f"{log_name}.log" if n == 0 else f"{log_name}-{n}.log"),
            s.step_minutes,
        )


def job_pods(job: model.Job, g: int, step_minutes: int, namespace: str) -> list[dict[str, Any]]:
    """A job as annotated pods, gated until gpuroster admits the gang."""
    count, _ = world.gang_shape(job, g)
    return world.job_pods(
        job,
        g,
        namespace,
        annotations={
            ann.WORKLOAD: job.type,
            ann.PRIORITY: f"{job.priority:g}",
            ann.GANG: job.name,
            ann.GANG_SIZE: str(count),
            ann.EXPECTED_DURATION: f"{job.estimate_steps * step_minutes}m",
        },
        # held back from kube-scheduler until gpuroster admits the gang
        spec={"schedulingGates": [{"name": "gpuroster.io/admission"}]},
    )


def service_objects(v: model.Service, namespace: str, window: int) -> tuple[dict[str, Any], ...]:
    """A service's demand ConfigMap and its Deployment, at 0 replicas: gpuroster scales it."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{v.name}-demand",
            "namespace": namespace,
            "labels": {world.BENCH_LABEL: "service"},
        },
        "data": {"curve": json.dumps(list(v.forecast[:window])), "observed": "[]"},
    }
    dep = world.service_deployment(
        v,
        namespace,
        0,
        annotations={
            ann.WORKLOAD: model.REALTIME_TYPE,
            ann.PRIORITY: f"{v.priority:g}",
            ann.MAX_SWAP: str(v.max_swap),
            ann.DEMAND_CONFIGMAP: f"{v.name}-demand",
        },
    )
    return cm, dep


def _factory(policy: str) -> Factory:
    return lambda: ExtenderPeer(policy)


PEERS: dict[str, Factory] = {"gpuroster": _factory("gpuroster"), "fifo": _factory("fifo")}

"""Peers `kueue` and `kueue-reactive`: Kueue v0.17.0 in front of the stock kube-scheduler.

Kueue is built from its Go module by the control-plane build and run as a
process against the replay's API server, as the local control plane's other
components are: its CRDs are applied from the same module
(`config/components/crd/bases`), its configuration and queueing objects are
rendered from `kueue.yaml` next to this file (recorded before the first
measured run; docs/benchmarks.md says why each setting is what it is).

Each job is a batch/v1 Indexed Job, one pod per node-sized piece, created
suspended and labelled for the LocalQueue and the WorkloadPriorityClass of its
priority; its pods go to the stock scheduler (`stock`). Services are
Deployments outside Kueue: `kueue` holds them at the forecast peak and gives
the ClusterQueue the rest of the GPUs; `kueue-reactive` gives it every GPU and
scales each service every step to the demand observed in the step before (the
HorizontalPodAutoscaler's rule; its scaling policies cap a step's change at the
service's swap cap).

Webhooks are left out, and Jobs are created already suspended. For a
well-formed Job labelled for a LocalQueue, Kueue's `batch/job` webhook does
one thing: it sets `spec.suspend: true`; its validation only refuses input
the replay never writes. Topology Aware Scheduling does not need the pod
webhook either: the scheduling gate and the node selector are put on the
Job's pod template when Kueue unsuspends it (`podset.FromAssignment`), and
its ungater removes the gate. Registering the webhooks by URL would put a
fail-closed call from the API server to a process each replay starts and
stops in front of every Job and Pod the replay creates, for nothing the
measurement sees. The webhook server still listens (Kueue will not start
without it), with a throwaway certificate, on a free loopback port.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from extender.planner import model
from extender.replay import world
from extender.replay.peers import Context, Factory, stock

VERSION = "v0.17.0"
TEMPLATE = Path(__file__).with_name("kueue.yaml")
QUEUE = "gpu"  # ClusterQueue and LocalQueue
FLAVOR = "gpu"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
HOSTNAME = "kubernetes.io/hostname"
# Kueue v0.17 reads its metrics serving certificate from this fixed path when its
# internal certificate management is off (cmd/kueue/main.go), and exits without it.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
GROUP = "kueue.x-k8s.io"
API = "v1beta2"


class KueueError(RuntimeError):
    """Kueue could not be set up or stopped working."""


def binary(bin_dir: Path) -> Path:
    return bin_dir / f"kueue-{VERSION}"


def crds(bin_dir: Path) -> Path:
    return bin_dir / "crds" / f"kueue-{VERSION}"


def template() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(TEMPLATE.read_text()) if d]


@dataclass(frozen=True)
class Setup:
    """What one replay runs Kueue with: the manager's configuration and its objects."""

    configuration: dict[str, Any]
    objects: list[dict[str, Any]]


def render(
    *,
    quota: int,
    priorities: list[float],
    namespace: str,
    step_seconds: float,
    health_port: int,
    webhook_port: int,
    cert_dir: Path,
) -> Setup:
    """`kueue.yaml` with the fields it marks FILLED filled in; nothing else changes."""
    if quota < 0:
        raise ValueError(f"ClusterQueue quota {quota} < 0")
    docs = copy.deepcopy(template())
    cfg = next(d for d in docs if d["kind"] == "Configuration")
    cfg["health"]["healthProbeBindAddress"] = f"127.0.0.1:{health_port}"
    cfg["webhook"].update({"port": webhook_port, "certDir": str(cert_dir)})
    step = max(1, round(step_seconds))
    cfg["waitForPodsReady"]["timeout"] = f"{step_seconds:g}s"
    cfg["waitForPodsReady"]["requeuingStrategy"]["backoffMaxSeconds"] = step
    objects: list[dict[str, Any]] = []
    for d in docs:
        kind = d["kind"]
        if kind == "Configuration":
            continue
        if kind == "ClusterQueue":
            (group,) = d["spec"]["resourceGroups"]
            (flavor,) = group["flavors"]
            (res,) = flavor["resources"]
            res["nominalQuota"] = quota
        elif kind == "LocalQueue":
            d["metadata"]["namespace"] = namespace
        elif kind == "WorkloadPriorityClass":
            for p in sorted(set(priorities)):
                w = copy.deepcopy(d)
                w["metadata"]["name"] = stock.priority_class(p)
                w["value"] = stock.priority_value(p)
                w["description"] = f"priority {p:g} of the replayed scenario"
                objects.append(w)
            continue
        objects.append(d)
    return Setup(cfg, objects)


def _self_signed(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "365", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
        check=True, capture_output=True,
    )


def ensure_metrics_cert() -> None:
    """Kueue's fixed metrics certificate path: a throwaway pair if it is missing."""
    if (METRICS_CERT_DIR / "tls.crt").is_file() and (METRICS_CERT_DIR / "tls.key").is_file():
        return
    try:
        _self_signed(METRICS_CERT_DIR)
    except (OSError, subprocess.CalledProcessError) as e:
        raise KueueError(
            f"Kueue {VERSION} needs a serving certificate at {METRICS_CERT_DIR}/tls.crt and "
            f"tls.key (it reads that fixed path when its internal certificate management is "
            f"off) and it could not be written ({e}); create any self-signed pair there"
        ) from e


class Manager:
    """The Kueue manager as a child process in its own session, with its objects."""

    def __init__(self, bin_dir: Path, kubectl: Path, kubeconfig: str, work_dir: Path,
                 setup: Setup, health_port: int, name: str = "kueue") -> None:
        self.bin_dir, self.kubectl, self.kubeconfig = bin_dir, kubectl, kubeconfig
        self.work_dir, self.setup, self.health_port = work_dir, setup, health_port
        self.log_path = work_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        out = subprocess.run(
            [str(self.kubectl), "--kubeconfig", self.kubeconfig, *args],
            input=stdin, text=True, capture_output=True,
        )
        if out.returncode != 0:
            raise KueueError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def install_crds(self) -> None:
        src = crds(self.bin_dir)
        if not src.is_dir() or not binary(self.bin_dir).is_file():
            raise KueueError(
                f"Kueue {VERSION} is not built in {self.bin_dir} ({binary(self.bin_dir).name}, "
                f"crds/); run the control-plane build (make cluster-bin)"
            )
        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", str(src))
        names = [f"crd/{p.stem.split('_', 1)[1]}.{GROUP}" for p in sorted(src.glob("*.yaml"))]
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)

    def start(self, timeout: float = 60.0) -> float:
        """Start the manager and wait until it is healthy; seconds it took."""
        ensure_metrics_cert()
        self.install_crds()
        cert_dir = Path(self.setup.configuration["webhook"]["certDir"])
        if not (cert_dir / "tls.crt").is_file():
            _self_signed(cert_dir)
        cfg_path = self.work_dir / "kueue-config.yaml"
        cfg_path.write_text(yaml.safe_dump(self.setup.configuration, sort_keys=False))
        started = time.time()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        self.proc = subprocess.Popen(
            [str(binary(self.bin_dir)), f"--config={cfg_path}",
             "--zap-log-level=info"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )
        log.close()
        deadline = time.time() + timeout
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while True:
            if self.proc.poll() is not None:
                raise KueueError(f"kueue exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.time() > deadline:
                raise KueueError(f"kueue not ready after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)
        return time.time() - started

    def apply_objects(self, timeout: float = 30.0) -> None:
        """Create the queueing objects and wait until the ClusterQueue is Active."""
        text = yaml.safe_dump_all(self.setup.objects, sort_keys=False)
        self._kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=text)
        self._kubectl("wait", f"clusterqueues.{API}.{GROUP}/{QUEUE}", "--for=condition=Active",
                      f"--timeout={max(1, int(timeout))}s")

    def delete_objects(self) -> None:
        """The queueing objects go between replays (a new quota, new priority classes).
        Kueue must be running: it holds finalizers on them until they are unused."""
        for kind in ("localqueues", "clusterqueues", "resourceflavors", "topologies",
                     "workloadpriorityclasses"):
            args = ["delete", f"{kind}.{API}.{GROUP}", "--all", "--ignore-not-found",
                    "--wait=true", "--timeout=60s"]
            if kind == "localqueues":
                args.append("--all-namespaces")
            self._kubectl(*args)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass


def which_kubectl(bin_dir: Path) -> Path:
    local = bin_dir / "kubectl"
    if local.is_file():
        return local
    found = shutil.which("kubectl")
    if not found:
        raise KueueError(f"no kubectl in {bin_dir} or on PATH")
    return Path(found)


def quota(s: model.Scenario, reactive: bool) -> int:
    """The ClusterQueue's GPUs: every GPU, less the services' peaks unless they scale."""
    if reactive:
        return s.cluster.gpus
    return max(0, s.cluster.gpus - sum(stock.peak(v, s.duration_steps) for v in s.services))


def reactive_replicas(v: model.Service, t: int, current: int) -> int:
    """Replicas for step t: step t-1's observed demand (forecast[0] before any), moved
    by at most the swap cap from `current` (the autoscaler's scaling policies)."""
    if t == 0:
        return v.forecast[0] if v.forecast else 0
    want = v.demand[t - 1]
    return max(current - v.max_swap, min(current + v.max_swap, want))


def job_body(job: model.Job, g: int, namespace: str) -> dict[str, Any]:
    """A suspended Indexed Job for the LocalQueue, one pod per node-sized piece.

    A gang of G GPUs or less is one pod, and TAS is asked for one host
    (`podset-required-topology`), which a single pod always gets. Above G, each
    pod asks a whole node's GPUs, so TAS gives each a node of its own; that the
    nodes be consecutive, as the model wants, is nothing Kueue can express.
    """
    count, per_pod = world.gang_shape(job, g)
    annotations = {REQUIRED_TOPOLOGY: HOSTNAME} if count == 1 else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": namespace,
            "labels": {
                **world.job_pod_labels(job),
                QUEUE_LABEL: QUEUE,
                PRIORITY_LABEL: stock.priority_class(job.priority),
            },
        },
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": world.job_pod_labels(job), "annotations": annotations},
                "spec": {**stock.pod_extras(job.priority), **world.job_pod_spec(per_pod)},
            },
        },
    }


def delete_jobs(api: Any, ns: str) -> None:
    batch: Any = k8s.BatchV1Api(api)
    for j in batch.list_namespaced_job(ns).items:
        try:
            batch.delete_namespaced_job(j.metadata.name, ns, propagation_policy="Background",
                                        grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise


class KueuePeer(stock.DefaultPeer):
    def __init__(self, name: str, reactive: bool) -> None:
        super().__init__()
        self.name = name
        self.reactive = reactive
        self.manager: Manager | None = None
        self._ctx: Context | None = None

    def service_replicas(self, ctx: Context, v: model.Service) -> int:
        if self.reactive:
            return reactive_replicas(v, 0, 0)
        return super().service_replicas(ctx, v)

    def setup(self, ctx: Context) -> None:
        """Kueue starts here, before the replay fixes step 0's time: its CRDs, the
        manager and its objects take longer than the replay's start slack."""
        delete_jobs(ctx.api, ctx.namespace)  # a run killed before its cleanup leaves them
        super().setup(ctx)
        self._ctx = ctx
        try:
            self._start_kueue(ctx)
        except BaseException:
            if self.manager is not None:
                self.manager.stop()
            raise

    def _start_kueue(self, ctx: Context) -> None:
        run = self.run_dir(ctx)
        run.mkdir(parents=True, exist_ok=True)
        binaries = stock.bin_dir()
        health, webhook = stock.free_port(), stock.free_port()
        q = quota(ctx.scenario, self.reactive)
        setup = render(
            quota=q, priorities=[j.priority for j in ctx.scenario.jobs],
            namespace=ctx.namespace, step_seconds=ctx.step_seconds, health_port=health,
            webhook_port=webhook, cert_dir=run / "kueue-webhook-certs")
        self.manager = Manager(binaries, which_kubectl(binaries), ctx.kubeconfig, run, setup,
                               health)
        took = self.manager.start()
        self.manager.delete_objects()  # a run killed before its cleanup leaves them
        self.manager.apply_objects()
        ctx.setup.update({"kueue": VERSION, "cluster_queue_quota": q,
                          "kueue_ready_seconds": round(took, 1)})

    def submit(self, ctx: Context, job: model.Job, t: int) -> None:
        g = ctx.scenario.cluster.gpus_per_node
        batch: Any = k8s.BatchV1Api(ctx.api)
        batch.create_namespaced_job(ctx.namespace, job_body(job, g, ctx.namespace))

    def drive(self, ctx: Context, t: int) -> None:
        if not self.reactive or t + 1 >= ctx.scenario.duration_steps:
            return
        for v in ctx.scenario.services:
            want = reactive_replicas(v, t + 1, self.replicas[v.name])
            if want != self.replicas[v.name]:
                ctx.apps.patch_namespaced_deployment_scale(
                    v.name, ctx.namespace, {"spec": {"replicas": want}})
                self.replicas[v.name] = want

    def check(self, ctx: Context, t: int) -> None:
        super().check(ctx, t)
        if self.manager is not None and not self.manager.alive():
            raise RuntimeError(f"kueue died at step {t}:\n{self.manager.log_tail()}")

    def stop(self) -> None:
        try:
            # Kueue holds finalizers on its objects: they go while it runs.
            if self.manager is not None and self.manager.alive() and self._ctx is not None:
                delete_jobs(self._ctx.api, self._ctx.namespace)
                self.manager.delete_objects()
        finally:
            if self.manager is not None:
                self.manager.stop()
            super().stop()

    def log_tail(self) -> str:
        return self.manager.log_tail() if self.manager else ""


PEERS: dict[str, Factory] = {
    "kueue": lambda: KueuePeer("kueue", reactive=False),
    "kueue-reactive": lambda: KueuePeer("kueue-reactive", reactive=True),
}

"""A local Kubernetes control plane with fake GPU nodes, for tests, the
benchmark and the demo.

    from extender.localcluster import Cluster
    with Cluster(nodes=4) as cluster:          # up() ... down()
        cluster.kubeconfig                     # admin kubeconfig (client cert)
        cluster.extender_port                  # kube-scheduler calls the extender here
        cluster.add_node()                     # gpu-node-4, 8 GPUs
        cluster.set_node_ready("gpu-node-0", False)

    with Cluster(nodes=2, gpus="dra") as cluster:  # GPUs as DRA devices (dradriver)
        ...

Processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
(configured from the packaged ``scheduler-config.yaml``, the same as
``deploy/scheduler/scheduler-config.yaml``) and the KWOK controller (stages in
``stages/`` here). All on 127.0.0.1, on free ports, with
logs in ``<base_dir>/logs``. Every process stops on ``down()``, at interpreter
exit, on SIGINT/SIGTERM, and (via a parent-death signal) if the owner is
killed.

The command line (``gpuroster cluster ...``, which the Makefile's cluster
targets call) is in ``commands``.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from extender.localcluster import dradriver, objects, pki, processes, rendering

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

BUILD_SCRIPT = "build-control-plane.sh"  # package data, next to this module
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
            "kwok")
RUN_ROOT = Path(os.environ.get("GPUROSTER_CACHE", Path.home() / ".cache" / "gpuroster")) / "run"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.64.0.0/12"
# `make test` sets this; every process started under it inherits it, so
# `gpuroster cluster leftovers` can find what outlived the run.
RUN_ID_ENV = "GPUROSTER_RUN_ID"
_NODE_LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# How fake nodes offer their GPUs: as the nvidia.com/gpu extended resource (what
# NVIDIA's device plugin advertises) or as DRA devices in ResourceSlices.
GPU_MODES = ("device-plugin", "dra")


class ClusterError(RuntimeError):
    """The control plane could not start or a process died."""


def build_script() -> contextlib.AbstractContextManager[Path]:
    """The build script (package data) as a file path, for as long as the context lasts."""
    return importlib.resources.as_file(
        importlib.resources.files("extender.localcluster") / BUILD_SCRIPT)


def binaries_dir(build: bool = False) -> Path:
    """Where the pinned binaries live; with ``build``, build or reuse them first.

    The build script logs to stderr; building from cold takes many minutes.
    """
    if env := os.environ.get("GPUROSTER_BIN_DIR"):
        return Path(env)
    with build_script() as script:
        argv = ["bash", str(script)] if build else ["bash", str(script), "--print-bin"]
        out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    extender: int


class Cluster:
    """One local control plane. Not thread-safe; start it from the main thread."""

    def __init__(
        self,
        *,
        nodes: int = 4,
        gpus_per_node: int = 8,
        extender_port: int | None = None,
        node_cache_capable: bool = True,
        extender_tls: bool = False,
        base_dir: Path | None = None,
        bin_dir: Path | None = None,
        verbosity: int = 2,
        extender_shadow: bool = False,
        gpus: str = "device-plugin",
        nvlink_domain_size: int = 0,
    ) -> None:
        if gpus not in GPU_MODES:
            raise ValueError(f"gpus must be one of {GPU_MODES}, not {gpus!r}")
        self.gpu_mode = gpus
        self.nvlink_domain_size = nvlink_domain_size
        self.initial_nodes = nodes
        self.extender_shadow = extender_shadow
        self.gpus_per_node = gpus_per_node
        self.node_cache_capable = node_cache_capable
        self.extender_tls = extender_tls
        self.verbosity = verbosity
        self.bin_dir = bin_dir or binaries_dir()
        self.base_dir = base_dir or Path(tempfile.mkdtemp(prefix="gpuroster-cluster-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.base_dir / "logs"
        self.pki_dir = self.base_dir / "pki"
        etcd_c, etcd_p, api, kcm, sched, ext = processes.free_ports(6)
        self.ports = Ports(etcd_c, etcd_p, api, kcm, sched, extender_port or ext)
        self.kubeconfig = self.base_dir / "admin.kubeconfig"
        self.scheduler_config_path = self.base_dir / "scheduler-config.yaml"
        self.startup_seconds: float | None = None
        self.pki: pki.Pki | None = None
        self._group = processes.Group(self.log_dir)
        self._api: ApiClient | None = None
        self._up = False

    # --- addresses -----------------------------------------------------------

    @property
    def dra(self) -> bool:
        return self.gpu_mode == "dra"

    @property
    def extender_port(self) -> int:
        return self.ports.extender

    @property
    def extender_url(self) -> str:
        scheme = "https" if self.extender_tls else "http"
        return f"{scheme}://127.0.0.1:{self.ports.extender}"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    # --- lifecycle -------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self.up()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down(remove=exc_type is None)

    def up(self, timeout: float = 120.0) -> Cluster:
        """Start every process, create the nodes, and wait until Ready."""
        if self._up:
            return self
        missing = [b for b in BINARIES if not (self.bin_dir / b).is_file()]
        if missing:
            raise ClusterError(f"missing binaries in {self.bin_dir}: {missing}; "
                               f"run `gpuroster cluster build`")
        started = time.monotonic()
        deadline = started + timeout
        processes.register(id(self), self.down)
        self._up = True
        try:
            self._write_files()
            self._start_etcd()
            self._wait(lambda: self._http_ok(f"http://127.0.0.1:{self.ports.etcd_client}/health"),
                       deadline, "etcd healthy")
            self._start_apiserver()
            self._wait(lambda: self._https_ok(f"{self.server}/readyz"), deadline,
                       "kube-apiserver ready")
            if self.dra:
                dradriver.publish_class(self.api())
            self._start_controller_manager()
            self._start_scheduler()
            self._start_kwok()
            self.add_nodes(self.initial_nodes, wait=False)
            self._wait(lambda: self._default_service_account_exists("default"), deadline,
                       "default ServiceAccount in namespace default")
            self._wait(
                lambda: self._https_ok(f"https://127.0.0.1:{self.ports.scheduler}/healthz",
                                       verify=False),
                deadline, "kube-scheduler healthy")
            self.wait_nodes_ready(self.node_names(), timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.down(remove=False)
            raise
        self.startup_seconds = time.monotonic() - started
        self._write_state()
        return self

    def down(self, remove: bool = False) -> None:
        """Stop every process (idempotent); with ``remove``, delete the state dir."""
        processes.unregister(id(self))
        self._group.stop()
        if self._api is not None:
            with contextlib.suppress(Exception):
                self._api.close()  # type: ignore[no-untyped-call]
            self._api = None
        self._up = False
        if remove:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def running(self) -> bool:
        """Up, and no process has died."""
        return self._up and not self._group.dead()

    def check_alive(self) -> None:
        dead = self._group.dead()
        if dead:
            names = ", ".join(f"{c.name} (exit {c.popen.returncode})" for c in dead)
            raise ClusterError(f"process died: {names}\n{self.log_tails()}")

    def stop_process(self, name: str, *, hard: bool = False) -> None:
        """Stop one component (``kube-apiserver``, ``kube-scheduler``, ``kwok``, ...) for a
        fault test; ``hard``: SIGKILL. :meth:`start_process` restarts it on the same ports."""
        self._group.stop_one(name, hard=hard)

    def start_process(self, name: str, timeout: float = 60.0) -> None:
        """Restart a component stopped by :meth:`stop_process` and wait until it is healthy."""
        self._group.restart(name)
        self._write_state()
        deadline = time.monotonic() + timeout
        if name == "kube-apiserver":
            self._wait(lambda: self._https_ok(f"{self.server}/readyz"), deadline,
                       "kube-apiserver ready")
        elif name == "kube-scheduler":
            self._wait(lambda: self._https_ok(f"https://127.0.0.1:{self.ports.scheduler}/healthz",
                                              verify=False), deadline, "kube-scheduler healthy")

    def pids(self) -> dict[str, int]:
        return {c.name: c.pid for c in self._group.children}

    # --- Kubernetes access -------------------------------------------------------

    def api(self) -> ApiClient:
        """An admin client for this cluster (kubernetes package), shared."""
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(self.kubeconfig)
            )
        return self._api

    def core(self) -> Any:
        """A ``kubernetes.client.CoreV1Api`` (typed Any: tests pass plain dicts)."""
        from kubernetes import client

        return client.CoreV1Api(self.api())

    def create_namespace(self, name: str, labels: dict[str, str] | None = None,
                         timeout: float = 30.0) -> str:
        """Create namespace ``name`` and wait for its ``default`` ServiceAccount.

        The ServiceAccount admission plugin refuses pods (403) in a namespace whose
        ``default`` account the controller-manager has not made yet; on a loaded
        2-core machine that lag reaches past a test's first pod create.
        """
        body: dict[str, Any] = {"metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = labels
        self.core().create_namespace(body)
        self._wait(lambda: self._default_service_account_exists(name),
                   time.monotonic() + timeout, f"default ServiceAccount in namespace {name}")
        return name

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            check=check, text=True, capture_output=True,
        )

    # --- nodes -----------------------------------------------------------------

    def node_names(self) -> list[str]:
        """Fake GPU nodes in topology order."""
        return [name for _, name in sorted(self._ordered_nodes())]

    def _ordered_nodes(self) -> list[tuple[int, str]]:
        nodes = self.core().list_node(label_selector=objects.TOPOLOGY_ORDER_LABEL).items
        out = []
        for n in nodes:
            meta: Any = n.metadata
            out.append((int(meta.labels[objects.TOPOLOGY_ORDER_LABEL]), str(meta.name)))
        return out

    def _next_index(self) -> int:
        return max((i for i, _ in self._ordered_nodes()), default=-1) + 1

    def add_node(
        self, index: int | None = None, gpus: int | None = None, *,
        labels: dict[str, str] | None = None, wait: bool = True, timeout: float = 30.0,
    ) -> str:
        """Create fake GPU node ``gpu-node-<index>`` (next free index by default).

        A lease left by an earlier node of that name goes first: while the garbage
        collector has not removed it, KWOK's lease create for the new node fails, the
        node is never heartbeated and goes NotReady 50 s later, mid-test.
        """
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        index = self._next_index() if index is None else index
        if self.dra and self.nvlink_domain_size:
            labels = {dradriver.NVLINK_LABEL: str(self.nvlink_domain_size), **(labels or {})}
        body = objects.fake_gpu_node(index, gpus or self.gpus_per_node, labels=labels,
                                     dra=self.dra)
        try:
            client.CoordinationV1Api(self.api()).delete_namespaced_lease(
                str(body["metadata"]["name"]), "kube-node-lease")
        except ApiException as e:
            if e.status != 404:
                raise
        created = self.core().create_node(body)
        name = str(body["metadata"]["name"])
        if self.dra:  # the fake driver publishes the node's GPUs
            dradriver.publish_node(
                self.api(), self.api().sanitize_for_serialization(created))  # type: ignore[no-untyped-call]
        if wait:
            self.wait_nodes_ready([name], timeout=timeout)
        return name

    def add_nodes(self, count: int, gpus: int | None = None, *, wait: bool = True,
                  timeout: float = 60.0) -> list[str]:
        start = self._next_index()
        names = [self.add_node(start + i, gpus, wait=False) for i in range(count)]
        if wait:
            self.wait_nodes_ready(names, timeout=timeout)
        return names

    def reset_nodes(self, timeout: float = 60.0) -> list[str]:
        """Back to the initial nodes gpu-node-0..N-1, all Ready: delete others,
        recreate missing ones, clear simulated NotReady. For test teardown."""
        wanted = {objects.node_name(i): i for i in range(self.initial_nodes)}
        have = dict((name, i) for i, name in self._ordered_nodes())
        for name in set(have) - set(wanted):
            self.remove_node(name)
        for name, i in wanted.items():
            if name not in have:
                self.add_node(i, wait=False)
            else:
                node: Any = self.core().read_node(name)
                if objects.NOT_READY_LABEL in (node.metadata.labels or {}):
                    self.set_node_ready(name, True, wait=False)
        self.wait_nodes_ready(wanted, timeout=timeout)
        return list(wanted)

    def remove_node(self, name: str) -> None:
        """Delete a node; the pod GC in kube-controller-manager removes its pods later."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.core().delete_node(name)
        except ApiException as e:
            if e.status != 404:
                raise

    def set_node_ready(self, name: str, ready: bool, *, wait: bool = True,
                       timeout: float = 30.0) -> None:
        """Make a node NotReady (KWOK stage ``node-not-ready``) or Ready again."""
        value = None if ready else "true"
        self.core().patch_node(name, {"metadata": {"labels": {objects.NOT_READY_LABEL: value}}})
        if wait:
            self._wait(lambda: self._node_ready(name) is ready, time.monotonic() + timeout,
                       f"node {name} Ready={ready}")

    def wait_nodes_ready(self, names: Iterable[str], timeout: float = 60.0) -> None:
        pending = set(names)

        def all_ready() -> bool:
            for name in list(pending):
                if self._node_schedulable(name):
                    pending.discard(name)
            return not pending

        self._wait(all_ready, time.monotonic() + timeout, f"nodes Ready: {sorted(pending)}")

    def _node_schedulable(self, name: str) -> bool:
        """Ready, and kube-controller-manager has lifted its not-ready taints."""
        if not self._node_ready(name):
            return False
        spec: Any = self.core().read_node(name).spec
        return not any(t.key in _NODE_LIFECYCLE_TAINTS for t in spec.taints or [])

    def _node_ready(self, name: str) -> bool | None:
        from kubernetes.client.exceptions import ApiException

        try:
            node = self.core().read_node_status(name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        status: Any = node.status
        for cond in status.conditions or []:
            if cond.type == "Ready":
                return bool(cond.status == "True")
        return False

    # --- logs --------------------------------------------------------------------

    def log_tails(self, lines: int = 40) -> str:
        out = [f"==== cluster logs in {self.log_dir} ===="]
        for log in sorted(self.log_dir.glob("*.log")):
            with contextlib.suppress(OSError):
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"---- {log.name} (last {len(tail)} lines) ----")
                out.extend(tail)
        return "\n".join(out)

    # --- internals -----------------------------------------------------------------

    def _write_files(self) -> None:
        self.pki = pki.create(self.pki_dir)
        p = self.pki
        rendering.kubeconfig(self.kubeconfig, self.server, p.ca.cert, p.admin.cert, p.admin.key,
                             "admin")
        rendering.kubeconfig(self.base_dir / "controller-manager.kubeconfig", self.server,
                             p.ca.cert, p.controller_manager.cert, p.controller_manager.key,
                             "system:kube-controller-manager")
        rendering.kubeconfig(self.base_dir / "scheduler.kubeconfig", self.server, p.ca.cert,
                             p.scheduler.cert, p.scheduler.key, "system:kube-scheduler")
        rendering.scheduler_config(
            self.scheduler_config_path,
            kubeconfig=self.base_dir / "scheduler.kubeconfig",
            extender_port=self.ports.extender,
            node_cache_capable=self.node_cache_capable,
            extender_ca_file=p.ca.cert if self.extender_tls else None,
            shadow=self.extender_shadow,
        )

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        self._group.start("etcd", [
            self._bin("etcd"), "--name=default", f"--data-dir={self.base_dir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync",
            "--auto-compaction-retention=1", "--log-level=warn",
        ])

    def _start_apiserver(self) -> None:
        assert self.pki is not None
        p = self.pki
        self._group.start("kube-apiserver", [
            self._bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports.apiserver}",
            f"--cert-dir={self.base_dir / 'apiserver-certs'}",
            f"--tls-cert-file={p.apiserver.cert}", f"--tls-private-key-file={p.apiserver.key}",
            f"--client-ca-file={p.ca.cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.service_account_pub}",
            f"--service-account-signing-key-file={p.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            # Endpoints may not hold a loopback address; nothing in-cluster dials it.
            "--endpoint-reconciler-type=none",
            # Benchmarks create many pods at once on 2 cores.
            "--max-requests-inflight=1000", "--max-mutating-requests-inflight=500",
            f"--v={self.verbosity}",
        ])

    def _start_controller_manager(self) -> None:
        assert self.pki is not None
        self._group.start("kube-controller-manager", [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={self.base_dir / 'controller-manager.kubeconfig'}",
            "--bind-address=127.0.0.1", f"--secure-port={self.ports.controller_manager}",
            f"--cert-dir={self.base_dir / 'controller-manager-certs'}",
            f"--root-ca-file={self.pki.ca.cert}",
            f"--service-account-private-key-file={self.pki.service_account_key}",
            # Each controller acts as its own ServiceAccount, as kubeadm runs it; the
            # system:kube-controller-manager user alone may not even get nodes.
            "--leader-elect=false", "--use-service-account-credentials=true",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--kube-api-qps=500", "--kube-api-burst=1000",
            f"--v={self.verbosity}",
        ])

    def _start_scheduler(self) -> None:
        self._group.start("kube-scheduler", [
            self._bin("kube-scheduler"),
            f"--config={self.scheduler_config_path}",
            "--bind-address=127.0.0.1", f"--secure-port={self.ports.scheduler}",
            f"--cert-dir={self.base_dir / 'scheduler-certs'}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--v={self.verbosity}",
        ])

    def _start_kwok(self) -> None:
        argv = [
            self._bin("kwok"), f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={objects.KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40", f"--cidr={POD_CIDR}", "--node-ip=10.255.0.1",
        ]
        for stage in rendering.stage_files():
            argv.append(f"--config={stage}")
        self._group.start("kwok", argv)

    def _wait(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while True:
            self.check_alive()
            try:
                if ready():
                    return
            except Exception as e:  # noqa: BLE001 - servers refuse until they are up
                last = repr(e)
            else:
                last = "not yet"
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what} ({last})\n{self.log_tails()}")
            time.sleep(0.2)

    def _http_ok(self, url: str) -> bool:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)

    def _https_ok(self, url: str, verify: bool = True) -> bool:
        assert self.pki is not None
        if verify:
            ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
            ctx.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        else:
            ctx = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return bool(r.status == 200)
        except urllib.error.HTTPError:
            return False

    def _default_service_account_exists(self, namespace: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core().read_namespaced_service_account("default", namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def state(self) -> dict[str, Any]:
        return {
            "base_dir": str(self.base_dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "extender_port": self.extender_port,
            "extender_url": self.extender_url,
            "log_dir": str(self.log_dir),
            "bin_dir": str(self.bin_dir),
            "ports": asdict(self.ports),
            "pids": self.pids(),
            "startup_seconds": self.startup_seconds,
            "gpus": self.gpu_mode,
        }

    def _write_state(self) -> None:
        (self.base_dir / "state.json").write_text(json.dumps(self.state(), indent=2) + "\n")
        (self.base_dir / "extender-port").write_text(f"{self.extender_port}\n")



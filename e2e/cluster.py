"""A local Kubernetes control plane with fake GPU nodes, for tests, the
benchmark and the demo.

    from e2e.cluster import Cluster
    with Cluster(nodes=4) as cluster:          # up() ... down()
        cluster.kubeconfig                     # admin kubeconfig (client cert)
        cluster.extender_port                  # kube-scheduler calls the extender here
        cluster.add_node()                     # gpu-node-4, 8 GPUs
        cluster.set_node_ready("gpu-node-0", False)

Processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
(configured from ``deploy/scheduler/scheduler-config.yaml``) and the KWOK
controller (stages in ``e2e/stages/``). All on 127.0.0.1, on free ports, with
logs in ``<base_dir>/logs``. Every process stops on ``down()``, at interpreter
exit, on SIGINT/SIGTERM, and (via a parent-death signal) if the owner is
killed.

CLI, used by ``make cluster-up|cluster-down|cluster-kubeconfig``:

    python -m e2e.cluster up [--nodes N] [--gpus-per-node G] [--extender-port P]
    python -m e2e.cluster down
    python -m e2e.cluster kubeconfig | extender-port | status
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from e2e.harness import objects, pki, processes, rendering

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

REPO = rendering.REPO
BUILD_SCRIPT = REPO / "e2e" / "build-control-plane.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
            "kwok")
RUN_ROOT = Path(os.environ.get("GPUROSTER_CACHE", Path.home() / ".cache" / "gpuroster")) / "run"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.64.0.0/12"
# `make test` sets this; every process started under it inherits it, so
# `python -m e2e.cluster leftovers` can find what outlived the run.
RUN_ID_ENV = "GPUROSTER_RUN_ID"
_NODE_LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


class ClusterError(RuntimeError):
    """The control plane could not start or a process died."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_ports(count: int) -> list[int]:
    # Hold every socket until all are chosen so no two are the same.
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def binaries_dir(build: bool = False) -> Path:
    """Where the pinned binaries live; with ``build``, build or reuse them first."""
    if env := os.environ.get("GPUROSTER_BIN_DIR"):
        return Path(env)
    if build:
        out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE,
                             text=True).stdout
    else:
        out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-bin"], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
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
    ) -> None:
        self.initial_nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.node_cache_capable = node_cache_capable
        self.extender_tls = extender_tls
        self.verbosity = verbosity
        self.bin_dir = bin_dir or binaries_dir()
        self.base_dir = base_dir or Path(tempfile.mkdtemp(prefix="gpuroster-cluster-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.base_dir / "logs"
        self.pki_dir = self.base_dir / "pki"
        etcd_c, etcd_p, api, kcm, sched, ext = _free_ports(6)
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
                               f"run `make cluster-bin`")
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
        body = objects.fake_gpu_node(index, gpus or self.gpus_per_node, labels=labels)
        try:
            client.CoordinationV1Api(self.api()).delete_namespaced_lease(
                str(body["metadata"]["name"]), "kube-node-lease")
        except ApiException as e:
            if e.status != 404:
                raise
        self.core().create_node(body)
        name = str(body["metadata"]["name"])
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
        }

    def _write_state(self) -> None:
        (self.base_dir / "state.json").write_text(json.dumps(self.state(), indent=2) + "\n")
        (self.base_dir / "extender-port").write_text(f"{self.extender_port}\n")


# --- CLI: a background cluster for make targets ------------------------------------


def _current() -> Path | None:
    pointer = RUN_ROOT / "current"
    if not pointer.is_file():
        return None
    base = Path(pointer.read_text().strip())
    return base if base.is_dir() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_state(base: Path) -> dict[str, Any]:
    path = base / "state.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _cmd_up(args: argparse.Namespace) -> int:
    base = _current()
    if base is not None:
        sup = base / "supervisor.pid"
        if sup.is_file() and _alive(int(sup.read_text())) and (base / "ready").is_file():
            state = _read_state(base)
            print(f"cluster already up: kubeconfig {state['kubeconfig']}, "
                  f"extender port {state['extender_port']}")
            return 0
    if args.dir:
        base = Path(args.dir)
        base.mkdir(parents=True, exist_ok=True)
    else:
        base = Path(tempfile.mkdtemp(prefix="gpuroster-cluster-"))
    (base / "logs").mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "e2e.cluster", "serve", "--dir", str(base),
            "--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus_per_node)]
    if args.extender_port:
        argv += ["--extender-port", str(args.extender_port)]
    if args.no_node_cache:
        argv.append("--no-node-cache")
    with (base / "logs" / "supervisor.log").open("ab") as log:
        supervisor = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    (base / "supervisor.pid").write_text(f"{supervisor.pid}\n")
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    (RUN_ROOT / "current").write_text(f"{base}\n")
    deadline = time.monotonic() + args.timeout
    while not (base / "ready").is_file():
        if supervisor.poll() is not None or time.monotonic() > deadline:
            print(f"cluster failed to start; logs in {base / 'logs'}", file=sys.stderr)
            print((base / "logs" / "supervisor.log").read_text(errors="replace")[-6000:],
                  file=sys.stderr)
            _stop_supervisor(base)
            return 1
        time.sleep(0.3)
    state = _read_state(base)
    print(f"cluster up in {state['startup_seconds']:.1f}s")
    print(f"  kubeconfig:    {state['kubeconfig']}")
    print(f"  extender port: {state['extender_port']}  (kube-scheduler calls "
          f"{state['extender_url']}/filter)")
    print(f"  logs:          {state['log_dir']}")
    print(f"  state:         {base}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = Cluster(nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                      extender_port=args.extender_port, node_cache_capable=not args.no_node_cache,
                      base_dir=Path(args.dir), bin_dir=binaries_dir())
    try:
        cluster.up()
        print(f"ready in {cluster.startup_seconds:.1f}s", flush=True)
        (Path(args.dir) / "ready").write_text("ok\n")
        while not stop:
            cluster.check_alive()
            time.sleep(0.5)
    except ClusterError as e:
        print(e, flush=True)
        return 1
    finally:
        cluster.down(remove=False)
    return 0


def _stop_supervisor(base: Path, timeout: float = 30.0) -> None:
    sup = base / "supervisor.pid"
    if sup.is_file():
        pid = int(sup.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    # Children the supervisor could not stop: kill their groups, but only if the
    # pid still runs one of our binaries (pids get reused).
    state = _read_state(base)
    for pid in state.get("pids", {}).values():
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if state.get("bin_dir", "\0").encode() in cmdline:
                os.killpg(pid, signal.SIGKILL)


def _cmd_down(args: argparse.Namespace) -> int:
    base = _current()
    if base is None:
        print("no cluster is up")
        return 0
    _stop_supervisor(base)
    (RUN_ROOT / "current").unlink(missing_ok=True)
    if args.keep:
        print(f"cluster down; logs kept in {base / 'logs'}")
    else:
        shutil.rmtree(base, ignore_errors=True)
        print("cluster down")
    return 0


def _processes_with_run_id(run_id: str) -> list[tuple[int, str]]:
    marker = f"{RUN_ID_ENV}={run_id}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(proc.name), cmd.strip()))
    return found


def _cmd_leftovers(args: argparse.Namespace) -> int:
    """Processes that inherited GPUROSTER_RUN_ID=<id> and still run: report, kill, fail."""
    left = [(pid, cmd) for pid, cmd in _processes_with_run_id(args.run_id) if cmd]
    if not left:
        print(f"no process left behind (run {args.run_id})")
        return 0
    print(f"processes left behind by run {args.run_id}:", file=sys.stderr)
    for pid, cmd in left:
        print(f"  {pid} {cmd[:200]}", file=sys.stderr)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return 1


def _cmd_show(key: str) -> int:
    base = _current()
    state = _read_state(base) if base else {}
    if not state or not (base and (base / "ready").is_file()):
        print("no cluster is up (run `make cluster-up`)", file=sys.stderr)
        return 1
    print(state[key] if key != "status" else json.dumps(state, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("up", "serve"):
        p = sub.add_parser(name)
        p.add_argument("--nodes", type=int, default=4)
        p.add_argument("--gpus-per-node", type=int, default=8)
        p.add_argument("--extender-port", type=int, default=0)
        p.add_argument("--no-node-cache", action="store_true",
                       help="extender gets full Node objects (nodeCacheCapable: false)")
        p.add_argument("--timeout", type=float, default=180.0)
        p.add_argument("--dir", required=name == "serve",
                       help="state directory (default: a new /tmp/gpuroster-cluster-*)")
    down = sub.add_parser("down")
    down.add_argument("--keep", action="store_true", help="keep the logs")
    sub.add_parser("kubeconfig")
    sub.add_parser("extender-port")
    sub.add_parser("status")
    left = sub.add_parser("leftovers", help="fail if processes of a run are still alive")
    left.add_argument("--run-id", default=os.environ.get(RUN_ID_ENV, ""))
    args = parser.parse_args(argv)
    if args.cmd == "up":
        return _cmd_up(args)
    if args.cmd == "serve":
        return _cmd_serve(args)
    if args.cmd == "down":
        return _cmd_down(args)
    if args.cmd == "leftovers":
        if not args.run_id:
            parser.error(f"--run-id or ${RUN_ID_ENV} is required")
        return _cmd_leftovers(args)
    return _cmd_show({"kubeconfig": "kubeconfig", "extender-port": "extender_port",
                      "status": "status"}[args.cmd])


if __name__ == "__main__":
    sys.exit(main())

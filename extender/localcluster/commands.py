"""`gpuroster cluster`: a local control plane in the background, for make targets and you.

    gpuroster cluster build                  build (or reuse) the pinned binaries
    gpuroster cluster bin-dir                where they are (helm, kubectl, ...)
    gpuroster cluster up [--nodes N] [--gpus-per-node G] [--extender-port P]
                         [--gpus device-plugin|dra] [--nvlink-domain-size D]
    gpuroster cluster down [--keep]
    gpuroster cluster kubeconfig | extender-port | status
    gpuroster cluster leftovers --run-id ID  fail if processes of a test run outlived it

`up` starts a supervisor (`gpuroster cluster serve --dir D`, in a session of its
own) that runs the control plane until `down`; `~/.cache/gpuroster/run/current`
points at its state directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from extender.localcluster import processes
from extender.localcluster.cluster import (
    GPU_MODES,
    RUN_ID_ENV,
    RUN_ROOT,
    Cluster,
    ClusterError,
    binaries_dir,
)


def _current() -> Path | None:
    pointer = RUN_ROOT / "current"
    if not pointer.is_file():
        return None
    base = Path(pointer.read_text().strip())
    return base if base.is_dir() else None


def _read_state(base: Path) -> dict[str, Any]:
    path = base / "state.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _cmd_up(args: argparse.Namespace) -> int:
    base = _current()
    if base is not None:
        sup = base / "supervisor.pid"
        if sup.is_file() and processes.alive(int(sup.read_text())) and (base / "ready").is_file():
            state = _read_state(base)
            print(f"cluster already up: kubeconfig {state['kubeconfig']}, "
                  f"extender port {state['extender_port']}")
            return 0
    try:
        binaries_dir(build=True)  # reused when built; the supervisor needs them
    except subprocess.CalledProcessError as e:
        print(f"could not build the control-plane binaries (exit {e.returncode})",
              file=sys.stderr)
        return 1
    if args.dir:
        base = Path(args.dir)
        base.mkdir(parents=True, exist_ok=True)
    else:
        base = Path(tempfile.mkdtemp(prefix="gpuroster-cluster-"))
    (base / "logs").mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "extender.cli", "cluster", "serve", "--dir", str(base),
            "--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus_per_node),
            "--gpus", args.gpus, "--nvlink-domain-size", str(args.nvlink_domain_size)]
    if args.extender_port:
        argv += ["--extender-port", str(args.extender_port)]
    if args.no_node_cache:
        argv.append("--no-node-cache")
    with (base / "logs" / "supervisor.log").open("ab") as log:
        supervisor = subprocess.Popen(argv, cwd=base, stdin=subprocess.DEVNULL, stdout=log,
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
                      base_dir=Path(args.dir), bin_dir=binaries_dir(), gpus=args.gpus,
                      nvlink_domain_size=args.nvlink_domain_size)
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
        while processes.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if processes.alive(pid):
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
        print("no cluster is up (run `gpuroster cluster up` or `make cluster-up`)",
              file=sys.stderr)
        return 1
    print(state[key] if key != "status" else json.dumps(state, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuroster cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build (or reuse) the pinned binaries; print their directory")
    sub.add_parser("bin-dir", help="print the directory of the pinned binaries")
    for name in ("up", "serve"):
        p = sub.add_parser(name)
        p.add_argument("--nodes", type=int, default=4)
        p.add_argument("--gpus-per-node", type=int, default=8)
        p.add_argument("--extender-port", type=int, default=0)
        p.add_argument("--no-node-cache", action="store_true",
                       help="extender gets full Node objects (nodeCacheCapable: false)")
        p.add_argument("--gpus", choices=GPU_MODES, default="device-plugin",
                       help="how nodes offer GPUs: nvidia.com/gpu (device plugin) or DRA "
                            "devices in ResourceSlices published by a fake DRA driver")
        p.add_argument("--nvlink-domain-size", type=int, default=0,
                       help="with --gpus dra: GPUs per NVLink domain (0: no such attribute)")
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
    args = parser.parse_args(None if argv is None else list(argv))
    if args.cmd in ("build", "bin-dir"):
        print(binaries_dir(build=args.cmd == "build"))
        return 0
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

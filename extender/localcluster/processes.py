"""Child processes of a local cluster: one process group each, one log file
each, and a guarantee that they stop with their owner.

Every child runs in its own session (so a signal reaches its whole group) and,
where ``setpriv`` exists, with a parent-death signal, so a SIGKILLed owner
does not leave orphans. The parent-death signal fires when the *thread* that
started the child exits: start clusters from a thread that outlives them (the
main thread, normally).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

_SETPRIV = shutil.which("setpriv")


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Group:
    """The processes of one cluster, stopped in reverse start order."""

    log_dir: Path
    children: list[Child] = field(default_factory=list)
    stopped: set[str] = field(default_factory=set)  # stopped on purpose by stop_one()

    def start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        prefix = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [*prefix, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        child = Child(name, list(argv), log, popen)
        self.children.append(child)
        return child

    def stop_one(self, name: str, timeout: float = 5.0, hard: bool = False) -> Child:
        """Stop one child (SIGTERM, or SIGKILL with ``hard``) for a fault test; it stays
        listed, so :meth:`restart` brings it back with the same argv (same ports), and
        :meth:`dead` does not report it while stopped on purpose."""
        child = self._named(name)
        _signal_group(child.popen, signal.SIGKILL if hard else signal.SIGTERM)
        try:
            child.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(child.popen, signal.SIGKILL)
            child.popen.wait(5)
        _signal_group(child.popen, signal.SIGKILL)
        self.stopped.add(name)
        return child

    def restart(self, name: str) -> Child:
        """Start a child stopped by :meth:`stop_one` again, in its place in the stop order."""
        old = self._named(name)
        if old.alive():
            raise RuntimeError(f"{name} is still running")
        i = self.children.index(old)
        new = self.start(name, old.argv)
        self.children.pop()  # start() appended it: put it back where it was
        self.children[i] = new
        self.stopped.discard(name)
        return new

    def _named(self, name: str) -> Child:
        for child in self.children:
            if child.name == name:
                return child
        raise KeyError(f"no process named {name!r}")

    def dead(self) -> list[Child]:
        return [c for c in self.children if not c.alive() and c.name not in self.stopped]

    def stop(self, timeout: float = 3.0) -> None:
        # State is throwaway: a short grace, then SIGKILL (kube-apiserver can
        # linger >10 s on SIGTERM while the scheduler retries a pod).
        if not self.children:
            return
        started = time.monotonic()
        for child in reversed(self.children):
            _signal_group(child.popen, signal.SIGTERM)
        deadline = started + timeout
        report = []
        for child in reversed(self.children):
            remaining = max(0.1, deadline - time.monotonic())
            how = "exited"
            try:
                child.popen.wait(remaining)
            except subprocess.TimeoutExpired:
                how = "killed"
                _signal_group(child.popen, signal.SIGKILL)
                child.popen.wait(5)
            # Reap anything else left in the group (children of children).
            _signal_group(child.popen, signal.SIGKILL)
            report.append(f"{child.name} {how} ({child.popen.returncode}) after "
                          f"{time.monotonic() - started:.2f}s")
        self.children.clear()
        self.stopped.clear()
        with contextlib.suppress(OSError), (self.log_dir / "stop.txt").open("a") as f:
            f.write("\n".join(report) + "\n")


def stop_process(popen: subprocess.Popen[Any], timeout: float = 10.0,
                 hard: bool = False) -> None:
    """Stop one process this test started itself (not a cluster child): SIGTERM (SIGKILL
    with ``hard``), ``timeout`` seconds to exit, then SIGKILL. A no-op once it has exited."""
    if popen.poll() is not None:
        return
    popen.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(5)


def _signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The child leads its own session, so its pgid is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, sig)


# --- stopping everything at interpreter exit and on SIGINT/SIGTERM ----------

_lock = threading.Lock()
_stoppers: dict[int, Callable[[], None]] = {}
_installed = False


def register(key: int, stop: Callable[[], None]) -> None:
    """Call ``stop`` at exit or on SIGINT/SIGTERM unless :func:`unregister`ed first."""
    global _installed
    with _lock:
        _stoppers[key] = stop
        if _installed:
            return
        _installed = True
    atexit.register(stop_all)
    if threading.current_thread() is threading.main_thread():
        # SIGINT normally raises KeyboardInterrupt, whose unwinding (fixture
        # teardown, ``with``, atexit) stops clusters; the others would kill the
        # interpreter without any of that.
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            if signal.getsignal(sig) is not signal.default_int_handler:
                _chain(sig)


def unregister(key: int) -> None:
    with _lock:
        _stoppers.pop(key, None)


def stop_all() -> None:
    with _lock:
        stoppers = list(_stoppers.values())
        _stoppers.clear()
    for stop in stoppers:
        with contextlib.suppress(Exception):
            stop()


def _chain(sig: signal.Signals) -> None:
    previous = signal.getsignal(sig)
    if previous == signal.SIG_IGN:
        return  # the owner chose to ignore it (e.g. a background job): so do we

    def handler(signum: int, frame: FrameType | None) -> None:
        stop_all()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(sig, handler)


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
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


def alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

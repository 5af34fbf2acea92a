"""Load generator for the extender verbs over loopback.

    python -m extender.api.loadbench [--nodes 1000] [--seconds 5] [--client go|python]

Starts `gpuroster`'s real app and controller in a child process (a static
in-memory cluster of `--nodes` 8-GPU nodes, one admitted 4x2 gang, one
waiting gang; one plan step run before serving), then drives it from this
process with keep-alive HTTP clients and prints p50 / p99 latency and
throughput for:

- filter + prioritize with NodeNames (nodeCacheCapable: true), per pair;
- filter + prioritize with a full NodeList (nodeCacheCapable: false);
- filter alone (throughput).

The default client is a small Go program (`goclient/`, built once into
~/.cache/gpuroster/bin): Go's net/http with keep-alive, as kube-scheduler
calls an extender, and light enough not to crowd the server off two cores.
`--client python` drives it from this process instead (http.client, one
thread per connection): slower, and its own CPU shows in the tail.

Each line also says what else shared the machine during that run, since on
two cores the tail of a pair is mostly not the server's: the hypervisor's steal
(share of CPU time the host took from this VM, /proc/stat), the Go client's own
garbage collections, and the server's own time (its histogram: the bound under
which 99% of the handler times fell). `--runs N` repeats everything on the same
server and prints each run's p99 and their median; the verdict uses the worst.

Thresholds: p99 <= 5 ms (names), <= 25 ms (full NodeList), >= 500 filter
requests/s; the figures measured are in docs/benchmarks.md ("Extender verbs").
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from starlette.types import ASGIApp, Message, Receive, Scope, Send

THRESHOLDS = {"names_p99_ms": 5.0, "full_p99_ms": 25.0, "filter_rps": 500.0}


def _node(i: int) -> dict[str, Any]:
    name = f"gpu-node-{i}"
    res = {"cpu": "256", "memory": "2Ti", "pods": "1000", "ephemeral-storage": "10Ti",
           "nvidia.com/gpu": "8"}
    return {
        "metadata": {"name": name, "uid": f"00000000-0000-0000-0000-{i:012d}",
                     "resourceVersion": str(1000 + i), "creationTimestamp": "2026-12-01T00:00:00Z",
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "type": "kwok",
                                "gpuroster.io/topology-order": str(i)},
                     "annotations": {"kwok.x-k8s.io/node": "fake",
                                     "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake",
                             "effect": "NoSchedule"}]},
        "status": {"capacity": dict(res), "allocatable": dict(res),
                   "conditions": [{"type": t, "status": s, "reason": "KubeletReady",
                                   "lastHeartbeatTime": "2026-12-01T00:00:00Z",
                                   "lastTransitionTime": "2026-12-01T00:00:00Z",
                                   "message": "kwok"} for t, s in
                                  (("Ready", "True"), ("MemoryPressure", "False"),
                                   ("DiskPressure", "False"), ("PIDPressure", "False"))],
                   "addresses": [{"type": "InternalIP", "address": "10.255.0.1"}],
                   "nodeInfo": {"architecture": "amd64", "kubeletVersion": "fake",
                                "operatingSystem": "linux", "machineID": "", "bootID": "",
                                "kernelVersion": "", "osImage": "", "systemUUID": "",
                                "containerRuntimeVersion": "", "kubeProxyVersion": ""}},
    }


def _pod(name: str, gang: str, size: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-12-01T00:00:00Z",
                     "annotations": {"gpuroster.io/gang": gang,
                                     "gpuroster.io/gang-size": str(size),
                                     "gpuroster.io/expected-duration": "6h"}},
        "spec": {"containers": [{"name": "main", "image": "x",
                                 "resources": {"requests": {"nvidia.com/gpu": "2"},
                                               "limits": {"nvidia.com/gpu": "2"}}}],
                 "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Equal",
                                  "value": "fake", "effect": "NoSchedule"}]},
        "status": {"phase": "Pending"},
    }


class _StaticCluster:
    """A `kube.Kube` holding a fixed cluster; writes succeed and change nothing."""

    def __init__(self, nodes: int) -> None:
        self.items: dict[str, list[dict[str, Any]]] = {
            "nodes": [_node(i) for i in range(nodes)],
            "pods": [_pod(f"admitted-{i}", "a", 4) for i in range(4)]
            # gang-size 5 with 4 pods: it waits ("4 of 5 pods"), every node fails
            + [_pod(f"waiting-{i}", "w", 5) for i in range(4)],
            "deployments": [], "configmaps": []}

    def list(self, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        return list(self.items[kind]), "1"

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              timeout_seconds: int) -> Iterator[dict[str, Any]]:
        time.sleep(timeout_seconds)
        return iter(())

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> None:
        return None

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return {}

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        return None

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        return None

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        return None

    def evict(self, namespace: str, name: str) -> None:
        return None

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


class Replay:
    """ASGI wrapper for `--replay-answers`: a POST's first answer comes from the app, and
    every later POST with the same path and body gets that answer back without the
    app doing any work. Same process, threads, uvicorn and bytes on the wire: what is
    left of the tail then is loopback, uvicorn, the client and the machine."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.answers: dict[tuple[str, bytes], list[Message]] = {}
        self.computed = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        key = (scope["path"], body)
        answer = self.answers.get(key)
        if answer is not None:
            for message in answer:
                await send(message)
            return
        sent: list[Message] = []

        async def again() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def record(message: Message) -> None:
            sent.append(message)
            await send(message)

        self.computed += 1
        await self.app(scope, again, record)
        self.answers[key] = sent


def serve(port: int, nodes: int, replay: bool = False) -> None:
    import gc
    import logging

    import uvicorn

    from extender import config
    from extender.controller import main

    logging.basicConfig(level=logging.WARNING)
    settings = config.Settings(step_seconds=3600, port=port, bind_address="127.0.0.1")
    client = _StaticCluster(nodes)
    controller, app = main.build(settings, client=client)
    for inf in controller.cache.all():
        inf.relist()
    controller.run_step()
    gc.freeze()  # as the step loop does after every step
    served: ASGIApp = Replay(app) if replay else app
    uvicorn.run(served, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Drive = tuple[list[float], int, float, int | None]  # samples, requests, seconds, client GCs


def _drive(port: int, bodies: list[tuple[str, bytes]], seconds: float,
           clients: int) -> Drive:
    """Each client sends `bodies` in turn (one round = one sample) for `seconds`."""
    samples: list[float] = []
    lock = threading.Lock()
    requests = [0]
    stop = time.perf_counter() + seconds

    def run() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine: list[float] = []
        n = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            for path, body in bodies:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    raise RuntimeError(f"{path}: {r.status} {data[:200]!r}")
                n += 1
            mine.append(time.perf_counter() - t0)
        conn.close()
        with lock:
            samples.extend(mine)
            requests[0] += n

    gc.collect()
    gc.freeze()  # the generator's own GC pauses are not the server's latency
    t_start = time.perf_counter()
    threads = [threading.Thread(target=run) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, requests[0], time.perf_counter() - t_start, None


GO_CLIENT = os.path.join(os.path.dirname(__file__), "goclient")


def _go_client() -> str | None:
    """Path of the Go client (built once into the cache), or None without Go."""
    import hashlib
    import shutil

    go = shutil.which("go")
    if go is None:
        return None
    from pathlib import Path

    src = b"".join(Path(GO_CLIENT, f).read_bytes() for f in ("main.go", "go.mod"))
    cache = os.environ.get("GPUROSTER_CACHE", os.path.expanduser("~/.cache/gpuroster"))
    exe = os.path.join(cache, "bin", f"goclient-{hashlib.sha256(src).hexdigest()[:12]}")
    if not os.path.exists(exe):
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        subprocess.run([go, "build", "-o", exe + ".tmp", "."], cwd=GO_CLIENT, check=True,
                       env=dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod"))
        os.replace(exe + ".tmp", exe)
    return exe


def _drive_go(exe: str, port: int, bodies: list[tuple[str, bytes]], seconds: float,
              clients: int) -> Drive:
    """`_drive`, with the Go client: net/http keep-alive, as kube-scheduler calls."""
    import tempfile

    assert len({b for _, b in bodies}) == 1, "the Go client sends one body to every path"
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(bodies[0][1])
        f.flush()
        out = subprocess.run([exe, "-url", f"http://127.0.0.1:{port}", "-body", f.name,
                              "-paths", ",".join(p for p, _ in bodies), "-seconds",
                              str(seconds), "-clients", str(clients)],
                             check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    return (list(got["samples"]), int(got["requests"]), float(got["elapsed"]),
            int(got["gcs"]))


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time so far (/proc/stat: user, nice, system, idle, iowait, irq,
    softirq, steal), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            first = f.readline().split()
    except OSError:
        return None
    if len(first) < 9 or first[0] != "cpu":
        return None
    return [int(x) for x in first[1:9]]


def steal_pct(before: list[int] | None, after: list[int] | None) -> float | None:
    """Share of the machine's CPU time the hypervisor took between two `cpu_ticks`."""
    if before is None or after is None:
        return None
    d = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(d)
    return 100.0 * d[7] / total if total > 0 else None


REQUEST_HISTOGRAM = "gpuroster_extender_request_duration_seconds"


def _histogram_samples(metrics_text: str, suffix: str) -> Iterator[tuple[dict[str, str], float]]:
    """(labels, value) of each sample of the server's request-duration histogram whose
    name ends in `suffix` (`_bucket`, `_sum`, `_count`)."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == REQUEST_HISTOGRAM + suffix:
                yield sample.labels, sample.value


def handler_buckets(metrics_text: str) -> dict[str, dict[float, float]]:
    """verb -> {bucket bound in seconds: requests so far at or under it}, all outcomes
    added, from the server's request-duration histogram."""
    out: dict[str, dict[float, float]] = {}
    for labels, value in _histogram_samples(metrics_text, "_bucket"):
        by_le = out.setdefault(labels["verb"], {})
        bound = float(labels["le"])  # "+Inf" reads as inf
        by_le[bound] = by_le.get(bound, 0.0) + value
    return out


def handler_means_ms(metrics_text: str) -> dict[str, float]:
    """verb -> mean handler time (ms) over every request so far, all outcomes added."""
    totals: dict[str, list[float]] = {}
    for i, suffix in enumerate(("_sum", "_count")):
        for labels, value in _histogram_samples(metrics_text, suffix):
            totals.setdefault(labels["verb"], [0.0, 0.0])[i] += value
    return {verb: t / n * 1000.0 for verb, (t, n) in sorted(totals.items()) if n}


def handler_p99_bound(before: dict[str, dict[float, float]],
                      after: dict[str, dict[float, float]], verb: str) -> float | None:
    """The smallest histogram bound (ms) under which 99% of `verb`'s handler times fell
    between two `handler_buckets`, or None when there were none."""
    b, a = before.get(verb, {}), after.get(verb, {})
    counts = {le: a[le] - b.get(le, 0.0) for le in a}
    total = counts.get(float("inf"), 0.0)
    if total <= 0:
        return None
    for le in sorted(counts):
        if counts[le] >= 0.99 * total:
            return le * 1000.0
    return None


def pct(xs: list[float], q: float) -> float:
    """The q-quantile of `xs` (seconds) in ms, nearest rank; NaN for no samples.
    Shared by the load benches (`bench/load.py`, `bench/round.py`)."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000.0 if s else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m extender.api.loadbench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=1,
                   help="concurrent keep-alive connections for the latency runs")
    p.add_argument("--throughput-clients", type=int, default=4)
    p.add_argument("--runs", type=int, default=1,
                   help="repeat every case this many times on the same server; each run's "
                        "p99 and the median are printed, the verdict uses the worst")
    p.add_argument("--client", choices=("go", "python"), default="go",
                   help="load generator: Go net/http like kube-scheduler (default; "
                        "needs `go`), or this Python process")
    p.add_argument("--replay-answers", action="store_true",
                   help="baseline: the server answers each repeated request with its first "
                        "answer, doing no work (shows the tail that is not the server's)")
    p.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    if args.serve:
        serve(args.serve, args.nodes, args.replay_answers)
        return 0
    drive = _drive
    if args.client == "go":
        exe = _go_client()
        if exe is None:
            print("no `go` on PATH: use --client python", file=sys.stderr)
            return 2
        drive = lambda *a: _drive_go(exe, *a)  # noqa: E731
    port = _free_port()
    child = subprocess.Popen([sys.executable, "-m", "extender.api.loadbench", "--serve",
                              str(port), "--nodes", str(args.nodes)]
                             + (["--replay-answers"] if args.replay_answers else []),
                             env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or child.poll() is not None:
                print("server did not start", file=sys.stderr)
                return 1
            time.sleep(0.2)
        nodes = [_node(i) for i in range(args.nodes)]
        names = [n["metadata"]["name"] for n in nodes]
        go = (",", ":")  # compact, as Go writes it
        cases = []
        for label, pod in (("admitted pod", _pod("admitted-0", "a", 4)),
                           ("waiting pod", _pod("waiting-0", "w", 5))):
            by_names = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names},
                                  separators=go).encode()
            full = json.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": nodes},
                               "NodeNames": None}, separators=go).encode()
            cases.append((label, by_names, full))

        def metrics_text() -> str:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                c.request("GET", "/metrics")
                return c.getresponse().read().decode()
            finally:
                c.close()

        def metrics_now() -> dict[str, dict[float, float]]:
            return handler_buckets(metrics_text())

        def measure(bodies: list[tuple[str, bytes]], clients: int) -> tuple[Drive, str]:
            """One run, and what else shared the machine meanwhile, as text."""
            m0, t0 = metrics_now(), cpu_ticks()
            got = drive(port, bodies, args.seconds, clients)
            steal, m1 = steal_pct(t0, cpu_ticks()), metrics_now()
            notes = [] if steal is None else [f"steal {steal:.1f}%"]
            if got[3] is not None:
                notes.append(f"client GCs {got[3]}")
            bounds = []
            for path, _ in bodies:
                verb = path.strip("/")
                bound = handler_p99_bound(m0, m1, verb)
                if bound is not None:
                    bounds.append(f"{verb} {bound:g} ms" if bound != float("inf")
                                  else f"{verb} > 2.5 s")
            notes.append("server 99% within " + ", ".join(bounds) if bounds
                         else "server handler not called")
            return got, "; ".join(notes)

        per_run: dict[str, list[float]] = {}  # line label -> p99 (or req/s) of each run
        print(f"extender verbs over loopback, {args.nodes} nodes, {args.seconds:g}s per run, "
              f"{os.cpu_count()} CPUs, {args.client} client"
              + (", answers replayed (the server does no work per request)"
                 if args.replay_answers else ""))
        for run in range(args.runs):
            if args.runs > 1:
                print(f" run {run + 1} of {args.runs}:")
            for label, by_names, full in cases:
                _drive(port, [("/filter", by_names)], 0.5, 1)  # warm up
                for kind, body in (("NodeNames", by_names), ("full NodeList", full)):
                    (s, _, _, _), notes = measure([("/filter", body), ("/prioritize", body)],
                                                  args.clients)
                    print(f"  {label}: filter+prioritize, {kind} ({len(body) // 1024} KiB): "
                          f"p50 {pct(s, .5):.2f} ms  p99 {pct(s, .99):.2f} ms  "
                          f"({len(s)} pairs)  [{notes}]")
                    per_run.setdefault(f"{label}, {kind} p99 ms", []).append(pct(s, .99))
                (s, n, t, _), notes = measure([("/filter", by_names)], args.throughput_clients)
                print(f"  {label}: filter alone, NodeNames, {args.throughput_clients} clients: "
                      f"{n / t:.0f} req/s  p50 {pct(s, .5):.2f} ms  p99 {pct(s, .99):.2f} ms"
                      f"  [{notes}]")
                per_run.setdefault(f"{label}, filter req/s", []).append(n / t)
        if args.runs > 1:
            print(" each run, then the median of the runs:")
            for key, xs in per_run.items():
                print(f"  {key}: {', '.join(f'{x:.2f}' for x in xs)}; "
                      f"median {statistics.median(xs):.2f}")
        means = handler_means_ms(metrics_text())
        inside = ", ".join(f"{verb} {ms:.2f} ms" for verb, ms in means.items())
        print(f"  server-side handler time, mean over every request above: {inside}")
        # The verdict takes the worst run of each case.
        results = {
            "names_p99_ms": max(x for k, xs in per_run.items() if "NodeNames p99" in k
                                for x in xs),
            "full_p99_ms": max(x for k, xs in per_run.items() if "full NodeList p99" in k
                               for x in xs),
            "filter_rps": min(x for k, xs in per_run.items() if "req/s" in k for x in xs)}
        ok = (results["names_p99_ms"] <= THRESHOLDS["names_p99_ms"]
              and results["full_p99_ms"] <= THRESHOLDS["full_p99_ms"]
              and results["filter_rps"] >= THRESHOLDS["filter_rps"])
        print(f"worst: NodeNames p99 {results['names_p99_ms']:.2f} ms (<= 5), full NodeList p99 "
              f"{results['full_p99_ms']:.2f} ms (<= 25), filter {results['filter_rps']:.0f} "
              f"req/s (>= 500): {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        child.terminate()
        child.wait(10)


if __name__ == "__main__":
    raise SystemExit(main())

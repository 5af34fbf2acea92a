"""Loopback load on the extender verbs at many concurrent connections, and a soak.

    python bench/load.py [--nodes 1000] [--levels 50,200,1000] [--seconds 20]
    python bench/load.py --soak 300 --connections 200      # `make soak`

The service is the real app and controller in a separate uvicorn process
(`extender.api.loadbench --serve`: a static in-memory cluster of `--nodes`
8-GPU nodes, an admitted gang, a waiting gang, one plan step run). This
process holds N keep-alive HTTP/1.1 connections at once on one asyncio loop
(no thread per connection, so the client is not what saturates) and sends
filter + prioritize with NodeNames (nodeCacheCapable), alternating the
admitted and the waiting pod. Per level it prints p50 / p99 / max of one
request, requests/s, and errors (non-200 answers, resets, timeouts); with
`--soak` it runs one level for that long and samples the server's RSS.

Exit status 1 on any error, or (soak) if RSS grows more than `--max-growth-mb`
over the second half of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from extender.api import loadbench  # noqa: E402
from extender.api.loadbench import pct  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bodies(nodes: int) -> list[tuple[bytes, bytes]]:
    names = [f"gpu-node-{i}" for i in range(nodes)]
    out = []
    for pod in (loadbench._pod("admitted-0", "a", 4), loadbench._pod("waiting-0", "w", 5)):
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names},
                          separators=(",", ":")).encode()
        for verb in (b"/filter", b"/prioritize"):
            head = (b"POST " + verb + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode() + b"\r\n\r\n")
            out.append((verb, head + body))
    return out


class Stats:
    def __init__(self) -> None:
        self.lat: list[float] = []
        self.errors: dict[str, int] = {}
        self.requests = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def one_connection(port: int, reqs: list[tuple[bytes, bytes]], stop: float, stats: Stats,
                         offset: int, timeout: float) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port),
                                                timeout)
    except (OSError, TimeoutError) as e:
        stats.error(f"connect: {type(e).__name__}")
        return
    i = offset
    try:
        while time.perf_counter() < stop:
            verb, raw = reqs[i % len(reqs)]
            i += 1
            t0 = time.perf_counter()
            writer.write(raw)
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), timeout)
            length = 0
            while True:
                line = await asyncio.wait_for(reader.readline(), timeout)
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await asyncio.wait_for(reader.readexactly(length), timeout)
            stats.lat.append(time.perf_counter() - t0)
            stats.requests += 1
            code = status_line.split(b" ")[1] if status_line else b"EOF"
            if code != b"200":
                stats.error(f"{verb.decode()} {code.decode()}: {body[:80]!r}")
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
        stats.error(f"{type(e).__name__}")
    finally:
        writer.close()


async def level(port: int, reqs: list[tuple[bytes, bytes]], connections: int, seconds: float,
                timeout: float = 30.0) -> tuple[Stats, float]:
    stats = Stats()
    stop = time.perf_counter() + seconds
    t0 = time.perf_counter()
    await asyncio.gather(*(one_connection(port, reqs, stop, stats, k, timeout)
                           for k in range(connections)))
    return stats, time.perf_counter() - t0


def rss_mb(pid: int) -> float:
    import psutil

    p = psutil.Process(pid)
    return float(sum(c.memory_info().rss for c in [p, *p.children(recursive=True)])) / 2**20


def start_server(nodes: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    child = subprocess.Popen([sys.executable, "-m", "extender.api.loadbench", "--serve",
                              str(port), "--nodes", str(nodes)], cwd=REPO, env=dict(os.environ))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
                if b" 200 " in s.recv(200):
                    return child, port
        except OSError:
            pass
        if child.poll() is not None:
            break
        time.sleep(0.2)
    child.kill()
    raise SystemExit("load: the server did not start")


def run_levels(port: int, pid: int, reqs: list[tuple[bytes, bytes]], levels: list[int],
               seconds: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for n in levels:
        stats, took = asyncio.run(level(port, reqs, n, seconds))
        errors = sum(stats.errors.values())
        print(f"  {n:5d} connections: {stats.requests:7d} requests in {took:5.1f}s "
              f"({stats.requests / took:6.0f}/s)  p50 {pct(stats.lat, .5):7.1f} ms  "
              f"p99 {pct(stats.lat, .99):7.1f} ms  max {pct(stats.lat, 1.0):7.1f} ms  "
              f"errors {errors} {stats.errors or ''}  server RSS {rss_mb(pid):.0f} MiB",
              flush=True)
        results[str(n)] = {"requests": stats.requests, "p50_ms": pct(stats.lat, .5),
                           "p99_ms": pct(stats.lat, .99), "errors": errors,
                           "rps": stats.requests / took}
    return results


def soak(port: int, pid: int, reqs: list[tuple[bytes, bytes]], connections: int,
         seconds: float, sample_every: float) -> tuple[Stats, list[tuple[float, float]]]:
    samples: list[tuple[float, float]] = [(0.0, rss_mb(pid))]
    total = Stats()
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        stats, _ = asyncio.run(level(port, reqs, connections,
                                     min(sample_every, seconds - (time.monotonic() - t0))))
        total.lat.extend(stats.lat[::10])  # every 10th: enough for percentiles, bounded here
        total.requests += stats.requests
        for k, v in stats.errors.items():
            total.errors[k] = total.errors.get(k, 0) + v
        samples.append((time.monotonic() - t0, rss_mb(pid)))
        print(f"  t={samples[-1][0]:5.0f}s  requests {total.requests:8d}  "
              f"errors {sum(total.errors.values())}  server RSS {samples[-1][1]:.1f} MiB",
              flush=True)
    return total, samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--levels", default="50,200,1000")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--soak", type=float, default=0.0, help="soak for this many seconds")
    p.add_argument("--connections", type=int, default=200, help="soak concurrency")
    p.add_argument("--sample-every", type=float, default=10.0)
    p.add_argument("--max-growth-mb", type=float, default=20.0)
    p.add_argument("--json", default="", help="write the figures here")
    args = p.parse_args(argv)
    reqs = bodies(args.nodes)
    child, port = start_server(args.nodes)
    try:
        print(f"extender verbs over loopback: {args.nodes} nodes, filter+prioritize with "
              f"NodeNames ({len(reqs[0][1]) // 1024} KiB bodies), one uvicorn process, "
              f"{os.cpu_count()} CPUs shared with this client")
        asyncio.run(level(port, reqs, 4, 1.0))  # warm up
        if args.soak:
            stats, samples = soak(port, child.pid, reqs, args.connections, args.soak,
                                  args.sample_every)
            half = [r for t, r in samples if t >= args.soak / 2]
            growth = max(half) - min(half) if half else 0.0
            errors = sum(stats.errors.values())
            print(f"soak: {args.soak:.0f}s at {args.connections} connections, "
                  f"{stats.requests} requests, errors {errors} {stats.errors or ''}; p50 "
                  f"{pct(stats.lat, .5):.1f} ms p99 {pct(stats.lat, .99):.1f} ms; server RSS "
                  f"start {samples[0][1]:.1f} MiB, peak {max(r for _, r in samples):.1f}, end "
                  f"{samples[-1][1]:.1f}; growth over the second half {growth:.1f} MiB "
                  f"(limit {args.max_growth_mb:g})")
            if args.json:
                Path(args.json).write_text(json.dumps({"requests": stats.requests,
                                                       "errors": errors, "rss": samples}))
            return 0 if errors == 0 and growth <= args.max_growth_mb else 1
        results = run_levels(port, child.pid, reqs,
                             [int(x) for x in args.levels.split(",")], args.seconds)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return 0 if all(r["errors"] == 0 for r in results.values()) else 1
    finally:
        child.terminate()
        child.wait(10)


if __name__ == "__main__":
    raise SystemExit(main())

"""The replay's clock: set up the world, start the peer, play the steps, read back.

Time: step t spans [T0 + t*S, T0 + (t+1)*S) on the wall clock, S = step
seconds; the peer gets T0 (gpuroster's controller takes it as its epoch, so
both count the same steps).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from kubernetes import client as k8s

from extender import config
from extender.planner import model
from extender.replay import peers as peer_registry
from extender.replay import readback, world
from extender.replay.peers import Context, Peer

# From submitting the scenario to step 0: the extender starts (about 2 s), syncs and
# scales the services, and their first replicas bind before step 0's sample.
START_SLACK_SECONDS = 5.0
# The sample of step t, as a fraction of the step.
SAMPLE_AT = 0.85


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
    samples: list[readback.Sample] = field(default_factory=list)
    # job index per cell where a pod held GPUs while its gang did not all run
    # (allocated, not useful: empty in `grid`); None for peers that never do that
    held: np.ndarray | None = None
    setup: dict[str, Any] = field(default_factory=dict)  # what the peer ran, for the result
    plan_ms: dict[str, float] | None = None  # the peer's plan times (`peers.Context`)
    plan_rounds: int = 0


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


def _sleep_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


def play(
    s: model.Scenario,
    policy: str | Peer,
    kubeconfig: str,
    extender_port: int,
    *,
    step_seconds: float = 3.0,
    namespace: str = "gpuroster-bench",
    work_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    observe: Callable[[readback.StepView], None] | None = None,
    on_extender: Callable[[int], None] | None = None,
    on_step: Callable[[int, Any], None] | None = None,
) -> Replay:
    """Run the scenario through the cluster under `policy` (a peer's name, or a peer)
    and rebuild its grid.

    `on_extender(port)`, if given, runs once the peer is ready. `on_step(t, peer)`,
    if given, runs late in each step (after the sample): fault tests kill and
    restart gpuroster's extender through the peer (`ExtenderPeer`).
    """
    peer = peer_registry.create(policy) if isinstance(policy, str) else policy
    api = world.api(kubeconfig)
    core: Any = k8s.CoreV1Api(api)  # typed as Any: plain dict bodies, as the API takes them
    apps: Any = k8s.AppsV1Api(api)
    G, T, S = s.cluster.gpus_per_node, s.duration_steps, step_seconds
    work_dir = work_dir or Path(os.environ.get("TMPDIR", "/tmp"))
    work_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(s, kubeconfig, api, core, apps, namespace, S, work_dir, extender_port)
    world.wipe(core, apps, namespace)
    world.create_nodes(core, s.cluster.nodes, G)
    peer.setup(ctx)

    # Room for the extender to start, sync and place the first replicas. Whole
    # milliseconds: the extender gets it as its epoch in that form, and both sides
    # must put an admission right after a boundary in the same step.
    ctx.t0 = t0 = round(time.time() + START_SLACK_SECONDS, 3)
    samples: list[readback.Sample] = []
    try:
        peer.start(ctx)
        if time.time() > t0 - (1 - SAMPLE_AT) * S:
            ctx.notes.append(f"{peer.name} was ready only {t0 - time.time():.1f} s before step 0")
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

        def submit(t: int) -> None:
            for j in by_arrival.get(t, []):
                submitted.add(j.name)
                peer.submit(ctx, j, t)

        if peer.after_sample:
            _sleep_until(t0 - (1 - SAMPLE_AT) * S)
            submit(0)
        for t in range(T):
            if not peer.after_sample:
                _sleep_until(t0 + t * S - 0.9 * tail)
                submit(t)
            _sleep_until(t0 + t * S + SAMPLE_AT * S)
            samples.append(readback.sample(core, namespace, t, s))
            peer.drive(ctx, t)
            if peer.after_sample:
                world.end_now(core, namespace, s, t, readback.gang_starts(s, samples), ctx.notes)
                submit(t + 1)
            else:
                world.schedule_ends(core, namespace, s, t0, S, readback.first_bound(samples),
                                    ctx.notes)
            peer.check(ctx, t)
            if progress:
                progress(t + 1, T)
            if observe:
                observe(readback.view(samples[-1], s, submitted, t))
            if on_step:
                on_step(t, peer)
        pods = core.list_namespaced_pod(
            namespace, label_selector=f"{world.BENCH_LABEL}=job").items
    finally:
        peer.stop()
    extender_log = peer.log_tail()
    names = [j.name for j in s.jobs] + [v.name for v in s.services]
    notes = ctx.notes
    back = peer.read_back(s, pods, samples, t0, S, notes)
    grid, starts, ends = back.grid, back.starts, back.ends
    out = Replay(
        s,
        peer.name,
        t0,
        S,
        grid,
        names,
        starts,
        ends,
        notes,
        extender_log,
        readback.pod_churn(samples, [v.name for v in s.services]),
        samples,
        back.held,
        dict(ctx.setup),
        ctx.plan_ms,
        ctx.plan_rounds,
    )
    peer.cleanup(ctx)
    world.wipe(core, apps, namespace)
    return out


@contextmanager
def local_cluster(nodes: int = 0) -> Iterator[tuple[str, int]]:
    """The local control plane (`extender.localcluster`), started for the replay and
    stopped after; its pinned binaries are built first if they are not there yet.

    Yields (kubeconfig, extender_port).
    """
    from extender.localcluster import Cluster, binaries_dir

    c = Cluster(nodes=nodes, bin_dir=binaries_dir(build=True))
    c.up()
    try:
        yield str(c.kubeconfig), int(c.extender_port)
    finally:
        c.down(remove=True)

"""What the cluster runs during a replay: a peer, chosen by name.

A peer is the scheduling system under test, as a small interface: which
processes run beside the control plane, how a job is handed to the cluster at
its arrival step, how a service is driven each step, and what is cleaned up.
Everything else is shared and peer-independent (`world`: nodes, namespace,
completion of pods after their true duration; `readback`: samples, grid rebuild;
`driving`: the clock), so the grids of all peers are read and scored the same way.

Today's peers: `gpuroster` and `fifo` (`extender` module), a `gpuroster serve`
process behind the local control plane's extender; `default` (`stock`), the stock
kube-scheduler alone; `kueue` and `kueue-reactive` (`kueue`), Kueue in front of it.
A new peer is a new module in this package with a `PEERS` mapping (name ->
factory), added to `_MODULES` below, or registered at run time with `register`.

The call order, for one replay (`ctx.t0` is set before `start`):

    setup(ctx)                 services exist, before step 0 (e.g. Deployments)
    start(ctx)                 processes up and ready (stop() always follows)
    for t in steps:
        submit(ctx, job, t)    late in step t-1, for each job arriving in step t
        ... sample of step t ...
        drive(ctx, t)          after step t's sample: services for step t+1
        check(ctx, t)          raise if a process died that should not have
    stop()                     processes down (in a `finally`)
    read_back(...)             the grid, from the samples (default: `readback.rebuild`)
    cleanup(ctx)               peer-specific objects gone (the namespace is wiped anyway)

"Late in step t-1" is the extender's quiet tail by default (`after_sample` False):
arrivals and job ends land there so gpuroster's boundary plan sees them. A peer
with no plan to respect sets `after_sample`: what step t brings (arrivals, the
GPUs of jobs whose last step was t-1) reaches the cluster right after step t-1's
sample, so it has a whole step to act before step t's sample.

Read-back contract (see `world`): job pods carry `BENCH_LABEL=job` and
`JOB_LABEL=<job>`, service pods `BENCH_LABEL=service` and `app=<service>`,
however they are created. `block_of` says where a job's GPUs are (default:
the admission block annotation, which gpuroster's extender writes).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extender.planner import model
from extender.replay import readback


@dataclass
class Context:
    """One replay, as a peer sees it. `core`/`apps`/`api` are kubernetes clients."""

    scenario: model.Scenario
    kubeconfig: str
    api: Any
    core: Any
    apps: Any
    namespace: str
    step_seconds: float
    work_dir: Path
    extender_port: int  # where the control plane's kube-scheduler calls an extender
    t0: float = 0.0  # wall time of step 0's start
    notes: list[str] = field(default_factory=list)
    setup: dict[str, Any] = field(default_factory=dict)  # what the peer ran, for the result
    # The peer's own plan times, for the result's `plan_ms` (p50, p99, max in ms) and
    # how many re-plans they cover; None for a peer that does not time its plans.
    plan_ms: dict[str, float] | None = None
    plan_rounds: int = 0


class Peer:
    """The interface, with what most peers share as defaults. Subclass it."""

    name: str = ""
    # The kube-scheduler profile the peer's pods name (`spec.schedulerName`);
    # None: the cluster's default profile.
    scheduler_name: str | None = None
    # Arrivals and job ends right after the previous step's sample, not in its tail.
    after_sample: bool = False

    def setup(self, ctx: Context) -> None:
        """Objects that exist before step 0 (services, queues, priority classes)."""

    def start(self, ctx: Context) -> None:
        """Start the peer's processes and return when they are ready."""

    def submit(self, ctx: Context, job: model.Job, t: int) -> None:
        """Hand a job arriving in step t to the cluster."""
        raise NotImplementedError

    def drive(self, ctx: Context, t: int) -> None:
        """After step t's sample: drive each service for step t+1 (demand, replicas)."""

    def check(self, ctx: Context, t: int) -> None:
        """Raise if a process the peer runs died unexpectedly."""

    def stop(self) -> None:
        """Stop the peer's processes; safe to call when `start` failed or never ran."""

    def cleanup(self, ctx: Context) -> None:
        """Remove what the namespace wipe does not (cluster-scoped objects)."""

    def log_tail(self) -> str:
        """The end of the peer's own log, for the replay's result."""
        return ""

    def block_of(
        self, name: str, members: Sequence[Any], node_index: dict[str, int], g: int,
        notes: list[str],
    ) -> model.Block | None:
        """Where job `name`'s GPUs are on the grid (see `readback.BlockReader`)."""
        return readback.admission_block(name, members, node_index, g, notes)

    def read_back(
        self, s: model.Scenario, pods: list[Any], samples: list[readback.Sample], t0: float,
        S: float, notes: list[str],
    ) -> readback.Rebuilt:
        """The grid as the cluster ran it. Default: job blocks from `block_of`, whole
        gangs only; a peer whose gangs can run partially reads pods instead
        (`readback.rebuild_from_pods`, which also returns the GPUs they held)."""
        grid, starts, ends = readback.rebuild(s, pods, samples, t0, S, notes, self.block_of)
        return readback.Rebuilt(grid, starts, ends)


Factory = Callable[[], Peer]

# Modules holding built-in peers; each defines PEERS: dict[str, Factory].
_MODULES = (
    "extender.replay.peers.extender",
    "extender.replay.peers.stock",
    "extender.replay.peers.kueue",
)
_registry: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Make a peer available by name (e.g. from a plugin)."""
    _registry[name] = factory


def _load() -> dict[str, Factory]:
    for module in _MODULES:
        peers: dict[str, Factory] = importlib.import_module(module).PEERS
        for name, factory in peers.items():
            _registry.setdefault(name, factory)
    return _registry


def names() -> list[str]:
    return sorted(_load())


def create(name: str) -> Peer:
    known = _load()
    if name not in known:
        raise ValueError(f"unknown peer {name!r} (known: {', '.join(sorted(known))})")
    return known[name]()

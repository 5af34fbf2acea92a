"""The planner's domain types: cluster, jobs, services, blocks, plan in and out.

Purely computational: standard library only. Every policy (fifo, the peers,
gpuroster) takes a `PlanInput` (what is known at step `now`) and returns a
`Plan` (what to do at step `now`, plus the grid it expects for the horizon).
The simulator and the Kubernetes adapter both speak these types.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

BATCH_TYPES: tuple[str, ...] = ("training", "batch-inference", "quantization")
REALTIME_TYPE = "realtime-inference"


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node


@dataclass(frozen=True, slots=True, order=True)
class Block:
    """A contiguous range of GPUs [start, start + size) in topology order."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def mask(self) -> int:
        return ((1 << self.size) - 1) << self.start

    def gpus(self) -> range:
        return range(self.start, self.start + self.size)

    def is_legal(self, cluster: Cluster) -> bool:
        """MODEL.md: <= G GPUs inside one node; > G GPUs as whole consecutive nodes."""
        g = cluster.gpus_per_node
        if not is_power_of_two(self.size) or self.start < 0 or self.end > cluster.gpus:
            return False
        if self.size <= g:
            return self.start // g == (self.end - 1) // g
        return self.start % g == 0 and self.size % g == 0

    def label(self, cluster: Cluster, node_names: list[str] | None = None) -> str:
        """Human form used in the `gpuroster.io/block` annotation.

        `node-3:0-3` (GPUs 0..3 of node 3) or `node-4..node-5` (whole nodes).
        """
        g = cluster.gpus_per_node

        def name(i: int) -> str:
            return node_names[i] if node_names else f"node-{i}"

        first = self.start // g
        if self.size <= g:
            lo = self.start - first * g
            return f"{name(first)}:{lo}-{lo + self.size - 1}"
        last = (self.end - 1) // g
        return f"{name(first)}..{name(last)}"


@dataclass(frozen=True, slots=True)
class Job:
    """Batch-like work as a scenario describes it (true duration included)."""

    name: str
    type: str
    gpus: int
    duration_steps: int
    estimate_steps: int
    arrival_step: int
    priority: float


@dataclass(frozen=True, slots=True)
class Service:
    """Real-time inference as a scenario describes it."""

    name: str
    priority: float
    max_swap: int
    demand: tuple[int, ...]
    forecast: tuple[int, ...]
    # The share of its demanded GPU-steps it must get (optional `service_level`, an
    # extension of MODEL.md v1); None: the planner's default.
    service_level: float | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    cluster: Cluster
    step_minutes: int
    horizon_steps: int
    duration_steps: int
    jobs: tuple[Job, ...]
    services: tuple[Service, ...]
    source: str = "<memory>"

    @property
    def steps_per_day(self) -> int:
        return max(1, round(24 * 60 / self.step_minutes))


# --- what a policy sees at step `now` -----------------------------------------


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """Arrived, not started. The planner knows its estimate, not its true duration."""

    name: str
    gpus: int
    estimate_steps: int
    arrival_step: int
    priority: float
    type: str = "training"
    # The nodes (indices in topology order) its pods may run on, as their node selector,
    # affinity and tolerations say; None: any node.
    nodes: frozenset[int] | None = None

    def allowed(self, cluster: Cluster) -> int:
        """Mask of the GPUs a block of this job may use."""
        return node_mask(self.nodes, cluster)


def node_mask(nodes: frozenset[int] | None, cluster: Cluster) -> int:
    """Mask of the GPUs of `nodes` (None: every GPU of the cluster)."""
    if nodes is None:
        return (1 << cluster.gpus) - 1
    return _node_mask(nodes, cluster.gpus_per_node)


@functools.lru_cache(maxsize=1024)
def _node_mask(nodes: frozenset[int], per_node: int) -> int:
    full = (1 << per_node) - 1
    return sum(full << (i * per_node) for i in nodes)


@dataclass(frozen=True, slots=True)
class RunningJob:
    """Started and pinned: it keeps `block` until it ends."""

    name: str
    gpus: int
    block: Block
    start_step: int
    estimate_steps: int
    priority: float
    type: str = "training"

    def expected_end(self, now: int) -> int:
        """First step it is expected to be gone; past its estimate, assume one more step."""
        return max(self.start_step + self.estimate_steps, now + 1)


@dataclass(frozen=True, slots=True)
class ServiceState:
    """A real-time service at step `now`.

    `forecast[k]` is the forecast for step now + k (at least `horizon` long).
    `past_demand` is the true demand of steps before now (oldest first).
    `current_gpus` is its GPU set at step now - 1 (empty at step 0), less `lost`
    GPUs that went with a node (NotReady or gone) since: replacing those is not a
    swap, so they come on top of `max_swap` this step.
    `reservation` is the fixed reservation a reserving baseline holds (the
    peak of the forecast over the evaluation window), where one is known.
    """

    name: str
    priority: float
    max_swap: int
    forecast: tuple[int, ...]
    past_demand: tuple[int, ...] = ()
    current_gpus: frozenset[int] = frozenset()
    reservation: int | None = None
    past_forecast: tuple[int, ...] = ()
    lost: int = 0
    # The nodes (indices) its pods may run on, by the pod template's node selector,
    # affinity and tolerations; None: any node.
    nodes: frozenset[int] | None = None
    # GPUs per replica: a replica's GPUs are on one node, so the service's set holds a
    # multiple of this on every node. Scenario services are 1 (any GPU will do).
    unit: int = 1
    # The most GPUs one node may hold for it (its pods' required anti-affinity to each
    # other on the node: one replica a node); 0: no limit.
    most_per_node: int = 0
    # The share of its demanded GPU-steps it must get (the `gpuroster.io/service-level`
    # objective); None: the planner's default. Sets the headroom over its forecast.
    service_level: float | None = None
    # GPUs it held at past steps, paired with `past_demand` from the end (what it was
    # given, not what it asked for); empty where unknown. With `reservation` it tells the
    # planner how the service has fared against a static reservation
    # (`servicing.reservation_lead`).
    past_held: tuple[int, ...] = ()

    def allowed(self, cluster: Cluster) -> int:
        """Mask of the GPUs this service may hold."""
        return node_mask(self.nodes, cluster)


@dataclass(frozen=True, slots=True)
class PlanInput:
    now: int
    cluster: Cluster
    horizon: int
    queued: tuple[QueuedJob, ...]
    running: tuple[RunningJob, ...]
    services: tuple[ServiceState, ...]
    unavailable_gpus: frozenset[int] = frozenset()
    steps_per_day: int = 24


@dataclass(slots=True)
class Plan:
    """A policy's answer at step `now`.

    Only `starts` and `service_gpus` are committed. The rest is the plan's
    view of the horizon, for explanations (`planned_start`) and the plan page.
    """

    now: int
    starts: dict[str, Block] = field(default_factory=dict)
    service_gpus: dict[str, frozenset[int]] = field(default_factory=dict)
    planned_start: dict[str, int] = field(default_factory=dict)
    planned_block: dict[str, Block] = field(default_factory=dict)
    service_counts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # GPUs planned for a service over its forecast at step now, for its recent forecast
    # error at its service level (`headroom`); policies without headroom leave it empty.
    headroom: dict[str, int] = field(default_factory=dict)
    # GPUs a service holds at step now over its curve (forecast and headroom): idle GPUs
    # no job is planned on by the next step (`Options.spare_fill`).
    spare: dict[str, int] = field(default_factory=dict)
    # How far a service is ahead of its static reservation's record, as a share of its
    # demand (`servicing.reservation_lead`; None: no record to read it from), for every
    # service whose lead the policy read; the controller reads the others' after planning.
    lead: dict[str, float | None] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

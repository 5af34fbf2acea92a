"""Prometheus metrics of the service, all in one place (names per KUBERNETES.md).

Counters and histograms are updated where things happen; the state of the
latest step (allocation, queue, services) is read at scrape time by
`StepCollector` from whatever `set_state_source` installed, so a scrape never
sees a half-written step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

EXTENDER_REQUEST_DURATION = Histogram(
    "gpuroster_extender_request_duration_seconds",
    "Time to answer a kube-scheduler extender call, by verb and outcome.",
    ["verb", "outcome"], buckets=_FAST, registry=REGISTRY)
PLAN_DURATION = Histogram(
    "gpuroster_plan_duration_seconds", "Time to re-plan the horizon (one policy call).",
    buckets=_FAST + (5.0, 10.0, 30.0), registry=REGISTRY)
GANG_ADMISSIONS = Counter(
    "gpuroster_gang_admissions_total", "Gangs admitted (given their block), by outcome.",
    ["outcome"], registry=REGISTRY)
BINDINGS = Counter(
    "gpuroster_bindings_total", "Pod bindings made by the extender, by outcome.",
    ["outcome"], registry=REGISTRY)
WATCH_RESTARTS = Counter(
    "gpuroster_watch_restarts_total", "Watch restarts, by kind and reason (gone, error, resync).",
    ["kind", "reason"], registry=REGISTRY)
STEPS = Counter("gpuroster_steps_total", "Plan-and-commit rounds run.", registry=REGISTRY)
STEP_FAILURES = Counter(
    "gpuroster_step_failures_total",
    "Rounds that failed before publishing (retried after a growing wait; the log has the "
    "first error of each streak).", registry=REGISTRY)
QUEUE_WAIT = Histogram(
    "gpuroster_queue_wait_seconds", "Arrival to admission of a gang, by priority.",
    ["priority"], buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400),
    registry=REGISTRY)
PLANNED_START_DELAY = Histogram(
    "gpuroster_planned_start_delay_seconds",
    "Admission time minus the first planned start the plan announced for the gang.",
    buckets=(-3600, -60, 0, 1, 5, 30, 60, 300, 900, 3600, 4 * 3600, 86400), registry=REGISTRY)
NODELIST_PARSES = Counter(
    "gpuroster_extender_nodelist_parses_total",
    "Extender calls with full Node objects, by how they were read: fast (Go's layout: "
    "names only) or full (a complete parse).", ["path"], registry=REGISTRY)
SHADOW_WRITES_BLOCKED = Counter(
    "gpuroster_shadow_writes_blocked_total",
    "Shadow mode: writes that reached the read-only client and were not sent, by verb "
    "(stays 0: shadow mode makes none).", ["verb"], registry=REGISTRY)
SHADOW_GANG_STARTS = Counter(
    "gpuroster_shadow_gang_starts_total",
    "Shadow mode: gangs the cluster's scheduler started, against the plan: on_time (in "
    "the step the plan first started it), later (the plan had started it in an earlier "
    "step), earlier (the plan had it start in a later step), unplanned (the plan had no "
    "start for it in its horizon).", ["versus"], registry=REGISTRY)
SHADOW_POD_PLACEMENTS = Counter(
    "gpuroster_shadow_pod_placements_total",
    "Shadow mode: pods of gangs the cluster's scheduler placed, by whether the node is "
    "one the plan's block for the gang had (planned), another (other), or the plan had "
    "no block for it (unplanned).", ["node"], registry=REGISTRY)
SHADOW_START_DELAY = Histogram(
    "gpuroster_shadow_start_delay_seconds",
    "Shadow mode: when the cluster's scheduler started a gang minus when the plan first "
    "started it (positive: gpuroster would have started it that much sooner).",
    buckets=(-3600, -60, 0, 1, 5, 30, 60, 300, 900, 3600, 4 * 3600, 86400), registry=REGISTRY)
ANNOTATION_ERRORS = Counter(
    "gpuroster_annotation_errors_total", "Pods or Deployments found with bad annotations.",
    registry=REGISTRY)


@dataclass
class StepState:
    """What the latest step knows, for gauges read at scrape time."""

    gpus_total: int = 0
    allocated_by_workload: dict[str, int] = field(default_factory=dict)
    useful_by_workload: dict[str, int] = field(default_factory=dict)
    value_rate: float = 0.0
    service_demand: dict[str, int] = field(default_factory=dict)
    service_allocated: dict[str, int] = field(default_factory=dict)
    # Per service: delivered service level over the last day of steps (where any demand
    # was seen), its objective, and the headroom GPUs planned over its forecast now.
    service_level: dict[str, float] = field(default_factory=dict)
    service_objective: dict[str, float] = field(default_factory=dict)
    service_headroom: dict[str, int] = field(default_factory=dict)
    service_spare: dict[str, int] = field(default_factory=dict)  # spare GPUs held now
    # service level over the plan's record, less what the static reservation would have
    # given (`servicing.reservation_lead`); absent without a record
    service_lead: dict[str, float] = field(default_factory=dict)
    queue_length: dict[str, int] = field(default_factory=dict)  # by priority
    queue_oldest_wait_seconds: dict[str, float] = field(default_factory=dict)
    step: int = 0
    shadow: Shadow | None = None  # set in shadow mode only


@dataclass
class Shadow:
    """Shadow mode: what the plan would do now that the cluster does not."""

    would_start_gangs: int = 0  # waiting gangs the plan starts now
    would_start_gpus: int = 0  # their GPUs: what it would give to waiting work now
    waiting_gangs: int = 0  # gangs waiting in the cluster (not placed)
    idle_gpus: int = 0  # GPUs free now in the cluster
    gated_pods: int = 0  # pods held by gpuroster's scheduling gate, which nobody lifts
    replicas_planned: dict[str, int] = field(default_factory=dict)  # by service
    replicas_actual: dict[str, int] = field(default_factory=dict)  # Deployment spec.replicas


def _source() -> (StepState | None):
    return None


def set_state_source(source: Callable[[], StepState | None]) -> None:
    global _source
    _source = source


class StepCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = _source() or StepState()
        alloc = GaugeMetricFamily("gpuroster_gpus_allocated",
                                  "GPUs held this step, by workload type.", labels=["workload"])
        useful = GaugeMetricFamily("gpuroster_gpus_useful",
                                   "GPUs doing useful work this step (services capped at "
                                   "demand), by workload type.", labels=["workload"])
        for w, n in sorted(s.allocated_by_workload.items()):
            alloc.add_metric([w], n)
        for w, n in sorted(s.useful_by_workload.items()):
            useful.add_metric([w], n)
        yield alloc
        yield useful
        yield GaugeMetricFamily("gpuroster_gpus", "GPUs the plan manages.", value=s.gpus_total)
        used = sum(s.useful_by_workload.values())
        yield GaugeMetricFamily("gpuroster_utilization",
                                "Useful GPUs / all GPUs this step (0..1).",
                                value=used / s.gpus_total if s.gpus_total else 0.0)
        yield GaugeMetricFamily("gpuroster_value_rate",
                                "Priority-weighted useful GPUs this step (value per step).",
                                value=s.value_rate)
        demand = GaugeMetricFamily("gpuroster_realtime_demand_gpus",
                                   "Real-time demand this step (forecast), by service.",
                                   labels=["service"])
        allocated = GaugeMetricFamily("gpuroster_realtime_allocated_gpus",
                                      "GPUs the plan holds for a service this step.",
                                      labels=["service"])
        short = GaugeMetricFamily("gpuroster_realtime_shortfall_gpus",
                                  "max(0, demand - allocated) this step, by service.",
                                  labels=["service"])
        for name in sorted(s.service_demand):
            d, a = s.service_demand[name], s.service_allocated.get(name, 0)
            demand.add_metric([name], d)
            allocated.add_metric([name], a)
            short.add_metric([name], max(0, d - a))
        yield demand
        yield allocated
        yield short
        level = GaugeMetricFamily(
            "gpuroster_realtime_service_level",
            "Share of a service's demanded GPU-steps it got over the last day of steps "
            "(demand as monitoring saw it, GPUs as planned), by service.", labels=["service"])
        objective = GaugeMetricFamily(
            "gpuroster_realtime_service_level_objective",
            "The service level a service must get (gpuroster.io/service-level or the "
            "default), by service.", labels=["service"])
        room = GaugeMetricFamily(
            "gpuroster_realtime_headroom_gpus",
            "GPUs planned for a service over its forecast this step, for its recent "
            "forecast error at its objective, by service.", labels=["service"])
        for name in sorted(s.service_level):
            level.add_metric([name], s.service_level[name])
        for name in sorted(s.service_objective):
            objective.add_metric([name], s.service_objective[name])
        for name in sorted(s.service_headroom):
            room.add_metric([name], s.service_headroom[name])
        spare = GaugeMetricFamily(
            "gpuroster_realtime_spare_gpus",
            "GPUs a service holds this step over its forecast and headroom: idle GPUs no job "
            "is planned on by the next step, given while its demand runs above its forecast, "
            "by service.", labels=["service"])
        for name in sorted(s.service_spare):
            spare.add_metric([name], s.service_spare[name])
        lead = GaugeMetricFamily(
            "gpuroster_realtime_reservation_lead",
            "Share of a service's demand over the steps the controller has a record of it "
            "got more than its static reservation (its forecast's peak) would have given "
            "it; above 0.01 its headroom over that reservation gives way to batch work, by "
            "service.", labels=["service"])
        for name in sorted(s.service_lead):
            lead.add_metric([name], s.service_lead[name])
        yield level
        yield objective
        yield room
        yield spare
        yield lead
        q = GaugeMetricFamily("gpuroster_queue_length", "Gangs waiting, by priority.",
                              labels=["priority"])
        oldest = GaugeMetricFamily("gpuroster_queue_oldest_wait_seconds",
                              "Wait so far of the oldest waiting gang, by priority.",
                              labels=["priority"])
        for p in sorted(s.queue_length):
            q.add_metric([p], s.queue_length[p])
            oldest.add_metric([p], s.queue_oldest_wait_seconds.get(p, 0.0))
        yield q
        yield oldest
        yield GaugeMetricFamily("gpuroster_step", "The step last committed.", value=s.step)
        yield from _shadow(s.shadow)


def _shadow(sh: Shadow | None) -> Iterator[GaugeMetricFamily]:
    yield GaugeMetricFamily("gpuroster_shadow_mode",
                            "1 in shadow mode (plans, writes nothing), else 0.",
                            value=1 if sh is not None else 0)
    if sh is None:
        return
    yield GaugeMetricFamily("gpuroster_shadow_would_start_gangs",
                            "Waiting gangs the plan would start now.",
                            value=sh.would_start_gangs)
    yield GaugeMetricFamily("gpuroster_shadow_would_start_gpus",
                            "GPUs the plan would give to waiting gangs now.",
                            value=sh.would_start_gpus)
    yield GaugeMetricFamily("gpuroster_shadow_waiting_gangs",
                            "Gangs waiting in the cluster (not all their pods placed).",
                            value=sh.waiting_gangs)
    yield GaugeMetricFamily("gpuroster_shadow_idle_gpus",
                            "GPUs nothing holds in the cluster now (usable nodes).",
                            value=sh.idle_gpus)
    yield GaugeMetricFamily("gpuroster_shadow_gated_pods",
                            "Pods held by gpuroster's scheduling gate, which shadow mode "
                            "never lifts (create pods without it while in shadow mode).",
                            value=sh.gated_pods)
    planned = GaugeMetricFamily("gpuroster_shadow_service_replicas_planned",
                                "Replicas the plan would set now, by service.",
                                labels=["service"])
    actual = GaugeMetricFamily("gpuroster_shadow_service_replicas_actual",
                               "Replicas the service's Deployment asks for now "
                               "(spec.replicas), by service.", labels=["service"])
    for name in sorted(sh.replicas_planned):
        planned.add_metric([name], sh.replicas_planned[name])
    for name in sorted(sh.replicas_actual):
        actual.add_metric([name], sh.replicas_actual[name])
    yield planned
    yield actual


REGISTRY.register(StepCollector())


def exposition() -> bytes:
    return generate_latest(REGISTRY)

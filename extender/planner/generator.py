"""Seeded generator of large, realistic scenarios (for the latency benchmark).

Purely computational (standard library + numpy), except `write`, which dumps a
scenario to a file in MODEL.md's version-1 format (YAML or JSON by suffix) so
that `scenario.py` loads it back unchanged.

The mix follows ../shared/notes/WORKLOADS.md:

- job sizes 1/2/4/8 GPUs with the Philly (Gavel) mix 0.70/0.10/0.15/0.05, plus,
  on clusters of several nodes, a tail of multi-node training gangs (whole
  nodes, powers of two, up to `max_gang` GPUs) that holds much of the GPU-time;
- durations 60 x 10^U(1.5, 3) s with p = 0.8, else 60 x 10^U(3, 4) s (32 min to
  7 days), rounded up to whole steps;
- arrivals diurnal (about 4x between the 14:00 peak and the 04:00 trough) and
  weekly (weekdays about 1.7x weekends); a `backlog` share is queued at step 0;
- a few real-time services with diurnal curves: a coding assistant swinging
  about 10x on weekdays (weekend peaks 4.5x lower), chat about 2x, serverless
  functions about 1.5x, image generation bursty;
- priorities 1..8, most work at the low end.

The same arguments (seed included) give the same scenario, on any machine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from extender.planner import model

PHILLY_SIZES: tuple[int, ...] = (1, 2, 4, 8)
PHILLY_P: tuple[float, ...] = (0.70, 0.10, 0.15, 0.05)
# The shape of real GPU pod logs (mix="trace"): most pods 1 GPU, a few 2/4/8, no gangs;
# between Philly's ~82% of jobs at 1 GPU and Alibaba PAI's ~97% (WORKLOADS.md).
TRACE_P: tuple[float, ...] = (0.90, 0.05, 0.03, 0.02)
MIXES: dict[str, tuple[float, ...]] = {"philly": PHILLY_P, "trace": TRACE_P}
PRIORITY_P: tuple[float, ...] = (0.22, 0.18, 0.15, 0.13, 0.11, 0.09, 0.07, 0.05)  # 1..8
TYPE_P: dict[str, float] = {"training": 0.6, "batch-inference": 0.25, "quantization": 0.15}
_PREFIX = {"training": "train", "batch-inference": "binf", "quantization": "quant"}

# name, weekday peak / trough, weekend peak divisor, within-hour burstiness (lognormal sigma)
SERVICE_KINDS: tuple[tuple[str, float, float, float], ...] = (
    ("coding-assistant", 10.0, 4.5, 0.05),
    ("chat", 2.0, 1.3, 0.05),
    ("functions", 1.5, 1.1, 0.05),
    ("image-gen", 3.0, 1.5, 0.35),
)


def generate(
    gpus: int,
    jobs: int,
    seed: int,
    gpus_per_node: int = 8,
    *,
    services: int | None = None,
    duration_steps: int = 48,
    horizon_steps: int = 24,
    step_minutes: int = 60,
    arrival_steps: int | None = None,
    backlog: float = 0.5,
    large_share: float | None = None,
    max_gang: int | None = None,
    service_share: float = 0.2,
    estimate_error: float = 0.0,
    forecast_error: float = 0.0,
    start_hour: int = 0,
    name: str | None = None,
    mix: str = "philly",
    burst: float = 0.0,
) -> model.Scenario:
    """A scenario of `gpus` GPUs and `jobs` batch-like jobs, fully determined by `seed`.

    `services` defaults to a few (1 at <= 16 GPUs up to 4 beyond 1,024);
    together their weekday peaks take about `service_share` of the cluster.
    Arrivals spread over `arrival_steps` (default the window), with a
    `backlog` share (default half) already queued at step 0. `large_share` is
    the share of jobs that are multi-node gangs (default 4% where the cluster
    has at least 4 nodes), of 2 nodes up to `max_gang` GPUs (default a quarter
    of the cluster, at most 256). `estimate_error` is the sigma of a lognormal
    error on `estimate_steps` (0 = exact); `forecast_error` likewise on each
    service's forecast (0 = exact). Step 0 is Monday `start_hour`:00.

    `mix` picks the job sizes: "philly" (above) or "trace", the shape of real GPU pod
    logs (`TRACE_P`: 90% 1 GPU, a few 2/4/8, no multi-node gangs unless `large_share`
    asks). `burst` is the sigma of a lognormal factor on each step's arrival rate (0 =
    the smooth diurnal rate): pods arrive in bursts, as in those logs.
    """
    _check(gpus >= 1, f"gpus must be >= 1, got {gpus}")
    _check(gpus_per_node >= 1, f"gpus_per_node must be >= 1, got {gpus_per_node}")
    _check(
        gpus % gpus_per_node == 0,
        f"gpus ({gpus}) must be a multiple of gpus_per_node ({gpus_per_node})",
    )
    _check(jobs >= 0, f"jobs must be >= 0, got {jobs}")
    _check(duration_steps >= 1, f"duration_steps must be >= 1, got {duration_steps}")
    _check(horizon_steps >= 1, f"horizon_steps must be >= 1, got {horizon_steps}")
    _check(step_minutes >= 1, f"step_minutes must be >= 1, got {step_minutes}")
    _check(0.0 <= backlog <= 1.0, f"backlog must be in [0, 1], got {backlog}")
    _check(0.0 <= service_share < 1.0, f"service_share must be in [0, 1), got {service_share}")
    _check(mix in MIXES, f"mix must be one of {', '.join(MIXES)}, got {mix!r}")
    _check(burst >= 0.0, f"burst must be >= 0, got {burst}")
    # (Written so that NaN fails too: a lognormal with a NaN sigma draws NaN durations.)
    _check(estimate_error >= 0.0, f"estimate_error must be >= 0, got {estimate_error}")
    _check(forecast_error >= 0.0, f"forecast_error must be >= 0, got {forecast_error}")
    cluster = model.Cluster(nodes=gpus // gpus_per_node, gpus_per_node=gpus_per_node)
    rng = np.random.default_rng(seed)
    span = arrival_steps if arrival_steps is not None else duration_steps
    _check(span >= 1, f"arrival_steps must be >= 1, got {span}")

    gang_sizes = _gang_sizes(cluster, max_gang)
    if large_share is None:
        large_share = 0.04 if gang_sizes and cluster.nodes >= 4 and mix == "philly" else 0.0
    _check(0.0 <= large_share <= 1.0, f"large_share must be in [0, 1], got {large_share}")
    if not gang_sizes:
        large_share = 0.0
    small_sizes = [s for s in PHILLY_SIZES if s <= gpus_per_node and s <= gpus]
    small_p = np.array([MIXES[mix][PHILLY_SIZES.index(s)] for s in small_sizes])
    small_p /= small_p.sum()

    arrivals = _arrivals(rng, jobs, span, backlog, step_minutes, start_hour, burst)
    types = list(TYPE_P)
    type_p = np.array(list(TYPE_P.values()))
    out_jobs: list[model.Job] = []
    for i, arrival in enumerate(arrivals):
        large = bool(rng.random() < large_share)
        kind = "training" if large else str(rng.choice(types, p=type_p))
        if large:
            size = int(gang_sizes[int(rng.integers(len(gang_sizes)))])
        else:
            size = int(rng.choice(small_sizes, p=small_p))
        seconds = _duration_seconds(rng)
        if kind == "quantization":
            seconds = min(seconds, 12 * 3600.0)  # quantization runs take hours, not days
        duration = max(1, math.ceil(seconds / (60 * step_minutes)))
        estimate = duration
        if estimate_error > 0:
            estimate = max(1, round(duration * float(rng.lognormal(0.0, estimate_error))))
        priority = int(rng.choice(8, p=np.array(PRIORITY_P))) + 1
        if large:
            priority = max(priority, 3)  # big gangs are somebody's pretraining run
        out_jobs.append(
            model.Job(
                name=f"{_PREFIX[kind]}-{i:05d}",
                type=kind,
                gpus=size,
                duration_steps=duration,
                estimate_steps=estimate,
                arrival_step=int(arrival),
                priority=float(priority),
            )
        )

    n_services = services if services is not None else _default_services(gpus)
    _check(n_services >= 0, f"services must be >= 0, got {n_services}")
    length = duration_steps + horizon_steps  # the planner looks past the window's end
    out_services = _services(
        rng, n_services, gpus, service_share, length, step_minutes, start_hour, forecast_error
    )
    return model.Scenario(
        name=name or f"generated-{gpus}g-{jobs}j-s{seed}",
        description=(
            f"generated: {gpus} GPUs, {jobs} jobs, {n_services} services, seed {seed}"
            " (Philly mix, multi-node tail, diurnal arrivals and demand)"
        ),
        cluster=cluster,
        step_minutes=step_minutes,
        horizon_steps=horizon_steps,
        duration_steps=duration_steps,
        jobs=tuple(out_jobs),
        services=tuple(out_services),
        source="<generated>",
    )


def first_input(scenario: model.Scenario) -> model.PlanInput:
    """What a policy sees at step 0: every job arrived by then queued, nothing running.

    With `generate(..., backlog=1.0)` that is every job: the latency benchmark's
    "N GPUs with M queued jobs" in one call.
    """
    h = scenario.horizon_steps
    return model.PlanInput(
        now=0,
        cluster=scenario.cluster,
        horizon=h,
        queued=tuple(
            model.QueuedJob(
                name=j.name,
                gpus=j.gpus,
                estimate_steps=j.estimate_steps,
                arrival_step=j.arrival_step,
                priority=j.priority,
                type=j.type,
            )
            for j in scenario.jobs
            if j.arrival_step <= 0
        ),
        running=(),
        services=tuple(
            model.ServiceState(
                name=s.name,
                priority=s.priority,
                max_swap=s.max_swap,
                forecast=tuple(s.forecast[:h]) + (s.forecast[-1],) * max(0, h - len(s.forecast)),
                reservation=max(s.forecast[: scenario.duration_steps]),
            )
            for s in scenario.services
        ),
        steps_per_day=scenario.steps_per_day,
    )


def to_dict(scenario: model.Scenario) -> dict[str, Any]:
    """The scenario as MODEL.md's version-1 mapping (estimate/forecast only where they differ)."""
    jobs: list[dict[str, Any]] = []
    for j in scenario.jobs:
        d: dict[str, Any] = {
            "name": j.name,
            "type": j.type,
            "gpus": j.gpus,
            "duration_steps": j.duration_steps,
        }
        if j.estimate_steps != j.duration_steps:
            d["estimate_steps"] = j.estimate_steps
        d["arrival_step"] = j.arrival_step
        d["priority"] = _number(j.priority)
        jobs.append(d)
    services: list[dict[str, Any]] = []
    for s in scenario.services:
        sd: dict[str, Any] = {
            "name": s.name,
            "priority": _number(s.priority),
            "max_swap": s.max_swap,
            "demand": list(s.demand),
        }
        if s.forecast != s.demand:
            sd["forecast"] = list(s.forecast)
        if s.service_level is not None:
            sd["service_level"] = s.service_level
        services.append(sd)
    return {
        "version": 1,
        "name": scenario.name,
        "description": scenario.description,
        "cluster": {
            "nodes": scenario.cluster.nodes,
            "gpus_per_node": scenario.cluster.gpus_per_node,
        },
        "step_minutes": scenario.step_minutes,
        "horizon_steps": scenario.horizon_steps,
        "duration_steps": scenario.duration_steps,
        "jobs": jobs,
        "services": services,
    }


def write(scenario: model.Scenario, path: str | Path) -> Path:
    """Write `scenario` as version-1 YAML (`.yaml`/`.yml`) or JSON (`.json`)."""
    p = Path(path)
    data = to_dict(scenario)
    if p.suffix == ".json":
        text = json.dumps(data, indent=1) + "\n"
    elif p.suffix in (".yaml", ".yml"):
        text = _yaml(data)
    else:
        raise ValueError(f"{p}: unknown suffix {p.suffix!r}; use .yaml, .yml or .json")
    p.write_text(text, encoding="utf-8")
    return p


# --- internals -------------------------------------------------------------------


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _gang_sizes(cluster: model.Cluster, max_gang: int | None) -> list[int]:
    """Legal multi-node sizes: powers of two, whole nodes, 2 nodes and up."""
    g = cluster.gpus_per_node
    cap = max_gang if max_gang is not None else min(256, cluster.gpus // 4)
    sizes = []
    s = 1
    while s <= min(cap, cluster.gpus):
        if s >= 2 * g and s % g == 0:
            sizes.append(s)
        s *= 2
    return sizes


def _duration_seconds(rng: np.random.Generator) -> float:
    if rng.random() < 0.8:
        return 60.0 * 10 ** float(rng.uniform(1.5, 3.0))
    return 60.0 * 10 ** float(rng.uniform(3.0, 4.0))


def hour_of_week(step: int, step_minutes: int, start_hour: int) -> float:
    return (start_hour + step * step_minutes / 60.0) % (24 * 7)


def arrival_rate(hour_of_week: float) -> float:
    day, hour = divmod(hour_of_week, 24.0)
    diurnal = 0.4 + 0.6 * (0.5 - 0.5 * math.cos(2 * math.pi * (hour - 4.0) / 24.0))  # 04h..16h
    return diurnal * (1.0 if day < 5 else 0.6)


def _arrivals(
    rng: np.random.Generator, jobs: int, span: int, backlog: float, step_minutes: int, h0: int,
    burst: float = 0.0,
) -> list[int]:
    n_backlog = round(jobs * backlog)
    rest = jobs - n_backlog
    if span <= 1:
        return [0] * jobs
    steps = np.arange(1, span)
    w = np.array([arrival_rate(hour_of_week(int(t), step_minutes, h0)) for t in steps])
    if burst > 0:  # drawn only when asked, so burst=0 keeps every seed's scenario as it was
        w = w * rng.lognormal(0.0, burst, size=len(w))
    later = rng.choice(steps, size=rest, p=w / w.sum()) if rest else np.array([], dtype=int)
    return sorted([0] * n_backlog + [int(t) for t in later])


def _default_services(gpus: int) -> int:
    if gpus <= 16:
        return 1
    if gpus <= 128:
        return 2
    return 3 if gpus <= 1024 else 4


def _services(
    rng: np.random.Generator,
    count: int,
    gpus: int,
    share: float,
    length: int,
    step_minutes: int,
    h0: int,
    forecast_error: float,
) -> list[model.Service]:
    if count == 0:
        return []
    weights = rng.uniform(0.5, 1.5, size=count)
    peaks = np.maximum(1, np.floor(weights / weights.sum() * share * gpus)).astype(int)
    out: list[model.Service] = []
    used: dict[str, int] = {}
    for i in range(count):
        kind, swing, weekend, burst = SERVICE_KINDS[i % len(SERVICE_KINDS)]
        used[kind] = used.get(kind, 0) + 1
        name = kind if used[kind] == 1 else f"{kind}-{used[kind]}"
        peak = int(peaks[i])
        phase = float(rng.uniform(-1.5, 1.5))  # peak hour varies a little per service
        curve = []
        for t in range(length):
            how = hour_of_week(t, step_minutes, h0)
            day, hour = divmod(how, 24.0)
            shape = 0.5 - 0.5 * math.cos(2 * math.pi * (hour - 4.0 - phase) / 24.0)
            v = peak / swing + (peak - peak / swing) * shape
            if day >= 5:
                v /= weekend
            curve.append(v)
        demand = [max(0, min(gpus, round(v * float(rng.lognormal(0.0, burst))))) for v in curve]
        forecast = demand
        if forecast_error > 0:
            forecast = [
                max(0, min(gpus, round(v * float(rng.lognormal(0.0, forecast_error)))))
                for v in demand
            ]
        # Enough swap for the steepest hourly ramp of the curve, with headroom.
        ramp = max((abs(b - a) for a, b in zip(demand, demand[1:], strict=False)), default=1)
        max_swap = max(2, math.ceil(1.25 * ramp))
        out.append(
            model.Service(
                name=name,
                priority=float(int(rng.integers(5, 9))),  # real-time work is valued high
                max_swap=max_swap,
                demand=tuple(demand),
                forecast=tuple(forecast),
            )
        )
    return out


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def _yaml(data: dict[str, Any]) -> str:
    """Block YAML for the version-1 mapping; scalars and short lists in flow style.

    Strings are written as JSON strings, which YAML reads as double-quoted scalars.
    """
    lines: list[str] = []
    for key, value in data.items():
        if key in ("jobs", "services"):
            if not value:
                lines.append(f"{key}: []")
                continue
            lines.append(f"{key}:")
            for item in value:
                first = True
                for k, v in item.items():
                    lines.append(f"{'  - ' if first else '    '}{k}: {_flow(v)}")
                    first = False
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def _flow(v: object) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, Sequence) and not isinstance(v, str):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return json.dumps(v)

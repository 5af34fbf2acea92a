"""Seeded families shaped like production traffic, and the statistics that check them.

Purely computational (standard library + numpy). Both families put a stream of short,
mostly one-GPU pods (the shape of a real GPU cluster's pod log: 99% ask for one GPU, a
median run of an hour and a p90 of two to three, hundreds a day, estimates off by a
lognormal factor of sigma 0.6) beside real-time services whose forecast is what an
operator really has:

- `bursty(count, seed)`: LLM serving at minute shape, on 15-minute steps. Demand jumps at
  every step around a level with a mild daily cycle (coefficient of variation about 0.5,
  peak about twice the mean, a step at zero now and then); the forecast is the demand a
  few steps earlier (lagged persistence), so it carries the level and almost nothing of
  the step.
- `daily(count, seed)`: image generation at hour shape, on hourly steps. A sharp daily
  peak (coefficient of variation about 1.1, peak four to five times the mean) growing from
  week to week, with noise and bursts; the forecast is the same hours a day or a week
  earlier.

`stats(scenarios)` measures the figures above, so a change to the generators shows up as a
change in what they print (`bench/traffic.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from extender.planner import generator, model

SIZES: tuple[int, ...] = (16, 24, 32)
FAMILIES: tuple[str, ...] = ("bursty", "daily")
POD_SIZES: tuple[int, ...] = (1, 2, 4, 8)
POD_P: tuple[float, ...] = (0.99, 0.005, 0.003, 0.002)
RUN_MEDIAN_HOURS = 1.0
RUN_SIGMA = 0.72  # p90 of 2.5 hours: exp(1.2816 x 0.72) = 2.5
ESTIMATE_SIGMA = 0.6


def bursty(count: int = 100, seed: int = 20000, days: int = 2) -> list[model.Scenario]:
    """`count` instances of jumpy LLM serving beside a pod stream (see the module text)."""
    return [_instance("bursty", seed + i, days) for i in range(_count(count, days))]


def daily(count: int = 100, seed: int = 30000, days: int = 2) -> list[model.Scenario]:
    """`count` instances of a strongly daily service beside a pod stream."""
    return [_instance("daily", seed + i, days) for i in range(_count(count, days))]


def family(name: str, count: int, seed: int) -> list[model.Scenario]:
    """The family `name` (one of FAMILIES) at its default length."""
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    return bursty(count, seed) if name == "bursty" else daily(count, seed)


def _count(count: int, days: int) -> int:
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    return count


def _instance(kind: str, seed: int, days: int) -> model.Scenario:
    rng = np.random.default_rng([seed, FAMILIES.index(kind)])
    gpus = int(rng.choice(SIZES))
    step_minutes = 15 if kind == "bursty" else 60
    spd = 24 * 60 // step_minutes
    T = days * spd
    length = T + spd  # the planner looks a horizon past the window's end
    start_hour = int(rng.integers(0, 24))
    count = 1 if gpus <= 16 else int(rng.integers(1, 3))
    share = float(rng.uniform(0.3, 0.55))  # the services' peaks, of the cluster
    weights = rng.uniform(0.5, 1.5, size=count)
    peaks = [max(2, int(w / weights.sum() * share * gpus)) for w in weights]
    services = []
    for i, peak in enumerate(peaks):
        make = _bursty_service if kind == "bursty" else _daily_service
        demand, forecast = make(rng, peak, length, spd, start_hour)
        demand = np.clip(np.round(demand), 0, gpus).astype(int)
        forecast = np.clip(np.round(forecast), 0, gpus).astype(int)
        ramp = int(np.abs(np.diff(demand)).max(initial=1))
        services.append(model.Service(
            name=f"{'llm' if kind == 'bursty' else 'image-gen'}-{i}",
            priority=float(rng.integers(5, 9)), max_swap=max(2, math.ceil(1.25 * ramp)),
            demand=tuple(int(x) for x in demand), forecast=tuple(int(x) for x in forecast)))
    mean_service = sum(float(np.mean(v.demand[:T])) for v in services)
    jobs = _pods(rng, gpus - mean_service, T, step_minutes, start_hour)
    return model.Scenario(
        name=f"{kind}-{gpus}g-s{seed}", description=(
            f"{kind} services beside a pod stream: {gpus} GPUs, {len(jobs)} pods, seed {seed}"),
        cluster=model.Cluster(nodes=gpus // 8, gpus_per_node=8), step_minutes=step_minutes,
        horizon_steps=spd, duration_steps=T, jobs=tuple(jobs), services=tuple(services),
        source="<generated>")


def _daily_shape(rng: np.random.Generator, length: int, spd: int, start_hour: int,
                 sharpness: float) -> np.ndarray:
    """exp(sharpness x cos(hour - peak hour)) over `length` steps, peak 1."""
    peak_hour = float(rng.uniform(11.0, 21.0))
    hours = (start_hour + np.arange(length) * 24.0 / spd) % 24.0
    return np.asarray(np.exp(sharpness * (np.cos(2 * np.pi * (hours - peak_hour) / 24.0) - 1.0)))


def _bursty_service(rng: np.random.Generator, peak: int, length: int, spd: int,
                    start_hour: int) -> tuple[np.ndarray, np.ndarray]:
    lag = int(rng.choice((1, 2, 4)))
    swing = float(rng.uniform(1.2, 2.0))  # the level's daily peak over its trough
    n = length + lag
    level = _daily_shape(rng, n, spd, start_hour, math.log(swing) / 2.0)  # trough 1/swing
    level = level / level.max() * peak / 2.0  # the jumps reach twice the level
    # Twice a Beta(a, a): mean 1, at most 2, coefficient of variation 1 / sqrt(2a + 1).
    a = float(rng.uniform(1.0, 2.0))
    jumps = 2.0 * rng.beta(a, a, size=n)
    jumps[rng.random(n) < float(rng.uniform(0.0, 0.08))] = 0.0  # idle steps
    true = level * jumps
    return true[lag:], true[:length]


def _daily_service(rng: np.random.Generator, peak: int, length: int, spd: int,
                   start_hour: int) -> tuple[np.ndarray, np.ndarray]:
    back = spd * (7 if rng.random() < 0.5 else 1)  # forecast: a week or a day earlier
    n = length + back
    shape = _daily_shape(rng, n, spd, start_hour, float(rng.uniform(1.8, 2.6)))
    weekly = float(rng.uniform(1.0, 1.25))  # growth from one week to the next
    growth = weekly ** (np.arange(n) / (7.0 * spd))
    true = shape * growth * rng.lognormal(0.0, float(rng.uniform(0.15, 0.35)), size=n)
    for day in range(math.ceil(n / spd)):
        for _ in range(int(rng.integers(0, 3))):  # bursts: a release, a campaign
            at = day * spd + int(rng.integers(0, spd))
            true[at:at + int(rng.integers(1, 3))] *= float(rng.uniform(1.2, 1.6))
    true = true / true[back:].max() * peak
    return true[back:], true[:length]


def _pods(rng: np.random.Generator, room: float, T: int, step_minutes: int,
          start_hour: int) -> list[model.Job]:
    """A pod stream offering `room` GPUs (what the services leave on average) a load of
    0.8-1.3 over the window, arriving diurnally and in bursts."""
    load = float(rng.uniform(0.8, 1.3))
    mean_hours = RUN_MEDIAN_HOURS * math.exp(RUN_SIGMA**2 / 2)
    mean_gpus = float(np.dot(POD_SIZES, POD_P))
    count = max(1, round(load * room * T * step_minutes / 60.0 / mean_hours / mean_gpus))
    w = np.array([generator.arrival_rate(generator.hour_of_week(t, step_minutes, start_hour))
                  for t in range(T)])
    w = w * rng.lognormal(0.0, 0.5, size=T)
    arrivals = np.sort(rng.choice(T, size=count, p=w / w.sum()))
    arrivals[: count // 10] = 0  # a tenth already queued at the start
    arrivals.sort()
    out = []
    for i, at in enumerate(arrivals):
        hours = RUN_MEDIAN_HOURS * float(rng.lognormal(0.0, RUN_SIGMA))
        steps = max(1, math.ceil(hours * 60.0 / step_minutes))
        estimate = max(1, round(steps * float(rng.lognormal(0.0, ESTIMATE_SIGMA))))
        kind = str(rng.choice(list(generator.TYPE_P), p=list(generator.TYPE_P.values())))
        out.append(model.Job(
            name=f"pod-{i:05d}", type=kind, gpus=int(rng.choice(POD_SIZES, p=POD_P)),
            duration_steps=steps, estimate_steps=estimate, arrival_step=int(at),
            priority=float(int(rng.choice(8, p=np.array(generator.PRIORITY_P))) + 1)))
    return out


@dataclass(frozen=True)
class Stats:
    """A family's traffic, as the figures of production traces are stated."""

    instances: int
    one_gpu_share: float  # of pods
    run_median_hours: float
    run_p90_hours: float
    pods_per_day: float  # per instance, mean
    demand_cv: float  # per service, mean
    peak_over_mean: float  # per service, mean
    forecast_error_of_peak: float  # mean |demand - forecast| / peak, per service, mean
    under_share: float  # share of steps whose demand is over the forecast, mean


def stats(scenarios: Sequence[model.Scenario]) -> Stats:
    """What `scenarios` look like, over their evaluation windows."""
    runs, sizes, per_day = [], [], []
    cv, ratio, err, under = [], [], [], []
    for s in scenarios:
        T = s.duration_steps
        runs += [j.duration_steps * s.step_minutes / 60.0 for j in s.jobs]
        sizes += [j.gpus for j in s.jobs]
        per_day.append(len(s.jobs) * s.steps_per_day / T)
        for v in s.services:
            d = np.array(v.demand[:T], dtype=float)
            f = np.array(v.forecast[:T], dtype=float)
            if d.mean() <= 0:
                continue
            cv.append(d.std() / d.mean())
            ratio.append(d.max() / d.mean())
            err.append(float(np.abs(d - f).mean() / d.max()))
            under.append(float((d > f).mean()))
    return Stats(
        instances=len(scenarios),
        one_gpu_share=float(np.mean(np.array(sizes) == 1)) if sizes else 0.0,
        run_median_hours=float(np.median(runs)) if runs else 0.0,
        run_p90_hours=float(np.percentile(runs, 90)) if runs else 0.0,
        pods_per_day=float(np.mean(per_day)) if per_day else 0.0,
        demand_cv=float(np.mean(cv)) if cv else 0.0,
        peak_over_mean=float(np.mean(ratio)) if ratio else 0.0,
        forecast_error_of_peak=float(np.mean(err)) if err else 0.0,
        under_share=float(np.mean(under)) if under else 0.0)

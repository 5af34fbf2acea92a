"""A seeded family of scenarios whose services' forecasts are wrong, the ways operators meet it.

Purely computational (standard library + numpy). `family(count, seed)` gives
`count` scenarios of 8, 16 or 32 GPUs, jobs of the usual trace shapes (the
generator's Philly mix, durations and diurnal arrivals), and services whose
true demand departs from what the planner is told in one of five ways:

- `low`: the forecast is 15-40% below demand all along (growth a week-old
  forecast did not see);
- `high`: the forecast is 15-50% above demand;
- `shift`: the forecast's daily peak comes 1-3 hours early or late;
- `spikes`: demand is the forecast, plus a few unforeseen spikes a day of
  1.4-2x for one or two hours;
- `noise`: demand is the forecast times a lognormal factor of sigma 0.3.

`day_earlier(count, seed)` is a second, held-out family shaped like the
forecast an operator really has: the same hours a day earlier, under demand
that grows 0-25% a day, is noisy (lognormal sigma 0.1-0.3 on every day) and
has a few bursts of 1.3-1.8x. It was held out at first; the stand-in history and
the default objective were later chosen looking at it, and checked on more of it
(other seeds, three and five days; docs/wrong-forecasts.md).

Both take the jobs' shape too (keyword `jobs`, a `Jobs`): the generator's Philly mix
with exact estimates by default, or the shape of real GPU pod logs (`mix="trace"`: 90%
1-GPU pods, arriving in bursts) and estimates off by a lognormal error, as in those logs.

The same arguments give the same scenarios on any machine; `generator.write`
dumps one to a version-1 scenario file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from extender.planner import generator, model

KINDS: tuple[str, ...] = ("low", "high", "shift", "spikes", "noise")
SIZES: tuple[int, ...] = (8, 16, 32)


@dataclass(frozen=True)
class Jobs:
    """The batch jobs' shape: `mix` ("philly" or "trace", `generator.generate`),
    `estimate_error` (sigma of a lognormal error on each estimate; 0: exact) and `burst`
    (sigma of a lognormal factor on each step's arrival rate; 0: smooth)."""

    mix: str = "philly"
    estimate_error: float = 0.0
    burst: float = 0.0

    def __post_init__(self) -> None:
        if self.mix not in generator.MIXES:
            raise ValueError(f"mix must be one of {', '.join(generator.MIXES)}, got {self.mix!r}")
        for field, x in (("estimate_error", self.estimate_error), ("burst", self.burst)):
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"{field} must be a finite number >= 0, got {x!r}")

    def suffix(self) -> str:
        """What a scenario's name adds for this shape ("" for the default)."""
        return ((f"-{self.mix}" if self.mix != "philly" else "")
                + (f"-est{self.estimate_error:g}" if self.estimate_error else "")
                + (f"-burst{self.burst:g}" if self.burst else ""))


PHILLY = Jobs()


def family(count: int = 60, seed: int = 2500, days: int = 2, *,
           jobs: Jobs = PHILLY) -> list[model.Scenario]:
    """`count` instances, the kinds in turn, sizes and everything else drawn from `seed`;
    `days` of hourly steps each, jobs shaped as `jobs` says."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    return [instance(seed + i, KINDS[i % len(KINDS)], days, jobs=jobs) for i in range(count)]


def instance(seed: int, kind: str, days: int = 2, *, jobs: Jobs = PHILLY) -> model.Scenario:
    """One instance of `kind` (one of KINDS), fully determined by `seed`, `days` and
    `jobs`."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    base, gpus = _base(rng, seed, days, f"wrong-{kind}", jobs)
    services = tuple(_wrong(v, kind, rng, gpus, base.steps_per_day) for v in base.services)
    return _told(base, services, f"forecasts wrong: {kind}")


def _base(rng: np.random.Generator, seed: int, days: int, label: str, shape: Jobs,
          size: int | None = None) -> tuple[model.Scenario, int]:
    """The generated scenario an instance starts from (its services' forecasts exact),
    and its GPUs: its size (`size` where given, though one is drawn all the same, so that
    every later draw is the one it would be without `size`), jobs and services' share
    drawn from `rng`."""
    drawn = int(rng.choice(SIZES))
    gpus = drawn if size is None else size
    jobs = int(gpus * rng.uniform(1.5, 3.0) * days / 2)
    share = float(rng.uniform(0.3, 0.5))  # services' weekday peaks, of the cluster
    base = generator.generate(
        gpus, jobs, seed, services=1 if gpus <= 16 else 2, service_share=share,
        start_hour=int(rng.integers(0, 24)), duration_steps=24 * days, mix=shape.mix,
        estimate_error=shape.estimate_error, burst=shape.burst,
        name=f"{label}-{gpus}g-s{seed}" + (f"-{days}d" if days != 2 else "") + shape.suffix())
    return base, gpus


def _told(base: model.Scenario, services: tuple[model.Service, ...],
          how: str) -> model.Scenario:
    """`base` with its services replaced by `services`, whose forecasts are wrong `how`."""
    return model.Scenario(
        name=base.name,
        description=f"{base.description}; {how}",
        cluster=base.cluster,
        step_minutes=base.step_minutes,
        horizon_steps=base.horizon_steps,
        duration_steps=base.duration_steps,
        jobs=base.jobs,
        services=services,
        source="<generated>",
    )


def _service(v: model.Service, true: np.ndarray, told: np.ndarray, gpus: int) -> model.Service:
    """`v` with demand `true` and forecast `told`, whole GPUs within the cluster, and a
    swap cap that follows the demand's steepest step."""
    demand = tuple(int(x) for x in np.clip(np.round(true), 0, gpus))
    forecast = tuple(int(x) for x in np.clip(np.round(told), 0, gpus))
    ramp = max((abs(b - a) for a, b in zip(demand, demand[1:], strict=False)), default=1)
    return model.Service(name=v.name, priority=v.priority,
                         max_swap=max(v.max_swap, math.ceil(1.25 * ramp)),
                         demand=demand, forecast=forecast)


def _wrong(v: model.Service, kind: str, rng: np.random.Generator, gpus: int,
           steps_per_day: int) -> model.Service:
    """The service with its demand and forecast made to disagree as `kind` says."""
    told = np.array(v.forecast, dtype=np.float64)  # the generator's curve: exact so far
    true = told.copy()
    n = len(told)
    if kind == "low":  # forecast = demand x (1 - b)
        told = true * (1.0 - rng.uniform(0.15, 0.40))
    elif kind == "high":
        told = true * (1.0 + rng.uniform(0.15, 0.50))
    elif kind == "shift":
        hours = int(rng.integers(1, 4)) * int(rng.choice((-1, 1)))
        lag = round(hours * steps_per_day / 24)
        told = np.array([true[min(n - 1, max(0, t - lag))] for t in range(n)])
    elif kind == "spikes":
        days = math.ceil(n / steps_per_day)
        for d in range(days):
            for _ in range(int(rng.integers(2, 5))):
                start = d * steps_per_day + int(rng.integers(0, steps_per_day))
                width = int(rng.integers(1, 3))
                true[start : start + width] *= rng.uniform(1.4, 2.0)
    else:  # noise
        true = true * rng.lognormal(0.0, 0.3, size=n)
    return _service(v, true, told, gpus)


def day_earlier(count: int = 40, seed: int = 7000, days: int = 2, *,
                jobs: Jobs = PHILLY, gpus: int | None = None) -> list[model.Scenario]:
    """`count` instances whose forecast is the demand of the same hours a day earlier
    (see the module text); `days` of hourly steps each, jobs shaped as `jobs` says, of
    `gpus` GPUs each (one of SIZES) where it is given, else of a size drawn for each."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    if gpus is not None and gpus not in SIZES:
        raise ValueError(f"gpus must be one of {', '.join(map(str, SIZES))}, got {gpus!r}")
    return [_day_earlier(seed + i, days, jobs, gpus) for i in range(count)]


def _day_earlier(seed: int, days: int, shape: Jobs = PHILLY,
                 size: int | None = None) -> model.Scenario:
    rng = np.random.default_rng([seed, len(KINDS)])
    base, gpus = _base(rng, seed, days, "day-earlier", shape, size)
    spd = base.steps_per_day
    services = []
    for v in base.services:
        told = np.array(v.forecast, dtype=np.float64)
        n = len(told)
        # The day before the run, then the run: the generator's daily curve, growing and
        # noisy; the forecast of each step is the demand a day before it.
        profile = np.concatenate([told[:spd], told])
        growth = rng.uniform(1.0, 1.25)
        sigma = rng.uniform(0.1, 0.3)
        true = profile * growth ** (np.arange(len(profile)) // spd)
        true *= rng.lognormal(0.0, sigma, size=len(true))
        for d in range(math.ceil(len(true) / spd)):
            for _ in range(int(rng.integers(0, 3))):
                start = d * spd + int(rng.integers(0, spd))
                true[start : start + int(rng.integers(1, 3))] *= rng.uniform(1.3, 1.8)
        services.append(_service(v, true[spd : spd + n], true[:n], gpus))
    return _told(base, tuple(services), "forecast: the same hours a day earlier")

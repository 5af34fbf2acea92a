"""How the seven shipped scenarios were made: seeded, so anyone can remake them.

    python -m extender.scenarios.making   # rewrites extender/scenarios/*.yaml

    python -m extender.scenarios.making --calibrate   # re-derive the seeds, fifo only

Shapes follow WORKLOADS.md: jobs mostly small by count and large by GPU-time,
durations from hours to days, diurnal inference (a coding assistant swings
~10x between night and a 2-hour peak, chat ~2x). No job is larger than what
fifo's reservation leaves free, so the baseline can run everything eventually.

Calibrated to the published baseline, on fifo alone. Where PUBLISHED.md
states what fifo measured on a scenario (training-heavy 53.6%, mixed control
51.6%, the uniform-priority variant 76.8%, the scale test 44.9% with 27 of 30
jobs completed), the shipped seed is the first one, counting up from the
scenario's base seed, whose fifo run meets that figure (utilization within
one point; jobs completed exactly). Only fifo is run to pick it: no other
policy's result has a say in what ships, so gpuroster's gain on these files
is measured, not chosen. `--calibrate` repeats the search and says whether
the shipped seeds are still the ones it finds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from extender import scenarios
from extender.planner import metrics, model, simulating

K = TypeVar("K")

# Hourly shapes, midnight first, as a fraction of the daily peak.
# A coding assistant: ~10x between night and a 2-hour late-morning peak, shoulders
# through the working day (WORKLOADS.md: 9-11x peak to trough on weekdays). Until
# 2026-12-02 this stayed >= 0.9 of the peak for seven hours, which is no "2-hour
# peak" and gave fifo's all-day reservation far less to waste than described.
CODE_ASSIST = (
    0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0, 1.0,
    0.6, 0.5, 0.55, 0.5, 0.4, 0.3, 0.2, 0.15, 0.12, 0.1, 0.1, 0.1,
)
CHAT = (
    0.55,
    0.5,
    0.48,
    0.46,
    0.46,
    0.5,
    0.55,
    0.62,
    0.7,
    0.78,
    0.85,
    0.9,
    0.95,
    0.95,
    0.92,
    0.9,
    0.9,
    0.92,
    0.97,
    1.0,
    1.0,
    0.9,
    0.75,
    0.62,
)


def curve(
    shape: Sequence[float],
    peak: int,
    days: int,
    weekend_factor: float = 1.0,
    weekend_days: Sequence[int] = (),
) -> list[int]:
    out: list[int] = []
    for d in range(days):
        f = weekend_factor if d in weekend_days else 1.0
        out.extend(max(0, round(peak * f * x)) for x in shape)
    return out


@dataclass
class JobMix:
    count: int
    sizes: Mapping[int, float]
    hours: tuple[float, float]  # log-uniform true duration range
    arrivals: tuple[int, int]
    priorities: Mapping[float, float]
    types: Mapping[str, float]
    estimate_error: float = 0.0  # estimate = true x U(1 - e, 1 + e)
    prefix: str = "job"


def _pick(rng: random.Random, weights: Mapping[K, float]) -> K:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def jobs(rng: random.Random, mix: JobMix) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(mix.count):
        lo, hi = mix.hours
        true = max(1, round(lo * (hi / lo) ** rng.random()))
        est = true
        if mix.estimate_error:
            est = max(1, round(true * rng.uniform(1 - mix.estimate_error, 1 + mix.estimate_error)))
        kind = _pick(rng, mix.types)
        out.append(
            {
                "name": f"{mix.prefix}-{i:02d}",
                "type": kind,
                "gpus": _pick(rng, mix.sizes),
                "duration_steps": true,
                "estimate_steps": est,
                "arrival_step": rng.randint(*mix.arrivals),
                "priority": _pick(rng, mix.priorities),
            }
        )
    out.sort(key=lambda j: (int(j["arrival_step"]), str(j["name"])))
    return out


def service(
    name: str, priority: float, max_swap: int, demand: list[int], forecast: list[int] | None = None
) -> dict[str, Any]:
    d: dict[str, object] = {
        "name": name,
        "priority": priority,
        "max_swap": max_swap,
        "demand": demand,
    }
    if forecast is not None:
        d["forecast"] = forecast
    return d


def doc(
    name: str,
    description: str,
    nodes: int,
    per_node: int,
    job_list: list[dict[str, Any]],
    services: list[dict[str, Any]],
    window: int = 48,
) -> dict[str, Any]:
    return {
        "version": 1,
        "name": name,
        "description": description,
        "cluster": {"nodes": nodes, "gpus_per_node": per_node},
        "step_minutes": 60,
        "horizon_steps": 24,
        "duration_steps": window,
        "jobs": job_list,
        "services": services,
    }


TRAIN = {"training": 1.0}
ALL_BATCH = {"training": 0.45, "batch-inference": 0.35, "quantization": 0.2}
PRIOS: dict[float, float] = {1: 0.35, 2: 0.3, 4: 0.2, 8: 0.15}


def training_heavy(seed: int = 103) -> dict[str, Any]:
    rng = random.Random(seed)
    mix = JobMix(22, {1: 0.2, 2: 0.4, 4: 0.4}, (2, 24), (0, 24), PRIOS, TRAIN, prefix="train")
    return doc(
        "training-heavy",
        "8 GPUs, training queue behind a coding assistant whose 2-hour peak fifo reserves all day",
        1,
        8,
        jobs(rng, mix),
        [service("code-assist", 6, 2, curve(CODE_ASSIST, 4, 2))],
    )


def mixed_control(seed: int = 212) -> dict[str, Any]:
    rng = random.Random(seed)
    train = JobMix(10, {2: 0.3, 4: 0.4, 8: 0.3}, (6, 24), (0, 24), PRIOS, TRAIN, 0.3, "train")
    batch = JobMix(
        10, {1: 0.4, 2: 0.3, 4: 0.3}, (2, 6), (0, 30), PRIOS, {"batch-inference": 1.0}, 0.3, "batch"
    )
    quant = JobMix(8, {1: 0.6, 2: 0.4}, (1, 3), (0, 30), PRIOS, {"quantization": 1.0}, 0.3, "quant")
    return doc(
        "mixed-control",
        "16 GPUs, all four workload types: training, batch inference, quantization, two services",
        2,
        8,
        jobs(rng, train) + jobs(rng, batch) + jobs(rng, quant),
        [
            service("chat", 5, 2, curve(CHAT, 4, 2)),
            service("code-assist", 6, 2, curve(CODE_ASSIST, 3, 2)),
        ],
    )


def priority_inversion(seed: int = 309) -> dict[str, Any]:
    rng = random.Random(seed)
    early = JobMix(8, {2: 0.3, 4: 0.4, 8: 0.3}, (12, 36), (0, 4), {1.0: 1.0}, TRAIN, 0.2, "bulk")
    urgent = JobMix(
        12,
        {1: 0.3, 2: 0.3, 4: 0.4},
        (2, 8),
        (3, 30),
        {4.0: 0.5, 8.0: 0.5},
        {"training": 0.3, "batch-inference": 0.5, "quantization": 0.2},
        0.2,
        "urgent",
    )
    return doc(
        "priority-inversion",
        "16 GPUs, long low-priority training queued first, valuable short work arriving behind it",
        2,
        8,
        jobs(rng, early) + jobs(rng, urgent),
        [service("chat", 5, 2, curve(CHAT, 4, 2))],
    )


def fragmentation() -> dict[str, Any]:
    rng = random.Random(404)
    mix = JobMix(
        36,
        {1: 0.35, 2: 0.2, 4: 0.2, 8: 0.15, 16: 0.1},
        (3, 30),
        (0, 30),
        PRIOS,
        ALL_BATCH,
        0.25,
        "job",
    )
    return doc(
        "fragmentation",
        "32 GPUs, gangs from 1 GPU to two whole nodes: fifo's first-fit strands shapes",
        4,
        8,
        jobs(rng, mix),
        [service("chat", 5, 2, curve(CHAT, 6, 2))],
    )


def forecast_error() -> dict[str, Any]:
    rng = random.Random(505)
    mix = JobMix(26, {1: 0.3, 2: 0.3, 4: 0.3, 8: 0.1}, (3, 24), (0, 30), PRIOS, ALL_BATCH, 0.3)
    chat_fc = curve(CHAT, 5, 2)
    chat = chat_fc[:]
    for t in range(34, 42):  # day 2: a launch, demand runs 40-60% over the forecast for 8 hours
        chat[t] = round(chat_fc[t] * (1.4 + 0.2 * ((t - 34) % 3 == 1)))
    code_fc = curve(CODE_ASSIST, 4, 2)
    code = code_fc[:]
    for t in range(9, 15):  # day 1: a holiday, the forecast peak never comes
        code[t] = max(1, code_fc[t] // 2)
    for t in range(2, 5):  # a night batch of API calls nobody forecast
        code[t] = code_fc[t] + 2
    return doc(
        "forecast-error",
        "16 GPUs, forecasts wrong both ways: an 8-hour launch spike, a missed peak, a night burst",
        2,
        8,
        jobs(rng, mix),
        [service("chat", 5, 2, chat, chat_fc), service("code-assist", 6, 2, code, code_fc)],
    )


def uniform_priority(seed: int | None = None) -> dict[str, Any]:
    # A variant of the contended scenario whose fifo is nearest the published
    # uniform-priority baseline (76.8%); fifo ignores priority, so it measures the
    # same on both, and the variant follows its base's calibrated seed. Until
    # 2026-12-02 this was mixed-control's variant.
    d = priority_inversion() if seed is None else priority_inversion(seed)
    d["name"] = "uniform-priority"
    d["description"] = (
        "priority-inversion with every priority equal: any gain comes from planning alone"
    )
    for j in d["jobs"]:
        j["priority"] = 1
    for s in d["services"]:
        s["priority"] = 1
    return d


def scale_test(seed: int = 791) -> dict[str, Any]:
    rng = random.Random(seed)
    sizes = {1: 0.3, 2: 0.2, 4: 0.2, 8: 0.15, 16: 0.1, 32: 0.05}
    # Heavy-tailed as the Philly mix (WORKLOADS.md): four in five jobs run up to
    # 17 hours, one in five from 17 hours to a week.
    short = JobMix(24, sizes, (1, 17), (0, 24), PRIOS, ALL_BATCH, 0.3)
    long = JobMix(6, sizes, (17, 168), (0, 24), PRIOS, ALL_BATCH, 0.3, "long")
    return doc(
        "scale-test",
        "64 GPUs, 30 jobs, heavy-tailed durations, slack: gains must not cost anything at scale",
        8,
        8,
        jobs(rng, short) + jobs(rng, long),
        [
            service("chat", 5, 4, curve(CHAT, 8, 2)),
            service("code-assist", 6, 4, curve(CODE_ASSIST, 8, 2)),
        ],
    )


@dataclass(frozen=True)
class Baseline:
    """What PUBLISHED.md says fifo measured on the scenario this one is modeled on."""

    base_seed: int  # the search starts here (the seed the scenario first shipped with)
    utilization: float  # percent; a seed matches within UTIL_POINTS
    jobs_completed: int | None = None  # matched exactly, where stated


UTIL_POINTS = 1.0
PUBLISHED_FIFO: dict[str, Baseline] = {
    "training-heavy": Baseline(101, 53.6),
    "mixed-control": Baseline(202, 51.6),
    # fifo ignores priority: the uniform-priority variant's baseline is its base's
    "priority-inversion": Baseline(303, 76.8),
    "scale-test": Baseline(707, 44.9, jobs_completed=27),
}


def fifo_matches(d: dict[str, Any], want: Baseline) -> tuple[bool, str]:
    """Run fifo alone on `d`; does it measure what the published baseline did?"""
    s = scenarios.parse(d, f"<{d['name']}>")
    m = metrics.compute(s, simulating.simulate(s, "fifo").grid)
    ok = abs(m.utilization - want.utilization) <= UTIL_POINTS and (
        want.jobs_completed is None or m.jobs_completed == want.jobs_completed
    )
    return ok, f"fifo {m.utilization:.1f}%, {m.jobs_completed}/{m.jobs_total} jobs completed"


def calibrate(name: str, tries: int = 1000) -> tuple[int, str]:
    """The first seed from the base whose fifo run meets the published baseline, and
    what fifo measured on it."""
    want = PUBLISHED_FIFO[name]
    make = MAKERS[name]
    for seed in range(want.base_seed, want.base_seed + tries):
        ok, measured = fifo_matches(make(seed), want)
        if ok:
            return seed, measured
    raise LookupError(f"{name}: no seed in {tries} from {want.base_seed} meets {want}")


ALL = (
    training_heavy,
    mixed_control,
    priority_inversion,
    fragmentation,
    forecast_error,
    uniform_priority,
    scale_test,
)


MAKERS: dict[str, Callable[..., dict[str, Any]]] = {
    make.__name__.replace("_", "-"): make for make in ALL
}


def build() -> list[model.Scenario]:
    return [scenarios.parse(make(), f"<{make.__name__}>") for make in ALL]


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import inspect

    p = argparse.ArgumentParser(prog="python -m extender.scenarios.making")
    p.add_argument("--calibrate", action="store_true",
                   help="search the seeds again (fifo only) and compare with the shipped ones")
    if p.parse_args(argv).calibrate:
        stale = 0
        for name, want in PUBLISHED_FIFO.items():
            shipped = inspect.signature(MAKERS[name]).parameters["seed"].default
            found, measured = calibrate(name)
            stale += found != shipped
            print(f"{name}: published fifo {want.utilization}%"
                  + (f", {want.jobs_completed} jobs completed" if want.jobs_completed else "")
                  + f"; seed {found} ({measured}); shipped {shipped}"
                  + ("" if found == shipped else "  <- differs"))
        return 1 if stale else 0
    out = scenarios.builtin_dir()
    for s in build():
        path = Path(out) / f"{s.name}.yaml"
        scenarios.dump(s, path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

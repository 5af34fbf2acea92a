"""Service level against value when forecasts are wrong: gpuroster's objectives against fifo.

    python bench/slo.py                      # 60 instances of the family + the seven
    python bench/slo.py --count 100 --seed 2500 --out out/bench-slo

Runs fifo, priority-easy and gpuroster at each objective (every service's
`service_level` set to it) on the seeded family of wrong forecasts
(`extender/planner/wrongforecasts.py`) and on the seven shipped scenarios, and
prints per objective: the delivered real-time service level (mean, worst), the
value against fifo (mean change), and the bar's two counts:
instances where gpuroster's service level is more than 0.5 points below fifo's,
and the share where its value is at least fifo's. Writes a plot of the trade.
Then the same on a held-out family whose forecast is the same hours a day earlier
(`wrongforecasts.day_earlier`, `--day-earlier N`). `--jobs trace --estimate-error 0.5
--burst 0.5` shapes both families' jobs as real GPU pod logs are (mostly 1 GPU, bursts,
estimates off).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from extender import scenarios
from extender.planner import (
    allocating,
    legality,
    metrics,
    model,
    policies,
    simulating,
    wrongforecasts,
)

OBJECTIVES = (0.95, 0.99, 0.995, 0.999)
DEFAULT = allocating.Options().service_level  # a service's objective when it sets none
# gpuroster at the default objective with one default turned off, to show what it adds: (label, its
# `allocating.Options`, plot marker and colour).
ABLATIONS: tuple[tuple[str, dict[str, object], str, str], ...] = (
    ("no timing tolerance", {"shift_hours": 0.0}, "*", "tab:green"),  # `Options.shift_hours`
    ("no spare replicas", {"spare_fill": False}, "D", "tab:orange"),  # `Options.spare_fill`
    ("no stand-in history", {"stand_in_hours": 0.0}, "v", "tab:purple"),  # `.stand_in_hours`
)
SL_SLACK = 0.5  # points below fifo's service level that count as a violation


@dataclass
class Outcome:
    scenario: str
    kind: str  # the family's kind, or "shipped"
    fifo: metrics.Metrics
    easy: metrics.Metrics
    gpuroster: dict[float, metrics.Metrics]
    # gpuroster without its wrong-forecast parts: no headroom (an objective no forecast
    # misses), no timing tolerance, no spare replicas
    bare: metrics.Metrics
    # gpuroster at the default objective with each of `ABLATIONS` (by label)
    ablated: dict[str, metrics.Metrics] = field(default_factory=dict)


def with_objective(s: model.Scenario, objective: float) -> model.Scenario:
    return replace(s, services=tuple(replace(v, service_level=objective) for v in s.services))


def measure(s: model.Scenario, policy: str | policies.Policy) -> metrics.Metrics:
    run = simulating.simulate(s, policy)
    legality.check(s, run.grid)
    return metrics.compute(s, run.grid)


def run(instances: list[tuple[str, model.Scenario]]) -> list[Outcome]:
    out = []
    for kind, s in instances:
        g = {o: measure(with_objective(s, o), "gpuroster") for o in OBJECTIVES}
        bare = measure(s, allocating.Gpuroster(service_level=1e-9, shift_hours=0.0,
                                               spare_fill=False))
        ablated = {label: measure(with_objective(s, DEFAULT), allocating.Gpuroster(**options))
                   for label, options, _, _ in ABLATIONS}
        out.append(Outcome(s.name, kind, measure(s, "fifo"), measure(s, "priority-easy"), g,
                           bare, ablated))
    return out


def _sl(m: metrics.Metrics) -> float:
    return 100.0 * m.realtime_service_level


def _gain(m: metrics.Metrics, base: metrics.Metrics) -> float:
    return 100.0 * (m.value / base.value - 1.0) if base.value else 0.0


@dataclass(frozen=True)
class Line:
    """One policy over a set of instances: the delivered service level (mean, worst), the
    mean value change against fifo, the instances more than `SL_SLACK` points under fifo's
    service level, and those whose value is at least fifo's."""

    label: str
    sl_mean: float
    sl_worst: float
    gain: float
    under: int
    at_least: int
    n: int


def lines(outcomes: list[Outcome]) -> list[Line]:
    n = len(outcomes)

    def line(label: str, ms: list[metrics.Metrics]) -> Line:
        pairs = list(zip(ms, outcomes, strict=True))
        sl = [_sl(m) for m in ms]
        return Line(label, statistics.mean(sl), min(sl),
                    statistics.mean(_gain(m, o.fifo) for m, o in pairs),
                    sum(_sl(m) < _sl(o.fifo) - SL_SLACK for m, o in pairs),
                    sum(m.value >= o.fifo.value for m, o in pairs), n)

    out = [line("fifo", [o.fifo for o in outcomes]),
           line("priority-easy", [o.easy for o in outcomes]),
           line("gpuroster, before", [o.bare for o in outcomes])]
    out += [line(f"gpuroster @ {obj:g}", [o.gpuroster[obj] for o in outcomes])
            for obj in OBJECTIVES]
    out += [line(f"@{DEFAULT:g}, {label}", [o.ablated[label] for o in outcomes])
            for label, _, _, _ in ABLATIONS if all(label in o.ablated for o in outcomes)]
    return out


def table(outcomes: list[Outcome], title: str) -> str:
    out = [f"{title} ({len(outcomes)} instances)",
           f"{'policy':28s} {'SL mean':>8s} {'SL worst':>9s} {'value vs fifo':>14s} "
           f"{'SL < fifo-0.5':>14s} {'value >= fifo':>14s}"]
    for x in lines(outcomes):
        out.append(f"{x.label:28s} {x.sl_mean:8.2f} {x.sl_worst:9.2f} {x.gain:+13.1f}% "
                   f"{x.under:14d} {x.at_least:6d} ({100.0 * x.at_least / x.n:5.1f}%)")
    return "\n".join(out)


def markdown(outcomes: list[Outcome], title: str) -> str:
    """`table` as the Markdown docs/benchmarks.md carries (`make results` writes it)."""
    out = [f"**{title}** ({len(outcomes)} instances)", "",
           "| policy | service level, mean | worst | value vs fifo, mean "
           f"| service level > {SL_SLACK:g} points under fifo's | value ≥ fifo's |",
           "|---|---:|---:|---:|---:|---:|"]
    for x in lines(outcomes):
        default = x.label == f"gpuroster @ {DEFAULT:g}"
        label = f"**{x.label} (default)**" if default else x.label
        gain = "—" if x.label == "fifo" else f"{x.gain:+.1f}%"
        under = "—" if x.label == "fifo" else str(x.under)
        ok = "—" if x.label == "fifo" else f"{x.at_least} of {x.n}"
        out.append(f"| {label} | {x.sl_mean:.2f}% | {x.sl_worst:.2f}% | {gain} | {under} "
                   f"| {ok} |")
    return "\n".join(out)


def per_kind(outcomes: list[Outcome], objective: float, ablation: str | None = None) -> str:
    label = f"gpuroster @ {objective:g}" + (f", {ablation}" if ablation else "")
    lines = [f"by kind, {label}: SL mean (fifo), value vs fifo, violations"]
    for kind in sorted({o.kind for o in outcomes}):
        os_ = [o for o in outcomes if o.kind == kind]
        g = [o.ablated[ablation] if ablation else o.gpuroster[objective] for o in os_]
        bad = sum(_sl(m) < _sl(o.fifo) - SL_SLACK for m, o in zip(g, os_, strict=True))
        lines.append(
            f"  {kind:8s} n={len(os_):3d}  SL {statistics.mean(_sl(m) for m in g):6.2f} "
            f"({statistics.mean(_sl(o.fifo) for o in os_):6.2f})  value "
            f"{statistics.mean(_gain(m, o.fifo) for m, o in zip(g, os_, strict=True)):+6.1f}%"
            f"  violations {bad}")
    return "\n".join(lines)


def plot(outcomes: list[Outcome], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, kinds) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=(3, 2))
    fifo_sl = statistics.mean(_sl(o.fifo) for o in outcomes)
    ax.scatter([0.0], [fifo_sl], marker="s", color="black", label="fifo")
    easy = [o.easy for o in outcomes]
    ax.scatter([statistics.mean(_gain(m, o.fifo) for m, o in zip(easy, outcomes, strict=True))],
               [statistics.mean(_sl(m) for m in easy)], marker="^", color="grey",
               label="priority-easy")
    bare = [o.bare for o in outcomes]
    ax.scatter([statistics.mean(_gain(m, o.fifo) for m, o in zip(bare, outcomes, strict=True))],
               [statistics.mean(_sl(m) for m in bare)], marker="x", color="tab:red",
               label="gpuroster before (no headroom, tolerance or spares)")
    xs, ys = [], []
    for obj in OBJECTIVES:
        g = [o.gpuroster[obj] for o in outcomes]
        xs.append(statistics.mean(_gain(m, o.fifo) for m, o in zip(g, outcomes, strict=True)))
        ys.append(statistics.mean(_sl(m) for m in g))
    ax.plot(xs, ys, "o-", color="tab:blue", label="gpuroster (objective)")
    for label, _, marker, colour in ABLATIONS:
        if all(label in o.ablated for o in outcomes):
            ms = [o.ablated[label] for o in outcomes]
            ax.scatter([statistics.mean(_gain(m, o.fifo) for m, o in
                                        zip(ms, outcomes, strict=True))],
                       [statistics.mean(_sl(m) for m in ms)], marker=marker, s=80,
                       color=colour, label=f"gpuroster @ {DEFAULT:g}, {label}")
    for x, y, obj in zip(xs, ys, OBJECTIVES, strict=True):
        ax.annotate(f"{obj:g}", (x, y), textcoords="offset points", xytext=(6, -10))
    ax.set_xlabel("value vs fifo, mean over instances (%)")
    ax.set_ylabel("real-time service level, mean (%)")
    ax.set_title(f"Wrong forecasts: {len(outcomes)} instances of the family")
    ax.grid(alpha=0.3)
    ax.legend(loc="center left")
    names = sorted({o.kind for o in outcomes})
    width = 0.27
    bars: tuple[tuple[str, Callable[[Outcome], metrics.Metrics]], ...] = (
        ("fifo", lambda o: o.fifo), ("before", lambda o: o.bare),
        (f"gpuroster @ {DEFAULT:g}", lambda o: o.gpuroster[DEFAULT]))
    for i, (label, pick) in enumerate(bars):
        kinds.bar([j + (i - 1) * width for j in range(len(names))],
                  [statistics.mean(_sl(pick(o)) for o in outcomes if o.kind == k)
                   for k in names], width, label=label,
                  color=("black", "tab:red", "tab:blue")[i])
    kinds.set_xticks(range(len(names)), names)
    kinds.set_ylim(80, 100.5)
    kinds.set_ylabel("real-time service level, mean (%)")
    kinds.set_title("by kind of wrong forecast")
    kinds.legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--count", type=int, default=60, help="instances of the family")
    ap.add_argument("--seed", type=int, default=2500, help="first seed of the family")
    ap.add_argument("--days", type=int, default=2, help="days (of hourly steps) an instance runs")
    ap.add_argument("--day-earlier", type=int, default=40, metavar="N",
                    help="instances of the held-out family whose forecast is the same hours a "
                    "day earlier (0: skip)")
    ap.add_argument("--day-earlier-seed", type=int, default=7000, metavar="SEED",
                    help="first seed of the day-earlier family")
    ap.add_argument("--jobs", choices=("philly", "trace"), default="philly",
                    help="the jobs' sizes: the Philly mix, or the shape of real GPU pod logs "
                    "(90%% 1 GPU)")
    ap.add_argument("--estimate-error", type=float, default=0.0, metavar="SIGMA",
                    help="lognormal error on the jobs' estimates (0: exact)")
    ap.add_argument("--burst", type=float, default=0.0, metavar="SIGMA",
                    help="lognormal factor on each step's arrival rate (0: smooth)")
    ap.add_argument("--out", type=Path, default=Path("out/bench-slo"))
    ap.add_argument("--markdown", action="store_true",
                    help="print the family's, the seven's and the day-earlier tables as "
                    "Markdown only (what `make results` writes into docs/benchmarks.md)")
    a = ap.parse_args(argv)
    try:
        shape = wrongforecasts.Jobs(a.jobs, a.estimate_error, a.burst)
    except ValueError as e:
        ap.error(str(e))
    t0 = time.perf_counter()
    fam = [(s.name.split("-")[1], s)
           for s in wrongforecasts.family(a.count, a.seed, a.days, jobs=shape)]
    shipped = [("shipped", scenarios.load(scenarios.builtin_dir() / f"{n}.yaml"))
               for n in scenarios.builtin_names()]
    family_out = run(fam)
    shipped_out = run(shipped)
    if a.markdown:
        parts = [markdown(family_out, "the wrong-forecast family"),
                 markdown(shipped_out, "the seven scenarios")]
        if a.day_earlier:
            parts.append(markdown(run([("day-earlier", s) for s in wrongforecasts.day_earlier(
                a.day_earlier, a.day_earlier_seed, a.days, jobs=shape)]),
                "held out: the forecast is the same hours a day earlier"))
        print("\n\n".join(parts))
        return 0
    print(table(family_out, "wrong-forecast family"))
    print()
    print(per_kind(family_out, DEFAULT))
    print(per_kind(family_out, DEFAULT, ABLATIONS[0][0]))
    print()
    print(table(shipped_out, "the seven scenarios"))
    print()
    print(table(family_out + shipped_out, "both"))
    if a.day_earlier:
        held = run([("day-earlier", s)
                    for s in wrongforecasts.day_earlier(a.day_earlier, a.day_earlier_seed,
                                                        a.days, jobs=shape)])
        print()
        print(table(held, "held out: forecast = the same hours a day earlier"))
    print(f"\nplot: {plot(family_out, a.out / 'slo.png')}  ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does elasticity pay on production-shaped traffic? gpuroster against the static reservation.

    python bench/traffic.py                          # both families, 100 each, + held-out seeds
    python bench/traffic.py --family bursty --count 30 --seed 20000
    python bench/traffic.py --wrong 100              # the wrong-forecast families too

For each instance of `extender.planner.traffic`'s families (and, with --wrong, the
wrong-forecast and day-earlier families of `wrongforecasts`), runs fifo, priority-easy
(EASY backfilling beside fifo's static reservation) and gpuroster, and prints per family:
the traffic's statistics; how often the services held at most the static reservation's
GPU-steps where demand stayed within it; gpuroster's value against priority-easy's (share
at least as high, mean and worst change); the share of instances within 0.5 points of
fifo's real-time service level; and, with --bound, value as a share of the
perfect-information bound (`extender.optimizing.bound`) where it solves.
"""

from __future__ import annotations

import argparse
import ast
import multiprocessing
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from extender.planner import metrics, model, policies, simulating, traffic, wrongforecasts

SL_SLACK = 0.5  # points under fifo's service level that count as a miss


@dataclass(frozen=True)
class Row:
    name: str
    value: dict[str, float]  # by policy
    level: dict[str, float]  # real-time service level, percent
    held: int  # GPU-steps gpuroster's services held
    static: int  # GPU-steps fifo's static reservation holds
    within: bool  # demand never above the static reservation
    bound: float | None = None


def run(s: model.Scenario, bound: bool = False,
        options: dict[str, object] | None = None) -> Row:
    value, level = {}, {}
    held = 0
    for policy in ("fifo", "priority-easy", "gpuroster"):
        pol = policies.create(policy, **(options or {})) if policy == "gpuroster" else policy
        r = simulating.simulate(s, pol)
        m = metrics.compute(s, r.grid)
        value[policy] = m.value
        level[policy] = 100.0 * m.realtime_service_level
        if policy == "gpuroster":
            for v in s.services:
                held += int(np.count_nonzero(r.grid == r.names.index(v.name)))
    T = s.duration_steps
    static = sum(max(v.forecast[:T]) * T for v in s.services)
    within = all(max(v.demand[:T]) <= max(v.forecast[:T]) for v in s.services)
    b = None
    if bound:
        from extender.optimizing import bound as bounding

        try:
            b = bounding.value_upper_bound(s, time_limit_s=60.0).value_bound
        except RuntimeError:  # not solved in its time: the instance has no bound
            b = None
    return Row(s.name, value, level, held, static, within, b)


def _run(args: tuple[model.Scenario, bool, dict[str, object]]) -> Row:
    return run(*args)


@dataclass(frozen=True)
class Summary:
    """A family's figures against the bars: value against priority-easy's, service level
    against fifo's, the services' GPU-steps against the static reservation's."""

    label: str
    n: int
    at_least: int  # instances whose value is at least priority-easy's
    gain: float  # mean value change over priority-easy's, percent
    worst: float
    sl_ok: int  # instances within SL_SLACK points of fifo's service level
    level: float  # mean real-time service level, gpuroster, percent
    fifo_level: float
    within: int  # instances whose demand never passed the static reservation
    held_ok: int  # of those, where the services held at most its GPU-steps
    held: float  # mean GPU-steps held over the static reservation's
    bound: float | None  # mean share of the value bound, where it solved
    easy_bound: float | None

    def met(self) -> bool:
        return (self.at_least >= 0.9 * self.n and self.gain >= 3.0
                and self.sl_ok >= 0.97 * self.n and self.held_ok == self.within
                and (self.bound is None or self.bound >= 0.92))


def summarize(label: str, rows: list[Row]) -> Summary:
    gain = [100.0 * (r.value["gpuroster"] / r.value["priority-easy"] - 1.0) for r in rows]
    within = [r for r in rows if r.within]
    bounded = [(r.value, r.bound) for r in rows if r.bound]
    return Summary(
        label, len(rows),
        sum(r.value["gpuroster"] >= r.value["priority-easy"] - 1e-9 for r in rows),
        statistics.mean(gain), min(gain),
        sum(r.level["gpuroster"] >= r.level["fifo"] - SL_SLACK for r in rows),
        statistics.mean(r.level["gpuroster"] for r in rows),
        statistics.mean(r.level["fifo"] for r in rows),
        len(within), sum(r.held <= r.static for r in within),
        statistics.mean(r.held / max(1, r.static) for r in rows),
        statistics.mean(v["gpuroster"] / b for v, b in bounded) if bounded else None,
        statistics.mean(v["priority-easy"] / b for v, b in bounded) if bounded else None)


def report(x: Summary) -> None:
    n = x.n
    print(f"{x.label}: {n} instances")
    print(f"  value >= priority-easy's: {x.at_least}/{n} ({100.0 * x.at_least / n:.0f}%); "
          f"mean {x.gain:+.2f}%, worst {x.worst:+.2f}%")
    print(f"  service level within {SL_SLACK} points of fifo's: {x.sl_ok}/{n} "
          f"({100.0 * x.sl_ok / n:.0f}%); mean gpuroster {x.level:.2f}%, fifo {x.fifo_level:.2f}%")
    print(f"  demand within the static reservation on {x.within}; services held at most its "
          f"GPU-steps on {x.held_ok}/{x.within}; held/static mean {x.held:.3f}")
    if x.bound is not None and x.easy_bound is not None:
        print(f"  value of the bound: gpuroster {100 * x.bound:.1f}%, "
              f"priority-easy {100 * x.easy_bound:.1f}%")


def markdown(traffic_rows: list[str], summaries: list[Summary]) -> str:
    """The two tables `make results` publishes: the families' traffic, and the bars."""
    out = ["| family | pods 1-GPU | run median / p90 (h) | pods a day | demand CV | "
           "peak / mean | forecast error (of peak) | forecast under demand |",
           "|---|---|---|---|---|---|---|---|", *traffic_rows, "",
           "| family | instances | value >= priority-easy | value vs priority-easy (mean, worst) "
           "| service level within 0.5 pt of fifo | held <= static where demand stayed within "
           "| held / static |",
           "|---|---|---|---|---|---|---|"]
    for x in summaries:
        out.append(f"| {x.label} | {x.n} | {100.0 * x.at_least / x.n:.0f}% | {x.gain:+.2f}%, "
                   f"{x.worst:+.2f}% | {100.0 * x.sl_ok / x.n:.0f}% ({x.level:.2f}% vs "
                   f"{x.fifo_level:.2f}%) | {x.held_ok}/{x.within} | {x.held:.3f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=traffic.FAMILIES, action="append")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--seed", type=int, default=None, help="first seed (default: each family's)")
    p.add_argument("--held-out", type=int, default=0, help="also N instances at held-out seeds")
    p.add_argument("--wrong", type=int, default=0, help="also N of each wrong-forecast family")
    p.add_argument("--bound", action="store_true", help="also the value upper bound (slow)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--markdown", action="store_true", help="print the two published tables")
    p.add_argument("--verbose", action="store_true", help="a line per instance")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a gpuroster option (`allocating.Options`), as a Python literal")
    a = p.parse_args(argv)
    options = {k: ast.literal_eval(v) for k, v in (o.split("=", 1) for o in a.option)}
    sets: list[tuple[str, list[model.Scenario]]] = []
    for name in a.family or traffic.FAMILIES:
        seed = a.seed if a.seed is not None else (20000 if name == "bursty" else 30000)
        sets.append((f"{name} (seeds {seed}+)", traffic.family(name, a.count, seed)))
        if a.held_out:
            held = seed + 50000
            sets.append((f"{name} held out (seeds {held}+)",
                         traffic.family(name, a.held_out, held)))
    if a.wrong:
        sets.append(("wrong forecasts", wrongforecasts.family(a.wrong, 2500)))
        sets.append(("day-earlier", wrongforecasts.day_earlier(a.wrong, 7000)))
        trace = wrongforecasts.Jobs(mix="trace", estimate_error=0.5, burst=0.5)
        sets.append(("trace-shaped day-earlier",
                     wrongforecasts.day_earlier(a.wrong, 600, jobs=trace)))
    traffic_rows: list[str] = []
    summaries: list[Summary] = []
    with multiprocessing.Pool(a.workers) as pool:
        for label, scenarios in sets:
            t0 = time.perf_counter()
            if label.split()[0] in traffic.FAMILIES:
                st = traffic.stats(scenarios)
                line = (f"pods 1-GPU {100 * st.one_gpu_share:.1f}%, run median "
                        f"{st.run_median_hours:.2f} h p90 {st.run_p90_hours:.2f} h, "
                        f"{st.pods_per_day:.0f} pods a day; demand CV {st.demand_cv:.2f}, "
                        f"peak/mean {st.peak_over_mean:.2f}, forecast error "
                        f"{100 * st.forecast_error_of_peak:.1f}% of peak, under on "
                        f"{100 * st.under_share:.0f}% of steps")
                traffic_rows.append(
                    f"| {label} | {100 * st.one_gpu_share:.1f}% | {st.run_median_hours:.2f} / "
                    f"{st.run_p90_hours:.2f} | {st.pods_per_day:.0f} | {st.demand_cv:.2f} | "
                    f"{st.peak_over_mean:.2f} | {100 * st.forecast_error_of_peak:.1f}% | "
                    f"{100 * st.under_share:.0f}% |")
                if not a.markdown:
                    print(f"{label} traffic: {line}")
            rows = pool.map(_run, [(s, a.bound, options) for s in scenarios], chunksize=1)
            if a.verbose:
                for r in rows:
                    print(f"    {r.name}: value {r.value['gpuroster']:.0f} vs easy "
                          f"{r.value['priority-easy']:.0f} fifo {r.value['fifo']:.0f}; level "
                          f"{r.level['gpuroster']:.2f} vs fifo {r.level['fifo']:.2f}; held "
                          f"{r.held}/{r.static}{' within' if r.within else ''}")
            summaries.append(summarize(label, rows))
            if not a.markdown:
                report(summaries[-1])
                print(f"  ({time.perf_counter() - t0:.0f} s)")
    if a.markdown:
        print(markdown(traffic_rows, summaries))
    else:
        missed = [x.label for x in summaries if not x.met()]
        print("every bar met" if not missed else f"bars missed on: {', '.join(missed)}")
    return 0

if __name__ == "__main__":
    sys.exit(main())

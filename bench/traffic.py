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

        b = bounding.value_upper_bound(s, time_limit_s=20.0).value_bound
    return Row(s.name, value, level, held, static, within, b)


def _run(args: tuple[model.Scenario, bool, dict[str, object]]) -> Row:
    return run(*args)


def report(label: str, rows: list[Row]) -> bool:
    """Print the family's figures; whether it meets every bar."""
    gain = [100.0 * (r.value["gpuroster"] / r.value["priority-easy"] - 1.0) for r in rows]
    at_least = sum(r.value["gpuroster"] >= r.value["priority-easy"] - 1e-9 for r in rows)
    sl_ok = sum(r.level["gpuroster"] >= r.level["fifo"] - SL_SLACK for r in rows)
    within = [r for r in rows if r.within]
    held_ok = sum(r.held <= r.static for r in within)
    n = len(rows)
    print(f"{label}: {n} instances")
    print(f"  value >= priority-easy's: {at_least}/{n} ({100.0 * at_least / n:.0f}%); "
          f"mean {statistics.mean(gain):+.2f}%, worst {min(gain):+.2f}%, best {max(gain):+.2f}%")
    print(f"  service level within {SL_SLACK} points of fifo's: {sl_ok}/{n} "
          f"({100.0 * sl_ok / n:.0f}%); mean gpuroster "
          f"{statistics.mean(r.level['gpuroster'] for r in rows):.2f}%, fifo "
          f"{statistics.mean(r.level['fifo'] for r in rows):.2f}%")
    print(f"  demand within the static reservation on {len(within)}; services held at most "
          f"its GPU-steps on {held_ok}/{len(within)}; held/static mean "
          f"{statistics.mean(r.held / max(1, r.static) for r in rows):.3f}")
    bounded = [r for r in rows if r.bound]
    share = None
    if bounded:
        share = statistics.mean(r.value["gpuroster"] / r.bound for r in bounded if r.bound)
        easy = statistics.mean(r.value["priority-easy"] / r.bound for r in bounded if r.bound)
        print(f"  value of the bound ({len(bounded)} solved): gpuroster {100 * share:.1f}%, "
              f"priority-easy {100 * easy:.1f}%")
    return (at_least >= 0.9 * n and statistics.mean(gain) >= 3.0 and sl_ok >= 0.97 * n
            and held_ok == len(within) and (share is None or share >= 0.92))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=traffic.FAMILIES, action="append")
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--seed", type=int, default=None, help="first seed (default: each family's)")
    p.add_argument("--held-out", type=int, default=0, help="also N instances at held-out seeds")
    p.add_argument("--wrong", type=int, default=0, help="also N of each wrong-forecast family")
    p.add_argument("--bound", action="store_true", help="also the value upper bound (slow)")
    p.add_argument("--workers", type=int, default=2)
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
    ok = True
    with multiprocessing.Pool(a.workers) as pool:
        for label, scenarios in sets:
            t0 = time.perf_counter()
            if label.split()[0] in traffic.FAMILIES:
                st = traffic.stats(scenarios)
                print(f"{label} traffic: pods 1-GPU {100 * st.one_gpu_share:.1f}%, run median "
                      f"{st.run_median_hours:.2f} h p90 {st.run_p90_hours:.2f} h, "
                      f"{st.pods_per_day:.0f} pods a day; demand CV {st.demand_cv:.2f}, "
                      f"peak/mean {st.peak_over_mean:.2f}, forecast error "
                      f"{100 * st.forecast_error_of_peak:.1f}% of peak, under on "
                      f"{100 * st.under_share:.0f}% of steps")
            rows = pool.map(_run, [(s, a.bound, options) for s in scenarios], chunksize=1)
            if a.verbose:
                for r in rows:
                    print(f"    {r.name}: value {r.value['gpuroster']:.0f} vs easy "
                          f"{r.value['priority-easy']:.0f} fifo {r.value['fifo']:.0f}; level "
                          f"{r.level['gpuroster']:.2f} vs fifo {r.level['fifo']:.2f}; held "
                          f"{r.held}/{r.static}{' within' if r.within else ''}")
            ok &= report(label, rows)
            print(f"  ({time.perf_counter() - t0:.0f} s)")
    print("every bar met" if ok else "some bar missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

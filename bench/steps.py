"""fifo, priority-easy and gpuroster at several step lengths, on the same two days.

    python bench/steps.py                      # 60, 30 and 15 minutes, seeds 200-259
    python bench/steps.py --minutes 15 --mix philly --estimate-error 0 --seeds 200-229
    python bench/steps.py --variant max_wait_steps=48   # an allocating.Options field

Production steps are 15 to 60 minutes (`--step-seconds` 900-3600); the seven scenarios
are hourly. A setting counted in steps means another thing at every step length, so this
runs generated instances (16, 32 and 64 GPUs in turn, four jobs a GPU over two days, the
generator's services with forecasts off by a lognormal error of sigma 0.3 at each step,
`--forecast-error`) at each step
length and prints per length the mean value change of gpuroster and of priority-easy
against fifo, gpuroster's against priority-easy (and on how many it is at least
priority-easy's), the mean real-time service level of each, and how many instances are
more than half a point under fifo's. Durations are drawn in hours and rounded to steps,
so each step length plans the same work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from multiprocessing import Pool

from orders import parse_seeds, parse_variant  # bench/, the script's folder

from extender.planner import allocating, generator, metrics, simulating

SIZES = (16, 32, 64)


def _one(job: tuple[int, int, str, float, float, float, float, dict[str, object]]
         ) -> tuple[list[float], list[float]]:
    seed, minutes, mix, estimate_error, burst, forecast_error, share, variant = job
    gpus = SIZES[seed % len(SIZES)]
    per_day = 24 * 60 // minutes
    s = generator.generate(gpus, gpus * 4, seed, step_minutes=minutes,
                           duration_steps=2 * per_day, horizon_steps=per_day, mix=mix,
                           burst=burst, estimate_error=estimate_error,
                           forecast_error=forecast_error, service_share=share)
    values, levels = [], []
    for policy in ("fifo", "priority-easy", allocating.Gpuroster(**variant)):
        m = metrics.compute(s, simulating.simulate(s, policy).grid)
        values.append(m.value)
        levels.append(100.0 * m.realtime_service_level)
    return values, levels


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", default="60,30,15",
                   help="step lengths in minutes, comma-separated (default 60,30,15)")
    p.add_argument("--seeds", default="200-259", type=parse_seeds,
                   help="seed range, inclusive (default 200-259)")
    p.add_argument("--mix", default="trace", choices=sorted(generator.MIXES),
                   help="job sizes (default trace: the shape of real GPU pod logs)")
    p.add_argument("--estimate-error", type=float, default=0.5,
                   help="sigma of the lognormal error on estimates (default 0.5)")
    p.add_argument("--burst", type=float, default=0.5,
                   help="sigma of the lognormal factor on arrival rates (default 0.5)")
    p.add_argument("--forecast-error", type=float, default=0.3,
                   help="sigma of the lognormal error on each step's forecast (default 0.3)")
    p.add_argument("--service-share", type=float, default=0.2,
                   help="share of the cluster the services' peaks take (default 0.2)")
    p.add_argument("--markdown", action="store_true",
                   help="print the table as Markdown only (what `make results` writes into "
                   "docs/benchmarks.md; no timings, which vary by run)")
    p.add_argument("--variant", default={}, type=parse_variant,
                   help="an allocating.Options field=value (Python literal) instead of the default")
    args = p.parse_args(argv)
    try:
        minutes = [int(x) for x in args.minutes.split(",") if x.strip()]
    except ValueError as e:
        p.error(str(e))
    seeds: range = args.seeds
    bad = [m for m in minutes if m < 1 or 1440 % m]
    if bad or not minutes:
        p.error(f"step lengths must divide a day; got {args.minutes}")
    variant = f" {args.variant}" if args.variant else ""
    if args.markdown:
        print("| step | gpuroster vs fifo | priority-easy vs fifo | gpuroster vs priority-easy "
              "| at least priority-easy's | service level, gpuroster / easy / fifo "
              "| under fifo's |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    else:
        print(f"{len(seeds)} instances a step length ({args.mix} jobs, estimates off by sigma "
              f"{args.estimate_error:g}, bursts {args.burst:g}, forecasts off by sigma "
              f"{args.forecast_error:g}){variant}")
        print("minutes  gpuroster/fifo  easy/fifo  gpuroster/easy  >=easy  "
              "service level g/easy/fifo  under fifo  seconds")
    with Pool(2) as pool:
        for m in minutes:
            t0 = time.perf_counter()
            rows = pool.map(_one, [(s, m, args.mix, args.estimate_error, args.burst,
                                    args.forecast_error, args.service_share, args.variant)
                                   for s in seeds])
            gain = statistics.fmean(100 * (v[2] / v[0] - 1) for v, _ in rows)
            easy = statistics.fmean(100 * (v[1] / v[0] - 1) for v, _ in rows)
            over = statistics.fmean(100 * (v[2] / v[1] - 1) for v, _ in rows)
            at_least = sum(1 for v, _ in rows if v[2] >= v[1])
            sl = [statistics.fmean(lv[i] for _, lv in rows) for i in (2, 1, 0)]
            under = sum(1 for _, lv in rows if lv[2] < lv[0] - 0.5)
            took = time.perf_counter() - t0
            if args.markdown:
                print(f"| {m} min | {gain:+.1f}% | {easy:+.1f}% | {over:+.2f}% "
                      f"| {at_least} of {len(rows)} | {sl[0]:.2f} / {sl[1]:.2f} / {sl[2]:.2f}% "
                      f"| {under} |")
                continue
            print(f"{m:7d}  {gain:+13.1f}%  {easy:+8.1f}%  {over:+13.2f}%  "
                  f"{at_least:3d}/{len(rows)}  {sl[0]:.2f}/{sl[1]:.2f}/{sl[2]:.2f}  "
                  f"{under:10d}  {took:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

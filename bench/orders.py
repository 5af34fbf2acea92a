"""Planner variants against the default on generated contended instances (held out).

    python bench/orders.py --variant 'orders=("priority", "priority-short")'
    python bench/orders.py --variant decay=0.0 --seeds 300-314

A change to the planner that helps the seven shipped scenarios may only fit
them. This runs fifo, the default `gpuroster` and each variant on instances
from the seeded generator (8, 16 and 32 GPUs, queues long enough to contend,
estimates and forecasts off by a lognormal error) and prints, per variant,
the mean value change against the default, how many instances got better or
worse, the worst and best, the mean wait of the top priority, and the change
in real-time shortfall (GPU-steps over all instances, and on how many). Pick a
change on one seed range and confirm it on another.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from dataclasses import replace

from extender.planner import allocating, generator, metrics, model, simulating

# gpus, jobs: contended at every size (fifo leaves 20-45% of the value on the table)
SHAPES = ((8, 24), (16, 40), (32, 70), (16, 60))


def instances(seeds: range, uniform: bool = False,
              estimate_error: float = 0.3) -> list[model.Scenario]:
    out = []
    for seed in seeds:
        for gpus, jobs in SHAPES:
            out.append(generator.generate(
                gpus, jobs, seed, services=1 if gpus <= 16 else 2, estimate_error=estimate_error,
                forecast_error=0.15, name=f"gen-{gpus}-{jobs}-{seed}"))
    if uniform:  # every priority 1: any gain is packing alone
        out = [replace(s, jobs=tuple(replace(j, priority=1) for j in s.jobs),
                       services=tuple(replace(v, priority=1) for v in s.services))
               for s in out]
    return out


def top_wait(m: metrics.Metrics) -> float:
    return m.waits[-1].mean if m.waits else 0.0


def parse_variant(text: str) -> dict[str, object]:
    """`field=value` (a Python literal) for an `allocating.Options` field; an unknown field
    or a missing `=` is an argparse error, not a TypeError later in a worker."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or key not in allocating.Options.__dataclass_fields__:
        raise argparse.ArgumentTypeError(f"expected an Options field=value, got {text!r}")
    return {key: ast.literal_eval(value.strip())}


def parse_seeds(text: str) -> range:
    """`LO-HI` (inclusive) or one seed, as a range; anything else is an argparse error."""
    lo, sep, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a seed range LO-HI, got {text!r}") from None
    if last < first:
        raise argparse.ArgumentTypeError(f"empty seed range {text!r}")
    return range(first, last + 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/orders.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", action="append", default=[], type=parse_variant,
                   help="an allocating.Options field=value (Python literal); repeatable")
    p.add_argument("--uniform", action="store_true", help="every priority set to 1")
    p.add_argument("--seeds", default="200-214", type=parse_seeds,
                   help="seed range, inclusive (default 200-214)")
    p.add_argument("--estimate-error", type=float, default=0.3,
                   help="lognormal sigma of estimates against true durations (0: exact)")
    args = p.parse_args(argv)
    scen = instances(args.seeds, args.uniform, args.estimate_error)
    print(f"{len(scen)} generated instances, seeds {args.seeds[0]}-{args.seeds[-1]}, "
          f"shapes {SHAPES}, "
          f"estimate error {args.estimate_error}"
          + (", every priority 1" if args.uniform else ""))
    t0 = time.perf_counter()
    base: list[metrics.Metrics] = []
    fifos: list[float] = []
    gain: list[float] = []
    under: list[tuple[float, str, bool]] = []  # (change, instance, more shortfall than fifo)
    for s in scen:
        fifo = metrics.compute(s, simulating.simulate(s, "fifo").grid)
        m = metrics.compute(s, simulating.simulate(s, allocating.Gpuroster()).grid)
        base.append(m)
        fifos.append(fifo.value)
        gain.append(m.value / fifo.value - 1)
        if gain[-1] < 0:
            under.append((gain[-1], s.name, m.realtime_shortfall > fifo.realtime_shortfall))
    print(f"default: value vs fifo mean {statistics.mean(gain) * 100:+.1f}%, "
          f"top-priority mean wait {statistics.mean(top_wait(m) for m in base):.2f}"
          f" steps  ({time.perf_counter() - t0:.0f} s)")
    under.sort()
    print(f"default under fifo on {len(under)}: {sum(g > -0.03 for g, _, _ in under)} by under "
          f"3%, {sum(more for _, _, more in under)} with more real-time shortfall than fifo's; "
          "worst " + ", ".join(f"{n} {g * 100:+.1f}%" for g, n, _ in under[:5]))
    for variant in args.variant:
        ch: list[float] = []
        waits: list[float] = []
        short: list[int] = []
        below = 0  # under fifo's value
        for s, b, f in zip(scen, base, fifos, strict=True):
            m = metrics.compute(s, simulating.simulate(s, allocating.Gpuroster(**variant)).grid)
            ch.append(m.value / b.value - 1)
            below += m.value < f
            waits.append(top_wait(m) - top_wait(b))
            short.append(m.realtime_shortfall - b.realtime_shortfall)
        better = sum(c > 1e-9 for c in ch)
        worse = sum(c < -1e-9 for c in ch)
        print(f"{variant}: value vs default mean {statistics.mean(ch) * 100:+.2f}% "
              f"({better} better, {worse} worse, worst {min(ch) * 100:+.1f}%, "
              f"best {max(ch) * 100:+.1f}%), "
              f"top-priority wait {statistics.mean(waits):+.2f} steps, "
              f"real-time shortfall {sum(short):+d} GPU-steps "
              f"({sum(x > 0 for x in short)} more, {sum(x < 0 for x in short)} less); "
              f"under fifo on {below}; worst "
              + ", ".join(f"{s.name} {c * 100:+.1f}%" for c, s in sorted(
                  zip(ch, scen, strict=True), key=lambda x: x[0])[:3] if c < 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())

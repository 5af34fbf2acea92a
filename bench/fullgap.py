"""Fast mode against full mode on generated instances (held out from the seven files).

    python bench/fullgap.py                      # seeds 400-409, 8 and 16 GPUs
    python bench/fullgap.py --seeds 500-504 --estimate-error 0

The target "fast mode within 3% of full mode wherever full mode runs"
is measured on the seven shipped files by `gpuroster bench --full`; one file
is one window, and one decision there can swing it by several percent. This
runs fifo, fast mode (`gpuroster`) and full mode (`gpuroster-full`, CP-SAT,
the same settings as the bench) on generated contended instances and prints,
per instance, the three values, fast over full, and each one's real-time
shortfall; then the mean and median of fast over full, how many instances
are within 3%, and the worst. Full mode takes about 12 s per instance of
48 steps (0.25 s of CP-SAT work per step, one worker).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from orders import parse_seeds  # bench/, the script's folder

from extender.optimizing import exact
from extender.planner import generator, legality, metrics, model, simulating

# gpus, jobs: where full mode's CP-SAT model is solved within its limit at most steps
SHAPES = ((8, 24), (16, 40))


def instances(seeds: range, estimate_error: float) -> list[model.Scenario]:
    return [
        generator.generate(gpus, jobs, seed, services=1, estimate_error=estimate_error,
                           forecast_error=0.15, name=f"gen-{gpus}-{jobs}-{seed}")
        for seed in seeds
        for gpus, jobs in SHAPES
    ]


def value(s: model.Scenario, policy: object) -> metrics.Metrics:
    run = simulating.simulate(s, policy)  # type: ignore[arg-type]
    legality.check(s, run.grid)
    return metrics.compute(s, run.grid)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/fullgap.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="400-409", type=parse_seeds,
                   help="seed range, inclusive (default 400-409)")
    p.add_argument("--estimate-error", type=float, default=0.3,
                   help="lognormal sigma of estimates against true durations (0: exact)")
    args = p.parse_args(argv)
    scen = instances(args.seeds, args.estimate_error)
    print(f"{len(scen)} generated instances, seeds {args.seeds[0]}-{args.seeds[-1]}, "
          f"shapes {SHAPES}, "
          f"estimate error {args.estimate_error}")
    print(f"{'instance':18s} {'fifo':>7s} {'fast':>7s} {'full':>7s} {'fast/full':>9s} "
          f"{'short fast':>10s} {'short full':>10s} {'full s':>6s}")
    ratios: list[float] = []
    t_all = time.perf_counter()
    for s in scen:
        fifo = value(s, "fifo")
        fast = value(s, "gpuroster")
        t0 = time.perf_counter()
        full = value(s, exact.Full())
        secs = time.perf_counter() - t0
        r = fast.value / full.value - 1
        ratios.append(r)
        print(f"{s.name:18s} {fifo.value:7.0f} {fast.value:7.0f} {full.value:7.0f} "
              f"{r * 100:+8.1f}% {fast.realtime_shortfall:10d} {full.realtime_shortfall:10d} "
              f"{secs:6.1f}", flush=True)
    within = sum(r >= -0.03 for r in ratios)
    print(f"fast over full: mean {statistics.mean(ratios) * 100:+.2f}%, "
          f"median {statistics.median(ratios) * 100:+.2f}%, "
          f"worst {min(ratios) * 100:+.1f}%, best {max(ratios) * 100:+.1f}%; "
          f"within 3% on {within} of {len(ratios)}; "
          f"fast ahead on {sum(r > 1e-9 for r in ratios)}, behind on "
          f"{sum(r < -1e-9 for r in ratios)}  ({time.perf_counter() - t_all:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

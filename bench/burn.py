"""Keep the CPUs busy: N processes spin until a deadline, or until a watched process ends.

The flake hunt (bench/flakehunt.py) runs the unit suite beside it, so that a test that
only passes when its threads get the CPU at once fails where it can be seen.

    python bench/burn.py --procs 2 --seconds 3600 [--while-pid PID]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time

from extender.localcluster import processes


def spin(until: float, watched: int) -> None:
    """Burn one CPU until `until` (monotonic) or until process `watched` is gone."""
    x = 0
    while time.monotonic() < until:
        for _ in range(200_000):  # about 10 ms of work between checks
            x = (x * 1_103_515_245 + 12_345) & 0xFFFFFFFF
        if watched and not processes.alive(watched):
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1,
                    help="spinning processes (default: one per CPU)")
    ap.add_argument("--seconds", type=float, default=60.0,
                    help="stop after this long whatever happens (default: 60)")
    ap.add_argument("--while-pid", type=int, default=0,
                    help="stop as soon as this process is gone")
    args = ap.parse_args(argv)
    # Stopped by a signal, stop the spinners too (the `finally` below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    until = time.monotonic() + args.seconds
    procs = [multiprocessing.Process(target=spin, args=(until, args.while_pid), daemon=True)
             for _ in range(args.procs)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

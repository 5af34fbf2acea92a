"""The flake hunt: the unit suite many times, in random order, on busy CPUs.

Each run is `pytest -m 'not e2e' tests` shuffled by pytest-random-order with a seed of
its own, while bench/burn.py keeps the CPUs busy, so that a test which only passes when
its threads are scheduled promptly, or after some other test, fails here. Prints every
test that failed at least once with the seeds of the runs it failed in (rerun one with
the command printed), keeps each run's output, and exits 1 if anything failed.

    python bench/flakehunt.py --runs 20 --burn 2 [--record docs/testing.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ["-m", "not e2e", "tests", "-q", "-p", "no:cacheprovider"]
BEGIN, END = "<!-- flakehunt: written by bench/flakehunt.py -->", "<!-- /flakehunt -->"
_OUTCOME = re.compile(r"^(FAILED|ERROR) (.+?)(?: - .*)?$")
_TALLY = re.compile(r"^=*\s*(\d+ (?:passed|failed|errors?|skipped)\b.*?) in [\d.]+s",
                    re.MULTILINE)


def pytest_args(seed: int, bucket: str, timeout: int) -> list[str]:
    """The suite's arguments for one shuffled run (a hung test fails after `timeout` s)."""
    return [*SUITE, f"--random-order-bucket={bucket}", f"--random-order-seed={seed}",
            f"--timeout={timeout}"]


def failures(output: str) -> list[str]:
    """Node ids of the tests pytest's short summary lists as FAILED or ERROR."""
    return sorted({m.group(2) for line in output.splitlines()
                   if (m := _OUTCOME.match(line))})


def tally(output: str) -> str:
    """pytest's closing line ("950 passed, 2 failed"), or "" if it did not get there."""
    found = _TALLY.findall(output)
    return found[-1] if found else ""


def commit() -> str:
    """The commit hunted ("abc1234", "+ changes" when the tracked files differ), or ""."""
    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    return head + (" + changes" if head and git("status", "--porcelain", "-uno") else "")


def record(path: Path, text: str) -> None:
    """Replace the block between the markers in `path` with `text`."""
    doc = path.read_text(encoding="utf-8")
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    path.write_text(doc[:start] + "\n" + text.rstrip() + "\n" + doc[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--burn", type=int, default=os.cpu_count() or 1,
                    help="CPU-burning processes beside the suite (0: none)")
    ap.add_argument("--bucket", default="module",
                    help="pytest-random-order bucket: module, package or global")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a test may take")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "flakehunt",
                    help="where each run's output is kept")
    ap.add_argument("--record", type=Path, help="write the result into this page's block")
    args = ap.parse_args(argv)
    # Stopped early (Ctrl-C or SIGTERM), the hunt still reports the runs it finished.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    args.out.mkdir(parents=True, exist_ok=True)
    hunted = commit()
    burner = None
    if args.burn:
        burner = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "burn.py"), "--procs", str(args.burn),
             "--seconds", str(args.runs * 1800), "--while-pid", str(os.getpid())])
    failed: dict[str, list[int]] = defaultdict(list)
    broken: list[int] = []  # runs that did not finish (pytest's exit code above 1)
    seeds: list[int] = []  # of the runs that finished
    started = time.monotonic()
    stopped = False
    try:
        for i in range(1, args.runs + 1):
            seed = random.SystemRandom().randrange(1, 2**31)
            t0 = time.monotonic()
            run = subprocess.run([sys.executable, "-m", "pytest",
                                  *pytest_args(seed, args.bucket, args.timeout)],
                                 cwd=ROOT, capture_output=True, text=True)
            output = run.stdout + run.stderr
            (args.out / f"run-{i:03d}-seed-{seed}.log").write_text(output, encoding="utf-8")
            seeds.append(seed)
            for node in failures(output):
                failed[node].append(seed)
            if run.returncode > 1:
                broken.append(seed)
            print(f"run {i}/{args.runs} seed {seed}: {tally(output) or 'no tally'} "
                  f"(exit {run.returncode}, {time.monotonic() - t0:.0f} s)", flush=True)
    except KeyboardInterrupt:
        stopped = True  # the run in progress is not counted
    finally:
        if burner is not None:
            burner.terminate()
            burner.wait(30)

    took = time.monotonic() - started
    lines = [f"{len(seeds)} runs"
             + (f" (stopped early, of {args.runs} asked)" if stopped else "")
             + f", {len(failed)} tests failed at least once"
             + (f", {len(broken)} runs did not finish (seeds {broken})" if broken else "")]
    for node, its in sorted(failed.items()):
        lines.append(f"- {node}: {len(its)} of {len(seeds)} runs, seeds "
                     + ", ".join(map(str, its)))
    rerun = " ".join(shlex.quote(a) for a in pytest_args(0, args.bucket, args.timeout))
    print("\n".join(lines))
    if failed or broken:
        print(f"rerun one: python -m pytest {rerun.replace('seed=0', 'seed=SEED')}")
    if args.record:
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = (f"make test-flakes RUNS={args.runs} BURN={args.burn}"
                   + (f" BUCKET={args.bucket}" if args.bucket != "module" else ""))
        record(args.record, "\n".join([
            f"Last hunt: {when}, `{command}`" + (f" at {hunted}" if hunted else "")
            + f" on {os.cpu_count()} CPUs, {args.burn} "
            f"processes of bench/burn.py spinning beside the suite, {took / 60:.0f} minutes "
            f"(load average {os.getloadavg()[1]:.1f} over the last 5 minutes):",
            "", *lines]))
    return 1 if failed or broken or stopped else 0


if __name__ == "__main__":
    raise SystemExit(main())

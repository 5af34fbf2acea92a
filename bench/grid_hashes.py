"""Hash the grids `gpuroster bench` produces: a refactor must leave every one unchanged.

    python bench/grid_hashes.py                    # runs the bench, prints one hash per grid
    python bench/grid_hashes.py --out hashes.txt   # also writes them
    python bench/grid_hashes.py --check hashes.txt # exit 1 if any grid differs from the file

Runs `gpuroster bench` (the seven shipped scenarios, every registered policy
except gpuroster-full, whose CP-SAT solve is time-limited and so not
reproducible) into a temporary directory and hashes each result file's grid
(the named GPU x step grid, JSON-serialized with sorted keys).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def hashes(policies: str | None = None) -> dict[str, str]:
    if policies is None:
        from extender.planner import policies as registry

        policies = ",".join(registry.names())
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "extender.cli", "bench", "--quiet", "--policies", policies,
             "--out", tmp],
            check=True, stdout=subprocess.DEVNULL,
        )
        out = {}
        for p in sorted(Path(tmp).glob("*.json")):
            grid = json.loads(p.read_text())["grid"]
            out[p.stem] = hashlib.sha256(json.dumps(grid, sort_keys=True).encode()).hexdigest()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", help="comma list (default: every registered policy)")
    ap.add_argument("--out", type=Path, help="write the hashes here")
    ap.add_argument("--check", type=Path, help="compare with a file written by --out")
    args = ap.parse_args()
    got = hashes(args.policies)
    text = "".join(f"{k} {v}\n" for k, v in got.items())
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    if args.check:
        want = dict(line.split() for line in args.check.read_text().splitlines() if line)
        diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        if diff:
            print(f"{len(diff)} grid(s) differ: {', '.join(diff)}", file=sys.stderr)
            return 1
        print(f"all {len(got)} grids identical", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Hashes of the grids in a folder of result files: did a planner change move any plan?

    gpuroster bench --quiet --out /tmp/before        # before the change
    python bench/gridhash.py /tmp/before > before.txt
    gpuroster bench --quiet --out /tmp/after         # after it
    python bench/gridhash.py /tmp/after --against before.txt

One line per result file (`<scenario>.<policy>.json`): the SHA-256 of its grid (the
committed cells, as MODEL.md's result file lists them), then its value. With
`--against`, every line of that earlier listing is compared: a changed hash is printed
with both values, and the exit status is 1 when any grid changed or is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path


def grid_hashes(folder: Path) -> dict[str, tuple[str, float]]:
    """result file name -> (SHA-256 of its grid, its value)."""
    out = {}
    for p in sorted(folder.glob("*.json")):
        doc = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or "grid" not in doc:
            continue  # not a result file (the report's own data, say)
        text = json.dumps(doc["grid"], separators=(",", ":"))
        out[p.name] = (hashlib.sha256(text.encode()).hexdigest(), float(doc["metrics"]["value"]))
    return out


def parse_listing(text: str) -> dict[str, tuple[str, float]]:
    out = {}
    for line in text.splitlines():
        if line.strip():
            name, digest, value = line.split()
            out[name] = (digest, float(value))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a folder of result files (gpuroster bench --out)")
    ap.add_argument("--against", type=Path, help="an earlier listing of this script to compare")
    args = ap.parse_args(argv)
    now = grid_hashes(args.folder)
    if not now:
        print(f"{args.folder}: no result files", file=sys.stderr)
        return 2
    if args.against is None:
        for name, (digest, value) in now.items():
            print(f"{name} {digest} {value:.6f}")
        return 0
    before = parse_listing(args.against.read_text(encoding="utf-8"))
    changed = 0
    for name, (digest, value) in before.items():
        if name not in now:
            print(f"{name}: missing")
            changed += 1
        elif now[name][0] != digest:
            print(f"{name}: grid changed, value {value:.2f} -> {now[name][1]:.2f}")
            changed += 1
    print(f"{len(before) - changed} of {len(before)} grids identical")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`make results`: rewrite every published simulator table from the command that measures it.

The README and docs/benchmarks.md carry their tables between marker comments:

    <!-- results:NAME begin -->
    Measured DATE on MACHINE by `make results`: `COMMAND`

    | ... the command's Markdown output ... |
    <!-- results:NAME end -->

`BLOCKS` names each table's command. This script runs them and writes their output
between the markers, with the date and the machine, so no figure is typed by hand, and
redraws the README's picture of the grid (`PICTURE`) with the headline table.
tests/test_results.py fails when a table differs from what its command prints now (the
seven scenarios' tables, which take a second; the others take minutes and are checked
by `--check`).

    python tools/results.py                 # every table
    python tools/results.py seven steps     # some of them
    python tools/results.py --check         # compare only; exit 1 on a difference
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = (ROOT / "README.md", ROOT / "docs" / "benchmarks.md")
PROVENANCE = "Measured "
HIGHS_BANNER = ("Running HiGHS", "Includes third-party software")


@dataclass(frozen=True)
class Block:
    command: str  # as a reader types it, from the repository's root, in the venv
    minutes: float  # about how long it takes on a 2-core machine


BLOCKS = {
    "seven": Block("gpuroster bench --quiet --markdown headline", 0.1),
    "scenarios": Block("gpuroster bench --quiet --markdown scenarios", 0.1),
    "seven-all": Block("gpuroster bench --quiet --markdown table", 0.1),
    "full": Block("gpuroster bench --quiet --policies fifo,gpuroster --full --markdown full", 6),
    "slo": Block("python bench/slo.py --count 100 --markdown", 1),
    "steps": Block("python bench/steps.py --markdown", 1),
}

# The README's picture of the grid carries figures in its titles: drawn by the same run.
PICTURE = ("gpuroster bench --quiet training-heavy --policies fifo,gpuroster --out out/results",
           Path("out/results/training-heavy.grids.png"),
           Path("docs/images/training-heavy.grids.png"))

MARKER = re.compile(r"<!-- results:(?P<name>[\w-]+) begin -->\n(?P<body>.*?)"
                    r"<!-- results:(?P=name) end -->", re.S)


def argv(command: str) -> list[str]:
    """The command's argv, with `gpuroster` and `python` from this interpreter's venv."""
    words = shlex.split(command)
    bin_dir = Path(sys.executable).parent
    if words[0] == "python":
        words[0] = sys.executable
    elif (bin_dir / words[0]).exists():
        words[0] = str(bin_dir / words[0])
    return words


def measure(name: str) -> str:
    """What the block's command prints now, without trailing blank lines."""
    done = subprocess.run(argv(BLOCKS[name].command), cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{BLOCKS[name].command} failed ({done.returncode}):\n{done.stderr}")
    # HiGHS prints a banner on stdout from C when the bound's solver starts, before or
    # after Python's buffered table: it is no part of the table.
    lines = [ln for ln in done.stdout.splitlines() if not ln.startswith(HIGHS_BANNER)]
    return "\n".join(lines).strip("\n")


def draw_picture() -> None:
    command, made, published = PICTURE
    subprocess.run(argv(command), cwd=ROOT, capture_output=True, check=True)
    shutil.copyfile(ROOT / made, ROOT / published)
    print(f"wrote {published}", file=sys.stderr)


def machine() -> str:
    cores = os.cpu_count() or 0
    try:
        kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
        memory = f", {round(kb / 2**20)} GB"
    except (OSError, StopIteration, ValueError):
        memory = ""
    return f"{cores} cores{memory}"


def body(name: str, table: str, day: datetime.date, where: str) -> str:
    return (f"{PROVENANCE}{day.isoformat()} on {where} by `make results`: "
            f"`{BLOCKS[name].command}`\n\n{table}\n")


def table_of(block_body: str) -> str:
    """A block's table: its body without the provenance line."""
    lines = [ln for ln in block_body.splitlines() if not ln.startswith(PROVENANCE)]
    return "\n".join(lines).strip("\n")


def blocks(text: str) -> dict[str, str]:
    """Every marked block of a page, by name, its body as written."""
    return {m["name"]: m["body"] for m in MARKER.finditer(text)}


def rewrite(text: str, tables: dict[str, str], day: datetime.date, where: str) -> str:
    def one(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in tables:
            return m.group(0)
        return (f"<!-- results:{name} begin -->\n{body(name, tables[name], day, where)}"
                f"<!-- results:{name} end -->")

    return MARKER.sub(one, text)


def main(args_in: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("names", nargs="*",
                    help=f"tables to rewrite (default all: {', '.join(BLOCKS)})")
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    a = ap.parse_args(list(args_in))
    unknown = [n for n in a.names if n not in BLOCKS]
    if unknown:
        ap.error(f"unknown table(s) {', '.join(unknown)}; known: {', '.join(BLOCKS)}")
    names = a.names or list(BLOCKS)
    tables = {}
    for name in names:
        print(f"results: {name}: {BLOCKS[name].command} (~{BLOCKS[name].minutes:g} min)",
              file=sys.stderr)
        tables[name] = measure(name)
    differ = 0
    day, where = datetime.datetime.now(datetime.UTC).date(), machine()
    for page in PUBLISHED:
        text = page.read_text(encoding="utf-8")
        found = blocks(text)
        for name in tables:
            if name in found and table_of(found[name]) != tables[name]:
                differ += 1
                print(f"{page.relative_to(ROOT)}: results:{name} differs from what "
                      f"`{BLOCKS[name].command}` prints now")
        if not a.check:
            new = rewrite(text, tables, day, where)
            if new != text:
                page.write_text(new, encoding="utf-8")
                print(f"wrote {page.relative_to(ROOT)}", file=sys.stderr)
    if not a.check and (not a.names or "seven" in a.names):
        draw_picture()
    return 1 if a.check and differ else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

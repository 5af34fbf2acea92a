"""bench/gridhash.py: a planner change that moves any grid is caught, one that does not passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gridhash.py"


def _results(folder: Path, cell: str | None) -> Path:
    folder.mkdir()
    for policy in ("fifo", "gpuroster"):
        doc = {"version": 1, "grid": [[cell if policy == "gpuroster" else "a", None]],
               "metrics": {"value": 10.0 if cell == "a" else 7.0}}
        (folder / f"tiny.{policy}.json").write_text(json.dumps(doc))
    (folder / "report.json").write_text("[]")  # not a result file: ignored
    return folder


def _run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True, check=False)


def test_same_grids_pass_and_a_moved_cell_fails(tmp_path: Path) -> None:
    before = _results(tmp_path / "before", "a")
    listing = tmp_path / "before.txt"
    listing.write_text(_run(before).stdout)
    assert len(listing.read_text().splitlines()) == 2
    same = _run(_results(tmp_path / "same", "a"), "--against", listing)
    assert same.returncode == 0 and "2 of 2 grids identical" in same.stdout
    moved = _run(_results(tmp_path / "moved", "b"), "--against", listing)
    assert moved.returncode == 1
    assert "tiny.gpuroster.json: grid changed, value 10.00 -> 7.00" in moved.stdout
    assert "1 of 2 grids identical" in moved.stdout

"""bench/extremes.py: scenario files at the edges of the format, through every policy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extender.planner import scenario

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import extremes  # noqa: E402  (bench/ is not a package)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "extremes.py"), *args],
                          capture_output=True, text=True, check=False)


def test_every_drawn_file_is_legal_input_and_seeded() -> None:
    for seed in range(40):
        doc = extremes.document(seed)
        assert doc == extremes.document(seed)  # the seed alone decides it
        s = scenario.parse(doc, f"extreme-{seed}")  # a ScenarioError fails the test
        assert s.name == f"extreme-{seed}"


def test_every_policy_runs_legally_and_the_slowest_re_plans_are_printed() -> None:
    out = _run("--seeds", "0-5", "--slow-ms", "1000")
    assert out.returncode == 0, out.stderr
    assert "6 scenarios x 4 policies" in out.stdout
    assert "runs that raised or broke a rule: 0" in out.stdout
    for policy in extremes.POLICIES:
        assert f"  {policy} " in out.stdout


def test_a_bad_seed_range_is_refused() -> None:
    out = _run("--seeds", "9-3")
    assert out.returncode == 2 and "empty seed range" in out.stderr

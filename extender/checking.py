"""`gpuroster check SCENARIO RESULT.json`: legality and metrics of any result file.

Re-derives every rule of MODEL.md and every metric from the grid and the scenario alone,
as any checker could, and compares them with what the file says.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from extender import scenarios
from extender.planner import legality, metrics, model


def _service_churn(doc: Mapping[str, Any], s: model.Scenario) -> dict[str, list[int]] | None:
    """A cluster's result judges the swap cap by its pods (`service_churn`); any other
    result by the GPUs in its grid."""
    if doc.get("source") != "cluster":
        return None
    churn = doc.get("service_churn")
    if not isinstance(churn, dict):
        raise ValueError("a cluster result needs service_churn: per service, pods in+out per step")
    out: dict[str, list[int]] = {}
    for v in s.services:
        steps = churn.get(v.name)
        if not isinstance(steps, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in steps
        ):
            raise ValueError(f"service_churn.{v.name}: expected a list of counts >= 0")
        out[v.name] = steps
    return out


HEADER = ("version", "scenario", "policy", "gpus", "steps")


def _header_problems(doc: Mapping[str, Any], s: model.Scenario) -> list[str]:
    """Where a result file's header does not describe a run of `s`: a result of another
    scenario of the same shape would otherwise be judged, and pass, against this one."""
    want: dict[str, Any] = {"version": 1, "scenario": s.name, "gpus": s.cluster.gpus,
                            "steps": s.duration_steps}
    out = []
    for key in HEADER:
        got = doc.get(key)
        if key == "policy":
            if not isinstance(got, str) or not got:
                out.append(f"policy: file says {got!r}, expected the policy's name")
        # the type too: true and 1.0 are equal to 1 in Python, and are not it
        elif type(got) is not type(want[key]) or got != want[key]:
            out.append(f"{key}: file says {got!r}, the scenario ({s.source}) has {want[key]!r}")
    return out


def _grid_problem(grid: Any) -> str | None:
    """What makes `grid` not a list of rows of names or nulls (shape and names are
    `metrics.index_grid`'s to judge), or None."""
    if grid is None:
        return "grid: missing"
    if not isinstance(grid, list):
        return f"grid: expected a list of rows, got {type(grid).__name__}"
    for g, row in enumerate(grid):
        if not isinstance(row, list):
            return f"grid[{g}]: expected a list of cells, got {type(row).__name__}"
        for t, cell in enumerate(row):
            if cell is not None and not isinstance(cell, str):
                return f"grid[{g}][{t}]: expected a name or null, got {cell!r}"
    return None


def _is_number(x: Any) -> TypeGuard[int | float]:
    """A finite int or float, as JSON gives them (true and false are not numbers here)."""
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)


def _metric_problem(key: str, got: Any, want: float) -> str | None:
    if got is None:
        return f"metrics.{key}: missing, the grid gives {want}"
    if not _is_number(got):
        return f"metrics.{key}: file says {got!r}, not a number (the grid gives {want})"
    if abs(float(got) - want) > 1e-6 * max(1.0, abs(want)):
        return f"metrics.{key}: file says {got}, the grid gives {want}"
    return None


def _plan_ms_problem(got: Any) -> str | None:
    """What is wrong with a result file's `plan_ms` (p50, p99 and max plan times in ms,
    each a finite number >= 0, in that order), or None. It cannot be re-derived from the
    grid, only read for sense; a file without it (a peer that times no plan) passes."""
    keys = ("p50", "p99", "max")
    if not isinstance(got, dict):
        return f"plan_ms: expected a mapping of {', '.join(keys)}, file says {got!r}"
    for key in keys:
        x = got.get(key)
        if not _is_number(x) or x < 0:
            return f"plan_ms.{key}: file says {x!r}, not a time in ms (a number >= 0)"
    if not got["p50"] <= got["p99"] <= got["max"]:
        return (f"plan_ms: file says p50 {got['p50']}, p99 {got['p99']}, max {got['max']}; "
                "a percentile cannot pass a higher one")
    return None


def check_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="gpuroster check", description="check a result file against its scenario"
    )
    ap.add_argument("scenario")
    ap.add_argument("result", type=Path)
    args = ap.parse_args(list(argv))
    # A file that cannot be read as a result: exit 2. A result that is not a legal run
    # of this scenario, or whose header or metrics say otherwise than its grid: exit 1.
    try:
        s = scenarios.load(scenarios.resolve(args.scenario))
        doc = json.loads(args.result.read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise ValueError(f"{args.result}: expected a JSON object, got {type(doc).__name__}")
    except (scenarios.ScenarioError, ValueError, OSError) as e:
        print(f"gpuroster check: {e}", file=sys.stderr)
        return 2
    header = _header_problems(doc, s)
    if header:
        print("\n".join(header))
        return 1
    try:
        bad_grid = _grid_problem(doc.get("grid"))
        if bad_grid:
            raise ValueError(bad_grid)
        grid, _ = metrics.index_grid(s, doc["grid"])
        churn = _service_churn(doc, s)
    except ValueError as e:
        print(f"gpuroster check: {e}", file=sys.stderr)
        return 2
    problems = legality.violations(s, grid, churn=churn)
    m = metrics.compute(s, grid)
    written = doc.get("metrics")
    expected = m.result_block()  # the metrics a result file carries, as it writes them
    if isinstance(written, dict):
        for key, want in expected.items():
            problem = _metric_problem(key, written.get(key), float(want))
            if problem:
                problems.append(problem)
    else:
        problems.append(f"metrics: expected a mapping of {', '.join(expected)}, "
                        f"file says {written!r}")
    if "plan_ms" in doc:
        problem = _plan_ms_problem(doc["plan_ms"])
        if problem:
            problems.append(problem)
    if problems:
        print("\n".join(problems))
        return 1
    print(
        f"ok: {args.result} is legal and its metrics match "
        f"(utilization {m.utilization:.2f}%, value {m.value:.0f})"
    )
    return 0

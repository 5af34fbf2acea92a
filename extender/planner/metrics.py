"""MODEL.md's metrics, re-derived from a grid and its scenario alone.

Every policy is judged by this one function, whatever its own objective.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from extender.planner import model


@dataclass(frozen=True)
class WaitStats:
    priority: float
    jobs: int
    started: int
    mean: float
    p95: float


@dataclass(frozen=True)
class Metrics:
    utilization: float  # percent
    value: float
    realtime_shortfall: int
    realtime_service_level: float
    jobs_completed: int
    jobs_total: int
    waits: tuple[WaitStats, ...] = field(default=())

    def top_priority_p95_wait(self) -> float:
        return self.waits[-1].p95 if self.waits else 0.0

    def result_block(self) -> dict[str, Any]:
        """The ``metrics`` object of a MODEL.md result file."""
        return {
            "utilization": self.utilization,
            "value": self.value,
            "realtime_shortfall": self.realtime_shortfall,
            "realtime_service_level": self.realtime_service_level,
            "jobs_completed": self.jobs_completed,
            "jobs_total": self.jobs_total,
        }

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["waits"] = [asdict(w) for w in self.waits]
        return d


def index_grid(
    s: model.Scenario, grid: Sequence[Sequence[str | None]]
) -> tuple[np.ndarray, list[str]]:
    """Names grid (as in result files) -> (int grid, names). Unknown names raise ValueError."""
    names = [j.name for j in s.jobs] + [v.name for v in s.services]
    index = {n: i for i, n in enumerate(names)}
    N, T = s.cluster.gpus, s.duration_steps
    if len(grid) != N:
        raise ValueError(f"grid has {len(grid)} rows, the cluster has {N} GPUs")
    out = np.full((N, T), -1, dtype=np.int32)
    for g, row in enumerate(grid):
        if len(row) != T:
            raise ValueError(f"grid row {g} has {len(row)} steps, the window is {T}")
        for t, cell in enumerate(row):
            if cell is None:
                continue
            i = index.get(cell)
            if i is None:
                raise ValueError(f"grid[{g}][{t}] names {cell!r}, not a job or service")
            out[g, t] = i
    return out, names


def compute(s: model.Scenario, grid: np.ndarray) -> Metrics:
    """Metrics of an int grid whose indices follow jobs then services in file order."""
    N, T = s.cluster.gpus, s.duration_steps
    nj = len(s.jobs)
    k = nj + len(s.services)
    # counts[i, t] = GPUs held by entry i at step t (one bincount over (entry, step) pairs)
    flat = grid.astype(np.int64)
    cols = np.broadcast_to(np.arange(T, dtype=np.int64), (N, T))
    held = flat >= 0
    counts = np.bincount((flat[held] * T + cols[held]), minlength=k * T).reshape(k, T)

    prio_j = np.array([j.priority for j in s.jobs], dtype=np.float64)
    job_counts = counts[:nj]
    useful = float(job_counts.sum())
    value = float((job_counts.sum(axis=1) * prio_j).sum()) if nj else 0.0

    shortfall = 0
    demand_total = 0
    for i, v in enumerate(s.services):
        alloc = counts[nj + i]
        demand = np.asarray(v.demand[:T], dtype=np.int64)
        served = np.minimum(alloc, demand)
        useful += float(served.sum())
        value += float(served.sum()) * v.priority
        shortfall += int(np.maximum(0, demand - alloc).sum())
        demand_total += int(demand.sum())

    completed = 0
    by_priority: dict[float, list[tuple[float, bool]]] = {}
    for i, j in enumerate(s.jobs):
        present = np.flatnonzero(job_counts[i])
        if present.size:
            start = int(present[0])
            if start + j.duration_steps <= T:
                completed += 1
            by_priority.setdefault(j.priority, []).append((start - j.arrival_step, True))
        elif j.arrival_step < T:
            # never started: it waited at least until the window's end
            by_priority.setdefault(j.priority, []).append((T - j.arrival_step, False))
    waits = []
    for p in sorted(by_priority):
        w = np.array([x for x, _ in by_priority[p]], dtype=np.float64)
        waits.append(
            WaitStats(
                p,
                len(w),
                sum(1 for _, ok in by_priority[p] if ok),
                float(w.mean()),
                float(np.percentile(w, 95)),
            )
        )
    return Metrics(
        utilization=100.0 * useful / (N * T) if N * T else 0.0,
        value=value,
        realtime_shortfall=shortfall,
        realtime_service_level=1.0 - shortfall / demand_total if demand_total else 1.0,
        jobs_completed=completed,
        jobs_total=nj,
        waits=tuple(waits),
    )


def percentiles_ms(seconds: Sequence[float]) -> dict[str, float]:
    """MODEL.md's `plan_ms` of a run's plan times (seconds): p50, p99 and max in
    milliseconds; zeros where nothing was timed."""
    if not seconds:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    a = np.asarray(seconds, dtype=np.float64) * 1e3
    return {
        "p50": round(float(np.percentile(a, 50)), 4),
        "p99": round(float(np.percentile(a, 99)), 4),
        "max": round(float(a.max()), 4),
    }

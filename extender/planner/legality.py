"""The legality checker: verifies any grid against MODEL.md's rules.

Works from the grid and the scenario alone, so it judges the simulator, the
cluster replay and any other implementation the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from extender.planner import model


class IllegalGrid(ValueError):
    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        more = f"\n  ... and {len(violations) - 20} more" if len(violations) > 20 else ""
        super().__init__("illegal grid:\n  " + "\n  ".join(violations[:20]) + more)


def violations(
    s: model.Scenario,
    grid: np.ndarray,
    churn: Mapping[str, Sequence[int]] | None = None,
) -> list[str]:
    """Every rule broken by `grid` (int grid: jobs then services in file order, -1 idle).

    `churn` judges the swap cap for grids read back from a cluster, where a service's
    replicas carry no GPU identity (Kubernetes counts GPUs per node): per service and
    step, the replicas that came plus those that went since the step before. Given,
    it replaces the count of GPUs entering and leaving each service's set.
    """
    out: list[str] = []
    N, T = s.cluster.gpus, s.duration_steps
    if grid.shape != (N, T):
        return [f"grid shape {grid.shape} is not (gpus={N}, steps={T})"]
    nj = len(s.jobs)
    if grid.size and (grid.max() >= nj + len(s.services) or grid.min() < -1):
        out.append("grid holds an index that is neither a job nor a service")
        return out
    # Rule 1 holds by construction: one name per cell.
    for i, j in enumerate(s.jobs):
        cells = np.argwhere(grid == i)
        if cells.size == 0:
            continue
        steps = np.unique(cells[:, 1])
        start = int(steps[0])
        expected = min(j.duration_steps, T - start)
        if start < j.arrival_step:
            out.append(f"{j.name}: starts at step {start}, before its arrival {j.arrival_step}")
        if len(steps) != expected or int(steps[-1]) != start + expected - 1:
            out.append(
                f"{j.name}: runs {len(steps)} steps from {start} "
                f"(steps {int(steps[0])}..{int(steps[-1])}), must run "
                f"{expected} consecutive steps (true duration {j.duration_steps})"
            )
        first = np.flatnonzero(grid[:, start] == i)
        lo, size = int(first[0]), len(first)
        block = model.Block(lo, size)
        if size != j.gpus or int(first[-1]) != lo + size - 1 or not block.is_legal(s.cluster):
            out.append(
                f"{j.name}: holds GPUs {first.tolist()} at step {start}, not a legal "
                f"contiguous block of {j.gpus}"
            )
            continue
        # The same block at every step, whole: every cell of the job lies inside the
        # first step's block and there are `size` of them per step (one compare over
        # the cells already found; the steps are walked only to name a broken one).
        rows = cells[:, 0]
        if len(cells) != size * len(steps) or rows.min() < lo or rows.max() >= lo + size:
            for t in steps:
                if not np.array_equal(np.flatnonzero(grid[:, t] == i), first):
                    out.append(f"{j.name}: block moved or changed size at step {int(t)}")
                    break
    for k, v in enumerate(s.services):
        if churn is not None:
            for t, n in enumerate(churn.get(v.name, ())):
                if t > 0 and n > v.max_swap:
                    out.append(
                        f"{v.name}: {n} pods in and out between steps {t - 1} and {t} "
                        f"(max_swap {v.max_swap})"
                    )
            continue
        held = grid == nj + k
        for t in range(1, T):
            swapped = int(np.count_nonzero(held[:, t] != held[:, t - 1]))
            if swapped > v.max_swap:
                out.append(
                    f"{v.name}: swaps {swapped} GPUs between steps {t - 1} and {t} "
                    f"(max_swap {v.max_swap})"
                )
    return out


def check(s: model.Scenario, grid: np.ndarray) -> None:
    found = violations(s, grid)
    if found:
        raise IllegalGrid(found)

"""Upper bounds on a scenario's value and utilization, with perfect information.

A time-indexed model of the whole evaluation window (steps 0..T-1) that knows
every job's true duration and arrival and every service's true demand, and
relaxes contiguity: GPUs are a capacity, not positions.

- x[j, s] in {0, 1}: job j starts at step s (arrival <= s < T); it then holds
  `gpus` GPUs for steps s .. min(s + duration, T) - 1 and earns
  gpus x priority for each of them (MODEL.md's value).
- b[v, t] >= 0 integer: GPUs service v holds at t; |b[v, t] - b[v, t-1]| <=
  max_swap (the set's symmetric difference is at least the change in count);
  u[v, t] <= min(b[v, t], demand[t]) is what it serves, earning priority each.
- capacity: at each t, batch GPUs + service GPUs <= N.

Every legal grid is a feasible point, so the optimum (or HiGHS's dual bound
when the time limit stops it, or the LP relaxation on large instances) is an
upper bound on the value of any policy's grid. `utilization_upper_bound` is the
same model with every priority 1, in percent of N x T.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy
import numpy as np

from extender.planner import model

MILP_MAX_BINARIES = 20_000  # beyond this the LP relaxation is solved instead
INTEGER_SERVICES = True


@dataclass(frozen=True, slots=True)
class BoundResult:
    """`value_bound` >= the best achievable figure (value, or utilization in percent).

    kind: "milp-optimal" (the relaxation solved to optimality), "milp-bound"
    (time limit: HiGHS's dual bound) or "lp" (the LP relaxation of the MILP).
    `primal` is the best relaxed solution found (capacity-only, so not
    necessarily achievable), None for "lp".
    """

    value_bound: float
    kind: str
    seconds: float
    primal: float | None = None
    binaries: int = 0


def value_upper_bound(
    scenario: model.Scenario,
    time_limit_s: float = 10.0,
    *,
    max_binaries: int = MILP_MAX_BINARIES,
    lp: bool | None = None,
) -> BoundResult:
    """Upper bound on MODEL.md's value over the window (see the module docstring).

    `lp=True` forces the LP relaxation, `lp=False` the MILP; by default the
    MILP runs up to `max_binaries` start variables.
    """
    return _solve(scenario, time_limit_s, max_binaries, lp, unit=False)


def utilization_upper_bound(
    scenario: model.Scenario,
    time_limit_s: float = 10.0,
    *,
    max_binaries: int = MILP_MAX_BINARIES,
    lp: bool | None = None,
) -> BoundResult:
    """Upper bound on utilization (percent): the same model, every priority 1."""
    r = _solve(scenario, time_limit_s, max_binaries, lp, unit=True)
    cells = scenario.cluster.gpus * scenario.duration_steps
    scale = 100.0 / cells if cells else 0.0
    primal = None if r.primal is None else r.primal * scale
    return BoundResult(min(100.0, r.value_bound * scale), r.kind, r.seconds, primal, r.binaries)


def _solve(
    s: model.Scenario, time_limit_s: float, max_binaries: int, lp: bool | None, *, unit: bool
) -> BoundResult:
    t0 = time.perf_counter()
    N, T = s.cluster.gpus, s.duration_steps
    cost: list[float] = []
    lower: list[float] = []
    upper: list[float] = []
    integral: list[bool] = []
    # Sparse rows built column by column: row index, coefficient.
    columns: list[list[tuple[int, float]]] = []
    row_lo: list[float] = []
    row_hi: list[float] = []

    def add_row(lo: float, hi: float) -> int:
        row_lo.append(lo)
        row_hi.append(hi)
        return len(row_lo) - 1

    def add_col(
        c: float, lo: float, hi: float, integer: bool, entries: list[tuple[int, float]]
    ) -> int:
        cost.append(c)
        lower.append(lo)
        upper.append(hi)
        integral.append(integer)
        columns.append(entries)
        return len(cost) - 1

    cap = [add_row(-highspy.kHighsInf, float(N)) for _ in range(T)]
    binaries = 0
    for j in s.jobs:
        if j.arrival_step >= T or j.gpus > N:
            continue
        once = add_row(-highspy.kHighsInf, 1.0)
        prio = 1.0 if unit else j.priority
        for start in range(j.arrival_step, T):
            end = min(start + j.duration_steps, T)
            entries = [(once, 1.0)] + [(cap[t], float(j.gpus)) for t in range(start, end)]
            add_col(j.gpus * prio * (end - start), 0.0, 1.0, True, entries)
            binaries += 1
    for v in s.services:
        prio = 1.0 if unit else v.priority
        prev_b: int | None = None
        swap_rows: list[int] = []
        for t in range(T):
            demand = float(v.demand[t])
            link = add_row(-highspy.kHighsInf, 0.0)  # u - b <= 0
            add_col(prio, 0.0, demand, False, [(link, 1.0)])
            entries = [(cap[t], 1.0), (link, -1.0)]
            if prev_b is not None:
                row = add_row(-float(v.max_swap), float(v.max_swap))  # b_t - b_{t-1}
                swap_rows.append(row)
                entries.append((row, 1.0))
                columns[prev_b].append((row, -1.0))
            prev_b = add_col(0.0, 0.0, float(N), INTEGER_SERVICES, entries)

    use_lp = lp if lp is not None else binaries > max_binaries
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    # With integer priorities every objective value is an integer, so a gap below 1 is optimal.
    integer_objective = all(float(c).is_integer() for c in cost)
    h.setOptionValue("mip_abs_gap", 0.999 if integer_objective else 1e-6)
    m = highspy.HighsLp()
    m.num_col_ = len(cost)
    m.num_row_ = len(row_lo)
    m.sense_ = highspy.ObjSense.kMaximize
    m.col_cost_ = np.array(cost, dtype=np.float64)
    m.col_lower_ = np.array(lower, dtype=np.float64)
    m.col_upper_ = np.array(upper, dtype=np.float64)
    m.row_lower_ = np.array(row_lo, dtype=np.float64)
    m.row_upper_ = np.array(row_hi, dtype=np.float64)
    starts = [0]
    index: list[int] = []
    value: list[float] = []
    for entries in columns:
        for r, a in entries:
            index.append(r)
            value.append(a)
        starts.append(len(index))
    m.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    m.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    m.a_matrix_.index_ = np.array(index, dtype=np.int32)
    m.a_matrix_.value_ = np.array(value, dtype=np.float64)
    if not use_lp:
        m.integrality_ = [
            highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
            for i in integral
        ]
    h.passModel(m)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    seconds = time.perf_counter() - t0
    if use_lp:
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"{s.name}: LP relaxation ended {h.modelStatusToString(status)}")
        return BoundResult(float(info.objective_function_value), "lp", seconds, None, binaries)
    primal = float(info.objective_function_value) if info.primal_solution_status else None
    dual = float(info.mip_dual_bound)
    if status == highspy.HighsModelStatus.kOptimal and primal is not None:
        best = float(np.floor(dual + 1e-6)) if integer_objective else max(primal, dual)
        return BoundResult(max(primal, best), "milp-optimal", seconds, primal, binaries)
    if np.isfinite(dual):
        return BoundResult(dual, "milp-bound", seconds, primal, binaries)
    # Stopped before any bound (a very short limit): the LP relaxation is one.
    lp_result = _solve(s, max(1.0, time_limit_s), max_binaries, True, unit=unit)
    return BoundResult(lp_result.value_bound, "lp", seconds + lp_result.seconds, primal, binaries)

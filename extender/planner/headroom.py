"""Headroom for a real-time service from its observed forecast error, at its service level.

Purely computational (standard library + numpy). The planner knows, for every
past step, the demand that came and the forecast it was told for that step.
Their recent disagreement, turned into GPUs at the service's objective, is the
headroom the plan holds above the forecast, like service GPUs: batch work is
not started on GPUs it would still hold at the steps the headroom covers.

Headroom at lead k is min(r x max(f_k, mean forecast), a) GPUs over the
forecast f_k, with r and a sized on the last `window` steps so that the
forecast raised by them would have delivered the objective there: r is the
smallest relative error (demand - forecast) / max(forecast, mean forecast), a
the smallest error in GPUs, for which sum(min(demand, forecast + headroom)) >=
objective x sum(demand) (the objective counts demanded GPU-steps, as the
service level does; a per-step quantile would size it to the rare step). The
relative part follows a level bias up the curve, and at the trough, where a
small forecast would blow up a plain ratio, it is measured against the mean;
the absolute part keeps a burst of a few GPUs at night from becoming half of
the peak. Both are the recent observed error, so headroom tightens once the
forecast has been right for a window, and with exact forecasts it is 0: the
plans are those of before.

This builds on `forecasting`: its `upper` is the same idea as a ratio of the
profile's own replay; here the error is that of whatever forecast the planner
was told (a scenario's, an explicit demand curve, or `forecasting.forecast`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DEFAULT_WINDOW = 24  # steps of error remembered: a day at hourly steps (callers pass a day)


def check_objective(value: float) -> float:
    """`value` if it is a share of demand a service may be promised, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"service level must be a number in (0, 1), got {value!r}")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"service level must be in (0, 1) (a share of demand), got {value!r}")
    return float(value)


def curve(forecast: Sequence[int], past_demand: Sequence[int], past_forecast: Sequence[int],
          objective: float, window: int = DEFAULT_WINDOW) -> list[int]:
    """Headroom GPUs per lead (0 = step now) over `forecast`, at the service level
    `objective`, from the error of the last `window` steps (see the module text)."""
    n = min(len(past_demand), len(past_forecast), window)
    if n <= 0:
        return [0] * len(forecast)
    d = np.asarray(past_demand[len(past_demand) - n:], dtype=np.float64)
    f = np.asarray(past_forecast[len(past_forecast) - n:], dtype=np.float64)
    floor = max(1.0, float(f.mean()))
    scale = np.maximum(f, floor)
    share = smallest(d, f, scale, (d - f) / scale, objective)
    if share <= 0.0:
        return [0] * len(forecast)
    gpus = smallest(d, f, np.ones(n), d - f, objective)
    return [math.ceil(min(share * max(float(x), floor), gpus) - 1e-9) for x in forecast]


def smallest(demand: np.ndarray, forecast: np.ndarray, unit: np.ndarray, candidates: np.ndarray,
             objective: float) -> float:
    """The smallest of the positive `candidates` c for which the forecast raised by
    c x `unit` would have delivered `objective` of the demand (sum of min(demand,
    forecast + c x unit) over sum of demand); 0 when the bare forecast did; the
    largest candidate when none does."""
    total = float(demand.sum())
    if total <= 0.0 or float(np.minimum(demand, forecast).sum()) >= objective * total:
        return 0.0
    cand = np.unique(candidates[candidates > 0])
    if len(cand) == 0:
        return 0.0
    got = np.minimum(demand[None, :], forecast[None, :] + cand[:, None] * unit[None, :]).sum(axis=1)
    ok = np.nonzero(got >= objective * total - 1e-9)[0]
    return float(cand[ok[0]] if len(ok) else cand[-1])


def delivered(demand: Sequence[int], allocated: Sequence[int]) -> float | None:
    """The service level of paired steps: 1 - sum max(0, demand - allocated) / sum demand;
    None when nothing was demanded."""
    total = sum(demand)
    if total <= 0:
        return None
    short = sum(max(0, d - a) for d, a in zip(demand, allocated, strict=True))
    return 1.0 - short / total

"""Headroom for a real-time service from its observed forecast error, at its service level.

Purely computational (standard library + numpy). The planner knows, for every
past step, the demand that came and the forecast it was told for that step.
Their recent disagreement, turned into GPUs at the service's objective, is the
headroom the plan holds above the forecast, like service GPUs: batch work is
not started on GPUs it would still hold at the steps the headroom covers.

The error is scored relative to the scale of the forecast,
``(demand - forecast) / max(forecast, mean forecast)`` over the last `window`
steps: a level bias grows with the curve, and at the trough (where a small
forecast would blow up a plain ratio) it is measured against the day's mean.
The score at the objective's quantile is split conformally: with n recent
scores, the ceil((n + 1) x objective)-th smallest (the largest when that is
past n). Headroom at each lead is that score times the forecast's scale there,
never below zero. When the forecast has been right for a window, every score
is 0 and so is the headroom: exact forecasts plan exactly as before.

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


def scores(past_demand: Sequence[int], past_forecast: Sequence[int],
           window: int = DEFAULT_WINDOW) -> tuple[np.ndarray, float]:
    """(scores, scale floor): the recent relative errors and the mean forecast they used."""
    n = min(len(past_demand), len(past_forecast), window)
    if n <= 0:
        return np.zeros(0), 0.0
    d = np.asarray(past_demand[len(past_demand) - n:], dtype=np.float64)
    f = np.asarray(past_forecast[len(past_forecast) - n:], dtype=np.float64)
    floor = max(1.0, float(f.mean()))
    return (d - f) / np.maximum(f, floor), floor


def quantile(values: np.ndarray, objective: float) -> float:
    """The conformal upper quantile of `values` at `objective` (0 with no values)."""
    n = len(values)
    if n == 0:
        return 0.0
    k = math.ceil((n + 1) * objective)
    return float(np.sort(values)[min(k, n) - 1])


def curve(forecast: Sequence[int], past_demand: Sequence[int], past_forecast: Sequence[int],
          objective: float, window: int = DEFAULT_WINDOW) -> list[int]:
    """Headroom GPUs per lead (0 = step now) over `forecast`, at the service level
    `objective`, from the error of the last `window` steps."""
    s, floor = scores(past_demand, past_forecast, window)
    q = quantile(s, objective)
    if q <= 0.0:
        return [0] * len(forecast)
    n = min(len(past_demand), len(past_forecast), window)
    gpus = quantile(np.asarray(past_demand[len(past_demand) - n:], dtype=np.float64)
                    - np.asarray(past_forecast[len(past_forecast) - n:], dtype=np.float64),
                    objective)
    return [math.ceil(min(q * max(float(x), floor), gpus) - 1e-9) for x in forecast]

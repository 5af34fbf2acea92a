"""Real-time inference demand forecasting: a weekly profile, recalibrated on recent error.

Purely computational (standard library + numpy). The controller calls `forecast`
with a service's demand history (GPUs per step, oldest first) and gets the next
`horizon` steps as whole GPUs, ready for `model.ServiceState.forecast`.

How a forecast is made (the published allocator's "weekly profile rebuilt from
hourly history"):

1. **Profile.** The value for a future step is the mean of the history at the
   same step of the week over the last `weeks` weeks. With less than one week of
   history, the same step of the day over the last `weeks * 7` days; with less
   than one day, the mean of what there is.
2. **Recalibration.** The profile is replayed out of sample over the last
   `recent_steps` steps (each step predicted from data before it), and the
   ratio actual / predicted there becomes a multiplicative level correction.
   It applies fully to the next step and decays towards 1 with lead time
   (time constant `decay_steps`), because a level error seen now says more
   about the next hours than about next week, which the profile will absorb.
3. **Headroom.** `upper` adds a quantile of the recent relative error, for
   callers that want to cover peaks rather than track the mean.

`evaluate` holds back the last steps of a history and scores this forecaster
against the naive same-step-yesterday forecast, one day ahead at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]

DAYS_PER_WEEK = 7
_RATIO_LIMITS = (0.25, 4.0)  # a level correction beyond this is noise or an outage, not level


@dataclass(frozen=True, slots=True)
class Forecast:
    """The next `len(values)` steps, starting with the step right after the history."""

    values: tuple[int, ...]  # whole GPUs, rounded to nearest
    raw: tuple[float, ...]  # before rounding
    upper: tuple[int, ...]  # values with headroom at the `quantile` of recent error
    profile: str  # "weekly" | "daily" | "flat": which profile the history allowed
    level: float  # multiplicative correction at lead 1 (1.0 = none)
    quantile: float


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Day-ahead errors over the last `holdout_steps` steps of a history.

    `*_wape` is the MAPE-like figure: sum |error| / sum actual (robust to zero
    demand). `*_coverage` is the share of steps where the forecast was at
    least the actual demand (a planner trusting it would not short the
    service); `upper_coverage` likewise for the profile forecast's `upper`.
    `*_peak_error` is the mean over held-out days of (forecast daily peak -
    actual daily peak) / actual daily peak: negative means peaks are missed.
    """

    holdout_steps: int
    profile_mae: float
    naive_mae: float
    profile_wape: float
    naive_wape: float
    profile_coverage: float
    naive_coverage: float
    upper_coverage: float
    profile_peak_error: float
    naive_peak_error: float


def forecast(
    history: Sequence[float],
    horizon: int,
    steps_per_day: int = 24,
    *,
    weeks: int = 4,
    recent_steps: int | None = None,
    decay_steps: float | None = None,
    quantile: float = 0.9,
    recalibrate: bool = True,
) -> Forecast:
    """Forecast the next `horizon` steps of demand from `history` (oldest first).

    `steps_per_day` sets the step (24 = hourly, 48 = half-hourly).
    `recent_steps` (default a quarter day) is the window the level correction
    is estimated on; `decay_steps` (default a day) its time constant;
    `recalibrate=False` turns the correction off (the bare profile).
    Raises ValueError on empty or negative history, or bad parameters.
    """
    h = _history(history)
    _check_int("horizon", horizon, 1)
    _check_int("steps_per_day", steps_per_day, 1)
    _check_int("weeks", weeks, 1)
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    recent = recent_steps if recent_steps is not None else max(1, steps_per_day // 4)
    _check_int("recent_steps", recent, 1)
    tau = float(decay_steps) if decay_steps is not None else float(steps_per_day)
    if not tau > 0.0:
        raise ValueError(f"decay_steps must be > 0, got {decay_steps!r}")

    n = len(h)
    kind = _profile_kind(n, steps_per_day)
    base = np.array([_profile_at(h, n, n + k, steps_per_day, weeks) for k in range(horizon)])

    # Out-of-sample replay of the profile over the recent past: each step from data before it.
    ratios = _replay_ratios(h, steps_per_day, weeks, window=max(recent, steps_per_day * 7))
    level = _level(h, steps_per_day, weeks, recent) if recalibrate else 1.0
    leads = np.arange(1, horizon + 1, dtype=np.float64)
    correction = 1.0 + (level - 1.0) * np.exp(-(leads - 1.0) / tau)
    raw = base * correction
    headroom = float(np.quantile(ratios, quantile)) if len(ratios) else 1.0
    headroom = max(1.0, headroom)
    return Forecast(
        values=tuple(_round(v) for v in raw),
        raw=tuple(float(v) for v in raw),
        upper=tuple(math.ceil(v * headroom - 1e-9) for v in raw),
        profile=kind,
        level=level,
        quantile=quantile,
    )


def replay(
    history: Sequence[float],
    steps: int,
    steps_per_day: int = 24,
    *,
    weeks: int = 4,
    recent_steps: int | None = None,
) -> tuple[float, ...]:
    """What `forecast` said one step ahead for each of the last `steps` steps of
    `history` (at most all but the first), each from the data before it, oldest first.

    Beside the same steps of the history, this is the forecast error a planner sizes
    headroom on (`headroom`) when only the history is kept, not the forecasts made.
    """
    h = _history(history)
    _check_int("steps", steps, 1)
    _check_int("steps_per_day", steps_per_day, 1)
    _check_int("weeks", weeks, 1)
    recent = recent_steps if recent_steps is not None else max(1, steps_per_day // 4)
    _check_int("recent_steps", recent, 1)
    n = len(h)
    return tuple(_profile_at(h, t, t, steps_per_day, weeks) * _level(h[:t], steps_per_day, weeks,
                                                                     recent)
                 for t in range(max(1, n - steps), n))


def naive(history: Sequence[float], horizon: int, steps_per_day: int = 24) -> tuple[int, ...]:
    """Same step yesterday (repeated daily), for comparison. Needs one day of history."""
    h = _history(history)
    _check_int("horizon", horizon, 1)
    _check_int("steps_per_day", steps_per_day, 1)
    if len(h) < steps_per_day:
        raise ValueError(
            f"history has {len(h)} steps; the naive forecast needs one day ({steps_per_day})"
        )
    n = len(h)
    return tuple(_round(h[n - steps_per_day + (k % steps_per_day)]) for k in range(horizon))


def evaluate(
    history: Sequence[float],
    holdout_steps: int,
    steps_per_day: int = 24,
    *,
    weeks: int = 4,
    quantile: float = 0.9,
) -> Evaluation:
    """Score `forecast` and `naive` on the last `holdout_steps` steps, day ahead.

    The held-out span is cut into days; before each, both forecasters see only
    the history up to there and forecast to the end of that day.
    """
    h = _history(history)
    _check_int("holdout_steps", holdout_steps, 1)
    _check_int("steps_per_day", steps_per_day, 1)
    origin0 = len(h) - holdout_steps
    if origin0 < steps_per_day:
        raise ValueError(
            f"history has {len(h)} steps; holding out {holdout_steps} leaves {max(origin0, 0)}, "
            f"fewer than one day ({steps_per_day}) to forecast from"
        )
    prof: list[float] = []
    upper: list[float] = []
    nav: list[float] = []
    origin = origin0
    while origin < len(h):
        span = min(steps_per_day, len(h) - origin)
        f = forecast(h[:origin].tolist(), span, steps_per_day, weeks=weeks, quantile=quantile)
        prof.extend(f.values)
        upper.extend(f.upper)
        nav.extend(naive(h[:origin].tolist(), span, steps_per_day))
        origin += span
    actual = h[origin0:]
    p = np.array(prof, dtype=np.float64)
    u = np.array(upper, dtype=np.float64)
    q = np.array(nav, dtype=np.float64)
    return Evaluation(
        holdout_steps=holdout_steps,
        profile_mae=float(np.mean(np.abs(p - actual))),
        naive_mae=float(np.mean(np.abs(q - actual))),
        profile_wape=_wape(p, actual),
        naive_wape=_wape(q, actual),
        profile_coverage=float(np.mean(p >= actual)),
        naive_coverage=float(np.mean(q >= actual)),
        upper_coverage=float(np.mean(u >= actual)),
        profile_peak_error=_peak_error(p, actual, steps_per_day),
        naive_peak_error=_peak_error(q, actual, steps_per_day),
    )


# --- internals -------------------------------------------------------------------


def _history(history: Sequence[float]) -> Floats:
    try:
        h = np.asarray(list(history), dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"history must be a sequence of numbers: {e}") from None
    if h.ndim != 1:
        raise ValueError(f"history must be one-dimensional, got shape {h.shape}")
    if len(h) == 0:
        raise ValueError("history is empty: need at least one step of demand")
    if not np.all(np.isfinite(h)):
        i = int(np.argmin(np.isfinite(h)))
        raise ValueError(f"history[{i}] is {h[i]}: demand must be finite")
    if np.any(h < 0):
        i = int(np.argmax(h < 0))
        raise ValueError(f"history[{i}] is {h[i]:g}: demand must be >= 0")
    return h


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _profile_kind(n: int, spd: int) -> str:
    if n >= spd * DAYS_PER_WEEK:
        return "weekly"
    return "daily" if n >= spd else "flat"


def _profile_at(h: Floats, n: int, t: int, spd: int, weeks: int) -> float:
    """Profile value for step t using h[:n] only (t >= n)."""
    kind = _profile_kind(n, spd)
    if kind == "flat":
        return float(np.mean(h[:n]))
    period = spd * DAYS_PER_WEEK if kind == "weekly" else spd
    count = weeks if kind == "weekly" else weeks * DAYS_PER_WEEK
    # Latest index < n in the same phase as t, then back by whole periods.
    last = t - period * ((t - n) // period + 1)
    idx = np.arange(last, max(-1, last - period * count), -period)
    idx = idx[idx >= 0]
    return float(np.mean(h[idx]))


def _replay_ratios(h: Floats, spd: int, weeks: int, window: int) -> Floats:
    """actual / profile for recent steps, each profile built from the data before it."""
    n = len(h)
    out: list[float] = []
    for t in range(max(1, n - window), n):
        pred = _profile_at(h, t, t, spd, weeks)
        if pred > 0:
            out.append(h[t] / pred)
    return np.clip(np.array(out, dtype=np.float64), *_RATIO_LIMITS)


def _level(h: Floats, spd: int, weeks: int, recent: int) -> float:
    n = len(h)
    if n < 2:
        return 1.0
    ts = range(max(1, n - recent), n)
    pred = sum(_profile_at(h, t, t, spd, weeks) for t in ts)
    actual = float(sum(h[t] for t in ts))
    if pred <= 0.0:
        return 1.0
    return float(np.clip(actual / pred, *_RATIO_LIMITS))


def _round(v: float) -> int:
    return max(0, int(math.floor(v + 0.5)))


def _wape(f: Floats, a: Floats) -> float:
    total = float(np.sum(a))
    err = float(np.sum(np.abs(f - a)))
    return err / total if total > 0 else (0.0 if err == 0 else math.inf)


def _peak_error(f: Floats, a: Floats, spd: int) -> float:
    errs = []
    for s in range(0, len(a), spd):
        pa = float(np.max(a[s : s + spd]))
        if pa > 0:
            errs.append((float(np.max(f[s : s + spd])) - pa) / pa)
    return float(np.mean(errs)) if errs else 0.0

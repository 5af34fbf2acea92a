"""Headroom for a real-time service from its observed forecast error, at its service level.

Purely computational (standard library only). The planner knows, for every
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

import bisect
import math
import operator
from collections.abc import Sequence

DEFAULT_WINDOW = 24  # steps of error remembered: a day at hourly steps (callers pass a day)


def check_objective(value: float) -> float:
    """`value` if it is a share of demand a service may be promised, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"service level must be a number in (0, 1), got {value!r}")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"service level must be in (0, 1) (a share of demand), got {value!r}")
    return float(value)


def ran_over(past_demand: Sequence[int], past_forecast: Sequence[int], window: int) -> bool:
    """Whether demand ran above its forecast at any step of the last `window` (paired
    from the end)."""
    n = min(len(past_demand), len(past_forecast), window)
    return n > 0 and any(map(operator.gt, past_demand[len(past_demand) - n:],
                             past_forecast[len(past_forecast) - n:]))


def curve(forecast: Sequence[int], past_demand: Sequence[int], past_forecast: Sequence[int],
          objective: float, window: int = DEFAULT_WINDOW) -> list[int]:
    """Headroom GPUs per lead (0 = step now) over `forecast`, at the service level
    `objective`, from the error of the last `window` steps (see the module text)."""
    if not ran_over(past_demand, past_forecast, window):
        return [0] * len(forecast)  # no history, or the forecast covered every step
    n = min(len(past_demand), len(past_forecast), window)
    # Plain Python: a day of steps is a few dozen numbers, and this runs per service on
    # every re-plan (numpy's per-call cost was 200 us of a 1 ms budget).
    d = [float(x) for x in past_demand[len(past_demand) - n:]]
    f = [float(x) for x in past_forecast[len(past_forecast) - n:]]
    errors, floor = relative_errors(d, f)
    share = smallest(d, f, [x if x > floor else floor for x in f], errors, objective)
    if share <= 0.0:
        return [0] * len(forecast)
    gpus = smallest(d, f, [1.0] * n, [a - b for a, b in zip(d, f, strict=True)], objective)
    return [math.ceil(min(share * (x if x > floor else floor), gpus) - 1e-9) for x in forecast]


def relative_errors(demand: Sequence[float],
                    forecast: Sequence[float]) -> tuple[list[float], float]:
    """(each step's relative error, (demand - forecast) / max(forecast, floor); the floor):
    the floor is the mean forecast, at least 1 GPU, so that at the trough a small
    forecast does not blow a plain ratio up. Headroom at a lead is a relative error times
    the same max(forecast there, floor)."""
    floor = max(1.0, sum(forecast) / len(forecast)) if forecast else 1.0
    return [(a - b) / (b if b > floor else floor)
            for a, b in zip(demand, forecast, strict=True)], floor


def copied(forecast: Sequence[int], look: int, day: int) -> bool:
    """Whether `forecast` reads as a copy of past demand over its first `look` steps.

    A forecast that zigzags, or turns at a single step three times (`_jitters`), is a
    copy of past demand (the same hours a day or a week earlier, the operator's usual
    one), and the noise it copied is the size of the noise today brings. A forecast that
    does neither within the pattern it repeats (a model's: it rises and falls) is not;
    nor is a pattern shorter than a `day` written out again and again (an operator's
    curve of a few steps: a copy of a day's demand does not repeat within the day)."""
    seen = list(forecast[:look])
    period = _period(seen)
    return period >= day and _jitters(seen[:period])


def jitter(forecast: Sequence[int], half: int, count: int) -> tuple[list[int], list[int]]:
    """The stand-in history for a forecast that copies past demand (`copied`), to size
    headroom on before a service has one of its own: (demand, forecast) pairs for the
    first `count` steps of `forecast` whose error is the forecast's own jitter, its
    departures from its running median over `half` steps each side, x sqrt(2); ([], [])
    when none is wanted. (Whether the forecast is a copy is read apart, on a look that
    does not shrink with `count`: it does not hang on how much history the service has.)"""
    if half <= 0 or count <= 0:
        return [], []
    f = list(forecast[:count + half])
    level = _median(f, half)[:count]
    # Today's error is today's noise less the noise the forecast copied: two draws, so
    # sqrt(2) times the spread of the one the forecast shows.
    return ([max(0, round(b + math.sqrt(2.0) * (a - b))) for a, b in zip(f, level, strict=False)],
            level)


def _jitters(f: list[int]) -> bool:
    """Whether the forecast zigzags: three moves in a row, each the other way (up, down,
    up or down, up, down), or a turn at a single step (a step above or below both its
    neighbours) three times or more. A daily shape rises and falls, a single-step peak
    and trough included; copied noise turns at every other step, and where it is a GPU or
    two, a GPU up and back now and then (day-earlier copies on 8 GPUs turn so three times
    in two days without ever zigzagging)."""
    d = [b - a for a, b in zip(f, f[1:], strict=False)]
    turns = [x * y < 0 for x, y in zip(d, d[1:], strict=False)]
    return sum(turns) >= 3 or any(map(operator.and_, turns, turns[1:]))


def _period(f: list[int]) -> int:
    """The shortest p in which `f` repeats (f[k + p] == f[k] throughout, p at most half
    of it), else its length."""
    n = len(f)
    first = f[0] if f else None
    for p in range(1, n // 2 + 1):
        # (The first element and a short head spare most candidates the whole copy.)
        k = min(9, n - p)
        if f[p] == first and f[p:p + k] == f[:k] and f[p:] == f[:n - p]:
            return p
    return n


def _median(f: list[int], half: int) -> list[int]:
    """The running median over `half` steps each side (fewer near the ends, as many on
    each side: the ends are their own level, not their neighbours').

    The window is kept sorted as it slides (both its ends only move forward), so a day
    of minute steps with two hours each side is a bisection and a shift a step, not a
    sort of 241 numbers."""
    n = len(f)
    out = []
    window: list[int] = []
    lo = hi = 0  # window == sorted(f[lo:hi])
    for i in range(n):
        h = min(half, i, n - 1 - i)
        while hi < i + h + 1:
            bisect.insort(window, f[hi])
            hi += 1
        while lo < i - h:
            del window[bisect.bisect_left(window, f[lo])]
            lo += 1
        out.append(window[h])
    return out


def smallest(demand: Sequence[float], forecast: Sequence[float], unit: Sequence[float],
             candidates: Sequence[float], objective: float) -> float:
    """The smallest of the positive `candidates` c for which the forecast raised by
    c x `unit` would have delivered `objective` of the demand (sum of min(demand,
    forecast + c x unit) over sum of demand); 0 when the bare forecast did; the
    largest candidate when none does."""
    total = sum(demand)
    need = objective * total - 1e-9
    if total <= 0.0 or _delivered(demand, forecast, unit, 0.0) >= need:
        return 0.0
    cand = sorted({c for c in candidates if c > 0})
    if not cand:
        return 0.0
    lo, hi = 0, len(cand) - 1  # what is delivered grows with c: the first that meets it
    while lo < hi:
        mid = (lo + hi) // 2
        if _delivered(demand, forecast, unit, cand[mid]) >= need:
            hi = mid
        else:
            lo = mid + 1
    return cand[lo]


def _delivered(demand: Sequence[float], forecast: Sequence[float], unit: Sequence[float],
               c: float) -> float:
    return sum(d if d < f + c * u else f + c * u
               for d, f, u in zip(demand, forecast, unit, strict=True))


def delivered(demand: Sequence[int], allocated: Sequence[int]) -> float | None:
    """The service level of paired steps: 1 - sum max(0, demand - allocated) / sum demand;
    None when nothing was demanded."""
    total = sum(demand)
    if total <= 0:
        return None
    short = sum(max(0, d - a) for d, a in zip(demand, allocated, strict=True))
    return 1.0 - short / total


def dilate(curve: Sequence[int], k: int, before: Sequence[int] = (),
           late: int | None = None) -> list[int]:
    """curve[j] raised to the most of curve[j-late .. j+k] (`late` defaults to `k`: a
    peak `k` steps early or late; `before`: the steps ahead of curve[0], oldest first;
    the curve's ends are held past its ends)."""
    back = k if late is None else late
    k = max(0, k)
    back = max(0, back)
    if not (k or back) or not curve:
        return list(curve)
    head = list(before[len(before) - back:]) if before and back else []
    ext = [curve[0]] * (back - len(head)) + head + list(curve) + [curve[-1]] * k
    # The most of each window of w = back + k + 1 steps, by doubling: m[i] is the most of
    # ext[i : i + span]; two overlapping windows of `span` cover one of w. Comparisons in
    # comprehensions, not max() calls: this runs per service on every re-plan, over the
    # whole lookahead (6x faster than a max() per step and lag at +/-3 over 96 steps).
    w = back + k + 1
    m, span = ext, 1
    while span * 2 <= w:
        m = [x if x > y else y for x, y in zip(m, m[span:], strict=False)]
        span *= 2
    if span < w:
        m = [x if x > y else y for x, y in zip(m, m[w - span:], strict=False)]
    return m[:len(curve)]


def span(past_demand: Sequence[int], past_forecast: Sequence[int], ahead: Sequence[int],
         tolerance: int, window: int, evidence: float = 1.0) -> tuple[int, int]:
    """Steps of timing error to plan a service for, (early, late): the forecast dilated
    by that many steps ahead and back (`dilate`) covers a peak that comes that early or
    late.

    A forecast's timing shows only where it moves: until the forecast paired with
    demand over the last `window` steps has risen and fallen by `evidence` times its
    swing ahead (the most less the least of `ahead`), nothing says when the peak comes,
    and the answer is `tolerance` both ways. After, the lag within +/-`tolerance` that
    best aligns the forecast with the demand seen (least absolute error; ties to the
    smallest lag), on its side only: (early, late) steps, (0, 0) when the forecast came
    on time; a peak seen to come late is not also held early (`dilate`'s two sides)."""
    if tolerance <= 0:
        return 0, 0
    n = min(len(past_demand), len(past_forecast), window)
    if n <= tolerance:
        return tolerance, tolerance
    f = list(past_forecast[len(past_forecast) - n:])
    swing = max(ahead[:window]) - min(ahead[:window]) if ahead else 0
    moved = sum(map(abs, map(operator.sub, f[1:], f[:-1])))
    if moved < evidence * swing or moved == 0:
        return tolerance, tolerance
    d = past_demand[len(past_demand) - n:]
    f += list(ahead[:tolerance])
    best, best_err = 0, None
    for lag in sorted(range(-tolerance, tolerance + 1), key=abs):
        # demand early by `lag`: d[i] = f[i + lag]; only where both are known
        lo, hi = max(0, -lag), min(n, len(f) - lag)
        err = sum(map(abs, map(operator.sub, d[lo:hi], f[lo + lag : hi + lag])))
        err = err * n / max(1, hi - lo)
        if best_err is None or err < best_err:
            best, best_err = lag, err
    return max(0, best), max(0, -best)

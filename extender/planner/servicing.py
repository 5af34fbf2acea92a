"""The services' side of a plan: each real-time service's curve of GPUs over the horizon,
and what it leaves the batch work.

Purely computational (standard library). `allocating` (the fast plan) and full mode
(`extender.optimizing.exact`) build the services' curves here: the told forecast
continued past its end (`forecast_curve`), raised by headroom for the recent forecast
error and the peak's timing (`service_room`, from `headroom`), made reachable under the
swap cap (`service_curve`); then the GPUs the services still hold while they move off
(`locks`), the room left inside the nodes a service is limited to (`node_rooms`), and, at
step now, headroom giving way to another service's forecast (`headroom_last`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from extender.planner import blocks, headroom, model, scaling

# Windows of error a forecast that copies past demand is sized on (and topped up to by the
# stand-in until it has them); a model's forecast has one. See `service_room`.
COPY_WINDOWS = 4
# GPUs `cover` holds over what the worst step seen would have needed: for the unseen.
COVER_MARGIN = 1


def forecast_curve(v: model.ServiceState, length: int, period: int) -> list[int]:
    """The service's forecast over `length` steps, the daily pattern continued past its end."""
    f = list(v.forecast[:length])
    if len(f) < min(period, length):  # less than a day told: its last count held
        f += [f[-1] if f else 0] * (min(period, length) - len(f))
    while len(f) < length:  # each step as a day earlier (a day at a time: slices)
        f += f[len(f) - period:length - period]
    return f


def service_room(v: model.ServiceState, forecast: list[int], service_level: float,
                 error_window: int, tolerance: int = 0, timing_window: int = 24,
                 evidence: float = 1.0, stand_in: int = 0, cap: float = 0.0) -> list[int]:
    """GPUs over `forecast` the plan holds at each lead: for the peak's timing error
    (the forecast dilated by `headroom.span` steps ahead and back, at most `tolerance`,
    learned over `timing_window` steps once `evidence` says when the peak comes), and
    headroom for the recent error against that (`headroom.curve`) at the service's
    objective (or `service_level` when it sets none), sized on the last
    `error_window` steps of error, or on `COPY_WINDOWS` times that for a forecast that
    copies past demand (`headroom.copied`; `stand_in` > 0), whose error is noise drawn
    afresh each day, not the episodes a model's forecast misses. Until such a service
    has those windows of history, the forecast's own jitter (`headroom.jitter`, a
    running median over `stand_in` steps each side) tops it up. With `cap` > 0 the headroom
    never raises the plan above `cap` times the larger of what a static reservation holds
    there (the forecast's peak over the `timing_window` steps from each lead) and the
    demand's peak over the error window (while the stand-in fills part of that window,
    the real demand's peak and the service's own static reservation, `v.reservation`,
    where one is known)."""
    pf: Sequence[int] = v.past_forecast
    pd: Sequence[int] = v.past_demand
    # A copy's error window is four: the largest error of the next window passes the
    # largest of the last k about once in k + 1 windows (its draws are noise, afresh each
    # day); a model's forecast keeps one, or a burst's headroom outlives the burst.
    # Whether the forecast is a copy is read on the forecast the service was told.
    n = min(len(pd), len(pf))
    look = min(2 * error_window, len(v.forecast))
    if stand_in and headroom.copied(forecast, look, timing_window):
        error_window *= COPY_WINDOWS
    else:
        stand_in = 0
    sd: list[int] = []
    sf: list[int] = []
    if stand_in and n < error_window:  # the stand-in history, short of the copy's windows
        sd, sf = headroom.jitter(forecast, stand_in, error_window - n)
    early, late = headroom.span(v.past_demand, pf, forecast, tolerance, timing_window, evidence)
    if not (early or late or n or sd):
        return [0] * len(forecast)
    before: Sequence[int] = pf
    if late > len(pf) and len(forecast) >= timing_window >= late:
        # Steps before the first forecast it was told (a service's first steps): the
        # daily pattern continued back, as `forecast_curve` continues it forward, so a
        # late peak's demand at step now is not taken for the forecast's.
        before = [forecast[timing_window - j] for j in range(late, len(pf), -1)] + list(pf)
    wide = headroom.dilate(forecast, early, before, late)
    if not (n or sd):
        return [a - b for a, b in zip(wide, forecast, strict=True)]
    if early or late:  # the past forecast dilated alike (its last steps see the forecast ahead)
        pf = headroom.dilate(list(pf) + forecast[:early], early, (), late)[:len(pf)]
        sf = headroom.dilate(sf, early, (), late)
    if sd:
        pd = sd + list(pd[len(pd) - n:])
        pf = sf + list(pf[len(pf) - n:])
    level = v.service_level if v.service_level is not None else service_level
    room = headroom.curve(wide, pd, pf, level, error_window)
    if cap > 0.0 and any(room):
        # Error sized on noise can ask for more than the service was ever told or seen to
        # need. While the stand-in fills part of the window, the demand seen is the real
        # demand and the operator's static reservation (`v.reservation`), not the
        # stand-in's draws, which reach peaks no demand had.
        real = n if sd else error_window  # the window's last steps that are real demand
        seen = max(pd[len(pd) - real:], default=0)
        if sd:
            seen = max(seen, v.reservation or 0)
        peak = headroom.dilate(forecast, timing_window - 1, (), 0)  # the peak of each day ahead
        room = [r if r <= 0 else min(r, max(0, math.ceil(cap * (p if p > seen else seen) - 1e-9)
                                             - a))
                for a, r, p in zip(wide, room, peak, strict=True)]
    return [a - b + r for a, b, r in zip(wide, forecast, room, strict=True)]


def ceiling(v: model.ServiceState, growth: float = 1.0) -> int | None:
    """The most GPUs a plan holds for `v` at any step, in whole replicas: its static
    reservation (what fifo holds all day) while demand never came above it; once it did,
    `growth` times the most demand seen (a service outgrowing its reservation is planned
    for more of the same, not held to where it has already been). None where no
    reservation is known. Held to it, a service never takes more GPU-steps from batch
    work than the reservation it replaces, unless its demand did."""
    if v.reservation is None:
        return None
    seen = max(v.past_demand, default=0)
    top = v.reservation if seen <= v.reservation else math.ceil(growth * seen - 1e-9)
    return -(-top // v.unit) * v.unit


def service_curve(
    v: model.ServiceState, length: int, now: int, period: int, error_memory: float,
    service_level: float = 0.995, error_window: int = headroom.DEFAULT_WINDOW,
    room: list[int] | None = None, forecast: list[int] | None = None,
    limit: int | None = None, floor: Sequence[int] | None = None,
) -> list[int]:
    """GPUs the plan holds for a service at steps now .. now+length-1: its forecast,
    with headroom (`room`, else `service_room`) for the recent forecast error, at most
    `limit` at any step (`ceiling`)."""
    f = forecast if forecast is not None else forecast_curve(v, length, period)
    if room is None:
        room = service_room(v, f, service_level, error_window)
    f = [a + b for a, b in zip(f, room, strict=True)]
    # Recent miss: if demand ran above forecast, expect more of the same for a while.
    if v.past_demand and v.past_forecast:
        miss = v.past_demand[-1] - v.past_forecast[-1]
        if miss > 0:
            for k in range(length):
                extra = miss * error_memory**k
                if extra < 0.5:
                    break
                f[k] += math.ceil(extra - 0.5)
    if floor is not None:
        f = [x if x > y else y for x, y in zip(f, floor, strict=True)]
    if limit is not None:
        f = [x if x < limit else limit for x in f]
    swap = v.max_swap
    need = f
    # Ramp up ahead of a rise the swap cap cannot follow in one step. (Comparisons,
    # not min/max calls: this runs over the whole window on every re-plan.)
    if length:
        after = need[-1]
        for k in range(length - 2, -1, -1):
            x = after - swap
            if need[k] < x:
                need[k] = x
            after = need[k]
    if now > 0:
        have = len(v.current_gpus) + v.lost  # lost GPUs are replaced, not ramped back
        for k in range(length):
            x = need[k]
            if x < have - swap:
                have -= swap
            elif x > have + swap:
                have += swap
            else:
                have = x
            need[k] = have
    return need


def headroom_last(inp: model.PlanInput, used_now: int, targets: dict[str, int],
                  forecast: dict[str, int]) -> dict[str, int]:
    """`targets` cut to the GPUs the services can hold at step now (idle, or theirs
    and no job's), taking headroom (a target over its forecast now) first, a GPU at a
    time from the service with the most, the lowest priority on a tie: when a job
    planned on GPUs the services' curves grew into since holds them, one service's
    headroom must not take the GPUs another's forecast needs.

    Counted per set of nodes services are limited to (a node selector), the smallest
    first, then over the cluster: services that share a few nodes give way to each
    other's forecast there, even with GPUs to spare elsewhere."""
    c = inp.cluster
    full = (1 << c.gpus) - 1
    pool = full & ~used_now
    out = dict(targets)
    by_name = {v.name: v for v in inp.services}
    allowed = {v.name: v.allowed(c) for v in inp.services}
    for mask in sorted(set(allowed.values()) | {full}, key=lambda m: (m.bit_count(), m)):
        inside = [n for n in out if not allowed[n] & ~mask]  # limited to these nodes
        over = sum(out[n] for n in inside) - (pool & mask).bit_count()
        while over > 0:
            name = max(inside, key=lambda n: (out[n] - forecast[n], -by_name[n].priority, n))
            extra = out[name] - forecast[name]
            if extra <= 0:
                break
            take = min(over, by_name[name].unit, extra)
            out[name] -= take
            over -= take
    return out


def locks(inp: model.PlanInput, curves: dict[str, list[int]], R: int,
                   shrink: bool = False) -> list[int]:
    """GPUs the services still hold at steps now .. now+R: at step now a service can give
    up only so many of its GPUs; later it moves off them (in `scaling.release_order`) at the
    pace its swap cap allows. A block may only be planned where the services will have
    left by then. With `shrink`, a trade takes their GPUs instead: they go down towards
    none, one GPU of swap a GPU given up."""
    locked = [0] * (R + 1)
    for v in inp.services:
        for k, m in enumerate(held_ahead(v, v.current_gpus, curves[v.name], inp.now == 0,
                                         inp.cluster.gpus_per_node, R, shrink)):
            locked[k] |= m
    return locked


def held_ahead(v: model.ServiceState, held: frozenset[int], curve: Sequence[int], first_step: bool,
               per_node: int, R: int, shrink: bool = False) -> list[int]:
    """The GPUs of `held` that `locks` counts `v` on holding still at each step from the
    step `curve` starts at (the curve of the GPUs it wants from there), up to R steps on
    (fewer where it holds none of them any more); `first_step`: no swap cap applies."""
    want = curve[0]
    cap = None if first_step else v.max_swap + v.lost
    if shrink:  # giving GPUs up, acquiring none: one GPU of swap each
        first = len(held) if cap is None else min(len(held), cap)
    else:
        first = min(max(0, len(held) - want), scaling.releasable(held, want, cap))
    pace = len(held) if cap is None else max(0, v.max_swap if shrink else v.max_swap // 2)
    order = scaling.release_order(held, per_node)
    n = len(order)
    low = n - first  # the fewest of them it holds at a step so far, as its curve falls
    out = []
    for k in range(R + 1):
        if k and not shrink:
            # Where its curve falls it sheds them, in `scaling.release_order`, at its swap cap
            # a step; growing back, it keeps off the blocks planned to start soon.
            low = min(low, max(curve[k], 0 if cap is None else n - first - v.max_swap * k))
        gone = min(n, max(first + k * pace, n - low))
        if gone == n:
            break
        out.append(blocks.mask_of(frozenset(order[gone:])))
    return out


def node_rooms(services: tuple[model.ServiceState, ...], curves: dict[str, list[int]],
                   occ: list[int], unavailable: int, c: model.Cluster,
                   W: int) -> list[tuple[int, list[int]]]:
    """Per node set that some service is limited to: (its GPU mask, the GPUs left there
    for batch work at each step: available, less the curves of the services limited to
    it and the running jobs inside it). Empty when no service is limited."""
    sets: dict[frozenset[int], list[model.ServiceState]] = {}
    for v in services:
        if v.nodes is not None:
            sets.setdefault(v.nodes, []).append(v)
    out = []
    for nodes, members in sorted(sets.items(), key=lambda x: sorted(x[0])):
        mask = model.node_mask(nodes, c)
        have = (mask & ~unavailable).bit_count()
        room = [have - (occ[k] & mask & ~unavailable).bit_count() for k in range(W)]
        for v in members:
            curve = curves[v.name]
            for k in range(W):
                room[k] -= curve[k]
        out.append((mask, room))
    return out


def reservation_lead(v: model.ServiceState) -> float | None:
    """How far the service is ahead of its static reservation's record: the shortfall
    its static reservation (`v.reservation`, held all day, as fifo holds it) would have
    left over the steps it has a record of what it held (`v.past_held`, paired with its
    demand from the end), less its own, as a share of its demand there; None without a
    reservation, a record, or demand in it."""
    r = v.reservation
    n = min(len(v.past_demand), len(v.past_held))
    if r is None or n == 0:
        return None
    d = v.past_demand[len(v.past_demand) - n:]
    total = sum(d)
    if total <= 0:
        return None
    own = sum(x - y for x, y in zip(d, v.past_held[len(v.past_held) - n:], strict=True)
              if x > y)
    static = sum(x - r for x in d if x > r)
    return (static - own) / total


def reservation_leads(services: Sequence[model.ServiceState],
                      read: Mapping[str, float | None] | None = None) -> dict[str, float | None]:
    """Every service's `reservation_lead`, by name: as `read` already has it (a plan that
    read it once this round), else read now."""
    read = read or {}
    return {v.name: read[v.name] if v.name in read else reservation_lead(v) for v in services}


def held_to_reservation(v: model.ServiceState, forecast: Sequence[int], room: list[int],
                        lead: float, window: int, ahead: float | None) -> list[int]:
    """`room` (GPUs over `forecast` at each lead) cut so that the plan holds no more than
    the larger of the service's static reservation and its forecast raised by its typical
    error (the median relative error of the last `window` steps, as `headroom.curve`
    measures it), once the service is more than `lead` of its demand ahead of that
    reservation's record (`ahead`: `reservation_lead(v)`, read once by the caller, which
    also shows it); `room` itself otherwise. What is cut is headroom for errors rarer than
    the typical one (a spike, a burst) above what an operator's static reservation would
    have held, while the service already has more of its demand than that reservation
    would have given it: batch work may start there (idle GPUs still go to it as spare
    replicas, `allocating`). A forecast that runs low at every step keeps the headroom
    that covers it."""
    r = v.reservation
    if ahead is None or ahead <= lead or r is None:
        return room
    n = min(len(v.past_demand), len(v.past_forecast), window)
    errors, floor = headroom.relative_errors(v.past_demand[len(v.past_demand) - n:],
                                             v.past_forecast[len(v.past_forecast) - n:])
    # A forecast that ran high or right as often as not keeps nothing over the reservation.
    typical = max(0.0, statistics.median(errors)) if errors else 0.0
    out = []
    for x, g in zip(room, forecast, strict=True):
        top = max(r, g + math.ceil(typical * (g if g > floor else floor) - 1e-9))
        out.append(x if x <= top - g else max(0, top - g))
    return out


def cover(v: model.ServiceState, forecast: Sequence[int], reaches: Sequence[int],
          period: int, objective: float, prior: float = 2.0) -> list[int] | None:
    """The least a plan holds at each lead for a service whose forecast was seen wrong,
    sized on whole steps: the forecast's most within r steps either way (its envelope)
    times a ratio, plus a GPU; where the envelope is 0, the fewest GPUs that would have
    left no more demand short there than the objective allows. The ratio is the smallest
    that would have delivered `objective` of the demand seen (the service level's own
    count; at most what its static reservation would have delivered there): where the
    demand seen is a few dozen GPU-steps, and one GPU-step short misses the objective,
    it covers the worst step seen; where it is large, rarer steps go short as the
    objective allows.

    Of the `reaches` r, the one that would have held the fewest GPU-steps over the steps
    seen: a forecast right but for its timing or its noise wants a wide envelope and a
    small ratio, a forecast with a level bias a narrow one. Until a `period` of steps
    was seen, the ratio is at least `prior` (a forecast seen wrong one way may be wrong
    the other). None while the forecast was right at every step seen (exact forecasts plan
    as without it). The plan stays within the service's `ceiling`, so covering costs at
    most what the static reservation costs."""
    pd, pf = v.past_demand, v.past_forecast
    n = min(len(pd), len(pf), COPY_WINDOWS * period)  # the days a copy's error is sized on
    d = pd[len(pd) - n:]
    f = pf[len(pf) - n:]
    if d == f:
        return None
    level = v.service_level if v.service_level is not None else objective
    if v.reservation is not None:
        # No more than the static reservation would have delivered there: its promise is
        # fifo's service level, not demand that no reservation covered.
        level = min(level, headroom.delivered(d, [v.reservation] * n) or 1.0)
    best: tuple[int, int, float, int] | None = None  # (GPU-steps held, reach, ratio, at zero)
    for r in sorted(set(reaches)):
        past = headroom.dilate(list(f) + list(forecast[:r]), r)[:n]
        at_zero = _least_cover([x for x, e in zip(d, past, strict=True) if e == 0],
                               (1.0 - level) * sum(d))
        base = [float(COVER_MARGIN) if e > 0 else float(at_zero) for e in past]
        unit = [float(e) for e in past]
        ratio = headroom.smallest(
            [float(x) for x in d], base, unit,
            [(x - COVER_MARGIN) / e for x, e in zip(d, past, strict=True) if e > 0], level)
        if n < period:
            ratio = max(ratio, prior)
        held = sum(_covered(ratio, e, at_zero) for e in past)
        if best is None or held < best[0]:
            best = (held, r, ratio, at_zero)
    assert best is not None
    _, r, ratio, at_zero = best
    ahead = headroom.dilate(list(forecast), r, f, r)
    return [_covered(ratio, e, at_zero) for e in ahead]


def _covered(ratio: float, envelope: int, at_zero: int) -> int:
    """What `cover` holds where the forecast's envelope is `envelope`."""
    return math.ceil(ratio * envelope - 1e-9) + COVER_MARGIN if envelope > 0 else at_zero


def _least_cover(demand: Sequence[int], short: float) -> int:
    """The fewest GPUs that leave at most `short` GPU-steps of `demand` uncovered."""
    for z in sorted(set(demand) | {0}):
        if sum(x - z for x in demand if x > z) <= short + 1e-9:
            return z
    return max(demand, default=0)

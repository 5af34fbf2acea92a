"""Trades: a job started over the services' curve, priced at the real-time shortfall it
causes (`Options.realtime_penalty` times the services' priority, the cheapest services
first). Which jobs only a trade starts, what a trade nets at a step, and the first step
ahead where a starving job's trade pays.

Purely computational: the standard library and numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce
from operator import or_

import numpy as np
import numpy.typing as npt

from extender.planner import blocks, frame, model


def trade_loses(value: float, over: int, price: float, floor: float) -> bool:
    """Whether a trade at step now worth `value` before its shortfall surely nets no more
    than `floor` (so `trade` would say None): `over` GPUs short at step now, each at
    `price` or more. A margin far above rounding keeps the answer exact."""
    return over > 0 and value - price * over <= floor - 1e-9 * max(1.0, abs(floor))


def trade(
    g: frame.Sheet, q: model.QueuedJob, k: int, d: int, allow: int, locked: int,
    floor: float = 0.0,
) -> tuple[int, float] | None:
    """`q`'s block and value net of the real-time shortfall it causes if it starts at step
    `k` (its GPUs beyond the batch room at each step, taken from the services' curves
    cheapest first), when a block is free and that value is above `floor`; else None."""
    c, W, cum, _, shortable, occ, slack, short = g
    size = q.gpus
    # No block free at step k, none free over the whole run: the cheap tests first.
    if not blocks.start_positions(allow & ~occ[k] & ~locked, size, c):
        return None
    end = k + d if k + d < W else W
    starts = blocks.start_positions(allow & ~reduce(or_, occ[k:end], 0) & ~locked, size, c)
    if not starts:
        return None
    net = q.priority * size * (cum[end] - cum[k])
    for t in range(k, end):
        over = size - max(0, slack[t])
        if over <= 0:
            continue
        over = min(over, size)
        weight = cum[t + 1] - cum[t]
        given = short[t]  # the cheapest GPUs went to jobs placed before this one
        for price, curve in shortable:
            have = curve[t] - min(given, curve[t])
            given -= curve[t] - have
            take = min(have, over)
            net -= price * take * weight
            over -= take
            if not over:
                break
        if over:  # past every curve: the room kept for a running job's overrun
            net -= shortable[0][0] * over * weight
        if net <= floor:
            return None
    if net <= floor:
        return None
    return blocks.best_fit(starts, size, ((1 << c.gpus) - 1) & ~occ[k], c), net


def drain_trade(
    g: frame.Sheet, q: model.QueuedJob, d: int, allow: int, shrunk: list[int],
    near: Callable[[int, int], int], margin: int, R: int, full_at: bytearray,
    costs: Callable[[bool], npt.NDArray[np.float64]],
) -> tuple[int, tuple[int, float]] | None:
    """The first step `at` in 1..R where `trade` starts `q` (the GPUs `shrunk[at]` and
    `near(at + d, margin)` locked), and that trade: what trying each step in turn gives.

    A job past the starvation bound looks this far ahead for the step its block frees;
    on a cluster that running work and the services fill, pricing every start's run would
    be most of a re-plan. So a step is skipped unpriced when what the run would cost the
    services is more than it is worth, or when no block of its size is free over the run
    (`trade` tests that before it prices the run). A step with none free at the step
    itself is marked in `full_at` (1: none free), shared by the jobs of its size and GPUs
    for the rest of a pass, in which the grid only fills up. What a run costs is read off
    running sums over the steps (`costs(exact)`): first a bound, every GPU at the
    cheapest price (`least_shortfall`), and once a start it let through was not taken,
    the exact sums (`shortfall_sums`, which cost more to make): where the services'
    curves ask for more than the cluster has, the bound lets many starts through that do
    not pay (docs/benchmarks.md)."""
    size = q.gpus
    rate = q.priority * size
    ends = np.minimum(np.arange(1 + d, R + 1 + d), g.W)  # of the runs from steps 1..R
    gain = rate * (g.cum_a[ends] - g.cum_a[1:R + 1])
    most = rate * g.cum[g.W]

    def paying(sums: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
        """The starts 1..R whose run is worth more than `sums` say it costs the services,
        to within a margin far above the rounding of `trade`'s sum: a start left out
        surely loses."""
        eps = 1e-9 * max(1.0, most, float(sums[g.W]))
        return gain - (sums[ends] - sums[1:R + 1]) > -eps

    may = paying(costs(False)) & (np.frombuffer(full_at, np.uint8, R, 1) == 0)
    exact = False
    for at in (np.flatnonzero(may) + 1).tolist():
        if exact and not may[at - 1]:
            continue  # ruled out by the exact sums since
        if not blocks.start_positions(allow & ~g.occ[at] & ~shrunk[at], size, g.cluster):
            full_at[at] = 1
            continue
        got = trade(g, q, at, d, allow, shrunk[at] | near(at + d, margin))
        if got is not None:
            return at, got
        if not exact:  # the bound let through a start not taken: price the rest exactly
            exact = True
            may &= paying(costs(True))
    return None


def least_shortfall(size: int, slack: Sequence[int], cum_a: npt.NDArray[np.float64],
                    price: float) -> npt.NDArray[np.float64]:
    """Running sums (`out[k]`: over the steps before k) of the least a job of `size` GPUs
    running at each step costs the services there in `trade`: its GPUs beyond the batch
    room `slack`, each at `price` (the cheapest shortfall) or more, weighted as in it
    (`cum_a`: the cumulative reward weights)."""
    room = np.asarray(slack, dtype=np.int64)
    over = np.clip(size - np.maximum(room, 0), 0, size)
    out = np.zeros(len(room) + 1)
    np.cumsum(price * over * np.diff(cum_a), out=out[1:])
    return out


def shortfall_sums(size: int, slack: Sequence[int], cum_a: npt.NDArray[np.float64],
                   prices: npt.NDArray[np.float64], curves: npt.NDArray[np.int64],
                   short: Sequence[int]) -> npt.NDArray[np.float64]:
    """Running sums (`out[k]`: over the steps before k) of what a job of `size` GPUs
    running at each step costs the services there, as `trade` prices it: its GPUs beyond
    the batch room `slack`, taken from the services' `curves` (one a row, `prices` a
    GPU-step, cheapest first) after what the jobs placed before took (`short`), any left
    past every curve at the cheapest price, weighted by the reward weights (`cum_a`: their
    running sums).

    A step's cost does not hang on where the run starts, so a start's whole shortfall is
    a difference of two sums, not a walk over its run."""
    room = np.asarray(slack, dtype=np.int64)
    n = len(room)
    over = np.clip(size - np.maximum(room, 0), 0, size)
    curves = curves[:, :n]
    # What the jobs before took, cheapest curve first; then this job's, likewise.
    used = np.clip(np.asarray(short[:n], dtype=np.int64) - (np.cumsum(curves, axis=0) - curves),
                   0, curves)
    have = curves - used
    upto = np.cumsum(have, axis=0)
    take = np.clip(over - (upto - have), 0, have)
    cost = prices @ take + prices[0] * np.maximum(over - upto[-1], 0)
    out = np.zeros(n + 1)
    np.cumsum(cost * np.diff(cum_a)[:n], out=out[1:])
    return out


def only_by_trade(queue: list[model.QueuedJob], capacity: list[int], R: int) -> list[str]:
    """The jobs that no start before step `R` keeps beside the services' curves
    (`capacity`: the room they leave at each step) for their whole estimate: only a trade
    starts them."""
    W = len(capacity)
    longest_fit: dict[int, int] = {}
    out = []
    packed = frame.pack(capacity)
    for q in queue:
        if q.gpus not in longest_fit:
            longest_fit[q.gpus] = (curve_room(capacity, q.gpus, R) if packed is None else
                                   packed_room(packed.translate(frame.below(q.gpus)), R))
        if min(q.estimate_steps, W) > longest_fit[q.gpus]:
            out.append(q.name)
    return out


def curve_room(capacity: list[int], size: int, R: int) -> int:
    """The longest run a job of `size` GPUs can start before step `R` and keep beside the
    services' curves (`capacity`, the room they leave at each step): the window's length
    when such a run reaches its end (whatever is past it, the plan cannot see)."""
    W = len(capacity)
    longest = run = 0
    for k in range(W - 1, -1, -1):  # run: steps from k on with room for `size`
        run = run + 1 if capacity[k] >= size else 0
        if k < R:
            if run == W - k:
                return W
            longest = max(longest, run)
    return longest


def packed_room(bad: bytearray, R: int) -> int:
    """`curve_room` on the steps marked 1 in `bad` where the room is too small: the
    longest run of the others that starts before step `R` (the window's length when one
    reaches its end), a run at a time."""
    longest = at = 0
    while (at := bad.find(0, at)) >= 0 and at < R:
        end = bad.find(1, at)
        if end < 0:
            return len(bad)
        longest = max(longest, end - at)
        at = end
    return longest

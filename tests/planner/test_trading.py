"""Trades over the services' curves: the shortcuts against pricing each start plainly."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from extender.planner import blocks, frame, model, trading


def test_trade_loses_only_when_the_first_steps_shortfall_already_sinks_it() -> None:
    # Worth 100 before its shortfall, 2 GPUs short now at 40 or more each: at most 20.
    assert trading.trade_loses(100.0, 2, 40.0, floor=20.5)
    assert not trading.trade_loses(100.0, 2, 40.0, floor=19.0)
    # A tie is left to `trading.trade` itself, which adds the shortfall up in its own order.
    assert not trading.trade_loses(100.0, 2, 40.0, floor=20.0)
    assert not trading.trade_loses(100.0, 0, 40.0, floor=99.0)  # nothing short now


@given(capacity=st.lists(st.integers(-3, 9), min_size=2, max_size=40), size=st.integers(1, 8),
       R=st.integers(1, 39))
def test_the_byte_search_finds_the_longest_run_beside_the_curve(capacity: list[int], size: int,
                                                                R: int) -> None:
    R = min(R, len(capacity) - 1)
    packed = frame.pack(capacity)
    assert packed is not None
    assert (trading.packed_room(packed.translate(frame.below(size)), R)
            == trading.curve_room(capacity, size, R))


def _trade_each_step(g: Any, q: model.QueuedJob, d: int, allow: int, shrunk: list[int],
                     near: Any, margin: int, R: int) -> tuple[int, Any] | None:
    """What a job past the starvation bound looks ahead for, plainly: each step in turn."""
    for at in range(1, R + 1):
        trade = trading.trade(g, q, at, d, allow, shrunk[at] | near(at + d, margin))
        if trade is not None:
            return at, trade
    return None


@given(seed=st.integers(0, 2**32), nodes=st.integers(1, 3), size=st.sampled_from([1, 2, 4]),
       W=st.integers(3, 40), d=st.integers(1, 45), priority=st.floats(0.1, 20.0),
       decay=st.sampled_from([0.0, 0.02, 0.1]), busy=st.floats(0.0, 0.95))
def test_the_look_ahead_of_a_starving_trade_skips_only_starts_that_cannot_be_taken(
    seed: int, nodes: int, size: int, W: int, d: int, priority: float, decay: float,
    busy: float,
) -> None:
    c = model.Cluster(nodes=nodes, gpus_per_node=4)
    rnd = random.Random(seed)

    def mask(p: float) -> int:
        return sum(1 << g for g in range(c.gpus) if rnd.random() < p)

    R = W - 1
    occ = [mask(busy) for _ in range(W)]
    shrunk = [mask(busy / 3) for _ in range(W)]
    slack = [rnd.randint(-2, c.gpus) for _ in range(W)]
    short = [rnd.randint(0, 2) for _ in range(W)]
    shortable = sorted((rnd.choice([0.5, 2.0, 10.0]), [rnd.randint(0, c.gpus) for _ in range(W)])
                       for _ in range(rnd.randint(1, 2)))
    cum = frame.cumulative_weights(decay, W)
    near_masks = {end: mask(0.1) for end in range(W + 50)}

    def near(end: int, margin: int) -> int:
        return near_masks[end] if margin else 0

    allow = mask(0.9) | mask(0.9)
    q = model.QueuedJob("j", size, d, 0, priority)
    cum_a = np.asarray(cum)
    g = frame.Sheet(c, W, cum, cum_a, shortable, occ, slack, short)
    want = _trade_each_step(g, q, d, allow, shrunk, near, 2, R)
    full_at = bytearray(R + 1)
    # What the pass gives it: the bound, and the exact sums once the bound let through a
    # start that did not pay.
    exact = trading.shortfall_sums(
        size, slack, cum_a, np.array([p for p, _ in shortable]),
        np.array([cv for _, cv in shortable], dtype=np.int64), short)
    bound = trading.least_shortfall(size, slack, cum_a, shortable[0][0])

    def costs(priced_exactly: bool) -> Any:
        return exact if priced_exactly else bound

    got = trading.drain_trade(g, q, d, allow, shrunk, near, 2, R, full_at, costs)
    assert got == want
    # The steps it marked have no block free at the step for any job of the size and
    # GPUs: the next job's look-ahead in the pass, the grid only fuller, skips them.
    for at in range(1, R + 1):
        if full_at[at]:
            assert not blocks.start_positions(allow & ~occ[at] & ~shrunk[at], size, c)
    g = g._replace(occ=[x | mask(0.1) for x in occ])
    again = model.QueuedJob("k", size, max(1, d - 1), 0, priority * 2)
    want = _trade_each_step(g, again, again.estimate_steps, allow, shrunk, near, 2, R)
    assert trading.drain_trade(g, again, again.estimate_steps, allow, shrunk, near, 2, R,
                                   full_at, costs) == want


@given(seed=st.integers(0, 2**32), size=st.sampled_from([1, 2, 4, 8]), W=st.integers(1, 40),
       curves=st.integers(1, 4), decay=st.sampled_from([0.0, 0.02, 0.1]))
def test_the_shortfall_sums_price_every_start_as_the_trade_does(
    seed: int, size: int, W: int, curves: int, decay: float,
) -> None:
    # A start's shortfall read off the sums (two lookups) is what `trading.trade` nets by walking
    # its run: the look-ahead of a starving job skips on it, so it must not differ.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    rnd = random.Random(seed)
    slack = [rnd.randint(-3, 8) for _ in range(W)]
    short = [rnd.randint(0, 6) for _ in range(W)]
    shortable = sorted((rnd.choice([0.5, 2.0, 2.0, 10.0]), [rnd.randint(0, 5) for _ in range(W)])
                       for _ in range(curves))
    cum = frame.cumulative_weights(decay, W)
    costs = trading.shortfall_sums(
        size, slack, np.asarray(cum), np.array([p for p, _ in shortable]),
        np.array([cv for _, cv in shortable], dtype=np.int64), short)
    q = model.QueuedJob("j", size, W, 0, 3.0)
    g = frame.Sheet(c, W, cum, np.asarray(cum), shortable, [0] * W, slack, short)
    for k in range(W):
        for d in range(1, W - k + 1):
            got = trading.trade(g, q, k, d, 255, 0, floor=-np.inf)
            assert got is not None
            want = 3.0 * size * (cum[k + d] - cum[k]) - (costs[k + d] - costs[k])
            assert abs(got[1] - want) <= 1e-9 * max(1.0, abs(want))

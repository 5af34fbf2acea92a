"""The fast policy's block choice and its shortcuts, against their plain definitions."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.planner import allocating, blocks, frame, model, placing, seating, trading


def _fullest_node_first(starts: int, size: int, free: int, c: model.Cluster) -> int:
    """The rule as the docstring says it: the fullest node that fits (fewest free GPUs),
    a size-aligned offset there when one is free, lower nodes on ties."""
    g = c.gpus_per_node
    best: tuple[int, int, int, int] | None = None
    for node in range(c.nodes):
        here = (starts >> (node * g)) & ((1 << g) - 1)
        if not here:
            continue
        aligned = [off for off in range(0, g, size) if here >> off & 1]
        offset = aligned[0] if aligned else (here & -here).bit_length() - 1
        node_free = ((free >> (node * g)) & ((1 << g) - 1)).bit_count()
        key = (node_free, 0 if aligned else 1, node, node * g + offset)
        best = key if best is None or key < best else best
    assert best is not None
    return best[3]


@given(nodes=st.integers(1, 16), size=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**32))
def test_best_fit_takes_the_fullest_node_and_an_aligned_offset(nodes: int, size: int,
                                                               seed: int) -> None:
    c = model.Cluster(nodes=nodes, gpus_per_node=8)
    rnd = random.Random(seed)
    free = rnd.getrandbits(c.gpus)
    # Where a block may go is inside the free GPUs, narrowed further (locked GPUs, nodes).
    starts = blocks.start_positions(free & rnd.getrandbits(c.gpus), size, c)
    if not starts:
        return
    assert blocks.best_fit(starts, size, free, c) == _fullest_node_first(starts, size,
                                                                              free, c)


def test_trade_loses_only_when_the_first_steps_shortfall_already_sinks_it() -> None:
    # Worth 100 before its shortfall, 2 GPUs short now at 40 or more each: at most 20.
    assert trading.trade_loses(100.0, 2, 40.0, floor=20.5)
    assert not trading.trade_loses(100.0, 2, 40.0, floor=19.0)
    # A tie is left to `trading.trade` itself, which adds the shortfall up in its own order.
    assert not trading.trade_loses(100.0, 2, 40.0, floor=20.0)
    assert not trading.trade_loses(100.0, 0, 40.0, floor=99.0)  # nothing short now


def _first_clear(room: list[int], size: int, k: int, d: int) -> int:
    """The first start from `k` whose run (cut at the window's end) has room for `size`
    at every step, one start at a time; len(room) when none has."""
    W = len(room)
    while k < W and min(room[k:min(k + d, W)]) < size:
        k += 1
    return k


@given(room=st.lists(st.integers(-3, 9), min_size=1, max_size=40), size=st.integers(1, 8),
       k=st.integers(0, 40), d=st.integers(1, 50))
def test_the_byte_search_finds_the_first_start_with_room(room: list[int], size: int, k: int,
                                                         d: int) -> None:
    packed = frame.pack(room)
    assert packed is not None and list(packed) == [max(0, x) for x in room]
    bad = packed.translate(frame.below(size))
    k = min(k, len(room) - 1)
    assert min(frame.clear_from(bad, k, d), len(room)) == _first_clear(room, size, k, d)


@given(room=st.lists(st.integers(-3, 9), min_size=1, max_size=40), size=st.integers(1, 8),
       taken=st.integers(0, 9), lo=st.integers(0, 40), hi=st.integers(0, 40))
def test_packed_room_less_a_job_is_the_room_less_it(room: list[int], size: int, taken: int,
                                                    lo: int, hi: int) -> None:
    packed = frame.pack(room)
    assert packed is not None
    packed[lo:hi] = packed[lo:hi].translate(frame.less(taken))
    after = [x - taken if lo <= t < hi else x for t, x in enumerate(room)]
    assert list(packed) == [max(0, x) for x in after]
    assert frame.pack([0, 256]) is None


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


@pytest.mark.parametrize(("jobs", "passes"), [(15, 6), (100, 6), (101, 5), (150, 4), (200, 3),
                                               (250, 2), (301, 1), (700, 1)])
def test_a_long_queue_gets_as_many_queue_orders_as_the_pass_budget_holds(
    jobs: int, passes: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 600 placements a plan (`Options.pass_budget`): six passes up to 100 jobs, then fewer,
    # at least one; no job is left out of the one pass a very long queue still gets.
    rnd = random.Random(jobs)
    queue = tuple(model.QueuedJob(f"j{i:03d}", rnd.choice([1, 1, 2, 4]), rnd.randint(1, 30),
                                  rnd.randint(0, 3), float(rnd.randint(1, 5)))
                  for i in range(jobs))
    inp = model.PlanInput(4, model.Cluster(2, 8), 24, queue, (), ())
    planner = allocating.Gpuroster()
    calls = []
    place = placing.place

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("fill_now", False))
        return place(*args, **kwargs)

    monkeypatch.setattr(placing, "place", counted)
    plan = planner.plan(inp)
    assert len(calls) == passes
    assert set(plan.planned_start) | set(plan.reasons) == {q.name for q in queue}


def test_the_pass_budget_goes_to_orders_that_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    # 150 one-GPU jobs of one priority: "priority-size" is "priority" over again, and
    # "reach" is "priority-long". The four passes the budget holds at 150 jobs are four
    # different ones, not two.
    queue = tuple(model.QueuedJob(f"j{i:03d}", 1, 1 + i % 29, 0, 1.0) for i in range(150))
    inp = model.PlanInput(0, model.Cluster(1, 8), 24, queue, (), ())
    planner = allocating.Gpuroster()
    seen: list[tuple[str, ...]] = []
    place = placing.place

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen.append((str(kwargs.get("fill_now")), *(j.name for j in args[1])))
        return place(*args, **kwargs)

    monkeypatch.setattr(placing, "place", counted)
    planner.plan(inp)
    assert len(seen) == 600 // 150 == len(set(seen))


@pytest.mark.parametrize("seed", range(6))
def test_a_fill_now_pass_stopped_as_the_priority_pass_twin_would_end_as_that_pass(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the fill-now pass stops after its first phase (`frame.TWIN`), run it in full, and
    # the plain priority pass too, neither held to a bound: both place every job alike.
    # Every re-plan of generated runs with services, queues of 8-60 jobs, estimates off.
    from extender.planner import generator, simulating

    planner = allocating.Gpuroster()
    place = placing.place
    plain: list[tuple[Any, list[Any]]] = []  # (its frame, order) of the last priority pass
    twins = 0

    def checked(*args: Any, **kwargs: Any) -> Any:
        nonlocal twins
        f, ordered = args[0], args[1]
        if kwargs.get("opening") is not None:
            plain[:] = [(f, ordered)]
        out = place(*args, **kwargs)
        if out is frame.TWIN:
            twins += 1
            assert plain and plain[0][0] is f and plain[0][1] is ordered
            full = place(f, ordered, -float("inf"), fill_now=True)
            alone = place(f, ordered, -float("inf"))
            assert full is not None and alone is not None
            assert (full.placed, full.score, full.short) == (alone.placed, alone.score,
                                                             alone.short)
        return out

    monkeypatch.setattr(placing, "place", checked)
    gpus, jobs = ((8, 15), (8, 40), (16, 30), (32, 60), (64, 30), (16, 60))[seed]
    s = generator.generate(gpus, jobs, 300 + seed, mix="trace" if seed % 2 else "philly",
                           burst=0.5, estimate_error=0.3, duration_steps=36)
    simulating.simulate(s, planner)
    assert twins  # (the premise: the shortcut was taken)


def test_a_service_gives_up_its_gpus_on_the_node_where_it_holds_fewest_first() -> None:
    # Two nodes of 8. A 1-GPU job holds GPU 0 on node 0 all day; the service (curve 5,
    # swap cap 7) holds five GPUs on node 0 and three (the highest) on node 1. Its three
    # over the curve go first, and they are node 1's: the 8-GPU job starts there now.
    # Taken lowest first, node 0's went and node 1 stayed held, the job planned two steps
    # ahead, and at the next step the same again (a spare replica back on node 1).
    running = (model.RunningJob("long", 1, model.Block(0, 1), 0, 48, 1.0),)
    queued = (model.QueuedJob("gang", 8, 4, 5, 3.0),)
    held = frozenset({2, 3, 4, 5, 7, 13, 14, 15})
    chat = model.ServiceState("chat", 6.0, 7, (5,) * 48, past_demand=(5,) * 10,
                              past_forecast=(5,) * 10, current_gpus=held)
    inp = model.PlanInput(10, model.Cluster(2, 8), 24, queued, running, (chat,))
    plan = allocating.Gpuroster().plan(inp)
    assert plan.starts == {"gang": model.Block(8, 8)}
    assert plan.service_gpus["chat"] <= frozenset(range(8))
    assert len(plan.service_gpus["chat"]) == 5


def test_a_spare_replica_keeps_off_gpus_it_could_not_leave_before_a_planned_start() -> None:
    # Two nodes of 8: the service holds 8-11 (curve 4, swap cap 2: once over its curve the
    # plan counts on it giving up two GPUs at once, its lowest, then one a step), and 12
    # and 13 are idle. Holding them as spares too at the next re-plan, it would still hold
    # 12 two steps on and 13 three steps on: a job planned on 12-15 five steps from now
    # keeps both; four steps keeps neither (with 13 left out it gives up one GPU at once,
    # not two, and 12 stays three steps on).
    chat = model.ServiceState("chat", 6.0, 2, (4,) * 48, current_gpus=frozenset(range(8, 12)))
    held, spare = frozenset(range(8, 12)), frozenset({12, 13})
    for step, kept in ((2, set()), (4, set()), (5, {12, 13})):
        wanted = [0] * 12
        wanted[step - 1] = ((1 << 4) - 1) << 12  # a job planned on 12-15 `step` steps ahead
        assert seating.leaving_in_time(chat, held, spare, [4] * 48, wanted, 8) == kept
    # Curve 2: a job planned on GPU 13 alone, three steps ahead. Without 13, 12 leaves in
    # time and stays a spare; with replicas of two GPUs the pair goes together.
    wanted = [0] * 12
    wanted[2] = 1 << 13
    assert seating.leaving_in_time(chat, held, spare, [2] * 48, wanted, 8) == {12}
    pairs = dataclasses.replace(chat, unit=2)
    assert seating.leaving_in_time(pairs, held, spare, [2] * 48, wanted, 8) == set()

"""The value bound: equals the optimum on hand-solved instances, never below any plan."""

from __future__ import annotations

import pytest

from extender.optimizing import bound
from extender.planner import generator, legality, metrics, model, simulating
from tests.builders import scenario


def fragmentation(b_priority: float = 2.5) -> model.Scenario:
    # 4 GPUs, 2 steps. a (2 GPUs, prio 3) + c (2 GPUs, prio 1) = 16; b alone (4 GPUs) =
    # 8 x b_priority: 20 by default.
    return (
        scenario("frag")
        .nodes(1, 4)
        .window(2, horizon=2)
        .job("a", gpus=2, d=2, priority=3)
        .job("b", gpus=4, d=2, priority=b_priority)
        .job("c", gpus=2, d=2, priority=1)
        .build()
    )


def service_first() -> model.Scenario:
    # Serve the peak (8) then run j beside the service at steps 1-2 (12), service 2+2 (8): 28.
    return (
        scenario("svc")
        .nodes(1, 4)
        .window(3, horizon=3)
        .job("j", gpus=2, d=2, priority=3)
        .service("s", [4, 2, 2], priority=2, max_swap=2)
        .build()
    )


def swap_capped() -> model.Scenario:
    # Running j at step 0 (4) leaves the service only 2 at step 1 (swap cap): 4 + 3*(2+4) = 22;
    # ramping the service instead and never running j: 3 * (4 + 4) = 24.
    return (
        scenario("swap")
        .nodes(1, 4)
        .window(3, horizon=3)
        .job("j", gpus=4, d=1, priority=1)
        .service("s", [0, 4, 4], priority=3, max_swap=2)
        .build()
    )


def late_arrival() -> model.Scenario:
    # x (1 GPU, 4 steps, prio 1) and y (2 GPUs, arrives at 2, 2 steps, prio 4) on 2 GPUs:
    # x cannot pause, so started at 0 or 1 it still holds a GPU at step 2: x alone (4) or
    # y alone at 2-3 (16): 16.
    return (
        scenario("late")
        .nodes(1, 2)
        .window(4, horizon=4)
        .job("x", gpus=1, d=4, priority=1)
        .job("y", gpus=2, d=2, arrival=2, priority=4)
        .build()
    )


HAND = [
    pytest.param(fragmentation, 20.0, id="fragmentation"),
    pytest.param(service_first, 28.0, id="service-first"),
    pytest.param(swap_capped, 24.0, id="swap-capped"),
    pytest.param(late_arrival, 16.0, id="late-arrival"),
]


@pytest.mark.parametrize(("build", "optimum"), HAND)
def test_bound_equals_hand_optimum(build: object, optimum: float) -> None:
    s = build()  # type: ignore[operator]
    r = bound.value_upper_bound(s, time_limit_s=5)
    assert r.kind == "milp-optimal"
    assert r.value_bound == pytest.approx(optimum)
    assert r.primal == pytest.approx(optimum)


@pytest.mark.parametrize(("build", "optimum"), HAND)
def test_lp_relaxation_is_a_weaker_bound(build: object, optimum: float) -> None:
    s = build()  # type: ignore[operator]
    r = bound.value_upper_bound(s, lp=True)
    assert r.kind == "lp"
    assert r.value_bound >= optimum - 1e-6


def test_lp_is_strictly_weaker_on_fragmentation() -> None:
    # LP: a whole + half of b = 12 + 10 = 22.
    assert bound.value_upper_bound(fragmentation(), lp=True).value_bound == pytest.approx(22.0)


def test_large_instances_switch_to_lp() -> None:
    s = generator.generate(64, 40, seed=1, duration_steps=24)
    r = bound.value_upper_bound(s, max_binaries=10)
    assert r.kind == "lp" and r.binaries > 10


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bound_is_above_every_policy(seed: int) -> None:
    s = generator.generate(
        16, 14, seed=seed, gpus_per_node=8, duration_steps=16, horizon_steps=8, backlog=0.6
    )
    value = bound.value_upper_bound(s, time_limit_s=5)
    util = bound.utilization_upper_bound(s, time_limit_s=5)
    assert 0.0 < util.value_bound <= 100.0
    for policy in ("fifo", "gpuroster"):
        run = simulating.simulate(s, policy)
        legality.check(s, run.grid)
        m = metrics.compute(s, run.grid)
        assert m.value <= value.value_bound + 1e-6, policy
        assert m.utilization <= util.value_bound + 1e-6, policy


def test_short_time_limit_still_gives_a_bound() -> None:
    s = generator.generate(32, 30, seed=4, duration_steps=24)
    r = bound.value_upper_bound(s, time_limit_s=0.0)
    relaxation = bound.value_upper_bound(s, lp=True)
    # No time at all: HiGHS stops before any dual bound, so the LP relaxation stands in.
    # (A limit that ends in "milp-bound" depends on the machine's speed, so it is not tested.)
    assert r.kind == "lp"
    assert r.primal is None
    assert r.value_bound == pytest.approx(relaxation.value_bound, abs=1e-6)
    run = simulating.simulate(s, "gpuroster")
    legality.check(s, run.grid)
    assert 0.0 < metrics.compute(s, run.grid).value <= r.value_bound + 1e-6

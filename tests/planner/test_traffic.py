"""The production-shaped families, and the services' plan against the static reservation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.planner import model, servicing, simulating, traffic, wrongforecasts


def test_the_same_seed_gives_the_same_instance() -> None:
    a = traffic.bursty(2, 123)
    b = traffic.bursty(2, 123)
    assert a == b
    assert traffic.daily(1, 5) == traffic.daily(1, 5)
    assert traffic.daily(1, 5) != traffic.daily(1, 6)


@pytest.mark.parametrize("bad", [0, -3])
def test_a_count_below_one_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="count must be >= 1"):
        traffic.bursty(bad)


def test_an_unknown_family_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown family 'weekly'"):
        traffic.family("weekly", 1, 0)


def test_bursty_traffic_looks_like_llm_serving_at_minute_shape() -> None:
    s = traffic.stats(traffic.bursty(20, 20000))
    assert s.one_gpu_share > 0.97
    assert 0.8 <= s.run_median_hours <= 1.3 and 2.0 <= s.run_p90_hours <= 3.2
    assert s.pods_per_day > 100
    assert 0.4 <= s.demand_cv <= 0.8
    assert 1.7 <= s.peak_over_mean <= 3.2
    assert 0.15 <= s.forecast_error_of_peak <= 0.35
    assert 0.2 <= s.under_share <= 0.5


def test_daily_traffic_looks_like_image_generation_at_hour_shape() -> None:
    s = traffic.stats(traffic.daily(20, 30000))
    assert s.one_gpu_share > 0.97
    assert 0.8 <= s.demand_cv <= 1.6
    assert 3.5 <= s.peak_over_mean <= 6.5
    assert 0.03 <= s.forecast_error_of_peak <= 0.2
    assert 0.1 <= s.under_share <= 0.4


def _held(run: simulating.Run, name: str) -> np.ndarray:
    return np.asarray((run.grid == run.names.index(name)).sum(axis=0))


def _check_never_over_the_reservation(s: model.Scenario) -> None:
    """At every step, each service holds at most its static reservation until demand was
    seen above it before that step (then at most 1.2 times the most seen: `headroom_cap`);
    so where demand stays within the reservation its GPU-steps are at most the
    reservation's, and batch work has at least the GPUs it would have beside the
    reservation, but for GPUs the services' demand took above it."""
    run = simulating.simulate(s, "gpuroster")
    T = s.duration_steps
    for v in s.services:
        reservation = max(v.forecast[:T])
        held = _held(run, v.name)
        for t in range(T):
            seen = max(v.demand[:t], default=0)
            top = reservation if seen <= reservation else math.ceil(1.2 * seen - 1e-9)
            assert held[t] <= top, (s.name, v.name, t, int(held[t]), top)
        if max(v.demand[:T]) <= reservation:
            assert int(held.sum()) <= reservation * T


@pytest.mark.parametrize("s", traffic.bursty(1, 20100, days=1) + traffic.daily(3, 30100),
                         ids=lambda s: s.name)
def test_services_never_hold_more_than_the_reservation_they_replace(s: model.Scenario) -> None:
    _check_never_over_the_reservation(s)


@pytest.mark.parametrize("s", wrongforecasts.family(5, 4100) + wrongforecasts.day_earlier(3, 4200),
                         ids=lambda s: s.name)
def test_nor_when_the_forecast_is_wrong_in_the_ways_operators_meet(s: model.Scenario) -> None:
    _check_never_over_the_reservation(s)


@settings(max_examples=6, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_the_ceiling_holds_for_any_seed(seed: int) -> None:
    s = traffic.daily(1, seed, days=1)[0]
    _check_never_over_the_reservation(s)


def _state(demand: list[int], forecast: list[int], ahead: list[int],
           reservation: int | None = 6) -> model.ServiceState:
    return model.ServiceState(
        name="svc", priority=5.0, max_swap=4, forecast=tuple(ahead),
        past_demand=tuple(demand), current_gpus=frozenset(), reservation=reservation,
        past_forecast=tuple(forecast))


def test_the_ceiling_is_the_reservation_until_demand_is_seen_above_it() -> None:
    assert servicing.ceiling(_state([1, 2, 3], [1, 2, 3], [3])) == 6
    assert servicing.ceiling(_state([1, 9, 3], [1, 2, 3], [3])) == 9
    assert servicing.ceiling(_state([1, 9, 3], [1, 2, 3], [3]), growth=1.2) == 11
    assert servicing.ceiling(_state([1], [1], [3], reservation=None)) is None


def test_a_forecast_right_at_every_step_is_not_covered() -> None:
    assert servicing.cover(_state([1, 2, 3], [1, 2, 3], [3, 2]), [3, 2], [1], 24, 0.995) is None


def test_cover_takes_the_worst_step_seen_and_keeps_the_night_empty() -> None:
    # Demand came at 1.5 times the forecast at its worst, never at night; a few dozen
    # GPU-steps, so the objective leaves no step short.
    demand = [0, 0, 3, 6, 3, 0, 0] * 4
    told = [0, 0, 2, 4, 2, 0, 0] * 4
    floor = servicing.cover(_state(demand, told, told), told, [1], 7, 0.995)
    assert floor is not None
    assert floor[0] == 0  # the envelope is empty there, and demand never came
    assert floor[3] == 6  # the worst step seen (6 where the forecast said 4), covered
    assert all(f >= d for f, d in zip(floor, demand[:len(floor)], strict=False))


def test_cover_with_little_history_assumes_the_forecast_may_run_under() -> None:
    # Only too high so far, and less than a day seen: the prior ratio stands.
    floor = servicing.cover(_state([1, 1], [2, 2], [2, 2]), [2, 2], [1], 24, 0.995)
    assert floor == [2 * 2 + 1, 2 * 2 + 1]
    # A day of a forecast that ran only high: covering the forecast is enough.
    floor = servicing.cover(_state([1] * 24, [2] * 24, [2, 2]), [2, 2], [1], 24, 0.995)
    assert floor is not None and max(floor) <= 2 + 1

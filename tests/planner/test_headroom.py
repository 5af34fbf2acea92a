"""Headroom over a service's forecast from its observed error, at its objective."""

from __future__ import annotations

import numpy as np
import pytest

from extender.planner import allocating, headroom, model, simulating, wrongforecasts

DAY = [2, 2, 3, 5, 8, 10, 10, 8, 5, 3, 2, 2]


def test_exact_forecasts_give_no_headroom() -> None:
    assert headroom.curve(DAY, DAY, DAY, 0.999) == [0] * len(DAY)


def test_no_history_gives_no_headroom() -> None:
    assert headroom.curve(DAY, [], [], 0.99) == [0] * len(DAY)


def test_a_forecast_too_high_gives_none_either() -> None:
    told = [x + 2 for x in DAY]
    assert headroom.curve(DAY, DAY, told, 0.99) == [0] * len(DAY)


def test_a_level_bias_gives_headroom_in_proportion_at_the_peak() -> None:
    demand = [round(x * 1.3) for x in DAY]
    room = headroom.curve(DAY, demand, DAY, 0.99)
    assert room[DAY.index(10)] == 3  # 30% of the peak
    assert 0 < room[0] <= 2  # at the trough, measured against the mean forecast
    assert all(r >= 0 for r in room)


def test_headroom_tightens_once_the_forecast_is_right_for_a_window() -> None:
    demand = [round(x * 1.4) for x in DAY] + DAY * 2
    told = DAY * 3
    assert max(headroom.curve(DAY, demand[:12], told[:12], 0.99, window=12)) > 0
    assert headroom.curve(DAY, demand, told, 0.99, window=12) == [0] * len(DAY)


def test_headroom_is_the_least_that_would_have_delivered_the_objective() -> None:
    demand = np.array([10.0, 10.0, 10.0, 10.0])
    told = np.array([10.0, 10.0, 10.0, 6.0])  # one step short by 4 of 40 GPU-steps
    unit = np.ones(4)
    assert headroom.smallest(demand, told, unit, demand - told, 0.9) == 0.0  # 36/40 already
    assert headroom.smallest(demand, told, unit, np.array([1.0, 2.0, 3.0, 4.0]), 0.95) == 2.0
    assert headroom.smallest(demand, told, unit, np.array([1.0, 4.0]), 0.99) == 4.0


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, float("nan"), True, "0.9"])
def test_objective_must_be_a_share(bad: object) -> None:
    with pytest.raises(ValueError, match="service level"):
        headroom.check_objective(bad)  # type: ignore[arg-type]


def _state(demand: list[int], told: list[int], level: float | None) -> model.ServiceState:
    return model.ServiceState("chat", 5.0, 4, tuple(DAY * 4), past_demand=tuple(demand),
                              past_forecast=tuple(told), current_gpus=frozenset(range(8, 10)),
                              service_level=level)


def test_the_plan_holds_headroom_where_demand_ran_above_forecast() -> None:
    over = [x + 2 for x in DAY]
    plain = allocating.service_curve(_state(DAY, DAY, 0.99), 12, 12, 12, 0.7)
    raised = allocating.service_curve(_state(over, DAY, 0.99), 12, 12, 12, 0.7)
    assert sum(raised) > sum(plain)
    assert all(a >= b for a, b in zip(raised, plain, strict=True))


def test_a_lower_objective_plans_no_more_headroom() -> None:
    demand = DAY[:6] + [x + 4 for x in DAY[6:]]
    low = allocating.service_curve(_state(demand, DAY, 0.5), 12, 12, 12, 0.7)
    high = allocating.service_curve(_state(demand, DAY, 0.99), 12, 12, 12, 0.7)
    assert sum(low) < sum(high)


def test_the_family_is_seeded_and_its_forecasts_are_wrong() -> None:
    a = wrongforecasts.family(10, seed=7)
    assert a == wrongforecasts.family(10, seed=7)
    assert {s.name.split("-")[1] for s in a} == set(wrongforecasts.KINDS)
    for s in a:
        assert s.cluster.gpus in wrongforecasts.SIZES
        assert any(v.demand != v.forecast for v in s.services), s.name
    with pytest.raises(ValueError, match="unknown kind"):
        wrongforecasts.instance(1, "sideways")
    longer = wrongforecasts.instance(7, "low", days=5)
    assert longer.duration_steps == 120 and len(longer.services[0].demand) >= 120
    with pytest.raises(ValueError, match="days"):
        wrongforecasts.instance(7, "low", days=0)


def test_headroom_keeps_the_service_level_on_a_level_bias() -> None:
    s = wrongforecasts.instance(2510, "low")
    from extender.planner import metrics
    fifo = metrics.compute(s, simulating.simulate(s, "fifo").grid)
    ours = metrics.compute(s, simulating.simulate(s, "gpuroster").grid)
    assert ours.realtime_service_level >= fifo.realtime_service_level
    assert ours.value >= fifo.value

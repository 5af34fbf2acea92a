"""Forecasting: the weekly profile beats same-hour-yesterday, level shifts are absorbed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from extender.planner import forecasting

SPD = 24


def diurnal_weekly(
    days: int,
    *,
    peak: float = 40.0,
    swing: float = 10.0,
    weekend: float = 4.5,
    noise: float = 0.05,
    seed: int = 0,
    spd: int = SPD,
) -> list[float]:
    """A coding-assistant-like curve: `swing`x peak/trough on weekdays, weekend peaks lower."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(days * spd):
        day, hour = divmod(t, spd)
        shape = 0.5 - 0.5 * math.cos(2 * math.pi * (hour / spd - 4 / 24))  # trough at 04:00
        lo = peak / swing
        v = lo + (peak - lo) * shape
        if day % 7 >= 5:
            v /= weekend
        out.append(max(0.0, v * (1 + noise * rng.standard_normal())))
    return out


def test_profile_beats_naive_on_a_weekly_pattern() -> None:
    h = diurnal_weekly(35)
    ev = forecasting.evaluate(h, holdout_steps=7 * SPD)
    # Naive misses both weekday->weekend transitions by a wide margin.
    assert ev.profile_mae < 0.6 * ev.naive_mae
    assert ev.profile_wape < ev.naive_wape
    assert abs(ev.profile_peak_error) < abs(ev.naive_peak_error)
    assert ev.upper_coverage >= ev.profile_coverage
    assert ev.upper_coverage >= 0.75


def test_forecast_follows_the_weekly_shape() -> None:
    h = diurnal_weekly(28, noise=0.0)
    f = forecasting.forecast(h, 7 * SPD)
    assert f.profile == "weekly"
    assert len(f.values) == 7 * SPD
    # Exact repetition: the forecast is the curve itself, to rounding.
    assert max(abs(v - a) for v, a in zip(f.values, h[: 7 * SPD], strict=True)) <= 1
    assert f.level == pytest.approx(1.0)


def test_level_shift_is_recalibrated() -> None:
    h = diurnal_weekly(28, noise=0.0)
    shifted = h[:-12] + [v * 1.5 for v in h[-12:]]  # demand up 50% for the last half day
    f = forecasting.forecast(shifted, SPD, recent_steps=6)
    plain = forecasting.forecast(h, SPD, recent_steps=6)
    assert f.level == pytest.approx(1.5, rel=0.05)
    assert f.raw[0] == pytest.approx(1.5 * plain.raw[0], rel=0.05)
    # The correction decays with lead time but is still there a few hours out.
    gain = [a / b for a, b in zip(f.raw, plain.raw, strict=True)]
    assert gain[0] > gain[12] > 1.0


def test_recalibration_reduces_error_after_a_shift() -> None:
    base = diurnal_weekly(35, noise=0.02, seed=3)
    shifted = base[: 28 * SPD] + [v * 1.4 for v in base[28 * SPD :]]
    with_level = forecasting.forecast(shifted[:-SPD], 6)
    without = forecasting.forecast(shifted[:-SPD], 6, recalibrate=False)
    actual = shifted[-SPD : -SPD + 6]
    err_with = sum(abs(a - b) for a, b in zip(with_level.raw, actual, strict=True))
    err_without = sum(abs(a - b) for a, b in zip(without.raw, actual, strict=True))
    assert without.level == 1.0
    assert err_with < 0.5 * err_without


@pytest.mark.parametrize(
    ("steps", "kind"),
    [(1, "flat"), (5, "flat"), (SPD, "daily"), (3 * SPD, "daily"), (7 * SPD, "weekly")],
    ids=["one-step", "hours", "one-day", "three-days", "one-week"],
)
def test_short_history_works(steps: int, kind: str) -> None:
    h = diurnal_weekly(8, noise=0.0)[:steps]
    f = forecasting.forecast(h, 30)
    assert f.profile == kind
    assert len(f.values) == len(f.upper) == 30
    assert all(v >= 0 for v in f.values)
    assert all(u >= v for u, v in zip(f.upper, f.values, strict=True))


def test_daily_profile_with_three_days() -> None:
    h = diurnal_weekly(3, noise=0.0)
    f = forecasting.forecast(h, SPD)
    assert max(abs(v - a) for v, a in zip(f.values, h[-SPD:], strict=True)) <= 1


def test_half_hour_steps() -> None:
    h = diurnal_weekly(21, noise=0.03, spd=48)
    ev = forecasting.evaluate(h, holdout_steps=4 * 48, steps_per_day=48)
    assert ev.profile_mae < ev.naive_mae


def test_zero_demand_is_fine() -> None:
    f = forecasting.forecast([0.0] * 200, 10)
    assert f.values == (0,) * 10
    ev = forecasting.evaluate([0.0] * 200, holdout_steps=24)
    assert ev.profile_mae == 0.0 and ev.profile_wape == 0.0


@pytest.mark.parametrize(
    ("history", "kwargs", "message"),
    [
        ([], {"horizon": 3}, "history is empty"),
        ([1, -2, 3], {"horizon": 3}, r"history\[1\] is -2"),
        ([1, float("nan")], {"horizon": 3}, r"history\[1\] is nan"),
        (["a"], {"horizon": 3}, "sequence of numbers"),
        ([1, 2], {"horizon": 0}, "horizon must be an integer >= 1"),
        ([1, 2], {"horizon": 2, "steps_per_day": 0}, "steps_per_day"),
        ([1, 2], {"horizon": 2, "quantile": 1.5}, "quantile"),
    ],
    ids=["empty", "negative", "nan", "not-numbers", "zero-horizon", "zero-spd", "quantile"],
)
def test_bad_input_is_rejected(
    history: list[object], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        forecasting.forecast(history, **kwargs)  # type: ignore[arg-type]


def test_evaluate_needs_a_day_before_the_holdout() -> None:
    with pytest.raises(ValueError, match="fewer than one day"):
        forecasting.evaluate([1.0] * 30, holdout_steps=10)


def test_replay_is_what_the_forecaster_said_one_step_ahead_from_the_data_before() -> None:
    day = [1.0] * 6 + [4.0] * 12 + [1.0] * 6
    history = day * 7 + [x * 2 for x in day]
    said = forecasting.replay(history, 24)
    assert len(said) == 24
    for k, t in enumerate(range(len(history) - 24, len(history))):
        assert said[k] == pytest.approx(forecasting.forecast(history[:t], 1).raw[0])
    assert forecasting.replay(day * 7, 24) == pytest.approx(day)  # a repeating week: exact
    assert forecasting.replay([3.0], 5) == ()
    with pytest.raises(ValueError, match="steps"):
        forecasting.replay(day, 0)

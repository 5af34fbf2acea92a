"""Headroom over a service's forecast from its observed error, at its objective."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from extender.planner import allocating, headroom, model, servicing, simulating, wrongforecasts

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
    # Plain lists, as curve() passes them (smallest takes sequences of floats).
    demand = [10.0, 10.0, 10.0, 10.0]
    told = [10.0, 10.0, 10.0, 6.0]  # one step short by 4 of 40 GPU-steps
    unit = [1.0] * 4
    short = [d - t for d, t in zip(demand, told, strict=True)]
    assert headroom.smallest(demand, told, unit, short, 0.9) == 0.0  # 36/40 already
    assert headroom.smallest(demand, told, unit, [1.0, 2.0, 3.0, 4.0], 0.95) == 2.0
    assert headroom.smallest(demand, told, unit, [1.0, 4.0], 0.99) == 4.0


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
    plain = servicing.service_curve(_state(DAY, DAY, 0.99), 12, 12, 12, 0.7)
    raised = servicing.service_curve(_state(over, DAY, 0.99), 12, 12, 12, 0.7)
    assert sum(raised) > sum(plain)
    assert all(a >= b for a, b in zip(raised, plain, strict=True))


def test_a_lower_objective_plans_no_more_headroom() -> None:
    demand = DAY[:6] + [x + 4 for x in DAY[6:]]
    low = servicing.service_curve(_state(demand, DAY, 0.5), 12, 12, 12, 0.7)
    high = servicing.service_curve(_state(demand, DAY, 0.99), 12, 12, 12, 0.7)
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


def test_both_families_take_the_jobs_shape_of_real_pod_logs() -> None:
    shape = wrongforecasts.Jobs("trace", estimate_error=0.5, burst=0.5)
    plain = wrongforecasts.day_earlier(4, seed=11)
    # The default shape is the one the families always had: same scenarios, same names.
    assert plain == wrongforecasts.day_earlier(4, seed=11, jobs=wrongforecasts.Jobs())
    for made in (wrongforecasts.day_earlier(4, seed=11, jobs=shape),
                 wrongforecasts.family(5, seed=7, jobs=shape)):
        jobs = [j for s in made for j in s.jobs]
        assert all(s.name.endswith("-trace-est0.5-burst0.5") for s in made)
        assert sum(j.gpus == 1 for j in jobs) > 0.8 * len(jobs)
        assert sum(j.estimate_steps != j.duration_steps for j in jobs) > 0.5 * len(jobs)
    assert all(j.estimate_steps == j.duration_steps for s in plain for j in s.jobs)
    for bad in ({"mix": "alibaba"}, {"estimate_error": -0.1}, {"burst": float("nan")}):
        with pytest.raises(ValueError, match="mix|estimate_error|burst"):
            wrongforecasts.Jobs(**bad)


def test_the_day_earlier_family_forecasts_each_step_with_the_demand_a_day_before() -> None:
    a = wrongforecasts.day_earlier(6, seed=11)
    assert a == wrongforecasts.day_earlier(6, seed=11)
    assert a != wrongforecasts.day_earlier(6, seed=12)
    for s in a:
        spd = s.steps_per_day
        for v in s.services:
            n = len(v.forecast)
            assert v.forecast[spd:n] == v.demand[:n - spd], s.name
            assert v.demand != v.forecast
            assert all(0 <= x <= s.cluster.gpus for x in v.demand + v.forecast)
    with pytest.raises(ValueError, match="count"):
        wrongforecasts.day_earlier(0)
    with pytest.raises(ValueError, match="days"):
        wrongforecasts.day_earlier(3, days=0)


def test_the_day_earlier_family_can_be_held_to_one_size() -> None:
    drawn = wrongforecasts.day_earlier(12, seed=11)
    eight = wrongforecasts.day_earlier(12, seed=11, gpus=8)
    assert all(s.cluster.gpus == 8 and "-8g-" in s.name for s in eight)
    assert {s.cluster.gpus for s in drawn} != {8}  # the draw alone gives other sizes too
    # Where the draw was 8 GPUs anyway, the instance is the one drawn (later draws unmoved).
    assert [a for a in drawn if a.cluster.gpus == 8] == [
        b for a, b in zip(drawn, eight, strict=True) if a.cluster.gpus == 8]
    with pytest.raises(ValueError, match="gpus must be one of 8, 16, 32"):
        wrongforecasts.day_earlier(2, gpus=12)


def test_headroom_keeps_the_service_level_on_a_level_bias() -> None:
    s = wrongforecasts.instance(2510, "low")
    from extender.planner import metrics
    fifo = metrics.compute(s, simulating.simulate(s, "fifo").grid)
    ours = metrics.compute(s, simulating.simulate(s, "gpuroster").grid)
    assert ours.realtime_service_level >= fifo.realtime_service_level
    assert ours.value >= fifo.value


# --- before a service has history: its forecast's own jitter stands in for it ---


def test_a_smooth_forecast_stands_in_for_nothing() -> None:
    # A model's forecast (monotone runs, plateaus, a peak of one step or two): no zigzag,
    # so no stand-in history and no headroom of it.
    # A pattern shorter than a day written out again and again turns where one copy meets
    # the next: not noise either.
    for smooth in (DAY * 2, [0, 0, 1, 2, 4, 4, 2, 1, 0, 0] * 2, [3] * 12, [2, 4, 6, 2, 2] * 5,
                   [1, 5, 5, 2, 2, 6] * 8, [1, 2, 3] * 16, [2, 4] * 24):
        assert not headroom.copied(smooth, 24, 12), smooth
    jittery = [1, 5, 1, 5] * 6
    assert headroom.jitter(jittery, 0, 12) == ([], [])  # off
    assert headroom.jitter(jittery, 2, 0) == ([], [])  # a day seen: none wanted


def test_a_copy_at_a_few_gpus_is_read_by_its_single_step_turns() -> None:
    # Yesterday's demand at one to three GPUs: it never zigzags, but it goes a GPU up and
    # back three times (steps 2, 12 and 18): a copy. A model's curve turns at a single
    # step twice (its peak and its trough): not one.
    told = [1, 1, 2, 1, 1, 1, 0, 0, 1, 1, 2, 2, 3, 2, 2, 2, 1, 1, 2, 1, 1, 0, 0, 0]
    assert headroom.copied(told, 24, 12)
    assert not headroom.copied([0, 1, 2, 3, 2, 1, 1, 1, 1, 1, 1, 1] * 2, 24, 12)
    assert not headroom.copied([1, 0, 1, 1, 2, 3, 4, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
                                1, 1, 1, 1, 1, 1], 24, 12)


def test_a_jittery_forecast_stands_in_with_its_noise_over_its_level() -> None:
    # Yesterday's demand copied as today's forecast: a burst of two steps and noise that
    # zigzags over a level of 4. Against its median over two steps each side, the burst and
    # the jumps are the error, x sqrt(2) (today's noise less yesterday's); where it is
    # flat, none.
    told = [4, 5, 4, 5, 4, 4, 4, 8, 8, 4, 4, 3, 4, 4]
    assert headroom.copied(told, 28, 14)
    demand, level = headroom.jitter(told, 2, 14)
    assert level == [4] * 14
    assert demand == [4, 5, 4, 5, 4, 4, 4, 10, 10, 4, 4, 3, 4, 4]
    room = headroom.curve([4] * 14, demand, level, 0.99)
    assert room == [6] * 14  # the burst, 2 x 6 of 69 GPU-steps, is more than 1% of them
    # The first steps only, their level read with the steps after them in view.
    assert headroom.jitter(told, 2, 4) == ([4, 5, 4, 5], [4, 4, 4, 4])
    assert headroom.jitter(told, 2, 1) == ([4], [4])


def _fresh(told: list[int]) -> model.ServiceState:
    return model.ServiceState("chat", 5.0, 8, tuple(told * 2), service_level=0.99)


def test_until_the_copys_days_are_seen_the_stand_in_tops_up_the_history() -> None:
    jittery = [4, 5, 4, 5, 4, 4, 4, 8, 8, 4, 4, 3] + [4, 4, 5, 4, 5, 4, 3, 4, 4, 9, 9, 4]
    told = jittery * 2
    fresh = servicing.service_room(_fresh(jittery), told, 0.99, 24, stand_in=2)
    assert min(fresh) > 0
    assert servicing.service_room(_fresh(jittery), told, 0.99, 24) == [0] * 48  # off
    smooth = DAY * 2
    assert servicing.service_room(_fresh(smooth), smooth * 2, 0.99, 24, stand_in=2) == [0] * 48
    # Days of its own history, the forecast right all day: the stand-in still counts
    # (a day or three of draws is too few to size a 0.99 objective on), beside the days
    # that had no error; `COPY_WINDOWS` days: the stand-in is gone.
    def seen(days: int) -> model.ServiceState:
        return replace(_fresh(jittery), past_demand=tuple(jittery * days),
                       past_forecast=tuple(jittery * days))

    assert servicing.COPY_WINDOWS == 4
    one = servicing.service_room(seen(1), told, 0.99, 24, stand_in=2)
    assert min(one) > 0 and max(one) <= max(fresh)
    three = servicing.service_room(seen(3), told, 0.99, 24, stand_in=2)
    assert min(three) > 0
    assert servicing.service_room(seen(4), told, 0.99, 24, stand_in=2) == [0] * 48


def test_a_copy_remembers_four_days_of_error_a_models_forecast_one() -> None:
    # Five days of history whose only miss, a burst of 3 GPUs for two steps, came
    # between three and four days ago. A forecast that copies past demand (it zigzags)
    # still holds headroom for it; a model's forecast (it rises and falls) has
    # forgotten it, and so has the copy with the stand-in (and its window) turned off.
    jittery = [4, 5, 4, 5, 4, 4, 4, 8, 8, 4, 4, 3] + [4, 4, 5, 4, 5, 4, 3, 4, 4, 9, 9, 4]
    smooth = DAY * 2
    for told, copy in ((jittery, True), (smooth, False)):
        demand = list(told * 5)
        demand[30:32] = [x + 3 for x in demand[30:32]]  # 90 and 89 steps before now
        v = replace(_fresh(told), past_demand=tuple(demand), past_forecast=tuple(told * 5))
        on = servicing.service_room(v, told * 2, 0.99, 24, stand_in=2)
        assert (max(on) > 0) == copy, (copy, on)
        assert servicing.service_room(v, told * 2, 0.99, 24) == [0] * 48
        # A day later (the burst 114 steps back), the copy has forgotten it too.
        older = replace(v, past_demand=tuple(demand + list(told)),
                        past_forecast=tuple(told * 6))
        assert servicing.service_room(older, told * 2, 0.99, 24, stand_in=2) == [0] * 48


def test_a_curve_repeated_and_continued_flat_stands_in_for_nothing() -> None:
    # The controller writes an explicit curve of a few steps out over two horizons; the
    # plan continues it past that, flat where a day is longer than what it was told. The
    # turn where the copies meet the flat tail is not noise: no headroom over the
    # timing tolerance's.
    # (The pattern itself turns up, down, up where one copy meets the next, at any phase.)
    curve = [1, 5, 5, 2, 2, 6]
    for phase in range(6):
        v = model.ServiceState("chat", 5.0, 2, tuple(curve[(phase + k) % 6] for k in range(48)))
        told = servicing.forecast_curve(v, 200, 43200)
        on = servicing.service_room(v, told, 0.99, 43200, 3, 43200, 1.0, stand_in=3600)
        assert on == servicing.service_room(v, told, 0.99, 43200, 3, 43200, 1.0), phase


def test_the_stand_in_costs_nothing_on_the_exact_forecast_files() -> None:
    from extender import scenarios

    for name in scenarios.builtin_names():
        s = scenarios.load(scenarios.builtin_dir() / f"{name}.yaml")
        if name == "forecast-error":
            continue  # its forecast is wrong on purpose (and jitters on day 2)
        on = simulating.simulate(s, allocating.Gpuroster()).grid
        off = simulating.simulate(s, allocating.Gpuroster(stand_in_hours=0.0)).grid
        assert (on == off).all(), name


# --- the peak's timing: a forecast dilated until the demand shows when the peak comes ---


def test_dilate_holds_the_most_of_each_step_and_its_neighbours() -> None:
    assert headroom.dilate([0, 0, 4, 0, 0], 1) == [0, 4, 4, 4, 0]
    assert headroom.dilate([0, 0, 4, 0, 0], 0) == [0, 0, 4, 0, 0]
    # the steps before the curve (the past forecast) reach into its first k steps
    assert headroom.dilate([0, 0, 0], 2, before=[5, 1]) == [5, 1, 0]


def test_span_is_the_tolerance_until_a_swing_of_the_forecast_was_seen() -> None:
    flat = [2] * 6  # night: the forecast has not moved, nothing says when the peak comes
    assert headroom.span(flat, flat, DAY, tolerance=3, window=24) == (3, 3)
    assert headroom.span([], [], DAY, tolerance=3, window=24) == (3, 3)
    assert headroom.span(DAY, DAY, DAY, tolerance=0, window=24) == (0, 0)


def test_span_widens_only_on_the_side_the_peak_was_seen_to_move() -> None:
    told = DAY * 2
    early = DAY[2:] + DAY + DAY[:2]
    late = DAY[-1:] + DAY + DAY[:-1]
    flat = [2] * 6
    assert headroom.span(flat, flat, DAY, tolerance=3, window=24) == (3, 3)  # not known yet
    assert headroom.span(told[:12], told[:12], told[12:], tolerance=3, window=24) == (0, 0)
    assert headroom.span(early[:12], told[:12], told[12:], tolerance=3, window=24) == (2, 0)
    assert headroom.span(late[:12], told[:12], told[12:], tolerance=3, window=24) == (0, 1)


@pytest.mark.parametrize("seed", range(5))
def test_dilate_is_the_most_over_each_window(seed: int) -> None:
    rng = np.random.default_rng(seed)
    curve = [int(x) for x in rng.integers(0, 9, size=int(rng.integers(1, 40)))]
    before = [int(x) for x in rng.integers(0, 9, size=int(rng.integers(0, 5)))]
    for early in range(5):
        for late in range(5):
            head = before[len(before) - late:] if before and late else []
            ext = [curve[0]] * (late - len(head)) + head + curve + [curve[-1]] * early
            want = [max(ext[i : i + late + early + 1]) for i in range(len(curve))]
            assert headroom.dilate(curve, early, before, late) == want, (early, late)


def test_dilate_one_sided() -> None:
    # early by 1 only: a step holds itself and the next; late by 1 only: itself and the last
    assert headroom.dilate([0, 0, 4, 0, 0], 1, late=0) == [0, 4, 4, 0, 0]
    assert headroom.dilate([0, 0, 4, 0, 0], 0, late=1) == [0, 0, 4, 4, 0]
    assert headroom.dilate([0, 0, 0], 0, before=[5, 1], late=2) == [5, 1, 0]


def _early_peak(shift_hours: float | None) -> tuple[model.Scenario, np.ndarray]:
    """8 GPUs, a service whose forecast peak (6 GPUs at hours 8-11) comes 3 hours early,
    and a long 4-GPU job queued at step 0: lent out at once, it holds the GPUs the early
    peak needs."""
    told = [1] * 8 + [6] * 4 + [1] * 12
    true = [1] * 5 + [6] * 4 + [1] * 15
    s = model.Scenario(
        "early-peak", "", model.Cluster(1, 8), 60, 24, 24,
        (model.Job("long", "training", 4, 20, 20, 0, 1.0),),
        (model.Service("chat", 4.0, 8, tuple(true), tuple(told), 0.99),),
    )
    policy = (allocating.Gpuroster() if shift_hours is None
              else allocating.Gpuroster(shift_hours=shift_hours))
    run = simulating.simulate(s, policy)
    return s, run.grid


def test_a_timing_tolerance_keeps_a_long_job_off_the_gpus_an_early_peak_needs() -> None:
    for hours, short in ((0.0, True), (3.0, False), (None, False)):  # None: the default
        s, grid = _early_peak(hours)
        chat = len(s.jobs)  # the service's index in the grid
        held = [int((grid[:, t] == chat).sum()) for t in range(s.duration_steps)]
        missed = sum(max(0, d - h) for d, h in zip(s.services[0].demand, held, strict=True))
        assert (missed > 0) == short, (hours, held)


def test_before_its_first_forecast_a_late_peak_is_the_daily_pattern_continued_back() -> None:
    # Step 0 of a service's life, its forecast's peak in the last hours of the day (just
    # before step 0 by the daily pattern): a peak 3 hours late is still on at step 0, so
    # the plan holds it there, not the forecast's trough.
    day = [2] * 21 + [8] * 3
    told = day * 2
    v = model.ServiceState(name="chat", priority=5.0, max_swap=8, forecast=tuple(told))
    room = servicing.service_room(v, told, 0.99, 24, tolerance=3, timing_window=24)
    assert [told[k] + room[k] for k in range(4)] == [8, 8, 8, 2]
    # With no tolerance, nothing over the forecast.
    assert servicing.service_room(v, told, 0.99, 24)[:4] == [0, 0, 0, 0]


def test_the_default_tolerance_is_three_hours() -> None:
    # The family's shifted peaks come 1-3 hours early or late, as a forecast of the same
    # hours a day or a week earlier does: the default covers that range.
    assert allocating.Options().shift_hours == 3.0


def _spare_input(demand: list[int], told: list[int], queued: tuple[model.QueuedJob, ...] = (),
                 running: tuple[model.RunningJob, ...] = ()) -> model.PlanInput:
    """Two nodes of 4 GPUs, a service holding 2 of them (swap cap 4), its forecast 2 now
    and 4 later, at step 12."""
    v = model.ServiceState("chat", 5.0, 4, tuple([2] * 6 + [4] * 6 + [2] * 36),
                           past_demand=tuple(demand), past_forecast=tuple(told),
                           current_gpus=frozenset({6, 7}), service_level=0.99)
    return model.PlanInput(len(demand), model.Cluster(2, 4), 12, queued, running, (v,),
                           frozenset(), 12)


OVER = [2] * 11 + [3]  # one step over its forecast: some headroom, and spares


def test_a_service_whose_forecast_held_gets_no_spare_gpus() -> None:
    plan = allocating.Gpuroster().plan(_spare_input([2] * 12, [2] * 12))
    assert plan.service_gpus["chat"] == frozenset({6, 7})


def test_a_service_whose_demand_ran_over_gets_idle_gpus_up_to_its_peak_within_its_cap() -> None:
    inp = _spare_input(OVER, [2] * 12)
    curve = servicing.service_curve(inp.services[0], 12, 24, 12, 0.7)
    got = allocating.Gpuroster().plan(inp).service_gpus["chat"]
    assert len(got) > curve[0]  # more than its curve: GPUs nobody uses now
    assert len(got) <= max(curve[:12])  # never past its own peak over the horizon
    assert len(got ^ {6, 7}) <= 4  # the swap cap
    off = allocating.Gpuroster(spare_fill=False).plan(inp)
    assert len(off.service_gpus["chat"]) == curve[0]


def test_spare_gpus_make_way_for_a_planned_job_in_time() -> None:
    busy = model.RunningJob("train", 2, model.Block(0, 2), 0, 13, 1.0)
    nxt = model.QueuedJob("next", 4, 3, 12, 3.0)
    starts = {}
    for spare in (True, False):
        planner = allocating.Gpuroster(spare_fill=spare)
        plan = planner.plan(_spare_input(OVER, [2] * 12, (nxt,), (busy,)))
        assert plan.planned_start["next"] == 14  # GPUs 2-3 free now, 0-1 after `busy`
        held = plan.service_gpus["chat"]
        assert bool(held & {2, 3}) == spare  # a spare on GPUs the job wants in two steps
        # Next step `busy` is gone: the service is off the job's block by the step it starts.
        v = replace(_spare_input(OVER + [3], [2] * 13).services[0], current_gpus=held)
        after = planner.plan(model.PlanInput(13, model.Cluster(2, 4), 12, (nxt,), (), (v,),
                                             frozenset(), 12))
        block = set(after.planned_block["next"].gpus())
        assert not after.service_gpus["chat"] & block, (spare, after.service_gpus, block)
        starts[spare] = after.planned_start["next"]
    assert starts[True] == starts[False]


@pytest.mark.parametrize("seed", range(20))
def test_the_running_median_and_the_period_are_their_plain_definitions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(50):
        f = [int(x) for x in rng.integers(0, 6, int(rng.integers(0, 40)))]
        half = int(rng.integers(0, 8))
        plain = []
        for i in range(len(f)):
            h = min(half, i, len(f) - 1 - i)
            plain.append(sorted(f[i - h:i + h + 1])[h])
        assert headroom._median(f, half) == plain
        g = f[:int(rng.integers(1, 7))] * int(rng.integers(1, 5)) + f[:int(rng.integers(0, 3))]
        for h_ in (f, g):
            n = len(h_)
            assert headroom._period(h_) == next(
                (p for p in range(1, n // 2 + 1) if h_[p:] == h_[:n - p]), n)


def test_one_services_headroom_never_takes_the_gpus_anothers_forecast_needs() -> None:
    """A job holds half of 8 GPUs; of the other 4, "alpha" (placed first: same priority,
    its name sorts first) wants its forecast of 2 and headroom for a day above it, "beta"
    (new, no GPUs yet) its forecast of 2: the headroom gives way, not beta's forecast."""
    job = model.RunningJob("train", 4, model.Block(0, 4), 0, 48, 9.0)
    alpha = model.ServiceState("alpha", 5.0, 4, tuple([2] * 48), past_demand=(4,) * 24,
                               past_forecast=(2,) * 24, current_gpus=frozenset({4, 5}))
    beta = model.ServiceState("beta", 5.0, 4, tuple([2] * 48), past_demand=(2,) * 24,
                              past_forecast=(2,) * 24)
    inp = model.PlanInput(24, model.Cluster(2, 4), 24, (), (job,), (alpha, beta), frozenset(),
                          24)
    assert servicing.service_curve(alpha, 24, 24, 24, 0.7)[0] > 2  # alpha has headroom
    plan = allocating.Gpuroster().plan(inp)
    assert len(plan.service_gpus["beta"]) == 2
    assert len(plan.service_gpus["alpha"]) == 2
    assert plan.headroom == {"alpha": 0, "beta": 0}  # the gauge: none left to alpha
    # With room for both, alpha keeps its headroom, and the plan reports it.
    roomy = allocating.Gpuroster().plan(replace(inp, running=()))
    assert len(roomy.service_gpus["alpha"]) > 2 and len(roomy.service_gpus["beta"]) == 2
    assert 0 < roomy.headroom["alpha"] <= len(roomy.service_gpus["alpha"]) - 2


def test_services_sharing_a_node_give_way_to_each_others_forecast_there() -> None:
    """Node 0 (GPUs 0-3) is the only one "alpha" and "beta" may use, node 1 sits idle:
    alpha (placed first) wants its forecast of 2 and headroom above it, beta its forecast
    of 2. Over the cluster there is room for both; on their node there is not, so alpha's
    headroom gives way there."""
    alpha = model.ServiceState("alpha", 5.0, 4, tuple([2] * 48), past_demand=(4,) * 24,
                               past_forecast=(2,) * 24, current_gpus=frozenset({2, 3}),
                               nodes=frozenset({0}))
    beta = model.ServiceState("beta", 5.0, 4, tuple([2] * 48), past_demand=(2,) * 24,
                              past_forecast=(2,) * 24, nodes=frozenset({0}))
    inp = model.PlanInput(24, model.Cluster(2, 4), 24, (), (), (alpha, beta), frozenset(), 24)
    assert servicing.service_curve(alpha, 24, 24, 24, 0.7)[0] > 2  # alpha has headroom
    plan = allocating.Gpuroster().plan(inp)
    assert plan.service_gpus["beta"] == frozenset({0, 1})
    assert plan.service_gpus["alpha"] == frozenset({2, 3})
    assert plan.headroom == {"alpha": 0, "beta": 0}
    # Free to use node 1 too, alpha keeps its headroom there.
    free = allocating.Gpuroster().plan(replace(inp, services=(
        replace(alpha, nodes=None), beta)))
    assert len(free.service_gpus["alpha"]) > 2 and len(free.service_gpus["beta"]) == 2


def test_headroom_is_capped_by_the_larger_of_the_forecast_peak_and_the_demand_peak() -> None:
    # A forecast that is the day's demand with noise on every step: its one burst of
    # error (demand 8 where 2 was told) sizes 6 GPUs of headroom at every step, more than
    # the day ever needed (demand's peak 10, the forecast's 10).
    told = [2, 2, 3, 5, 8, 10, 10, 8, 5, 3, 2, 2] * 2
    demand = list(told)
    demand[1] = 8
    v = model.ServiceState("chat", 5.0, 8, tuple(told * 2), service_level=0.99,
                           past_demand=tuple(demand), past_forecast=tuple(told))
    free = servicing.service_room(v, told * 2, 0.99, 24)
    assert max(a + r for a, r in zip(told * 2, free, strict=True)) == 16  # the peak + 6
    capped = servicing.service_room(v, told * 2, 0.99, 24, cap=1.2)
    assert max(a + r for a, r in zip(told * 2, capped, strict=True)) == 12  # 1.2 x 10
    assert capped[1] == free[1] > 0  # the troughs keep theirs
    assert all(0 <= c <= f for c, f in zip(capped, free, strict=True))
    # Demand seen above the forecast's peak raises the cap with it: a forecast 40% low
    # all day keeps the headroom that covers it.
    low = [round(x * 0.6) for x in told]
    v = replace(v, forecast=tuple(low * 2), past_demand=tuple(told), past_forecast=tuple(low))
    assert (servicing.service_room(v, low * 2, 0.99, 24, cap=1.2)
            == servicing.service_room(v, low * 2, 0.99, 24))
    assert allocating.Options().headroom_cap == 1.2


def test_while_the_stand_in_fills_the_window_the_cap_counts_real_demand_and_reservation() -> None:
    # A fresh service told a copy (it zigzags) whose burst is 9: the stand-in's draws reach
    # 4 + sqrt(2) x 5 = 11, but no demand did. The cap is 1.2 x the forecast's 9 (11 GPUs),
    # or 1.2 x the operator's static reservation, or the real demand seen, where that is
    # more (12 at 10); never 1.2 x the stand-in's 11 (14).
    jittery = [4, 5, 4, 5, 4, 4, 4, 8, 8, 4, 4, 3] + [4, 4, 5, 4, 5, 4, 3, 4, 4, 9, 9, 4]
    told = jittery * 2
    assert max(headroom.jitter(told, 2, 96)[0]) == 11

    def most(v: model.ServiceState, cap: float) -> int:
        room = servicing.service_room(v, told, 0.99, 24, stand_in=2, cap=cap)
        return max(a + r for a, r in zip(told, room, strict=True))

    fresh = _fresh(jittery)
    assert most(fresh, 0.0) == 16
    assert most(fresh, 1.2) == 11
    assert most(replace(fresh, reservation=10), 1.2) == 12
    assert most(replace(fresh, past_demand=(4, 10, 4), past_forecast=(4, 5, 4)), 1.2) == 12


def test_a_service_placed_before_one_that_sheds_gets_the_gpu_it_gave_back() -> None:
    """A job holds GPUs 0-1 of 4; "beta" holds 2-3 and its forecast falls to 1; "alpha"
    (placed first: same priority, its name sorts first) has none and wants 1. The GPU beta
    sheds goes to alpha this step, not to idle."""
    busy = model.RunningJob("train", 2, model.Block(0, 2), 0, 40, 1.0)

    def svc(name: str, held: set[int]) -> model.ServiceState:
        return model.ServiceState(name, 8.0, 2, tuple([1] * 24), past_demand=(1,) * 5,
                                  past_forecast=(1,) * 5, current_gpus=frozenset(held))

    inp = model.PlanInput(5, model.Cluster(1, 4), 12, (), (busy,),
                          (svc("alpha", set()), svc("beta", {2, 3})))
    plan = allocating.Gpuroster().plan(inp)
    assert (len(plan.service_gpus["alpha"]), len(plan.service_gpus["beta"])) == (1, 1)
    assert not plan.service_gpus["alpha"] & plan.service_gpus["beta"]


def _recorded(demand: list[int], held: list[int], reservation: int | None = 4,
              told: int = 2) -> model.ServiceState:
    return model.ServiceState("chat", 5.0, 8, (told,) * 48, past_demand=tuple(demand),
                              past_forecast=(told,) * len(demand), reservation=reservation,
                              past_held=tuple(held), service_level=0.99)


def test_the_lead_over_a_static_reservation_is_its_shortfall_less_the_services() -> None:
    # Demand 6 at two steps of 20 GPU-steps: a reservation of 4 leaves 2 + 2 short; the
    # service held 6 at one and 5 at the other (1 short): 3 of 20 ahead.
    v = _recorded([2, 6, 2, 6, 2, 2], [2, 6, 2, 5, 2, 2])
    assert servicing.reservation_lead(v) == pytest.approx(3 / 20)
    # Behind: it held its forecast of 2 where the reservation's 4 covered demand of 4.
    assert servicing.reservation_lead(_recorded([4, 2], [2, 2])) == pytest.approx(-2 / 6)
    # Paired from the end: a record shorter than the demand counts the steps it covers.
    assert servicing.reservation_lead(_recorded([9, 9, 6, 2], [6, 2])) == pytest.approx(2 / 8)
    for none in (_recorded([2, 6], []), _recorded([2, 6], [2, 6], reservation=None),
                 _recorded([0, 0], [0, 0])):
        assert servicing.reservation_lead(none) is None


def test_the_leads_read_once_are_kept_and_the_rest_read() -> None:
    ahead = _recorded([2, 6, 2, 6, 2, 2], [2, 6, 2, 5, 2, 2])  # 3 of 20 ahead
    other = replace(ahead, name="batch-chat")
    leads = servicing.reservation_leads((ahead, other), {"chat": -1.0})
    assert leads == {"chat": -1.0, "batch-chat": pytest.approx(3 / 20)}
    assert servicing.reservation_leads((ahead,)) == {"chat": pytest.approx(3 / 20)}


def _held(v: model.ServiceState, forecast: list[int], room: list[int], lead: float,
          window: int) -> list[int]:
    return servicing.held_to_reservation(v, forecast, room, lead, window,
                                         servicing.reservation_lead(v))


def test_ahead_of_its_reservation_the_plan_holds_no_more_than_it() -> None:
    room = [5, 3, 1, 0]
    forecast = [2, 2, 4, 5]
    ahead = _recorded([2, 6, 2, 6, 2, 2], [2, 6, 2, 6, 2, 2])  # 4 of 20 ahead
    assert _held(ahead, forecast, room, 0.01, 24) == [2, 2, 0, 0]
    assert _held(ahead, forecast, room, 0.25, 24) == room  # not that far
    even = _recorded([2, 3, 2], [2, 3, 2])  # the reservation covered it all too
    assert _held(even, forecast, room, 0.01, 24) == room
    behind = _recorded([4, 2], [2, 2])
    assert _held(behind, forecast, room, 0.01, 24) == room
    assert allocating.Options().reservation_lead == 0.01


def test_a_forecast_low_at_every_step_keeps_the_headroom_that_covers_it_ahead_or_not() -> None:
    # Told 2, demand 5 at every step: the reservation of 2 delivers 40%, the service
    # with its headroom all of it. Ahead of the reservation's record, the plan still
    # holds the forecast raised by its typical error (1.5 x 2 = 3 GPUs over it), not
    # more: the headroom past that (for errors rarer than the typical one) gives way.
    v = _recorded([5] * 6, [5] * 6, reservation=2, told=2)
    assert servicing.reservation_lead(v) == pytest.approx(0.6)
    assert _held(v, [2, 2, 2], [3, 5, 1], 0.01, 24) == [3, 3, 1]
    # Only the window's last steps count: after a day of 5 at every step, a day on the
    # forecast (demand 2) is the typical error now.
    v = _recorded([5] * 6 + [2] * 6, [5] * 12, reservation=2, told=2)
    assert _held(v, [2, 2, 2], [3, 5, 1], 0.01, 6) == [0, 0, 0]


def _ahead_input(held: list[int]) -> model.PlanInput:
    # 8 GPUs, a service told 2 whose demand ran at 6 for two steps of twelve; a job of 4
    # GPUs that would hold its block all day waits.
    demand = [2] * 12
    demand[3] = demand[9] = 6
    v = replace(_recorded(demand, held, reservation=4, told=2), current_gpus=frozenset(
        range(8 - held[-1], 8)) if held else frozenset())
    job = model.QueuedJob("long", 4, 24, 0, 3.0)
    return model.PlanInput(12, model.Cluster(2, 4), 12, (job,), (), (v,), frozenset(), 12)


def test_a_service_ahead_of_its_reservation_leaves_its_headroom_over_it_to_batch_work() -> None:
    planner = allocating.Gpuroster()
    held = [2] * 12
    held[3] = held[9] = 6  # its headroom covered both spikes: 4 GPU-steps ahead of the 4
    ahead = planner.plan(_ahead_input(held))
    assert "long" in ahead.starts  # over its reservation of 4, its headroom gave way
    assert ahead.headroom["chat"] == 2  # up to the reservation, over the forecast's 2
    # The plan carries the lead it read (4 of 32 GPU-steps ahead), for the gauge.
    assert ahead.lead == {"chat": pytest.approx(4 / 32)}
    unheld = allocating.Gpuroster(reservation_lead=None).plan(_ahead_input(held))
    assert "long" not in unheld.starts and unheld.headroom["chat"] > 2
    # No record of what it held (a controller just restarted): the headroom as before.
    fresh = planner.plan(_ahead_input([]))
    assert "long" not in fresh.starts and fresh.headroom["chat"] == unheld.headroom["chat"]
    assert fresh.lead == {"chat": None}  # read, and nothing to read it from
    assert unheld.lead == ahead.lead  # (read with the hold off too)


def test_headroom_that_gave_way_still_reaches_the_service_on_idle_gpus() -> None:
    held = [2] * 12
    held[3] = held[9] = 6
    inp = _ahead_input(held)
    inp = replace(inp, queued=())  # nothing wants the GPUs
    plan = allocating.Gpuroster().plan(inp)
    unheld = allocating.Gpuroster(reservation_lead=None).plan(inp)
    assert plan.headroom["chat"] < unheld.headroom["chat"]
    assert len(plan.service_gpus["chat"]) == len(unheld.service_gpus["chat"]) > 4


def test_the_simulator_tells_the_planner_what_each_service_held() -> None:
    s = wrongforecasts.family(1, 2500)[0]
    seen: list[model.PlanInput] = []

    class Spy:
        name = "spy"

        def __init__(self) -> None:
            self.inner = allocating.Gpuroster()

        def plan(self, inp: model.PlanInput) -> model.Plan:
            seen.append(inp)
            return self.inner.plan(inp)

    run = simulating.simulate(s, Spy())
    last = seen[-1]
    for i, v in enumerate(s.services):
        index = run.names.index(v.name)
        held = [int((run.grid[:, t] == index).sum()) for t in range(last.now)]
        assert last.services[i].past_held == tuple(held)
        assert len(last.services[i].past_held) == len(last.services[i].past_demand)

"""Every policy on every shipped scenario and on random ones: legal, judged the same way.

The performance targets are asserted here on the shipped scenarios,
so a change that loses them fails CI; the bench prints the same numbers.
"""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender import scenarios
from extender.optimizing import bound
from extender.planner import allocating, blocks, legality, metrics, model, policies, simulating
from extender.planner import scenario as scenario_doc
from tests.builders import scenario

FAST_POLICIES = ["fifo", "priority-skip", "priority-easy", "gpuroster"]
CONTENDED = [
    "training-heavy",
    "mixed-control",
    "priority-inversion",
    "fragmentation",
    "forecast-error",
    "uniform-priority",
]


@functools.cache
def result(name: str, policy: str) -> metrics.Metrics:
    s = scenarios.load(scenarios.resolve(name))
    run = simulating.simulate(s, policy)
    legality.check(s, run.grid)
    return metrics.compute(s, run.grid)


@pytest.mark.parametrize("name", scenarios.builtin_names())
@pytest.mark.parametrize("policy", FAST_POLICIES)
def test_every_policy_is_legal_on_every_shipped_scenario(name: str, policy: str) -> None:
    m = result(name, policy)
    assert 0 < m.utilization <= 100
    assert m.jobs_completed <= m.jobs_total


@pytest.mark.parametrize("name", scenarios.builtin_names())
def test_gpuroster_beats_fifo_in_value(name: str) -> None:
    assert result(name, "gpuroster").value > result(name, "fifo").value


@pytest.mark.parametrize("name", CONTENDED)
def test_gpuroster_beats_fifo_in_utilization_where_contended(name: str) -> None:
    assert result(name, "gpuroster").utilization > result(name, "fifo").utilization


# Tests of the curve-following mechanics (guards, shedding, trades) on crafted curves plan
# them as written: without the peak's timing tolerance, which widens a curve by up to 3
# hours each way until the demand shows when its peak comes (on by default; its own
# tests are in test_headroom and below).
UNWIDENED: dict[str, object] = {"shift_hours": 0.0}

PEER_CASES = [(n, p) for n in scenarios.builtin_names() for p in ("priority-skip", "priority-easy")]


@pytest.mark.parametrize(("name", "peer"), PEER_CASES)
def test_gpuroster_beats_every_peer_in_value(name: str, peer: str) -> None:
    # Without costing inference its service level: a peer more than half a point under
    # fifo's real-time service level is beaten on that instead, and by more than the half
    # point (priority-skip scales services to the last step's demand; on forecast-error it
    # delivers 89.9% where fifo delivers 94.4%).
    us, them, fifo = result(name, "gpuroster"), result(name, peer), result(name, "fifo")
    if them.realtime_service_level < fifo.realtime_service_level - 0.005:
        assert us.realtime_service_level > them.realtime_service_level + 0.005
        assert us.realtime_service_level >= fifo.realtime_service_level - 0.005
        return
    ours, theirs = us.value, them.value
    if ours > theirs:
        return
    # A tie passes only at the optimum, which no policy can beat: the upper bound
    # (perfect information, no contiguity) solved to optimality and reached by both.
    # scale-test, calibrated to the published fifo, leaves nothing to gain: 5049.
    b = bound.value_upper_bound(scenarios.load(scenarios.resolve(name)))
    assert ours == theirs and b.kind == "milp-optimal" and ours >= b.value_bound - 1e-6, (
        f"gpuroster {ours} vs {peer} {theirs}; bound {b.value_bound} ({b.kind})"
    )


def _exact(name: str) -> bool:
    s = scenarios.load(scenarios.resolve(name))
    return all(v.forecast[: s.duration_steps] == v.demand[: s.duration_steps] for v in s.services)


@pytest.mark.parametrize("name", [n for n in scenarios.builtin_names() if _exact(n)])
def test_the_peaks_timing_tolerance_costs_under_one_percent_with_exact_forecasts(
        name: str) -> None:
    # On by default; where the forecast is right its widening lasts only until the demand
    # has shown the peak on time (the target: exact forecasts lose nothing, < 1%).
    s = scenarios.load(scenarios.resolve(name))
    run = simulating.simulate(s, policies.create("gpuroster", **UNWIDENED))
    legality.check(s, run.grid)
    off = metrics.compute(s, run.grid).value
    assert abs(result(name, "gpuroster").value / off - 1.0) < 0.01


class _Listed:
    """gpuroster, handed its input with the jobs and services listed in another order."""

    name = "gpuroster"

    def __init__(self, seed: int) -> None:
        self.inner = policies.create("gpuroster")
        self.rng = random.Random(seed)

    def plan(self, inp: model.PlanInput) -> model.Plan:
        queued, services = list(inp.queued), list(inp.services)
        self.rng.shuffle(queued)
        self.rng.shuffle(services)
        return self.inner.plan(replace(inp, queued=tuple(queued), services=tuple(services)))


@pytest.mark.parametrize("name", scenarios.builtin_names())
def test_gpuroster_plan_does_not_depend_on_how_its_input_is_listed(name: str) -> None:
    # The simulator lists jobs in file order, the controller by arrival and name: the
    # same jobs must get the same plan, or the cluster and the simulator part ways.
    s = scenarios.load(scenarios.resolve(name))
    want = simulating.simulate(s, "gpuroster").grid
    for seed in range(3):
        assert (simulating.simulate(s, _Listed(seed)).grid == want).all()


@pytest.mark.parametrize("name", scenarios.builtin_names())
def test_realtime_service_level_at_least_fifos(name: str) -> None:
    s = scenarios.load(scenarios.resolve(name))
    g = result(name, "gpuroster").realtime_service_level
    assert g >= result(name, "fifo").realtime_service_level
    if all(v.forecast[: s.duration_steps] == v.demand[: s.duration_steps] for v in s.services):
        assert g >= 0.995


def _starve(step_minutes: int, steps: int) -> model.Scenario:
    """One low-priority 8-GPU job against a stream of high-priority 4-GPU work that could
    fill the node forever, over `steps` steps of `step_minutes`."""
    jobs = [{"name": "low", "type": "training", "gpus": 8, "duration_steps": 2,
             "arrival_step": 0, "priority": 1}]
    jobs += [{"name": f"hi-{i}", "type": "training", "gpus": 4, "duration_steps": 3,
              "arrival_step": i, "priority": 8} for i in range(steps - 10)]
    return scenario_doc.parse({
        "version": 1, "name": "starve", "cluster": {"nodes": 1, "gpus_per_node": 8},
        "step_minutes": step_minutes, "horizon_steps": 24 * 60 // step_minutes,
        "duration_steps": steps, "jobs": jobs, "services": []})


def test_the_starvation_bound_is_two_days_at_any_step_length() -> None:
    # At 15-minute steps the bound is 192 steps (48 hours), not 48 (12 hours): past 12
    # hours the low-priority job still waits behind more valuable work.
    pol = policies.create("gpuroster")
    assert isinstance(pol, allocating.Gpuroster)
    assert (pol.options.wait_steps(24), pol.options.wait_steps(96)) == (48, 192)
    run = simulating.simulate(_starve(15, 260), pol)
    start, _ = run.starts["low"]
    assert 48 + 3 < start <= 192 + 3, start
    # In steps, as before: 48 of them.
    run = simulating.simulate(_starve(15, 260), policies.create("gpuroster", max_wait_steps=48))
    start, _ = run.starts["low"]
    assert start <= 48 + 3, start


def test_no_starvation_low_priority_starts_within_the_bound() -> None:
    # One low-priority job against a stream of high-priority work that could fill the
    # cluster forever.
    jobs = [
        {
            "name": "low",
            "type": "training",
            "gpus": 8,
            "duration_steps": 2,
            "arrival_step": 0,
            "priority": 1,
        }
    ]
    jobs += [
        {
            "name": f"hi-{i}",
            "type": "training",
            "gpus": 4,
            "duration_steps": 3,
            "arrival_step": i,
            "priority": 8,
        }
        for i in range(0, 90, 1)
    ]
    s = scenario_doc.parse(
        {
            "version": 1,
            "name": "starve",
            "cluster": {"nodes": 1, "gpus_per_node": 8},
            "step_minutes": 60,
            "horizon_steps": 24,
            "duration_steps": 100,
            "jobs": jobs,
            "services": [],
        }
    )
    pol = policies.create("gpuroster")
    assert isinstance(pol, allocating.Gpuroster)  # for its options below
    run = simulating.simulate(s, pol)
    start, _ = run.starts["low"]
    bound = pol.options.wait_steps(24) + 3  # wait cap + the longest estimate ahead of it
    assert start <= bound, f"low-priority job started at {start}, bound {bound}"
    skip = simulating.simulate(s, "priority-skip")
    assert "low" not in skip.starts  # the peer does starve it: the scenario really tests this


def test_no_end_of_horizon_myopia_long_job_does_not_eat_a_peak_past_the_horizon() -> None:
    # A 20-step job at step 0 would hold GPUs through a peak at step 30, past the 24-step horizon.
    demand = [0] * 28 + [8] * 6 + [0] * 6
    s = scenario_doc.parse(
        {
            "version": 1,
            "name": "myopia",
            "cluster": {"nodes": 1, "gpus_per_node": 8},
            "step_minutes": 60,
            "horizon_steps": 24,
            "duration_steps": 40,
            "jobs": [
                {
                    "name": "long",
                    "type": "training",
                    "gpus": 8,
                    "duration_steps": 31,
                    "arrival_step": 0,
                    "priority": 1,
                }
            ],
            "services": [{"name": "svc", "priority": 5, "max_swap": 8, "demand": demand}],
        }
    )
    run = simulating.simulate(s, "gpuroster")
    m = metrics.compute(s, run.grid)
    assert m.realtime_shortfall == 0


def overrunning_job_before_a_peak() -> model.Scenario:
    """4 GPUs; x (2 GPUs) is estimated to end before a 2-GPU peak at step 2 but runs into
    it; y (2 GPUs) arrives at step 1."""
    return (
        scenario("overrun")
        .nodes(1, 4)
        .window(8, horizon=8)
        .job("x", gpus=2, d=3, estimate=2, priority=1)
        .job("y", gpus=2, d=3, arrival=1, priority=1)
        .service("svc", [0, 0, 2, 2, 0, 0, 0, 0], priority=5, max_swap=4)
        .build()
    )


def test_overrun_guard_keeps_the_services_room_from_a_running_jobs_overrun() -> None:
    # By x's estimate, y fits beside the peak from step 1; if x runs a step over, the two
    # jobs fill the cluster at the peak. The guard assumes x may, so y waits.
    s = overrunning_job_before_a_peak()
    # The curve as crafted (no peak timing tolerance, `UNWIDENED`): widened, it would
    # keep y off the peak with or without the guard.
    guarded = simulating.simulate(s, policies.create("gpuroster", **UNWIDENED))
    assert guarded.starts["y"][0] >= 3
    assert metrics.compute(s, guarded.grid).realtime_shortfall == 0
    # Without the guard y starts at once and x's overrun shorts the service: the scenario
    # really tests the guard.
    bare = simulating.simulate(s, policies.create("gpuroster", overrun_guard=0, **UNWIDENED))
    assert bare.starts["y"][0] == 1
    assert metrics.compute(s, bare.grid).realtime_shortfall == 2


@pytest.mark.parametrize("policy", ["gpuroster", "priority-skip"])
def test_gpus_a_service_lost_with_a_node_are_replaced_on_top_of_its_swap_cap(
        policy: str) -> None:
    # Step 5: the service had 2 GPUs on a node that went away (lost=2, current empty).
    # Replacing them is not a swap: it gets its 2 back at once, not max_swap=1 of them.
    c = model.Cluster(nodes=2, gpus_per_node=4)
    v = model.ServiceState(name="chat", priority=5, max_swap=1, forecast=(2,) * 48,
                           past_demand=(2,) * 5, current_gpus=frozenset(), lost=2,
                           past_forecast=(2,) * 5)
    inp = model.PlanInput(5, c, 24, (), (), (v,), frozenset(range(4, 8)))
    gpus = policies.create(policy).plan(inp).service_gpus["chat"]
    assert len(gpus) == 2 and not gpus & set(range(4, 8)), gpus
    # Without the loss, from nothing, the cap holds it to one more GPU.
    bare = policies.create(policy).plan(replace(inp, services=(replace(v, lost=0),)))
    assert len(bare.service_gpus["chat"]) == 1


def _whole_cluster_job_beside_a_service(priority: float, **options: object) -> model.Plan:
    # One node of 8. The service (priority 5) needs 1 GPU at 4 steps of every 10, so no
    # 8-GPU job of 20 steps ever fits beside its curve.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    v = model.ServiceState(name="chat", priority=5, max_swap=2,
                           forecast=((0,) * 6 + (1,) * 4) * 10)
    q = model.QueuedJob("wide", 8, 20, 0, priority)
    inp = model.PlanInput(0, c, 24, (q,), (), (v,), frozenset())
    plan = policies.create("gpuroster", **{**UNWIDENED, **options}).plan(inp)
    simulating.check_step(inp, plan)
    return plan


def _wide_job_against_a_stream(drain: bool = True) -> tuple[simulating.Run, int]:
    # One node of 8; "chat" wants 3 GPUs every step (swap cap 2), so no 8-GPU block is
    # ever left beside its curve and only a trade starts "wide" (priority 20: 160 a step
    # against 3 GPUs short at 8 x 2 = 48). A 1-GPU job of 6 steps arrives every step, so
    # some running job always holds a GPU of the block: a trade that waits for the block
    # to be free now never comes. Returns the run and the step "wide" came.
    b = scenario().nodes(1, 8).window(120)
    b.service("chat", [3] * 120, priority=2, max_swap=2)
    b.job("wide", gpus=8, d=10, priority=20, arrival=3)
    for t in range(120):
        b.job(f"small-{t:03d}", gpus=1, d=6, arrival=t, priority=3)
    s = b.build()
    run = simulating.simulate(s, policies.create("gpuroster", drain=drain))
    legality.check(s, run.grid)
    return run, 3


def test_a_job_only_a_trade_starts_does_not_starve_behind_a_stream_of_small_work() -> None:
    pol = policies.create("gpuroster")
    assert isinstance(pol, allocating.Gpuroster)  # for its options below
    run, came = _wide_job_against_a_stream()
    start, block = run.starts["wide"]
    # Past the wait cap it trades at the first step a block frees: the small jobs that
    # started before it end within their 6 steps, and the service gives up its 3 GPUs at
    # 2 a step ahead of the start.
    assert start <= came + pol.options.wait_steps(24) + 6 + 1, start
    assert block == model.Block(0, 8)
    # Waiting only for a block free now, it never starts: the scenario really tests this.
    run, _ = _wide_job_against_a_stream(drain=False)
    assert "wide" not in run.starts


def test_a_starving_job_that_fits_only_in_troughs_is_not_pushed_out_of_them() -> None:
    # "chat" needs 2 of 8 GPUs for 18 steps a day and none for 6: a whole-cluster job of 4
    # steps fits only in those troughs. A priority-9 1-GPU job of 5 steps arrives every
    # step. Past the bound the wide job is planned first, in the next trough; each
    # newcomer that ends just before it would, by the step kept for its overrun, push it
    # back one step at every re-plan, and out of the trough: it must not.
    b = scenario().nodes(1, 8).window(150)
    b.service("chat", ([0] * 6 + [2] * 18) * 7, priority=5, max_swap=2)
    b.job("wide", gpus=8, d=4, priority=1, arrival=2)
    for t in range(150):
        b.job(f"small-{t:03d}", gpus=1, d=5, arrival=t, priority=9)
    s = b.build()
    pol = policies.create("gpuroster")
    assert isinstance(pol, allocating.Gpuroster)  # for its options below
    run = simulating.simulate(s, pol)
    legality.check(s, run.grid)
    start, _ = run.starts["wide"]
    assert start <= 2 + pol.options.wait_steps(24) + 24, start  # the first trough after
    assert start % 24 < 6  # in a trough


def test_a_block_is_planned_where_a_services_curve_falls_even_at_swap_cap_1() -> None:
    # One node of 8. "chat" holds 6 and 7 and wants 2 until step 10, then none for 6 steps.
    # With a swap cap of 1 it never moves (a move costs 2), but it does shed as its curve
    # falls, one GPU a step, its lowest first: GPU 6 is free from step 10, GPU 7 from 11.
    # The whole-cluster job (4 steps) is planned there; before, the plan counted GPU 7 held
    # for good and found no room until the trough had begun.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    curve = (2,) * 10 + (0,) * 6 + (2,) * 80
    v = model.ServiceState(name="chat", priority=5, max_swap=1, forecast=curve,
                           past_demand=(2,) * 5, current_gpus=frozenset({6, 7}),
                           past_forecast=(2,) * 5)
    inp = model.PlanInput(5, c, 24, (model.QueuedJob("wide", 8, 4, 5, 1.0),), (), (v,),
                          frozenset())
    plan = policies.create("gpuroster", **UNWIDENED).plan(inp)  # the trough as crafted
    simulating.check_step(inp, plan)
    assert plan.planned_start == {"wide": 16}


def test_work_planned_after_a_starving_job_ends_a_margin_before_it() -> None:
    # Step 58; "wide" (8 GPUs) came at 0. x holds 0-3 until 64, so "wide" is planned at 64.
    # Work planned after it on its GPUs ends half its own estimate (at least a step) before
    # 64: else running over its estimate it would push "wide" back. "four" (4 steps) ends
    # at 62, two steps before: it starts now. "five" (5 steps) would end at 63, under three
    # steps before: it waits.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    running = (model.RunningJob("x", 4, model.Block(0, 4), 50, 14, 1.0),)
    queued = (model.QueuedJob("wide", 8, 10, 0, 1.0), model.QueuedJob("five", 1, 5, 58, 9.0),
              model.QueuedJob("four", 1, 4, 58, 9.0))
    inp = model.PlanInput(58, c, 24, queued, running, (), frozenset())
    plan = policies.create("gpuroster").plan(inp)
    simulating.check_step(inp, plan)
    assert plan.planned_start["wide"] == 64
    assert "four" in plan.starts and "five" not in plan.starts
    # With no margin but the one step kept for an overrun, "five" starts too.
    plan = policies.create("gpuroster", starving_margin=0.0).plan(inp)
    assert "four" in plan.starts and "five" in plan.starts
    # Beside a service that takes the whole node from step 74, "five" finds no start within
    # reach and is tried as a trade for now (it would cost no shortfall before 74): that
    # must keep the margin as well.
    chat = model.ServiceState(name="chat", priority=1, max_swap=8,
                              forecast=(0,) * 16 + (8,) * 80)
    inp = replace(inp, services=(chat,))
    plan = policies.create("gpuroster", **UNWIDENED).plan(inp)  # the service's rise at 74
    simulating.check_step(inp, plan)
    assert plan.planned_start["wide"] == 64
    assert "four" in plan.starts and "five" not in plan.starts


def test_a_starving_trade_is_planned_when_its_block_frees_and_the_service_shrinks_first(
) -> None:
    # Step 60. "wide" (8 GPUs) came at step 0 and waited past the cap. Running: x on 0-3
    # until step 62. "chat" holds 5, 6, 7 and wants 3 all day, swap cap 2. "wide" is
    # planned at 62, when x ends, over the curve, and chat gets nothing while it runs;
    # "now" (1 GPU, 4 steps) would run past 62, so it goes after. Chat can give up 2 GPUs
    # a step: two steps ahead it keeps its 3; one step ahead it keeps 2.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    v = model.ServiceState(name="chat", priority=2, max_swap=2, forecast=(3,) * 96,
                           past_demand=(3,) * 60, current_gpus=frozenset({5, 6, 7}),
                           past_forecast=(3,) * 60)
    running = (model.RunningJob("x", 4, model.Block(0, 4), 40, 22, 1.0),)
    queued = (model.QueuedJob("wide", 8, 10, 0, 20.0), model.QueuedJob("now", 1, 4, 60, 3.0))
    inp = model.PlanInput(60, c, 24, queued, running, (v,), frozenset())
    plan = policies.create("gpuroster").plan(inp)
    simulating.check_step(inp, plan)
    assert plan.planned_start["wide"] == 62 and plan.planned_block["wide"] == model.Block(0, 8)
    assert "starvation bound" in plan.reasons["wide"]
    assert plan.planned_start["now"] >= 72
    assert plan.service_counts["chat"][2:12] == (0,) * 10
    assert len(plan.service_gpus["chat"]) == 3
    inp = replace(inp, now=61, queued=(replace(queued[0]), replace(queued[1], arrival_step=61)))
    plan = policies.create("gpuroster").plan(inp)
    simulating.check_step(inp, plan)
    assert plan.planned_start["wide"] == 62
    assert len(plan.service_gpus["chat"]) == 2


def test_a_job_no_trough_can_hold_starts_when_worth_its_shortfall() -> None:
    # Priority 8 x 8 GPUs = 64 a step, for 20 steps; the shortfall is 1 GPU at 8 of them,
    # priced 8 x 5 = 40 a GPU-step: worth it, so it starts now, and the service waits.
    plan = _whole_cluster_job_beside_a_service(8.0)
    assert plan.starts == {"wide": model.Block(0, 8)}
    assert plan.service_gpus["chat"] == frozenset()
    # The plan's counts say so too: nothing for the service while "wide" runs (its first
    # 20 steps), not the forecast it is short of.
    forecast = ((0,) * 6 + (1,) * 4) * 10
    assert plan.service_counts["chat"] == (0,) * 20 + forecast[20:24]
    # At priority 1 (8 a step against 40 a GPU-step short, 8 x 20 against 8 x 40) it is not.
    plan = _whole_cluster_job_beside_a_service(1.0)
    assert plan.starts == {} and plan.reasons["wide"] == "no room within the plan's horizon"
    assert plan.service_counts["chat"] == forecast[:24]
    # Neither is the priority-8 job at a penalty that makes the curve a hard floor.
    plan = _whole_cluster_job_beside_a_service(8.0, realtime_penalty=1e9)
    assert plan.starts == {}


def test_a_trade_takes_from_the_cheapest_service_and_the_counts_say_so() -> None:
    # One node of 8. "low" (priority 2) wants 3 GPUs, "high" (priority 5) 2, all day: 3 are
    # left, so the 4-GPU job never fits beside them and trades one GPU-step a step. It takes
    # it from "low" (16 a step against 40); "high" keeps its curve.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    low = model.ServiceState(name="low", priority=2, max_swap=2, forecast=(3,) * 48)
    high = model.ServiceState(name="high", priority=5, max_swap=2, forecast=(2,) * 48)
    q = model.QueuedJob("job", 4, 10, 0, 6.0)
    inp = model.PlanInput(0, c, 24, (q,), (), (low, high), frozenset())
    plan = policies.create("gpuroster").plan(inp)
    simulating.check_step(inp, plan)
    assert plan.starts == {"job": model.Block(0, 4)}
    assert len(plan.service_gpus["high"]) == 2 and len(plan.service_gpus["low"]) == 2
    assert plan.service_counts["low"] == (2,) * 10 + (3,) * 14
    assert plan.service_counts["high"] == (2,) * 24


def test_a_trade_goes_first_when_every_order_gives_its_block_away() -> None:
    # As above, with "first" (priority 9, 4 GPUs, 60 steps) queued too. Every queue order
    # places "first" before "wide" (by priority, and by reach: 81 x 4 x sqrt(60) against
    # 64 x 8 x sqrt(20)), and then no 8-GPU block is free now for 60 steps: the trade
    # never comes. Trading first is worth more (64 a step for 20 steps, less 8 GPU-steps
    # short at 40, against "first" 20 steps later at 36 a step), so that plan wins.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    v = model.ServiceState(name="chat", priority=5, max_swap=2,
                           forecast=((0,) * 6 + (1,) * 4) * 10)
    queued = (model.QueuedJob("wide", 8, 20, 0, 8.0), model.QueuedJob("first", 4, 60, 0, 9.0))
    inp = model.PlanInput(0, c, 24, queued, (), (v,), frozenset())
    plan = policies.create("gpuroster").plan(inp)
    simulating.check_step(inp, plan)
    assert plan.starts == {"wide": model.Block(0, 8)}
    assert plan.planned_start["first"] == 21  # "wide" may overrun a step
    alone = policies.create("gpuroster", trade_first=False).plan(inp)
    assert alone.starts == {"first": model.Block(0, 4)} and "wide" not in alone.planned_start


def _wide_job_that_fits_beside_the_curve_only_later(priority: float, **options: object
                                                     ) -> model.Plan:
    # One node of 8; "chat" (priority 5) wants 1 GPU at steps 9-21 and 33-45 and none
    # between, so an 8-GPU job of 10 steps fits beside its curve only from step 22.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    forecast = ((0,) * 9 + (1,) * 13 + (0,) * 11 + (1,) * 13) * 3
    v = model.ServiceState(name="chat", priority=5, max_swap=2, forecast=forecast)
    inp = model.PlanInput(0, c, 24, (model.QueuedJob("wide", 8, 10, 0, priority),), (),
                          (v,), frozenset())
    plan = policies.create("gpuroster", **{**UNWIDENED, **options}).plan(inp)
    simulating.check_step(inp, plan)
    return plan


def test_a_job_that_fits_only_later_starts_now_when_its_shortfall_costs_less() -> None:
    # At priority 7, starting now is worth 56 a step for 10 steps at the weights of
    # steps 0-9, less one GPU-step short at step 9 (40): more than the same 10 steps from
    # step 22, by the time decay. So it starts now, and the plan gives chat none at step 9.
    plan = _wide_job_that_fits_beside_the_curve_only_later(7.0)
    assert plan.starts == {"wide": model.Block(0, 8)}
    assert plan.service_counts["chat"][9] == 0 and plan.service_counts["chat"][10] == 1
    # At priority 1 (8 a step) the GPU-step short costs more than the decay: it waits.
    plan = _wide_job_that_fits_beside_the_curve_only_later(1.0)
    assert plan.starts == {} and plan.planned_start["wide"] == 22
    assert plan.service_counts["chat"][9] == 1
    # So it does at priority 7 when the curve is a hard floor, or with the trade off.
    for options in ({"realtime_penalty": 1e9}, {"trade_sooner": False}):
        plan = _wide_job_that_fits_beside_the_curve_only_later(7.0, **options)
        assert plan.starts == {} and plan.planned_start["wide"] == 22


def test_a_service_moves_off_a_block_planned_for_next_step_within_its_node() -> None:
    # One node of 8; the service holds GPU 6 and needs 1, which leaves 7 for batch work.
    # Running: x on 0-3, y on 5 until step 8. "a" (2 GPUs) is planned next step on 6-7,
    # counting on the service to move; "b" (1 GPU) at step 9 on GPU 4 (before, a and y
    # leave it no room). No GPU is free of plans, so the service moves to GPU 4, the one
    # wanted latest: else "a" waits on it, step after step, with GPU 4 idle.
    c = model.Cluster(nodes=1, gpus_per_node=8)
    v = model.ServiceState(name="chat", priority=5, max_swap=2, forecast=(1,) * 96,
                           past_demand=(1,) * 5, current_gpus=frozenset({6}),
                           past_forecast=(1,) * 5)
    running = (model.RunningJob("x", 4, model.Block(0, 4), 0, 40, 1.0),
               model.RunningJob("y", 1, model.Block(5, 1), 0, 8, 1.0))
    queued = (model.QueuedJob("a", 2, 20, 0, 4.0), model.QueuedJob("b", 1, 20, 0, 2.0))
    inp = model.PlanInput(5, c, 24, queued, running, (v,), frozenset())
    plan = policies.create("gpuroster").plan(inp)
    simulating.check_step(inp, plan)
    assert plan.planned_start == {"a": 6, "b": 9}  # y may overrun a step
    assert plan.planned_block["a"] == model.Block(6, 2)
    assert plan.planned_block["b"] == model.Block(4, 1)
    assert plan.service_gpus["chat"] == {4}


@pytest.mark.parametrize("policy", FAST_POLICIES)
def test_every_policy_keeps_a_job_to_the_nodes_its_pods_may_use(policy: str) -> None:
    # 4 nodes of 4 GPUs, all free. "a" may use node 2 only; "wide" (8 GPUs) nodes 1-3,
    # so nodes 1-2 or 2-3; "b" anything. Nothing may start off its nodes.
    c = model.Cluster(nodes=4, gpus_per_node=4)
    queued = (model.QueuedJob("a", 2, 4, 0, 2.0, nodes=frozenset({2})),
              model.QueuedJob("wide", 8, 4, 0, 2.0, nodes=frozenset({1, 2, 3})),
              model.QueuedJob("b", 4, 4, 0, 1.0))
    inp = model.PlanInput(0, c, 24, queued, (), (), frozenset())
    plan = policies.create(policy).plan(inp)
    simulating.check_step(inp, plan)
    a = plan.starts.get("a") or plan.planned_block["a"]
    assert a.start // 4 == 2, a
    if "wide" in plan.starts:
        assert plan.starts["wide"].start // 4 in (1, 2)
    # A job whose nodes are all taken waits, though other nodes are free.
    busy = model.RunningJob("x", 4, model.Block(8, 4), 0, 10, 1.0)
    inp = model.PlanInput(0, c, 24, queued[:1], (busy,), (), frozenset())
    plan = policies.create(policy).plan(inp)
    assert "a" not in plan.starts


@pytest.mark.parametrize("policy", FAST_POLICIES)
def test_a_service_limited_to_some_nodes_gets_gpus_only_there(policy: str) -> None:
    # Services grow from the top; this one may use node 0 only.
    c = model.Cluster(nodes=2, gpus_per_node=4)
    v = model.ServiceState(name="chat", priority=5, max_swap=4, forecast=(2,) * 48,
                           nodes=frozenset({0}))
    plan = policies.create(policy).plan(model.PlanInput(0, c, 24, (), (), (v,), frozenset()))
    assert len(plan.service_gpus["chat"]) == 2 and plan.service_gpus["chat"] <= set(range(4))


def test_batch_work_leaves_a_limited_service_its_room_in_its_nodes() -> None:
    # 3 nodes of 4 GPUs; the service needs 2 GPUs of node 0 at every step; node 2 runs a
    # job. A 4-GPU job fits the cluster's count (12 - 2 - 4 = 6), but on node 0 it would
    # leave the service nothing: it goes to node 1, and a second one waits.
    c = model.Cluster(nodes=3, gpus_per_node=4)
    v = model.ServiceState(name="chat", priority=5, max_swap=4, forecast=(2,) * 96,
                           nodes=frozenset({0}))
    busy = model.RunningJob("x", 4, model.Block(8, 4), 0, 10, 1.0)
    queued = (model.QueuedJob("a", 4, 6, 0, 2.0), model.QueuedJob("b", 4, 6, 0, 2.0))
    inp = model.PlanInput(0, c, 24, queued, (busy,), (v,), frozenset())
    plan = policies.create("gpuroster").plan(inp)
    simulating.check_step(inp, plan)
    assert list(plan.starts.values()) == [model.Block(4, 4)], plan.starts
    assert plan.service_gpus["chat"] <= set(range(4)) and len(plan.service_gpus["chat"]) == 2
    assert plan.planned_block["b"].start // 4 != 0  # later, elsewhere: never on node 0


def test_the_simulator_refuses_a_start_off_a_jobs_nodes() -> None:
    c = model.Cluster(nodes=2, gpus_per_node=4)
    q = model.QueuedJob("a", 4, 4, 0, 1.0, nodes=frozenset({1}))
    inp = model.PlanInput(0, c, 24, (q,), (), (), frozenset())
    plan = model.Plan(now=0, starts={"a": model.Block(0, 4)})
    with pytest.raises(simulating.IllegalPlan, match="on a node it may not use"):
        simulating.check_step(inp, plan)


@pytest.mark.parametrize(("gpus", "why"), [
    ({3, 7}, "not whole replicas of 2"),
    ({0, 1, 2, 3}, "over its 2 a node"),
    ({2, 3, 6, 7}, None),
], ids=["split-replica", "two-on-a-node", "legal"])
def test_the_simulator_refuses_a_service_set_that_breaks_its_replicas(
        gpus: set[int], why: str | None) -> None:
    c = model.Cluster(nodes=2, gpus_per_node=4)
    v = model.ServiceState(name="s", priority=1, max_swap=4, forecast=(4,), unit=2,
                           most_per_node=2)
    inp = model.PlanInput(0, c, 24, (), (), (v,), frozenset())
    plan = model.Plan(now=0, service_gpus={"s": frozenset(gpus)})
    if why is None:
        simulating.check_step(inp, plan)
        return
    with pytest.raises(simulating.IllegalPlan, match=why):
        simulating.check_step(inp, plan)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_random_node_limits_every_policy_stays_on_them(data: st.DataObject) -> None:
    nodes = data.draw(st.integers(1, 4))
    per = data.draw(st.sampled_from([2, 4, 8]))
    c = model.Cluster(nodes=nodes, gpus_per_node=per)
    sizes = [s for s in (1, 2, 4, 8, 16) if s <= c.gpus and (s <= per or s % per == 0)]
    queued = tuple(
        model.QueuedJob(f"j{i}", data.draw(st.sampled_from(sizes)), data.draw(st.integers(1, 8)),
                        0, data.draw(st.sampled_from([1.0, 2.0, 8.0])),
                        nodes=data.draw(st.none() | st.frozensets(st.integers(0, nodes - 1))))
        for i in range(data.draw(st.integers(1, 8))))
    services = tuple(
        model.ServiceState(name=f"s{i}", priority=5, max_swap=2,
                           forecast=tuple(data.draw(st.lists(st.integers(0, per), min_size=24,
                                                             max_size=24))),
                           nodes=data.draw(st.none() | st.frozensets(st.integers(0, nodes - 1))))
        for i in range(data.draw(st.integers(0, 2))))
    inp = model.PlanInput(0, c, 12, queued, (), services, frozenset())
    for policy in FAST_POLICIES:
        plan = policies.create(policy).plan(inp)
        simulating.check_step(inp, plan)  # raises on a start off the job's nodes
        for q in queued:
            b = plan.planned_block.get(q.name)
            if b is not None:
                assert not b.mask & ~q.allowed(c), (policy, q, b)
        for v in services:
            held = blocks.mask_of(plan.service_gpus.get(v.name, frozenset()))
            assert not held & ~v.allowed(c), (policy, v.name, v.nodes)


def test_illegal_plan_is_refused_by_the_simulator() -> None:
    class Cheater:
        name = "cheater"

        def plan(self, inp: model.PlanInput) -> model.Plan:
            p = model.Plan(now=inp.now)
            for q in inp.queued:
                p.starts[q.name] = model.Block(0, q.gpus)  # everyone on GPU 0
            return p

    s = scenarios.load(scenarios.resolve("training-heavy"))
    with pytest.raises(simulating.IllegalPlan, match="overlaps"):
        simulating.simulate(s, Cheater())


# --- property-based: random scenarios through every policy --------------------------------


@st.composite
def random_scenario(draw: st.DrawFn) -> model.Scenario:
    nodes = draw(st.integers(1, 3))
    per_node = draw(st.sampled_from([2, 4, 8]))
    gpus = nodes * per_node
    window = draw(st.integers(2, 16))
    sizes = [s for s in (1, 2, 4, 8, 16) if s <= gpus and (s <= per_node or s % per_node == 0)]
    jobs = []
    for i in range(draw(st.integers(0, 10))):
        d = draw(st.integers(1, 8))
        jobs.append(
            {
                "name": f"j{i}",
                "type": draw(st.sampled_from(model.BATCH_TYPES)),
                "gpus": draw(st.sampled_from(sizes)),
                "duration_steps": d,
                "estimate_steps": draw(st.integers(1, 10)),
                "arrival_step": draw(st.integers(0, window)),
                "priority": draw(st.sampled_from([1, 2, 4, 8, 0.5])),
            }
        )
    services = []
    for i in range(draw(st.integers(0, 2))):
        demand = draw(st.lists(st.integers(0, gpus // 2), min_size=window, max_size=window))
        forecast = draw(st.lists(st.integers(0, gpus // 2), min_size=window, max_size=window))
        services.append(
            {
                "name": f"s{i}",
                "priority": draw(st.sampled_from([1, 5, 6])),
                "max_swap": draw(st.integers(0, 3)),
                "demand": demand,
                "forecast": forecast,
            }
        )
    return scenario_doc.parse(
        {
            "version": 1,
            "name": "random",
            "cluster": {"nodes": nodes, "gpus_per_node": per_node},
            "step_minutes": 60,
            "horizon_steps": draw(st.integers(1, 24)),
            "duration_steps": window,
            "jobs": jobs,
            "services": services,
        }
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_scenario())
def test_random_scenarios_every_policy_legal_and_metrics_consistent(s: model.Scenario) -> None:
    for policy in FAST_POLICIES:
        run = simulating.simulate(s, policy)  # check_step raises on any illegal step
        assert legality.violations(s, run.grid) == [], policy
        m = metrics.compute(s, run.grid)
        again, _ = metrics.index_grid(s, run.named_grid())
        assert metrics.compute(s, again) == m
        assert 0 <= m.utilization <= 100
        assert 0 <= m.realtime_service_level <= 1

"""The queue orders a plan tries: the pass budget, and the fill-now pass's shortcut."""

from __future__ import annotations

import random
from typing import Any

import pytest

from extender.planner import allocating, frame, model, placing


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

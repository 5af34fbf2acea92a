"""fifo is MODEL.md's baseline to the cell: hand-worked grids."""

from __future__ import annotations

from dataclasses import replace

from extender.planner import fifo, metrics, model, simulating
from tests.builders import scenario


def cells(run: simulating.Run) -> list[str]:
    return ["".join(c[0] if c else "." for c in row) for row in run.named_grid()]


def test_fifo_head_of_line_and_top_reservation() -> None:
    s = (
        scenario()
        .nodes(1, 4)
        .window(5)
        .job("a", gpus=2, d=2, priority=1)
        .job("b", gpus=2, d=1, priority=2)
        .job("c", gpus=1, d=3, priority=3)
        .service("svc", [1, 0, 1, 1, 0], priority=5)
        .build()
    )
    run = simulating.simulate(s, "fifo")
    # a takes the lowest block; b cannot fit beside it, and c (which would) may not overtake b.
    assert cells(run) == [
        "aab..",
        "aab..",
        "..ccc",
        "sssss",
    ]  # the service's peak (1) is reserved on the top GPU all along
    m = metrics.compute(s, run.grid)
    assert m.utilization == 100 * (4 + 2 + 3 + 3) / 20
    assert m.value == 4 * 1 + 2 * 2 + 3 * 3 + 3 * 5
    assert (m.jobs_completed, m.realtime_shortfall, m.realtime_service_level) == (3, 0, 1.0)


def test_fifo_multi_node_block_is_the_lowest_run_of_whole_nodes() -> None:
    s = (
        scenario()
        .nodes(3, 2)
        .window(3)
        .job("x", gpus=1, d=3)
        .job("y", gpus=4, d=1)
        .job("z", gpus=2, d=1)
        .build()
    )
    run = simulating.simulate(s, "fifo")
    assert cells(run) == ["xxx", "...", "yz.", "yz.", "y..", "y.."]


def test_fifo_services_stack_down_from_the_top_in_file_order() -> None:
    s = (
        scenario()
        .nodes(1, 8)
        .window(2)
        .service("first", [1, 3], forecast=[2, 3])
        .service("second", [2, 2])
        .build()
    )
    run = simulating.simulate(s, "fifo")
    grid = run.named_grid()
    assert [grid[g][0] for g in range(8)] == [
        None,
        None,
        None,
        "second",
        "second",
        "first",
        "first",
        "first",
    ]
    m = metrics.compute(s, run.grid)
    assert m.realtime_shortfall == 0
    assert m.utilization == 100 * (1 + 3 + 2 + 2) / 16  # reserved above demand is idle


def test_fifo_ignores_priority_and_runs_true_durations() -> None:
    s = (
        scenario()
        .nodes(1, 2)
        .window(6)
        .job("low", gpus=2, d=3, estimate=1, priority=1)
        .job("high", gpus=2, d=1, arrival=0, priority=100)
        .build()
    )
    run = simulating.simulate(s, "fifo")
    assert cells(run) == ["lllh..", "lllh.."]


def test_a_reservation_of_several_gpu_replicas_is_whole_replicas_on_each_node() -> None:
    """Not in any scenario (their services are 1 GPU per replica): on a cluster, a
    service of 2-GPU replicas below one that took 3 GPUs of the top node skips the odd
    GPU left there rather than split a replica across two nodes."""
    c = model.Cluster(nodes=2, gpus_per_node=4)
    one = model.ServiceState(name="one", priority=1, max_swap=2, forecast=(3,) * 24)
    two = model.ServiceState(name="two", priority=1, max_swap=2, forecast=(4,) * 24, unit=2)
    inp = model.PlanInput(0, c, 24, (), (), (one, two))
    got = fifo.reservation_ranges(inp)
    assert got == {"one": frozenset({5, 6, 7}), "two": frozenset({0, 1, 2, 3})}
    single = fifo.reservation_ranges(replace(inp, services=(one, replace(two, unit=1))))
    assert single["two"] == frozenset({1, 2, 3, 4})  # MODEL.md's contiguous range

"""The fast policy's block choice and its plan for the services at step now."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from extender.planner import allocating, blocks, model


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

"""The services' GPUs at step now: spare replicas."""

from __future__ import annotations

import dataclasses

from extender.planner import model, seating


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

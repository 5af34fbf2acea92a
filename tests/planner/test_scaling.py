"""Choosing a service's GPUs for one step: the swap cap, and getting out of planned jobs' way."""

from __future__ import annotations

import pytest

from extender.planner import blocks, scaling


def m(*gpus: int) -> int:
    return blocks.mask_of(frozenset(gpus))


# Two nodes of 4 GPUs: node 0 holds GPUs 0-3, node 1 GPUs 4-7. `wanted[i]`: the GPUs of
# blocks planned to start i + 1 steps from now.
CASES = [
    # id, current, target, free, cap, wanted, want
    ("keeps what it has", {6, 7}, 2, m(5, 6, 7), 2, (), {6, 7}),
    ("grows into the highest free GPU", {7}, 2, m(2, 5, 7), 2, (), {5, 7}),
    ("grows around wanted GPUs", {7}, 2, m(5, 6, 7), 2, (0, 0, m(6)), {5, 7}),
    ("sheds wanted GPUs first", {5, 6, 7}, 2, m(5, 6, 7), 2, (0, m(7)), {5, 6}),
    ("never past the cap", {7}, 4, m(3, 4, 5, 6, 7), 2, (), {5, 6, 7}),
    ("leaves a GPU wanted next step for an unwanted one", {3, 7}, 2, m(3, 4, 7), 2,
     (m(0, 1, 2, 3),), {4, 7}),
    ("else for the GPU wanted last", {3, 7}, 2, m(1, 3, 4, 5, 7), 2,
     (m(0, 1, 2, 3), m(5), 0, m(4)), {4, 7}),
    ("on its own node too", {3}, 1, m(0, 1, 2, 3), 2,
     (m(2, 3), 0, m(0, 1)), {1}),
    ("not for a GPU wanted next step as well", {3, 7}, 2, m(2, 3, 7), 2,
     (m(0, 1, 2, 3),), {3, 7}),
    ("a GPU wanted later only: not for another wanted one", {3, 7}, 2, m(3, 4, 7), 2,
     (0, m(3), m(4)), {3, 7}),
    ("not without two units of swap left", {3, 7}, 2, m(3, 4, 7), 1,
     (m(0, 1, 2, 3), 0, m(4)), {3, 7}),
]


@pytest.mark.parametrize(
    ("current", "target", "free", "cap", "wanted", "want"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_assign(
    current: set[int], target: int, free: int, cap: int, wanted: tuple[int, ...], want: set[int]
) -> None:
    got = scaling.assign(frozenset(current), target, free, cap, wanted)
    assert got == frozenset(want)
    assert len(got ^ frozenset(current)) <= cap


def test_releasable_is_what_the_cap_allows() -> None:
    assert scaling.releasable(frozenset({1, 2, 3}), 3, None) == 3
    assert scaling.releasable(frozenset({1, 2, 3}), 3, 2) == 1  # one out, one in
    assert scaling.releasable(frozenset({1, 2, 3}), 1, 2) == 2  # shrink by two
    assert scaling.releasable(frozenset({1, 2, 3}), 5, 2) == 0  # growing takes the cap

"""Choosing a service's GPUs for one step: the swap cap, and getting out of planned jobs' way."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_service_sheds_first_on_the_node_where_it_holds_fewest_when_told() -> None:
    # Three GPUs on node 0, two on node 1: node 1 goes first, whole (lowest first overall
    # would have kept it, and a whole-node block planned there would wait).
    got = scaling.assign(frozenset({1, 2, 3, 6, 7}), 3, m(1, 2, 3, 6, 7), 2, (), per_node=4,
                         thin_first=True)
    assert got == frozenset({1, 2, 3})
    assert scaling.release_order(frozenset({1, 2, 3, 6, 7}), 4) == [6, 7, 1, 2, 3]
    # GPUs planned jobs want still go first, wherever they are.
    got = scaling.assign(frozenset({1, 2, 3, 6, 7}), 3, m(1, 2, 3, 6, 7), 2, (m(2),),
                         per_node=4, thin_first=True)
    assert got == frozenset({1, 3, 7})
    # Whole replicas alike: two on node 0, one on node 1, which goes.
    got = scaling.assign(frozenset({0, 1, 2, 3, 6, 7}), 4, m(0, 1, 2, 3, 6, 7), 2, (),
                         unit=2, per_node=4, thin_first=True)
    assert got == frozenset({0, 1, 2, 3})
    # Without (the peers' services), the lowest first, as before.
    assert scaling.assign(frozenset({1, 2, 3, 6, 7}), 3, m(1, 2, 3, 6, 7), 2, (),
                          per_node=4) == frozenset({3, 6, 7})


def test_releasable_is_what_the_cap_allows() -> None:
    assert scaling.releasable(frozenset({1, 2, 3}), 3, None) == 3
    assert scaling.releasable(frozenset({1, 2, 3}), 3, 2) == 1  # one out, one in
    assert scaling.releasable(frozenset({1, 2, 3}), 1, 2) == 2  # shrink by two
    assert scaling.releasable(frozenset({1, 2, 3}), 5, 2) == 0  # growing takes the cap


# Replicas of two GPUs on the same two nodes of 4 GPUs.
UNIT_CASES = [
    # id, current, target, free, cap, wanted, want
    ("a replica on one node, not one GPU on each", set(), 2, m(3, 7), None, (), set()),
    ("grows into the highest node with room", set(), 2, m(2, 3, 6), None, (), {2, 3}),
    ("grows by whole replicas only", {6, 7}, 6, m(2, 3, 5, 6, 7), 4, (), {2, 3, 6, 7}),
    ("not past the cap", {6, 7}, 6, m(0, 1, 2, 3, 6, 7), 3, (), {2, 3, 6, 7}),
    ("a cap under a replica does not grow", {6, 7}, 4, m(2, 3, 6, 7), 1, (), {6, 7}),
    ("sheds the replica on the node planned jobs want", {2, 3, 6, 7}, 2, m(2, 3, 6, 7), 2,
     (0, m(6)), {2, 3}),
    ("else the one on the lowest node", {2, 3, 6, 7}, 2, m(2, 3, 6, 7), 2, (), {6, 7}),
    ("a GPU that holds no replica goes first", {3, 6, 7}, 2, m(3, 6, 7), 1, (), {6, 7}),
    ("moves off a planned block within its node", {6, 7}, 2, m(4, 5, 6, 7), 2,
     (m(7),), {5, 6}),
    ("else a whole replica to another node", {6, 7}, 2, m(2, 3, 6, 7), 4,
     (m(4, 5, 6, 7),), {2, 3}),
    ("not without the swap for a whole replica", {6, 7}, 2, m(2, 3, 6, 7), 3,
     (m(4, 5, 6, 7),), {6, 7}),
    ("a move costs two swaps a GPU", {4, 5, 6, 7}, 4, m(0, 1, 2, 3, 4, 5, 6, 7), 6,
     (m(4, 5, 6, 7),), {2, 3, 6, 7}),
]


@pytest.mark.parametrize(
    ("current", "target", "free", "cap", "wanted", "want"),
    [c[1:] for c in UNIT_CASES],
    ids=[c[0] for c in UNIT_CASES],
)
def test_assign_whole_replicas(
    current: set[int], target: int, free: int, cap: int | None, wanted: tuple[int, ...],
    want: set[int]
) -> None:
    got = scaling.assign(frozenset(current), target, free, cap, wanted, unit=2, per_node=4)
    assert got == frozenset(want)
    if cap is not None:
        assert len(got ^ frozenset(current)) <= cap


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_whole_replicas_within_the_cap_and_the_free_gpus(data: st.DataObject) -> None:
    """Whatever it is given, the set holds whole replicas on every node, only free
    GPUs, grows no further than the target, and swaps no more than the cap."""
    per_node = data.draw(st.sampled_from([2, 4, 8]), "per_node")
    unit = data.draw(st.sampled_from([u for u in (2, 4, 8) if u <= per_node]), "unit")
    nodes = data.draw(st.integers(1, 4), "nodes")
    gpus = nodes * per_node
    free = data.draw(st.integers(0, (1 << gpus) - 1), "free")
    # the current set: whole replicas on some nodes, as the controller builds it
    current: set[int] = set()
    for n in range(nodes):
        k = data.draw(st.integers(0, per_node // unit), f"replicas on node {n}") * unit
        current |= set(range((n + 1) * per_node - k, (n + 1) * per_node))
    free |= blocks.mask_of(frozenset(current))  # callers leave it what no job took
    target = data.draw(st.integers(0, gpus), "target")
    cap = data.draw(st.one_of(st.none(), st.integers(0, 2 * gpus)), "cap")
    wanted = tuple(data.draw(st.lists(st.integers(0, (1 << gpus) - 1), max_size=3), "wanted"))
    got = scaling.assign(frozenset(current), target, free, cap, wanted, unit, per_node)
    assert blocks.mask_of(got) & ~free == 0
    if cap is not None:
        assert len(got ^ frozenset(current)) <= cap
    for n in range(nodes):
        here = sum(1 for g in got if g // per_node == n)
        assert here % unit == 0, (n, here, sorted(got))
    assert len(got) <= len(current) or len(got) <= target


# One replica a node (required pod anti-affinity), on three nodes of 4 GPUs.
APART_CASES = [
    # id, unit, current, target, free, cap, want
    ("one a node, highest nodes first", 1, set(), 3, m(1, 2, 3, 5, 6, 7, 9, 10, 11), None,
     {3, 7, 11}),
    ("never two on a node, even short", 1, set(), 3, m(6, 7, 10, 11), None, {7, 11}),
    ("a second one on a node goes first", 1, {10, 11}, 2, m(6, 7, 10, 11), 2, {7, 11}),
    ("replicas of two GPUs, one a node", 2, set(), 4, m(2, 3, 6, 7, 10, 11), None,
     {6, 7, 10, 11}),
]


@pytest.mark.parametrize(("unit", "current", "target", "free", "cap", "want"),
                         [c[1:] for c in APART_CASES], ids=[c[0] for c in APART_CASES])
def test_assign_one_replica_a_node(unit: int, current: set[int], target: int, free: int,
                                   cap: int | None, want: set[int]) -> None:
    got = scaling.assign(frozenset(current), target, free, cap, (), unit=unit, per_node=4,
                         most=unit)
    assert got == frozenset(want)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_never_more_than_the_most_a_node(data: st.DataObject) -> None:
    nodes, per_node = data.draw(st.integers(1, 4)), 4
    unit = data.draw(st.sampled_from([1, 2]))
    most = data.draw(st.sampled_from([u for u in (1, 2, 4) if u >= unit and u % unit == 0]))
    gpus = nodes * per_node
    current: set[int] = set()
    for n in range(nodes):  # whole replicas, within the limit, at the top of each node
        k = data.draw(st.integers(0, most // unit)) * unit
        current |= set(range((n + 1) * per_node - k, (n + 1) * per_node))
    free = data.draw(st.integers(0, (1 << gpus) - 1)) | blocks.mask_of(frozenset(current))
    cap = data.draw(st.one_of(st.none(), st.integers(0, 2 * gpus)))
    wanted = tuple(data.draw(st.lists(st.integers(0, (1 << gpus) - 1), max_size=2)))
    got = scaling.assign(frozenset(current), data.draw(st.integers(0, gpus)), free, cap,
                         wanted, unit, per_node, most)
    assert blocks.mask_of(got) & ~free == 0
    if cap is not None:
        assert len(got ^ frozenset(current)) <= cap
    for n in range(nodes):
        here = sum(1 for g in got if g // per_node == n)
        assert here % unit == 0 and here <= most, (n, here, sorted(got))


@pytest.mark.parametrize(("held", "room", "free", "unit", "most", "want"), [
    ({7}, 2, m(2, 5, 6), 1, 0, {5, 6}),  # the highest free first
    ({7}, 5, m(2, 5), 1, 0, {2, 5}),  # no more than is free
    ({7}, 0, m(2, 5), 1, 0, set()),  # no room
    ({7}, -1, m(2, 5), 1, 0, set()),
    (set(), 4, m(1, 2, 3, 5, 6), 2, 0, {5, 6, 2, 3}),  # whole replicas on one node
    (set(), 3, m(1, 2, 3, 5, 6), 2, 0, {5, 6}),  # room for one and a half: one
    ({4}, 4, m(1, 2, 5, 6, 7), 1, 2, {7, 1, 2}),  # two a node at most
], ids=["highest-first", "what-is-free", "no-room", "negative-room", "whole-replicas",
        "half-a-replica", "most-a-node"])
def test_spare(held: set[int], room: int, free: int, unit: int, most: int,
               want: set[int]) -> None:
    assert scaling.spare(frozenset(held), room, free, unit, 4, most) == want

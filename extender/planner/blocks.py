"""Legal blocks on a GPU bitmask.

A set of GPUs is a Python int used as a bitmask (bit g = GPU g). Python's big
ints make every operation here a handful of word operations even at 4,096
GPUs, which keeps block search off the profile.

Legal blocks (MODEL.md): `size` a power of two; `size <= G` lies inside one
node at any offset; `size > G` is `size / G` whole consecutive nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from extender.planner import model


def popcount(mask: int) -> int:
    return mask.bit_count()


def bits(mask: int) -> Iterator[int]:
    """Set bits, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def bits_high_first(mask: int) -> Iterator[int]:
    while mask:
        top = mask.bit_length() - 1
        yield top
        mask ^= 1 << top


def mask_of(gpus: frozenset[int] | set[int] | range) -> int:
    m = 0
    for g in gpus:
        m |= 1 << g
    return m


def set_of(mask: int) -> frozenset[int]:
    return frozenset(bits(mask))


@cache
def _starts_within_node(nodes: int, per_node: int, size: int) -> int:
    """Bitmask of GPU positions where a block of `size` <= G may start."""
    node_mask = 0
    for off in range(per_node - size + 1):
        node_mask |= 1 << off
    full = 0
    for n in range(nodes):
        full |= node_mask << (n * per_node)
    return full


@cache
def _node_starts(nodes: int, per_node: int) -> int:
    m = 0
    for n in range(nodes):
        m |= 1 << (n * per_node)
    return m


def _runs(free: int, length: int) -> int:
    """Positions p such that bits p .. p+length-1 are all set in `free` (doubling)."""
    run = free
    have = 1
    while have < length:
        step = min(have, length - have)
        run &= run >> step
        have += step
    return run


def start_positions(free: int, size: int, cluster: model.Cluster) -> int:
    """Bitmask of the first GPU of every legal block of `size` inside `free`."""
    g = cluster.gpus_per_node
    if size <= g:
        return _runs(free, size) & _starts_within_node(cluster.nodes, g, size)
    whole = _runs(free, g) & _node_starts(cluster.nodes, g)  # nodes entirely free
    # `size / g` consecutive whole nodes: runs over the node-start bits spaced g apart.
    need = size // g
    run = whole
    for k in range(1, need):
        run &= whole >> (k * g)
    return run


def lowest(free: int, size: int, cluster: model.Cluster) -> model.Block | None:
    """The lowest-numbered legal block (fifo's rule: nodes in order, lowest offset)."""
    starts = start_positions(free, size, cluster)
    if not starts:
        return None
    return model.Block((starts & -starts).bit_length() - 1, size)


def block_mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start

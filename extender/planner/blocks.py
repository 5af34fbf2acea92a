"""Legal blocks on a GPU bitmask.

A set of GPUs is a Python int used as a bitmask (bit g = GPU g). Python's big
ints make every operation here a handful of word operations even at 4,096
GPUs, which keeps block search off the profile.

Legal blocks (MODEL.md): `size` a power of two; `size <= G` lies inside one
node at any offset; `size > G` is `size / G` whole consecutive nodes.

Which legal block a policy takes: `lowest` (fifo's rule) and `best_fit` (gpuroster's:
the fullest node, a size-aligned offset).
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


@cache
def _aligned_offsets(per_node: int, size: int) -> int:
    return sum(1 << off for off in range(0, per_node - size + 1, size))


_POPCOUNT = bytes(i.bit_count() for i in range(256))
_LOWEST_BIT = bytes((i & -i).bit_length() - 1 if i else 0 for i in range(256))


def best_fit(starts: int, size: int, free: int, c: model.Cluster) -> int:
    """Among legal start positions, the block that leaves the most useful free pool:
    the fullest node that fits (a perfect fit ends the search), a size-aligned
    offset inside it when one is free, lower nodes on ties. Whole-node blocks
    take the lowest run, which keeps the top for services."""
    g = c.gpus_per_node
    if size >= g:
        return (starts & -starts).bit_length() - 1
    aligned = _aligned_offsets(g, size)
    if c.nodes == 1:  # one node: only the offset to choose
        pick = starts & aligned or starts
        return (pick & -pick).bit_length() - 1
    if g == 8 and c.nodes <= 16:
        # The same look, a byte a node: every node is a candidate at this size.
        here_of = starts.to_bytes(c.nodes, "little")
        free_of = free.to_bytes(c.nodes, "little").translate(_POPCOUNT)
        best = -1
        start = 0
        for node in range(c.nodes):
            here = here_of[node]
            if not here:
                continue
            al = here & aligned
            rank = 2 * free_of[node] + (0 if al else 1)  # (GPUs free, unaligned) as a number
            if best < 0 or rank < best:
                best, start = rank, 8 * node + _LOWEST_BIT[al if al else here]
                if al and free_of[node] == size:
                    break
        return start
    node_full = (1 << g) - 1
    best_key: tuple[int, int] | None = None
    best_start = 0
    x = starts
    for _ in range(16):  # a bounded look at candidate nodes keeps the cost flat at scale
        if not x:
            break
        base = ((x & -x).bit_length() - 1) // g * g
        here = (x >> base) & node_full
        node_free = ((free >> base) & node_full).bit_count()
        al = here & aligned
        pick = al if al else here
        key = (node_free, 0 if al else 1)
        if best_key is None or key < best_key:
            best_key, best_start = key, base + (pick & -pick).bit_length() - 1
            if node_free == size and al:
                break  # fills the node's gap exactly: nothing fits better
        x &= ~(node_full << base)
    return best_start

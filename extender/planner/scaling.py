"""Choosing a real-time service's GPU set for one step, within its swap cap.

Services are elastic: any GPUs will do. To keep the free pool in shapes that
batch blocks can use, a service keeps what it has, grows into the highest
free GPUs and gives back its lowest ones (jobs pack from the bottom).
"""

from __future__ import annotations

from extender.planner import blocks


def assign(
    current: frozenset[int],
    target: int,
    free: int,
    max_swap: int | None,
    avoid: int = 0,
    urgent: int = 0,
    per_node: int = 0,
) -> frozenset[int]:
    """The set for this step: as close to `target` GPUs as the swap cap allows.

    `free` is the mask of GPUs the service may hold (its current GPUs that no
    job took, plus idle ones). `max_swap` None means unconstrained (step 0).
    Losing a current GPU that is no longer in `free` counts against the cap;
    callers must not take more of a service's GPUs than its cap allows.
    `avoid` marks GPUs that planned jobs will want soon: the service gives
    those back first, and with budget to spare moves off them (one GPU
    released and one acquired elsewhere per two units of swap). `urgent` (a
    part of `avoid`) marks GPUs a job is planned to take next step: the
    service leaves those first, and when no GPU is free of plans it moves to
    one on another node (of `per_node` GPUs) that is wanted later. A job that
    can start next step then does not wait on a service that had nowhere
    better to go; moving inside the node would only change which of that
    node's jobs waits.
    """
    keep_mask = blocks.mask_of(current) & free
    lost = len(current) - keep_mask.bit_count()
    budget = (10**9 if max_swap is None else max_swap) - lost
    have = keep_mask.bit_count()
    if target < have:
        drop = min(have - target, max(budget, 0))
        budget -= drop
        for g in list(blocks.bits(keep_mask & avoid)) + list(blocks.bits(keep_mask & ~avoid)):
            if drop == 0:
                break
            keep_mask &= ~(1 << g)
            drop -= 1
    elif target > have:
        grow = min(target - have, max(budget, 0))
        budget -= grow
        for g in blocks.bits_high_first(free & ~keep_mask & ~avoid):
            if grow == 0:
                break
            keep_mask |= 1 << g
            grow -= 1
        for g in blocks.bits_high_first(free & ~keep_mask):
            if grow == 0:
                break
            keep_mask |= 1 << g
            grow -= 1
    # Move off GPUs planned jobs want, those wanted next step first, while swap budget
    # and room elsewhere remain: where nobody wants a GPU soon, else (for a GPU wanted
    # next step) to another node, where one is wanted later.
    elsewhere = free & ~keep_mask & ~avoid
    for g in list(blocks.bits(keep_mask & urgent)) + list(blocks.bits(keep_mask & avoid & ~urgent)):
        to = elsewhere
        if not to and per_node and urgent >> g & 1:
            node = ((1 << per_node) - 1) << (g // per_node * per_node)
            to = free & ~keep_mask & ~urgent & ~node
        if budget < 2 or not to:
            break
        top = to.bit_length() - 1
        keep_mask = (keep_mask & ~(1 << g)) | (1 << top)
        elsewhere &= ~(1 << top)
        budget -= 2
    return blocks.set_of(keep_mask)


def releasable(current: frozenset[int], target: int, max_swap: int | None) -> int:
    """How many of its current GPUs a service can give up this step and still stay
    legal: x released, y acquired, x + y <= cap and |current| - x + y == target."""
    if max_swap is None:
        return len(current)
    n = len(current)
    if target >= n:
        # must grow by target - n: acquisitions use the cap first
        return max(0, (max_swap - (target - n)) // 2)
    return min(n, (max_swap + n - target) // 2)

"""Choosing a real-time service's GPU set for one step, within its swap cap.

Services are elastic: any GPUs will do. To keep the free pool in shapes that
batch blocks can use, a service keeps what it has, grows into the highest
free GPUs and gives back its lowest ones (jobs pack from the bottom), or with
`thin_first` (gpuroster's) those on the node where it holds fewest first, so
that whole nodes free sooner and the plan's locks (`release_order`) hold.
"""

from __future__ import annotations

from extender.planner import blocks


def spare(held: frozenset[int], room: int, free: int, unit: int = 1, per_node: int = 0,
          most: int = 0) -> frozenset[int]:
    """Up to `room` GPUs of the mask `free` to add to `held`, the highest first; with
    `unit` > 1 whole replicas of `unit` GPUs on one node (nodes of `per_node` GPUs), and
    with `most` no node holding more than that many."""
    if room <= 0 or not free:
        return frozenset()
    out: list[int] = []
    if unit <= 1 and not most:
        for g in blocks.bits_high_first(free):
            if len(out) == room:
                break
            out.append(g)
        return frozenset(out)
    unit = max(1, unit)
    here: dict[int, list[int]] = {}
    for g in blocks.bits_high_first(free):
        here.setdefault(g // per_node, []).append(g)
    for node, gs in here.items():  # nodes in the order of their highest free GPU
        held_there = sum(1 for g in held if g // per_node == node)
        cap = len(gs) if not most else max(0, most - held_there)
        take = min(len(gs), cap, room - len(out)) // unit * unit
        out.extend(gs[:take])
        if len(out) + unit > room:
            break
    return frozenset(out)


def assign(
    current: frozenset[int],
    target: int,
    free: int,
    max_swap: int | None,
    wanted: tuple[int, ...] = (),
    unit: int = 1,
    per_node: int = 0,
    most: int = 0,
    thin_first: bool = False,
) -> frozenset[int]:
    """The set for this step: as close to `target` GPUs as the swap cap allows.

    `free` is the mask of GPUs the service may hold (its current GPUs that no
    job took, plus idle ones). `max_swap` None means unconstrained (step 0).
    Losing a current GPU that is no longer in `free` counts against the cap;
    callers must not take more of a service's GPUs than its cap allows.
    `wanted[i]` marks the GPUs of the blocks planned to start i + 1 steps from
    now: the service grows around them, gives them back first, and with budget
    to spare moves off them (one GPU released and one acquired elsewhere per two
    units of swap) to GPUs nobody wants soon. Off a GPU wanted next step it also
    moves to one wanted later, the latest there is: the job that can start next
    step then does not wait on a service that had nowhere better to go, and the
    plan that put it there, which counted on the service moving, holds.
    With `unit` > 1 (GPUs per replica, nodes of `per_node` GPUs) the set holds
    whole replicas: a multiple of `unit` GPUs on every node, and with `most` at
    most that many GPUs on any node (`_assign_units`). Shrinking, it gives back
    first the GPUs planned jobs want, then (`thin_first`, nodes of `per_node` GPUs)
    in `release_order`, else the lowest first.
    """
    if unit > 1 or most:
        return _assign_units(current, target, free, max_swap, wanted, unit, per_node,
                             most or per_node, thin_first)
    avoid = 0
    for w in wanted:
        avoid |= w
    urgent = wanted[0] if wanted else 0
    keep_mask = blocks.mask_of(current) & free
    lost = len(current) - keep_mask.bit_count()
    budget = (10**9 if max_swap is None else max_swap) - lost
    have = keep_mask.bit_count()
    if target < have:
        drop = min(have - target, max(budget, 0))
        budget -= drop
        order = (release_order(blocks.set_of(keep_mask), per_node) if thin_first
                 else list(blocks.bits(keep_mask)))
        for g in list(blocks.bits(keep_mask & avoid)) + [g for g in order if not avoid >> g & 1]:
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
    # next step) where it is wanted last.
    elsewhere = free & ~keep_mask & ~avoid
    for g in list(blocks.bits(keep_mask & urgent)) + list(blocks.bits(keep_mask & avoid & ~urgent)):
        to = elsewhere
        if not to and urgent >> g & 1:
            to = _wanted_last(free & ~keep_mask & ~urgent, wanted)
        if budget < 2 or not to:
            break
        top = to.bit_length() - 1
        keep_mask = (keep_mask & ~(1 << g)) | (1 << top)
        elsewhere &= ~(1 << top)
        budget -= 2
    return blocks.set_of(keep_mask)


def _assign_units(current: frozenset[int], target: int, free: int, max_swap: int | None,
                  wanted: tuple[int, ...], unit: int, per_node: int,
                  most: int, thin_first: bool = False) -> frozenset[int]:
    """`assign` for replicas of `unit` GPUs, each inside one node, at most `most` GPUs
    (whole replicas) on a node.

    The same preferences as one GPU at a time, in whole replicas: keep what it
    has, grow into the highest free nodes with room for a replica, give back
    replicas on nodes planned jobs want (else the lowest, or with `thin_first` where it
    holds fewest), and move off planned
    blocks within the node, or a whole replica to another node when budget allows.
    GPUs a node holds beyond a multiple of `unit`, or beyond `most`, host no
    replica: they go first, as far as the cap allows.
    """
    avoid = 0
    for w in wanted:
        avoid |= w
    urgent = wanted[0] if wanted else 0
    keep = blocks.mask_of(current) & free
    budget = (10**9 if max_swap is None else max_swap) - (len(current) - keep.bit_count())
    full = (1 << per_node) - 1
    most -= most % unit
    nodes = [full << (i * per_node)
             for i in range(-(-max(free | keep, 1).bit_length() // per_node))]

    def shed(node: int, n: int) -> None:
        # n of the service's GPUs on `node`: those planned jobs want first, lowest first
        nonlocal keep
        mine = keep & node
        for g in [*blocks.bits(mine & avoid), *blocks.bits(mine & ~avoid)][:n]:
            keep &= ~(1 << g)

    def room(skip: int) -> list[int]:
        # GPUs for a moved replica, highest first, on the highest node but `skip` with
        # room for one that nobody wants soon
        idle = free & ~keep & ~avoid
        for node in reversed(nodes):
            here = idle & node
            if (node != skip and here.bit_count() >= unit
                    and (keep & node).bit_count() + unit <= most):
                return [*blocks.bits_high_first(here)]
        return []

    def held() -> list[int]:
        # the nodes (masks) where the service holds GPUs, lowest first
        return [n for n in nodes if keep & n]

    for node in held():
        n = (keep & node).bit_count()
        odd = min(max(n - most, n % unit), max(budget, 0))
        if odd:
            shed(node, odd)
            budget -= odd
    have = keep.bit_count()
    goal = target - target % unit
    if goal < have:
        mine = held()
        for _ in range(min(have - goal, max(budget, 0)) // unit):
            node = max((n for n in mine if keep & n),
                       key=lambda n: ((keep & n & avoid).bit_count(),
                                      -(keep & n).bit_count() if thin_first else 0, -n))
            shed(node, unit)
            budget -= unit
    elif goal > have:
        # Highest nodes first, as many replicas as fit on each: GPUs nobody wants
        # soon, then (on nodes with no such room) any.
        need = min(goal - have, max(budget, 0)) // unit
        for spare in (True, False):
            for node in reversed(nodes):
                if need == 0:
                    break
                here = free & ~keep & node & (~avoid if spare else -1)
                k = min(need, here.bit_count() // unit,
                        (most - (keep & node).bit_count()) // unit)
                if k:
                    for g in [*blocks.bits_high_first(here & ~avoid),
                              *blocks.bits_high_first(here & avoid)][:k * unit]:
                        keep |= 1 << g
                    need -= k
                    budget -= k * unit
    # Off planned blocks: within the node (one GPU out and one in), else a whole replica
    # to a node with room nobody wants soon.
    for node in held():
        for g in [*blocks.bits(keep & node & urgent), *blocks.bits(keep & node & avoid & ~urgent)]:
            if budget < 2:
                break
            to = free & ~keep & ~avoid & node
            if not to and urgent >> g & 1:
                to = _wanted_last(free & ~keep & ~urgent & node, wanted)
            if to:
                keep = (keep & ~(1 << g)) | (1 << (to.bit_length() - 1))
                budget -= 2
    for node in held():
        while keep & node & avoid and budget >= 2 * unit:
            add = room(skip=node)
            if not add:
                break
            for g in add[:unit]:
                keep |= 1 << g
            shed(node, unit)
            budget -= 2 * unit
    return blocks.set_of(keep)


def _wanted_last(candidates: int, wanted: tuple[int, ...]) -> int:
    """Those of `candidates` (all wanted by some plan) whose first planned start is the
    latest: wanted by `wanted[i]` and by no earlier step, for the largest such i."""
    first = [0] * len(wanted)  # first[i]: GPUs wanted first i + 1 steps from now
    seen = 0
    for i, w in enumerate(wanted):
        first[i] = w & ~seen
        seen |= w
    for here in reversed(first):
        if candidates & here:
            return candidates & here
    return 0


def release_order(gpus: frozenset[int], per_node: int) -> list[int]:
    """A service's GPUs in the order it lets them go (`assign`, and the plan's locks,
    `servicing.held_ahead`, which count on it): those on the nodes where it holds the
    fewest first, the lowest first among those. A replica or two left on a node is what
    keeps a whole-node block from being planned there; taken lowest first overall, a
    service on two nodes kept its GPUs on the higher one longest, a gang planned there
    slipped a step at every re-plan, and spare replicas that went back to those GPUs each
    step kept two 8-GPU jobs off for the run's last 28 steps (wrong-noise-16g-s2514)."""
    count: dict[int, int] = {}
    for g in gpus:
        count[g // per_node] = count.get(g // per_node, 0) + 1
    return sorted(gpus, key=lambda g: (count[g // per_node], g))


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

"""`fifo`: the published baseline, exactly as MODEL.md defines it.

Services hold a fixed reservation at the peak of their forecast, on fixed GPUs
from the top (the first service ends at GPU N-1). Batch jobs form one queue in
arrival order (ties: file order); each step the head starts on the lowest free
legal block if one exists, then the next head is tried; the first that cannot
start ends the step. Priority plays no part.
"""

from __future__ import annotations

from extender.planner import blocks, model, policies, scaling


def reservation_ranges(inp: model.PlanInput) -> dict[str, frozenset[int]]:
    """Fixed GPU ranges from the top, in service order: each service the highest GPUs no
    service before it took (of its nodes, where it is limited to some). A service of
    several GPUs per replica, or limited per node (never in a scenario file), takes
    them node by node, a whole number of replicas on each."""
    taken = 0
    out: dict[str, frozenset[int]] = {}
    g = inp.cluster.gpus_per_node
    for v in inp.services:
        size = (
            v.reservation
            if v.reservation is not None
            else max(v.forecast[: inp.horizon], default=0)
        )
        free = v.allowed(inp.cluster) & ~taken
        if v.unit == 1 and not v.most_per_node:
            out[v.name] = frozenset(list(blocks.bits_high_first(free))[: max(0, size)])
        else:  # highest nodes first, whole replicas on each: what a service grows into
            out[v.name] = scaling.assign(frozenset(), max(0, size), free, None, (), v.unit,
                                         g, v.most_per_node)
        taken |= blocks.mask_of(out[v.name])
    return out


def free_after_running(inp: model.PlanInput) -> int:
    """The GPUs neither running jobs nor lost nodes hold, as a mask."""
    free = (1 << inp.cluster.gpus) - 1
    free &= ~blocks.mask_of(inp.unavailable_gpus)
    for r in inp.running:
        free &= ~r.block.mask
    return free


class Fifo:
    name = "fifo"

    def plan(self, inp: model.PlanInput) -> model.Plan:
        c = inp.cluster
        plan = model.Plan(now=inp.now)
        reserved = reservation_ranges(inp)
        plan.service_gpus = reserved
        free = free_after_running(inp)
        for gpus in reserved.values():
            free &= ~blocks.mask_of(gpus)
        queue = sorted(inp.queued, key=lambda q: q.arrival_step)  # stable: file order on ties
        for q in queue:
            b = blocks.lowest(free & q.allowed(c), q.gpus, c)
            if b is None:
                plan.reasons[q.name] = (
                    "waiting behind the head of the fifo queue"
                    if q is not queue[0]
                    else "no free block of this size"
                )
                break
            plan.starts[q.name] = b
            free &= ~b.mask
        for q in queue:
            if q.name not in plan.starts:
                plan.reasons.setdefault(q.name, "waiting behind the head of the fifo queue")
        return plan


@policies.register("fifo")
def _create() -> Fifo:
    return Fifo()

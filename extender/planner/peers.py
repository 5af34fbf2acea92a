"""Peer policies a user would pick instead of fifo, on the same simulator.

- `priority-skip`: a queue manager's order (priority, then arrival) with
  skip-ahead: any queued job that fits now starts, in that order. Real-time
  services are scaled reactively to the previous step's demand (what a
  horizontal autoscaler does), within their swap cap.
- `priority-easy`: priority order with EASY backfilling: the head gets a
  reservation at the earliest time a block frees (by running jobs'
  estimates); later jobs may start now only if they cannot delay it. Services
  keep fifo's fixed reservation at the forecast peak.
"""

from __future__ import annotations

from extender.planner import blocks, fifo, model, policies, scaling


def _priority_order(queued: tuple[model.QueuedJob, ...]) -> list[model.QueuedJob]:
    return sorted(queued, key=lambda q: (-q.priority, q.arrival_step))


class PrioritySkip:
    name = "priority-skip"

    def plan(self, inp: model.PlanInput) -> model.Plan:
        c = inp.cluster
        plan = model.Plan(now=inp.now)
        free = fifo.free_after_running(inp)
        for v in inp.services:
            free &= ~blocks.mask_of(v.current_gpus)
        # Services first: they keep their GPUs and scale to last step's demand.
        for v in inp.services:
            target = v.past_demand[-1] if v.past_demand else (v.forecast[0] if v.forecast else 0)
            cap = None if inp.now == 0 else v.max_swap + v.lost
            gpus = scaling.assign(
                v.current_gpus, target, (free | blocks.mask_of(v.current_gpus)) & v.allowed(c),
                cap, (), v.unit, c.gpus_per_node, v.most_per_node,
            )
            plan.service_gpus[v.name] = gpus
            free &= ~blocks.mask_of(gpus)
        for q in _priority_order(inp.queued):
            b = blocks.lowest(free & q.allowed(c), q.gpus, c)
            if b is None:
                plan.reasons[q.name] = "no free block of this size now"
                continue
            plan.starts[q.name] = b
            free &= ~b.mask
        return plan


class PriorityEasy:
    name = "priority-easy"

    def plan(self, inp: model.PlanInput) -> model.Plan:
        c = inp.cluster
        plan = model.Plan(now=inp.now)
        reserved = fifo.reservation_ranges(inp)
        plan.service_gpus = reserved
        base = (1 << c.gpus) - 1
        for gpus in reserved.values():
            base &= ~blocks.mask_of(gpus)
        base &= ~blocks.mask_of(inp.unavailable_gpus)
        free = base
        for r in inp.running:
            free &= ~r.block.mask
        order = _priority_order(inp.queued)
        ends = [(r.expected_end(inp.now), r.block.mask) for r in inp.running]
        head_block: model.Block | None = None
        shadow = 0
        for q in order:
            if head_block is None:
                b = blocks.lowest(free & q.allowed(c), q.gpus, c)
                if b is not None:
                    plan.starts[q.name] = b
                    free &= ~b.mask
                    ends.append((inp.now + q.estimate_steps, b.mask))
                    continue
                # The head waits: reserve the earliest block that frees, by estimates.
                future = free
                for end, mask in sorted(ends):
                    future |= mask & base
                    hb = blocks.lowest(future & q.allowed(c), q.gpus, c)
                    if hb is not None:
                        head_block, shadow = hb, end
                        break
                if head_block is None:
                    # Cannot fit even when everything running ends: not a head to wait for.
                    plan.reasons[q.name] = "larger than the GPUs outside the reservation"
                    continue
                plan.reasons[q.name] = "head of the queue, waiting for a block"
                plan.planned_start[q.name] = shadow
                plan.planned_block[q.name] = head_block
                continue
            b = _backfill_block(free, q, inp.now, shadow, head_block, c)
            if b is None:
                plan.reasons[q.name] = "waiting for a block that does not delay the head"
                continue
            plan.starts[q.name] = b
            free &= ~b.mask
        return plan


def _backfill_block(
    free: int, q: model.QueuedJob, now: int, shadow: int, head: model.Block, c: model.Cluster
) -> model.Block | None:
    free &= q.allowed(c)
    if now + q.estimate_steps <= shadow:
        return blocks.lowest(free, q.gpus, c)
    return blocks.lowest(free & ~head.mask, q.gpus, c)


@policies.register("priority-skip")
def _create_skip() -> PrioritySkip:
    return PrioritySkip()


@policies.register("priority-easy")
def _create_easy() -> PriorityEasy:
    return PriorityEasy()

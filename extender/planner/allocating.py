"""`gpuroster` (fast mode): the planner's allocator on the hot path.

`Gpuroster.plan` reads the plan input into the frame every pass starts from (`frame`),
tries the queue orders and keeps the plan the objective picks (`ordering`), each order
placed by one pass (`placing`) that may start a job over the services' curves by a
trade (`trading`), and then seats the services at step now (`seating`). Block choice
lives in `blocks`, the services' curves and the GPUs they hold while they move off in
`servicing`, their growth in `scaling`, forecast headroom in `headroom`, and the
policy's options in `options`.

Every re-plan builds the whole horizon, and only its first step is committed.

1. Real-time services are curves, not reservations: each service's GPU count
   over the plan is its forecast (raised by the recent forecast error), made
   reachable under its swap cap (it ramps up before a peak, sheds after).
2. Batch-like jobs are placed over the horizon, highest priority first, each
   at the earliest step where a legal block stays free for its whole estimate
   and the services' curve still fits beside it, through the steps past the
   horizon too (no end-of-horizon myopia). Each placed job holds its block in
   the plan, so later jobs fill the holes it leaves (backfilling) without
   delaying it; a job that waited longer than `max_wait_hours` goes first, so
   nothing starves that some stretch of the services' curve can hold. A job the
   curve never leaves room for starts now when a block is free and it is worth
   more than the real-time shortfall it causes, priced at `realtime_penalty`
   times the services' priority (the cheapest services first); one pass tries
   those trades before placing anything else, and the services' planned
   counts show what a trade leaves them. Such a job past `max_wait_hours` does
   not starve either: it trades at the first step a block of it frees (work
   planned after it goes around that), and the services give up their GPUs in
   it ahead of time, at their swap cap. And a job that fits beside the curve
   only later may start now over it instead, when that is worth more than the
   later start net of the shortfall (each queue order that meets such a trade
   is planned once more taking it, and the objective picks).
3. Blocks are chosen best-fit: the fullest node that fits, at a size-aligned
   offset when one is free, low GPUs first (services live at the top), so the
   free pool keeps the shapes later work can use.
4. Several queue orders are tried and the plan with the best objective wins:
   priority x GPUs x time-decay weight for the batch work, minus the
   real-time shortfall priced at `realtime_penalty` times its weight. Within
   a priority: by arrival, widest, longest or shortest first; by reach (priority squared
   x GPUs x the square root of the estimate: a much wider job of the next
   priority down can go first, and the objective decides whether that pays);
   and once more by priority with every job that fits now started first, the
   rest planned around them (a job that fits today's hole is not kept out of it by the
   reservation of an equal job that cannot start yet, unless that pays).

The rules of MODEL.md hold by construction; the simulator checks them anyway.
"""

from __future__ import annotations

import operator

from extender.planner import (
    blocks,
    frame,
    model,
    options,
    ordering,
    policies,
    seating,
    servicing,
    trading,
)

Options = options.Options  # (the policy's options, as its callers name them)


def service_rooms(inp: model.PlanInput, o: Options,
                  told: dict[str, list[int]]) -> dict[str, list[int]]:
    """Per service, the GPUs over its forecast (`told`, by name) the plan holds at each
    lead under options `o` (`servicing.service_room`), before `held_to_reservation`
    holds them to the static reservation: the fast plan's, and full mode's too."""
    spd = inp.steps_per_day
    # (At most an eighth of the horizon: a timing error is a part of the day the plan
    # sees, and the lag search stays a few dozen sums where steps are short.)
    tolerance = min(round(o.shift_hours * spd / 24), inp.horizon // 8)
    rooms = {
        v.name: servicing.service_room(v, told[v.name], o.service_level,
                                       o.error_window or spd, tolerance, spd, o.evidence,
                                       round(o.stand_in_hours * spd / 24), o.headroom_cap)
        for v in inp.services
    }
    return rooms


def held_to_reservation(inp: model.PlanInput, o: Options, told: dict[str, list[int]],
                        rooms: dict[str, list[int]],
                        leads: dict[str, float | None]) -> dict[str, list[int]]:
    """`rooms` with each service's held to its static reservation where it is ahead of
    that reservation's record by more than `Options.reservation_lead` (`leads`, by name:
    `servicing.reservation_lead`; `servicing.held_to_reservation`)."""
    if o.reservation_lead is None:
        return rooms
    window = o.error_window or inp.steps_per_day
    return {v.name: servicing.held_to_reservation(v, told[v.name], rooms[v.name],
                                                  o.reservation_lead, window, leads[v.name])
            for v in inp.services}


def service_floors(inp: model.PlanInput, o: Options, told: dict[str, list[int]],
                   leads: dict[str, float | None]) -> dict[str, list[int] | None]:
    """Per service, the least its curve holds at each lead (`servicing.cover`; None: no
    floor), at most its static reservation while it is ahead of that reservation's
    record (as `held_to_reservation` holds its headroom): the fast plan's and full
    mode's."""
    if not o.cover:
        return {v.name: None for v in inp.services}
    reach = [max(1, round(h * inp.steps_per_day / 24)) for h in o.cover_hours]
    out: dict[str, list[int] | None] = {}
    for v in inp.services:
        floor = servicing.cover(v, told[v.name], reach, inp.steps_per_day, o.service_level)
        lead = leads[v.name]
        if (floor is not None and v.reservation is not None and o.reservation_lead is not None
                and lead is not None and lead > o.reservation_lead):
            floor = [x if x < v.reservation else v.reservation for x in floor]
        out[v.name] = floor
    return out


class Gpuroster:
    name = "gpuroster"

    def __init__(self, **options: object) -> None:
        self.options = Options(**options)  # type: ignore[arg-type]
        self._last_winner = 0  # the pass that won the last plan: it goes first (`ordering`)

    def plan(self, inp: model.PlanInput) -> model.Plan:
        o = self.options
        c = inp.cluster
        now, H = inp.now, inp.horizon
        unavailable = blocks.mask_of(inp.unavailable_gpus)
        # By name: every order below sorts stably, so ties go by name and the plan does not
        # depend on how the caller listed the jobs (the simulator as its file does, the
        # controller by arrival and name).
        queue = sorted(inp.queued, key=_BY_NAME)
        longest = max((q.estimate_steps for q in queue), default=1)
        W = min(int(H * o.reserve_factor) + longest, H + o.lookahead_cap)

        # Batch occupancy per step from the pinned running jobs.
        occ = [unavailable] * W
        # Estimates run over; for the services' room, assume each running job
        # may hold its GPUs `overrun_guard` steps past its estimate.
        overrun = [0] * W
        for r in inp.running:
            end = min(r.expected_end(now) - now, W)  # at least 1
            m = r.block.mask
            occ[:end] = [x | m for x in occ[:end]]
            for k in range(end, min(end + o.overrun_guard, W)):
                overrun[k] += r.gpus

        # Services: their curves, and the capacity they leave for batch work.
        told = {v.name: servicing.forecast_curve(v, W, inp.steps_per_day) for v in inp.services}
        unheld = service_rooms(inp, o, told)
        # How far each service is ahead of its static reservation's record: once, for the
        # hold and for the plan (the controller's gauge reads it there).
        leads = servicing.reservation_leads(inp.services)
        rooms = held_to_reservation(inp, o, told, unheld, leads)
        # Where a service's headroom gave way to batch work, what it would have held: its
        # spare replicas on idle GPUs may reach that.
        unheld_peak = {
            v.name: max(map(operator.add, told[v.name][:H], unheld[v.name][:H]), default=0)
            for v in inp.services if rooms[v.name] is not unheld[v.name]}
        floors = service_floors(inp, o, told, leads)
        curves = {
            v.name: servicing.service_curve(v, W, now, inp.steps_per_day, o.error_memory,
                                  room=rooms[v.name], forecast=told[v.name],
                                  limit=servicing.ceiling(v, o.headroom_cap),
                                  floor=floors[v.name])
            for v in inp.services
        }
        capacity = [c.gpus - unavailable.bit_count()] * W
        for curve in curves.values():
            capacity = list(map(operator.sub, capacity, curve))
        if inp.services:
            capacity = list(map(operator.sub, capacity, overrun))
        R = max(H, min(W - 1, int(H * o.reserve_factor)))
        locked = servicing.locks(inp, curves, R)

        bound = o.wait_steps(inp.steps_per_day)
        starving = [q for q in queue if now - q.arrival_step >= bound]
        rest = [q for q in queue if now - q.arrival_step < bound]
        starving.sort(key=_ARRIVAL)
        # Jobs the services' curve never leaves room for within reach (whatever other batch
        # work does) start only by a trade, and only now: once a block is free for one, a
        # pass that tries their trades before anything else takes that block.
        only_trade = trading.only_by_trade(queue, capacity, R) if inp.services else []
        trade_first = only_trade if o.trade_first else []
        # A job only a trade starts, waiting past the starvation bound, does not wait for a
        # block to be free now (other work would keep taking a GPU of it): it trades at the
        # first step a block frees, and work planned after it goes around that.
        starved = frozenset(q.name for q in starving)
        drain = starved & frozenset(only_trade) if o.drain else frozenset()
        # What the services still hold if a trade takes their GPUs: they shrink at their
        # swap cap.
        shrunk = servicing.locks(inp, curves, R, shrink=True) if drain else locked
        # Every job starting now is the most any order can score: once an order
        # reaches that, the others cannot win.
        cum = frame.cumulative_weights(o.decay, W)
        full = (1 << c.gpus) - 1
        jobs = {}
        make = tuple.__new__  # (a Job without the named tuple's own __new__: per job)
        for q in queue:
            d = q.estimate_steps if q.estimate_steps < W else W
            size = q.gpus
            allow = full if q.nodes is None else q.allowed(c)
            worth = q.priority * size
            jobs[q.name] = make(frame.Job, (q, q.name, d, size, allow, (size, d, allow), worth,
                                            worth * cum[d]))
        ceiling = sum(map(frame.REACH, jobs.values()))
        n_off = unavailable.bit_count()
        # Services limited to some nodes need their curve inside those nodes: per such
        # node set, the GPUs left there for batch work at each step.
        groups = servicing.node_rooms(inp.services, curves, occ, unavailable, c, W)
        # Room left for batch work at each step (capacity already excludes the
        # unavailable GPUs): the same start for every order.
        slack = list(map(operator.sub, capacity, map(int.bit_count, occ)))
        if n_off:
            slack = [x + n_off for x in slack]
        guard = o.overrun_guard if inp.services else 0
        # What a shortfall costs, per GPU-step: the services' curves, lowest priority first
        # (a job placed over the curve takes the cheapest GPUs first).
        shortable = sorted(((o.realtime_penalty * v.priority, curves[v.name])
                            for v in inp.services), key=lambda x: x[0])
        # The room as bytes where every step's fits in one (with the room kept for running
        # jobs' overruns too, which starving jobs may use): `placing.place` searches it fast.
        packed = frame.pack(slack, max(overrun))
        f = frame.Frame(o, c, W, R, occ, slack, packed, locked, shrunk,
                        overrun if inp.services else None, guard, ceiling, groups, shortable,
                        starved, drain)
        best, winner = ordering.best(f, [jobs[q.name] for q in starving],
                                     [jobs[q.name] for q in rest], trade_first,
                                     self._last_winner)
        if winner is not None:
            self._last_winner = winner

        plan = model.Plan(now=now)
        plan.lead = leads
        queued = {q.name: q for q in inp.queued}
        used_now = occ[0]
        placed = [frame.Placed(*p) for p in best.placed]
        for p in placed:
            plan.planned_start[p.name] = now + p.step
            plan.planned_block[p.name] = block = p.block
            if p.step == 0:
                plan.starts[p.name] = block
                used_now |= block.mask
            else:
                plan.reasons[p.name] = f"planned start at step {now + p.step}" + (
                    ", over the services' curve: waited past the starvation bound, and no "
                    "block of its size is ever left beside the curve" if p.traded else "")
        for name in queued:
            if name not in plan.planned_start:
                plan.reasons[name] = "no room within the plan's horizon"

        # The counts the plan gives the services: their curves less what a trade takes
        # from them (the cheapest first, as it was priced).
        traded = any(best.short)
        given = best.short[:] if traded else []
        counts: dict[str, list[int]] = {}
        for v in sorted(inp.services, key=lambda v: o.realtime_penalty * v.priority):
            counts[v.name] = list(curves[v.name] if traded else curves[v.name][:H])
            for k, g in enumerate(given):
                if g:
                    take = min(g, counts[v.name][k])
                    counts[v.name][k] -= take
                    given[k] -= take
        # Step now: the curve, unless a trade planned later takes more of a service than
        # its swap cap lets it give up by then; it starts giving up GPUs now.
        targets = {}
        for v in inp.services:
            target = curves[v.name][0]
            if inp.now > 0 and traded and v.max_swap > 0:
                for k in range(1, min(R + 1, W)):
                    if counts[v.name][k] < curves[v.name][k]:
                        target = min(target, counts[v.name][k] + v.max_swap * k)
            targets[v.name] = max(0, target)
        now_told = {v.name: told[v.name][0] for v in inp.services}
        cut = servicing.headroom_last(inp, used_now, targets, now_told)
        seating.seat(inp, o, plan, placed, used_now, cut, curves, unheld_peak)
        for v in inp.services:  # at step now, what they hold
            room = rooms[v.name][0] if rooms[v.name] else 0
            if cut[v.name] < targets[v.name]:  # headroom given way: what is left of it
                room = min(room, max(0, cut[v.name] - now_told[v.name]))
            plan.headroom[v.name] = room
            plan.service_counts[v.name] = tuple(
                [len(plan.service_gpus[v.name])] + counts[v.name][1:H])
        return plan


_BY_NAME = operator.attrgetter("name")
_ARRIVAL = operator.attrgetter("arrival_step")


@policies.register("gpuroster")
def _create(**options: object) -> Gpuroster:
    return Gpuroster(**options)

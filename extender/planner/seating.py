"""The services' GPUs at step now, once the jobs are planned: which each keeps, grows
into, sheds or moves off, and the idle GPUs they hold as spare replicas.

Purely computational: the standard library.
"""

from __future__ import annotations

from extender.planner import blocks, frame, headroom, model, options, scaling, servicing


def seat(inp: model.PlanInput, o: options.Options, plan: model.Plan,
         placed: list[frame.Placed], used_now: int, targets: dict[str, int],
         curves: dict[str, list[int]], unheld_peak: dict[str, int]) -> None:
    """The services' GPUs at step now: keep, grow into the top idle GPUs, shed the
    lowest, and move off the blocks of jobs planned to start soon (one left short of
    its target tops up from what those after it gave back); then the GPUs still idle
    that no job wants next step as spare replicas (`Options.spare_fill`), up to the
    peak of the service's curve over the horizon (of what it would have held, by
    `unheld_peak`, where its headroom gave way to batch work:
    `Options.reservation_lead`) and as many as
    the swap cap can shed again toward the curve at the next step."""
    c = inp.cluster
    now = inp.now
    idle = ((1 << c.gpus) - 1) & ~used_now
    for v in inp.services:
        idle &= ~blocks.mask_of(v.current_gpus)
    # Blocks of jobs planned to start while the services can still move, by step:
    # wanted[i], those planned i + 1 steps from now.
    wanted = [0] * o.migrate_steps
    for p in placed:
        if 0 < p.step <= o.migrate_steps:
            wanted[p.step - 1] |= p.block.mask
    for v in sorted(inp.services, key=lambda v: (-v.priority, v.name)):
        own = blocks.mask_of(v.current_gpus) & ~used_now
        cap = None if now == 0 else v.max_swap + v.lost
        gpus = scaling.assign(
            v.current_gpus, targets[v.name], (idle | own) & v.allowed(c), cap,
            tuple(wanted), v.unit, c.gpus_per_node, v.most_per_node, thin_first=True,
        )
        plan.service_gpus[v.name] = gpus
        # What it gave back (shed, or moved off a planned block) is free for the
        # services still to come this step: one moving off a GPU must not leave
        # another short of its curve while that GPU sits idle.
        idle = (idle | own) & ~blocks.mask_of(gpus)
    # A service placed before one that shed (or moved off a planned block) found no
    # idle GPU then: what was given back tops it up to its target now, within its swap
    # cap, before anything goes as spares, so no service is left short beside an idle GPU.
    for v in sorted(inp.services, key=lambda v: (-v.priority, v.name)):
        gpus = plan.service_gpus[v.name]
        free = idle & v.allowed(c)
        if not free or len(gpus) >= targets[v.name]:
            continue
        more = scaling.assign(
            v.current_gpus, targets[v.name], free | blocks.mask_of(gpus),
            None if now == 0 else v.max_swap + v.lost, tuple(wanted), v.unit,
            c.gpus_per_node, v.most_per_node, thin_first=True,
        )
        if len(more) > len(gpus):
            plan.service_gpus[v.name] = more
            idle = (idle | blocks.mask_of(gpus)) & ~blocks.mask_of(more)
    if not o.spare_fill:
        return
    soon = wanted[0] if wanted else 0
    window = o.error_window or inp.steps_per_day
    for v in sorted(inp.services, key=lambda v: (-v.priority, v.name)):
        # A service whose forecast held (or that has no past yet) gets no spares, so
        # exact forecasts plan as they did without them.
        if not headroom.ran_over(v.past_demand, v.past_forecast, window):
            continue
        gpus = plan.service_gpus[v.name]
        curve = curves[v.name]
        room = max(max(curve[:inp.horizon], default=0),
                   unheld_peak.get(v.name, 0)) - len(gpus)
        top = servicing.ceiling(v, o.headroom_cap)
        if top is not None:  # spares too stay within the reservation the service replaces
            room = min(room, top - len(gpus))
        if now > 0:  # swaps now, and the fall to next step's curve, within the cap
            after = curve[1] if len(curve) > 1 else targets[v.name]
            room = min(room, v.max_swap - len(gpus ^ v.current_gpus),
                       v.max_swap - max(0, len(gpus) - after))
        spare = scaling.spare(gpus, room, idle & ~soon & v.allowed(c), v.unit,
                              c.gpus_per_node, v.most_per_node)
        if spare:
            spare = leaving_in_time(v, gpus, spare, curve, wanted, c.gpus_per_node)
        if spare:
            plan.service_gpus[v.name] = gpus | spare
            plan.spare[v.name] = len(spare)
            idle &= ~blocks.mask_of(spare)



def leaving_in_time(v: model.ServiceState, gpus: frozenset[int], spare: frozenset[int],
                     curve: list[int], wanted: list[int], per_node: int) -> frozenset[int]:
    """`spare` less the GPUs the next re-plan would count the service on holding still (it
    holds them then) at a step a job is planned on them from (`wanted[k]`: the blocks
    planned k + 1 steps from now, lead k of the next re-plan): such a spare makes that job's
    start slip a step, and at the next step the spares go back there again (a 4-GPU job
    slipped 16 steps in a row so). With replicas of several GPUs, all of a node's spares go
    where one of them would be late."""
    reach = min(len(wanted), len(curve) - 1) - 1
    while spare and reach > 0:
        ahead = servicing.held_ahead(v, gpus | spare, curve[1:], False, per_node, reach)
        late = 0
        for k, m in enumerate(ahead):
            late |= m & wanted[k]
        late &= blocks.mask_of(spare)
        if not late:
            break
        if v.unit > 1:
            nodes = {g // per_node for g in blocks.bits(late)}
            spare = frozenset(g for g in spare if g // per_node not in nodes)
        else:
            spare = spare - frozenset(blocks.bits(late))
    return spare

"""One queue order's pass: where and when each job starts, and what the plan scores.

A pass places the jobs in its order, each at the earliest step where a legal block
stays free for its whole estimate beside the services' curves (backfilling around the
jobs placed before it), or by a trade over the curves (`trading`). It runs in phases:
the jobs past the starvation bound first, then in fill-now mode every job that fits now,
or in trade-first mode the trades of the jobs only a trade starts, and then the whole
queue. The grid it fills in is its `Draft`; what every pass starts from is the plan's
`frame.Frame`.

Purely computational: the standard library and numpy.
"""

from __future__ import annotations

import math
import operator
from functools import partial, reduce
from operator import or_

import numpy as np
import numpy.typing as npt

from extender.planner import blocks, frame, trading


class Draft:
    """One pass's plan as it is written: the grid it fills in job by job (the GPUs batch
    work holds, the room left beside the services' curves, the GPUs of the curves given
    up to trades), what it has ruled out on the way, and the jobs placed with their
    score. Within a phase the grid only fills up."""

    __slots__ = ("W", "guard", "starving", "shortable", "cum_a", "price_floor", "occ",
                 "slack", "too_full", "no_block", "costs", "priced", "rooms", "short",
                 "ahead", "placed", "score", "done")

    def __init__(self, f: frame.Frame) -> None:
        self.W, self.guard, self.starving, self.shortable = f.W, f.guard, f.starving, f.shortable
        # The reward weights' running sums (`frame.cumulative_weights`), as an array.
        self.cum_a = frame.cumulative_array(f.o.decay, f.W)
        self.price_floor = f.shortable[0][0] if f.shortable else 0.0  # the cheapest shortfall
        self.occ = f.occ[:]
        # The room beside the services' curves per step: as bytes (a step's room below 0
        # as 0, all that is ever asked of it) where it fits in them, else as a list. As
        # bytes, the first start with room for a job's whole run is one search of the
        # steps too full for its size (`frame.clear_from`), and placing a job one
        # translation of its steps: not a slice, a min and a walk per candidate start.
        self.slack: bytearray | list[int] = (bytearray(f.packed) if f.packed is not None
                                             else f.slack[:])
        # Per job size, 1 at steps whose room is below it.
        self.too_full: dict[int, bytearray] = {}
        # Per (job size, GPUs it may use), 1 at steps ahead where no block of it is free at
        # the step itself: the grid only fills up, so none is for the rest of the pass.
        self.no_block: dict[tuple[int, int], bytearray] = {}
        # Per (job size, exact), what a run costs the services, as running sums over the
        # steps (`shortfall`); the room and the curves' GPUs taken change them as jobs hold.
        self.costs: dict[tuple[int, bool], npt.NDArray[np.float64]] = {}
        # `shortable` as arrays (prices, curves a row), for `trading.shortfall_sums`: made
        # when first wanted.
        self.priced: tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]] | None = None
        # Per node set of a limited service, the GPUs left there for batch work per step.
        self.rooms = [(mask, room[:]) for mask, room in f.groups]
        self.short = [0] * f.W  # GPUs of the services' curves given up to jobs so far, per step
        # (start, block) of the starving jobs planned for later. Work planned after them
        # on their GPUs ends a margin before they start: one that overran into the block
        # would push it back, and at every re-plan another might, out of a trough for
        # good. The margin: `overrun_guard` steps, or a share of the work's own estimate.
        self.ahead: list[tuple[int, int]] = []
        # (name, step, start, size, traded) of each job placed, as in `frame.Placed`.
        self.placed: list[tuple[str, int, int, int, bool]] = []
        self.score = 0.0
        self.done: set[str] = set()

    def shortfall(self, size: int, exact: bool) -> npt.NDArray[np.float64]:
        """Running sums of what a job of `size` GPUs costs the services at each step:
        `trading.shortfall_sums` if `exact`, else the bound `trading.least_shortfall`
        (cheaper)."""
        got = self.costs.get((size, exact))
        if got is None:
            if not exact:
                got = trading.least_shortfall(size, self.slack, self.cum_a, self.price_floor)
            else:
                if self.priced is None:
                    W = self.W
                    self.priced = (np.array([p for p, _ in self.shortable]),
                                   np.array([cv[:W] for _, cv in self.shortable],
                                            dtype=np.int64))
                got = trading.shortfall_sums(size, self.slack, self.cum_a, *self.priced,
                                             self.short)
            self.costs[size, exact] = got
        return got

    def before_ahead(self, end: int, margin: int) -> int:
        """The GPUs of starving jobs planned to start within `margin` steps of `end`."""
        near = 0
        for s0, m in self.ahead:
            if end <= s0 < end + margin:
                near |= m
        return near

    def hold(self, j: frame.Job, k: int, end: int, start: int, value: float,
             traded: bool = False) -> None:
        """Place `j` on the block from GPU `start` over steps `k` to `end`, worth `value`."""
        size = j.size
        occ, slack, W = self.occ, self.slack, self.W
        m = ((1 << size) - 1) << start
        occ[k:end] = [x | m for x in occ[k:end]]  # (faster than a map of m.__or__)
        if traded:  # over the services' curve somewhere: note what it takes from them
            short = self.short
            for t in range(k, end):
                if slack[t] < size:
                    short[t] += size - max(0, slack[t])
        # Estimates run over: as for the running jobs, a planned job may hold its GPUs
        # `guard` steps past its estimate, so the services' room there is smaller for
        # the jobs placed after it; else a packed plan turns a one-step overrun into
        # real-time shortfall.
        over = end + self.guard if end + self.guard < W else W
        if type(slack) is bytearray:
            slack[k:over] = slack[k:over].translate(frame.less(size))
            self.too_full.clear()
        else:
            slack[k:over] = map((-size).__add__, slack[k:over])
        self.costs.clear()
        for mask, room in self.rooms:
            if m & mask:
                inside = (m & mask).bit_count()
                for t in range(k, end):
                    room[t] -= inside
        if k and j.name in self.starving:
            self.ahead.append((k, m))
        self.placed.append((j.name, k, start, size, traded))
        self.score += value
        self.done.add(j.name)

    def lend(self, base: list[int], more: list[int]) -> None:
        """Add `more` to the room at each step; packed, nothing is placed yet, so the room
        is `base` (the frame's) and `more`."""
        if type(self.slack) is bytearray:
            packed = frame.pack(list(map(operator.add, base, more)))
            assert packed is not None  # (the frame packs its room only if this fits)
            self.slack = packed
            self.too_full.clear()
        else:
            slack = self.slack
            for t in range(self.W):
                slack[t] += more[t]
        self.costs.clear()

    def take_back(self, more: list[int]) -> None:
        """Take back what `lend` added."""
        if type(self.slack) is bytearray:
            self.slack = bytearray(x - u if x > u else 0
                                   for x, u in zip(self.slack, more, strict=True))
            self.too_full.clear()
        else:
            slack = self.slack
            for t in range(self.W):
                slack[t] -= more[t]
        self.costs.clear()


def place(
    f: frame.Frame,
    queue: list[frame.Job],
    beat: float,
    fill_now: bool = False,
    trade_first: list[str] | None = None,
    sooner: bool = False,
    met: list[bool] | None = None,
    opening: frame.Opening | None = None,
    twin_of: frame.Opening | None = None,
) -> frame.Candidate | None:
    """One queue order's plan, or None once it cannot score more than `beat`.

    `reach` is the most a job can add (starting now; the reward weight only
    decays), so the score so far plus the reach of the jobs still to place
    bounds the pass: below `beat`, it cannot win and is dropped unfinished.

    A job that fits beside the services' curve only at a later step starts now
    over it instead with `sooner`, when that is worth more net of the shortfall;
    without, such a trade is only noted, by appending to `met` (once).

    A plain pass notes in `opening` the jobs it started now before any it did not. A
    fill-now pass given such a note of the same order (`twin_of`) returns `frame.TWIN`
    once its first phase started exactly those: it is then where that pass was after
    them, and places every job after as that pass did.
    """
    o = f.o
    c, W, starving = f.cluster, f.W, f.starving
    locked, shortable = f.locked, f.shortable
    left = f.ceiling  # the reach of the jobs not yet placed or given up on
    bar = beat - 1e-9 * max(1.0, abs(beat)) if o.decay >= 0 else -math.inf
    draft = Draft(f)
    occ, slack, too_full, no_block = draft.occ, draft.slack, draft.too_full, draft.no_block
    rooms, ahead, placed_jobs, done = draft.rooms, draft.ahead, draft.placed, draft.done
    hold, before_ahead = draft.hold, draft.before_ahead
    cum = frame.cumulative_weights(o.decay, W)
    cum_a, short = draft.cum_a, draft.short
    full = (1 << c.gpus) - 1
    price_floor = draft.price_floor
    # Jobs that find no room inside the horizon still get a reservation
    # further out (R steps), so smaller work backfills around them, not over them.
    R = f.R
    # (jobs, the steps their starts may reach, whether they may trade)
    passes = [(queue, R, True)]
    if fill_now:
        # First every job that can start now, in queue order, then the rest planned
        # around them: a job that fits in today's hole is not kept out of it by the
        # reservation of an earlier one that cannot start yet (the objective decides
        # whether that delay is worth it).
        passes = [(queue, 1, False), (queue, R, True)]
    if trade_first:
        # First the trades of the jobs only a trade can start (limit 0: no search
        # beside the curve), then every job in queue order around them.
        wanted = set(trade_first)
        passes = [([j for j in queue if j.name in wanted], 0, True), (queue, R, True)]
    if starving:
        # Jobs past the starvation bound are planned before anything else in every
        # pass, the fill of today's holes included: else each step's newcomers that
        # fit now push them back a step.
        passes.insert(0, ([j for j in queue if j.name in starving], R, True))
    noting = opening  # while set, every job looked at so far started now: noted in it
    for phase, (jobs, limit, may_trade) in enumerate(passes):
        final = phase == len(passes) - 1
        placed_before = len(placed_jobs)
        may_trade = may_trade and bool(shortable)
        # Nor does the room kept for running jobs' overruns hold them back: a newcomer
        # that ends just before their start would, by its overrun step, push them back
        # a step at every re-plan. (If it does overrun, their start slips then.)
        unguarded = f.overrun if phase == 0 and starving else None
        if unguarded:
            draft.lend(f.slack, unguarded)
            slack = draft.slack
        # The grid as the trades read it: the lists placing a job fills in, and this
        # phase's `slack` (replaced above and below, never inside a phase).
        board = frame.Sheet(c, W, cum, cum_a, shortable, occ, slack, short)
        # Within one pass the grid only fills up, so a job that fit nowhere rules out
        # every later job at least as wide and as long: remember the failures.
        # (A job that may use only some nodes rules out the later ones limited to those.)
        failed: list[tuple[int, int, int]] = []
        # Likewise a trade that did not pay rules out the later jobs of the same shape
        # and no higher priority (the room only shrinks; the cheapest shortfall goes
        # first): by shape, the highest priority it failed at.
        untraded: dict[tuple[int, int, int], float] = {}
        # And where a job found its earliest start, a later job of the same shape
        # starts no sooner (the grid fills, the room shrinks, the GPUs kept for
        # starving work only grow): a deep queue of small jobs, a few shapes many
        # times over, does not re-scan from step now for every one of them.
        front: dict[tuple[int, int, int], int] = {}
        for j in jobs:
            q, name, d, size, allow, shape, worth, reach = j
            if name in done:
                continue
            skip = bool(failed) and any(size >= fs and d >= fd and not allow & ~fa
                                        for fs, fd, fa in failed)
            tradable = may_trade and q.priority > untraded.get(shape, -math.inf)
            if skip and not tradable:
                if final:
                    if noting is not None:
                        noting.whole, noting = True, None
                    left -= reach
                    if draft.score + left < bar:
                        return None
                continue
            placed = False
            margin = max(o.overrun_guard, math.ceil(d * o.starving_margin)) if ahead else 0
            # Ruled out above: only a trade is left to try.
            k = limit if skip else front.get(shape, 0)
            while k < limit:
                end = k + d if k + d < W else W
                # A step where the services' curve leaves too little room for this job
                # rules out every start whose run covers it: on past them.
                if type(slack) is bytearray:
                    bad = too_full.get(size)
                    if bad is None:
                        bad = too_full[size] = slack.translate(frame.below(size))
                    if bad.find(1, k, end) >= 0:
                        k = frame.clear_from(bad, k, d)  # the first start clear of them
                        continue
                elif min(slack[k:end]) < size:
                    t = end - 1  # past the last of them in this run
                    while slack[t] >= size:
                        t -= 1
                    k = t + 1
                    continue
                free = allow & ~reduce(or_, occ[k:end], 0)
                free &= ~locked[k]
                if ahead:
                    free &= ~before_ahead(end, margin)
                for mask, room in rooms:  # keep a limited service's room in its nodes
                    if min(room[k:end]) < size:
                        free &= ~mask
                starts = blocks.start_positions(free, size, c)
                if not starts:
                    # The next start sees the same window (and fails the same way)
                    # while the step it drops matches one it keeps, the step it adds
                    # matches one it had, and neither the services' room nor their
                    # locked GPUs change: slide over those without re-reading it.
                    k += 1
                    while (
                        not rooms
                        and not ahead
                        and k < limit
                        and k + d <= W
                        and occ[k - 1] == occ[k]
                        and occ[k + d - 1] == occ[k + d - 2]
                        and slack[k + d - 1] >= size
                        and locked[k] == locked[k - 1]
                    ):
                        k += 1
                    continue
                front[shape] = k
                # Fullness counts batch work only: a node shared with a service is
                # not "snug", since the service moves and jobs do not.
                b = blocks.best_fit(starts, size, full & ~occ[k], c)
                later = worth * (cum[end] - cum[k])
                # Or now, over the services' curve, if that is worth more net of
                # the shortfall: taken with `sooner`, else only noted in `met`.
                # (Cheapest test first: on a busy cluster few GPUs are free at step now.)
                if (k and tradable and (sooner or (met is not None and not met))
                        and (free_now := allow & ~occ[0] & ~locked[0]).bit_count() >= size
                        and not trading.trade_loses(reach, size - max(0, slack[0]), price_floor,
                                             later)
                        and blocks.start_positions(free_now, size, c)):
                    swap = trading.trade(board, q, 0, d, allow,
                                  locked[0] | before_ahead(d, margin), floor=later)
                    if swap is not None:
                        if met is not None and not sooner:
                            met.append(True)
                        else:
                            hold(j, 0, d, *swap, traded=True)
                            placed = True
                            break
                hold(j, k, end, b, later)
                placed = True
                break
            if not placed and not skip and limit:
                failed = [(fs, fd, fa) for fs, fd, fa in failed
                          if not (fs >= size and fd >= d and not fa & ~allow)]
                failed.append(shape)
            if not placed and tradable:
                # Nowhere within reach leaves the services their curve. A job wider than
                # the curve ever leaves free would wait for ever; so it starts now if
                # it is worth more than the shortfall it causes, priced at
                # `realtime_penalty` x the priority of the services it takes from. (Now
                # only: a trade planned for later holds its block against work that
                # could run there, and by then the plan has moved on. Except for a job
                # past the starvation bound: it takes the first step a block frees, and
                # the services shrink towards it at their swap cap.)
                draining = name in f.drain
                trade = trading.trade(board, q, 0, d, allow,
                               (f.shrunk if draining else locked)[0]
                               | before_ahead(d, margin))
                at = 0
                if trade is None and draining:
                    # The first step ahead where a block frees and the trade pays.
                    full_at = no_block.get((size, allow))
                    if full_at is None:
                        full_at = no_block[(size, allow)] = bytearray(R + 1)
                    if full_at.find(0, 1) < 0:
                        found = None  # no block free at any step ahead
                    else:
                        found = trading.drain_trade(board, q, d, allow, f.shrunk, before_ahead,
                                             margin, R, full_at, partial(draft.shortfall, size))
                    if found is not None:
                        at, trade = found
                if trade is not None:
                    hold(j, at, at + d if at + d < W else W, *trade, traded=True)
                    placed = True
                else:
                    untraded[shape] = q.priority
            if noting is not None and final:
                if placed and not placed_jobs[-1][1] and not placed_jobs[-1][4]:
                    noting.names.append(name)  # (step now, not traded)
                else:
                    noting.whole, noting = True, None
            if placed or final:
                left -= reach
                if draft.score + left < bar:
                    return None
        if unguarded:
            draft.take_back(unguarded)
            slack = draft.slack
        if (twin_of is not None and fill_now and phase == len(passes) - 2
                and len(placed_jobs) - placed_before == len(twin_of.names)
                and [p[0] for p in placed_jobs[placed_before:]] == twin_of.names):
            return frame.TWIN
    if opening is not None:
        opening.whole = True
    return frame.Candidate(placed_jobs, draft.score, draft.short)

"""Queue orders, and the plan the objective picks among them.

A plan tries several orders of the queue (`Options.orders`), each placed by one pass
(`placing.place`), and keeps the one with the best objective: priority x GPUs x
time-decay weight for the batch work, less the real-time shortfall at its price.
Jobs past the starvation bound go first in every order. Two modes add a pass in
priority order: fill-now (every job that fits now first) and trade-first (the trades of
the jobs only a trade starts first). An order that met a trade to start a job sooner is
planned once more taking such trades.

Purely computational: the standard library.
"""

from __future__ import annotations

import math
import operator

from extender.planner import frame, placing


def best(f: frame.Frame, first: list[frame.Job], others: list[frame.Job],
         trade_first: list[str], last_winner: int) -> tuple[frame.Candidate, int | None]:
    """The plan with the best objective over the queue orders and modes, and the index of
    the pass that found it (None when no pass did).

    `first` (the starving jobs, oldest first) lead every order of `others`; `trade_first`
    names the jobs a trade-first pass trades before anything else (empty: no such pass).
    The pass that won the last plan (`last_winner`) goes first: it usually wins again, and
    a high score early lets the bound drop the others sooner. The winner is still the first
    best in the listed order, so plans do not depend on it."""
    o = f.o
    # Trying several orders pays on small queues; on long ones fewer fit the budget.
    passes = [(order, "") for order in o.orders]
    if o.fill_now:
        passes.append(("priority", "fill-now"))
    if trade_first:
        passes.append(("priority", "trade-first"))
    best = frame.Candidate()
    seen: set[tuple[str, ...]] = set()
    queues: list[tuple[int, list[frame.Job], str]] = []
    orders: dict[str, list[frame.Job]] = {}  # (the modes' passes share "priority")
    # The budget goes to the passes that differ (orders that come out the same merge
    # here), in the listed order; the orders past it are not sorted.
    budget = max(1, o.pass_budget // max(1, len(first) + len(others)))
    for i, (order, mode) in enumerate(passes):
        if len(queues) == budget:
            break
        if order not in orders:
            orders[order] = first + ordered(others, order)
        key = (mode, *map(frame.NAME, orders[order]))
        if key not in seen:
            seen.add(key)
            queues.append((i, orders[order], mode))
    queues.sort(key=lambda x: x[0] != last_winner)
    best_at = len(passes)

    def place(jobs: list[frame.Job], mode: str, sooner: bool = False,
              met: list[bool] | None = None, opening: frame.Opening | None = None,
              twin_of: frame.Opening | None = None) -> frame.Candidate | None:
        """One pass of a queue order in its mode, to beat the best plan so far."""
        return placing.place(f, jobs, best.score, fill_now=mode == "fill-now",
                             trade_first=trade_first if mode == "trade-first" else None,
                             sooner=sooner, met=met, opening=opening, twin_of=twin_of)

    again: list[tuple[list[frame.Job], str]] = []
    # The fill-now pass goes in priority order, as the plain pass "priority" does: when
    # its first phase starts now just the jobs that pass started now before any it did
    # not, it is that pass from there on, and cannot beat it (which comes first). So
    # that pass notes them, and where it met no trade to start sooner (the fill-now
    # pass would then meet none either), the other stops there.
    opening: frame.Opening | None = None
    for i, jobs, mode in queues:
        if best.score >= f.ceiling and best_at < i:
            continue  # nothing scores more, and an earlier pass holds the tie
        met: list[bool] = []  # whether a trade to start sooner would pay
        noted = frame.Opening() if mode == "" and jobs is orders.get("priority") else None
        twin_of = (opening if mode == "fill-now" and opening is not None and opening.whole
                   else None)
        cand = place(jobs, mode, met=met if o.trade_sooner and f.shortable else None,
                     opening=noted, twin_of=twin_of)
        if noted is not None and not met:
            opening = noted
        if cand is frame.TWIN:
            continue
        if cand is not None and (cand.score > best.score
                                 or (cand.score == best.score and i < best_at)):
            best, best_at = cand, i
        if met:
            again.append((jobs, mode))
    # The orders that met a trade to start a job sooner, planned again taking such
    # trades: they win only by scoring more (a tie keeps the curve).
    for jobs, mode in again:
        cand = place(jobs, mode, sooner=True)
        if cand is not None and cand.score > best.score:
            best = cand
    return best, best_at if best_at < len(passes) else None


# (A Job's fields in its queued job, for `ordered`.)
_PRIORITY = operator.attrgetter("q.priority")
_GPUS = operator.attrgetter("q.gpus")
_ESTIMATE = operator.attrgetter("q.estimate_steps")
_ARRIVED = operator.attrgetter("q.arrival_step")


def _by(queue: list[frame.Job],
        *keys: tuple[operator.attrgetter[int | float], bool]) -> list[frame.Job]:
    """`queue` by `keys` (a field, whether descending), the first deciding most: one stable
    sort a key, the last key first (as one sort by the tuple of keys, but each key read
    in C instead of a tuple built per job: half the time on a deep queue)."""
    out = list(queue)
    for key, descending in reversed(keys):
        out.sort(key=key, reverse=descending)  # (stable, also reversed)
    return out


def ordered(queue: list[frame.Job], order: str) -> list[frame.Job]:
    """`queue` in `order`; the sorts are stable, so ties keep the queue's order."""
    if order == "priority":
        return _by(queue, (_PRIORITY, True), (_ARRIVED, False))
    if order == "priority-size":
        return _by(queue, (_PRIORITY, True), (_GPUS, True), (_ARRIVED, False))
    if order == "priority-short":
        return _by(queue, (_PRIORITY, True), (_ESTIMATE, False), (_ARRIVED, False))
    if order == "priority-long":
        return _by(queue, (_PRIORITY, True), (_ESTIMATE, True), (_ARRIVED, False))
    if order == "reach":
        # Wide, valuable work first: a 32-GPU job of priority 1 goes before a 4-GPU
        # job of priority 2 (in scale-test, the plan that does so wins, and no
        # priority order finds it). Squared, priority still dominates, so wide
        # low-priority work rarely pushes back a top-priority job; the square root
        # keeps a long job from outranking a wide one by length alone (docs/options.md).
        return sorted(queue, key=lambda j: (
            -j.q.priority * j.q.priority * j.q.gpus * math.sqrt(j.q.estimate_steps),
            j.q.arrival_step))
    if order == "arrival":
        return sorted(queue, key=_ARRIVED)
    if order == "value-density":
        return sorted(queue, key=lambda j: (-j.q.priority * j.q.gpus, j.q.arrival_step))
    raise ValueError(f"unknown queue order {order!r}")

"""What the round tells the planner: a `model.PlanInput` from a cache snapshot.

Owns: turning a snapshot into planner terms for one step (admitted gangs as
running jobs on their blocks, queued gangs with estimates in steps, services
with forecasts and current GPU sets, GPUs held outside the plan), and the
memory that needs across rounds: the GPU sets the plan gave each service in
recent steps, and each service's set at the step's start (fixed at the step's
first plan, so a re-plan mid-step counts swaps from the same base), and how many
GPUs each service was planned at each step of the last week (what it held, against
its demand: `model.ServiceState.past_held`).

May not touch: the cluster or the plan. It reads a snapshot and its own
memory, asks `demand.Reader` for forecasts, and returns the input with the
services whose demand could not be read; it writes nothing and decides
nothing (the policy does).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from extender import config
from extender.adapter import annotations as ann
from extender.adapter import snapshot
from extender.controller import demand
from extender.planner import model

log = logging.getLogger(__name__)


def _mask(gpus: frozenset[int]) -> int:
    m = 0
    for g in gpus:
        m |= 1 << g
    return m


class Builder:
    """Builds each round's planner input; remembers the services' sets between rounds."""

    def __init__(self, settings: config.Settings, demand_reader: demand.Reader) -> None:
        self.settings = settings
        self.demand = demand_reader
        self._sets: dict[int, dict[str, frozenset[int]]] = {}  # step -> service GPU sets
        # step -> service -> (its set at the step's start, GPUs it lost with nodes)
        self._base: dict[int, dict[str, tuple[frozenset[int], int]]] = {}
        self._logged: dict[str, str] = {}  # service -> the unforeseen demand error last logged
        self._held: dict[str, dict[int, int]] = {}  # service -> step -> GPUs planned then

    def planned(self, step: int, sets: Mapping[str, frozenset[int]],
                services: Iterable[str] = ()) -> None:
        """Remember the GPU sets this step's plan gives the services (the last two steps
        before are kept: the next step's swaps count from them), and how many GPUs each
        service was planned at (the round's `services` too: one the plan gave none held
        0), for a week of steps."""
        self._sets[step] = dict(sets)
        for old in [k for k in self._sets if k < step - 2]:
            del self._sets[old]
        week = 7 * self.settings.steps_per_day()
        for name in {*sets, *services}:
            held = self._held.setdefault(name, {})
            held[step] = len(sets.get(name, ()))
            # Steps come in order, so the oldest are first: drop those a week old.
            while (first := next(iter(held))) <= step - week:
                del held[first]
        for name in [n for n, held in self._held.items() if next(reversed(held)) <= step - week]:
            del self._held[name]  # a service not planned for a week

    def held(self, service: str) -> Mapping[int, int]:
        """Step -> the GPUs `service` was planned at then, over the last week of steps
        it was planned (read only: the gauges' delivered service level pairs it with
        the service's demand)."""
        return MappingProxyType(self._held.get(service, {}))

    def past_held(self, service: str, step: int, most: int) -> tuple[int, ...]:
        """The GPUs `service` was planned at the steps before `step`, oldest first: the
        unbroken run of them that ends at step - 1 (none when that step was not planned:
        after a restart the record starts again), at most `most`."""
        held = self._held.get(service, {})
        out: list[int] = []
        k = step - 1
        while k in held and len(out) < most:
            out.append(held[k])
            k -= 1
        return tuple(reversed(out))

    def build(self, snap: snapshot.Snapshot,
              step: int) -> tuple[model.PlanInput, dict[str, str]]:
        """(the planner input for `step`, service -> why its demand could not be read)."""
        s = self.settings
        c = snap.cluster
        problems: dict[str, str] = {}  # service -> problem
        running: list[model.RunningJob] = []
        queued: list[model.QueuedJob] = []
        held = 0
        for g in snap.gangs.values():
            w = g.work
            prio = w.priority if w else float(s.priority_classes[s.default_priority])
            wtype = w.workload if w else "training"
            est = s.duration_steps(w.duration_seconds) if w else 1
            if g.admission is not None:
                b = g.admission.block
                if b.end > c.gpus or held & b.mask:
                    continue  # its nodes are gone or it overlaps: keep it out of the grid
                held |= b.mask
                start = s.step_of(g.admission.admitted_at)
                running.append(model.RunningJob(g.name, b.size, b, min(start, step), est, prio,
                                                wtype))
            elif g.placed is not None:
                # Shadow mode: placed by the cluster's scheduler; runs on its pieces.
                start = min(step, s.step_of(g.placed_at))
                for j, b in enumerate(g.placed_blocks):
                    if b.end > c.gpus or held & b.mask:
                        continue
                    held |= b.mask
                    running.append(model.RunningJob(snapshot.piece_name(g.name, j), b.size, b,
                                                    start, est, prio, wtype))
            elif g.error is None and g.waiting_for is None and w is not None:
                arrival = min(step, s.step_of(g.arrival))
                queued.append(model.QueuedJob(g.name, g.gpus, est, arrival, prio, wtype, g.nodes))
        services: list[model.ServiceState] = []
        # Shadow mode carries no plan out: a service holds where its pods run, never
        # what an earlier plan would have given it.
        prev = {} if s.shadow else self._previous_sets(step)
        taken = held
        frozen: set[int] = set()  # GPUs of services that cannot be planned this step
        for name, sv in sorted(snap.services.items()):
            try:
                fc, past = self.demand.forecast(snap, sv, step)
            except Exception as e:  # noqa: BLE001 - one service's source, not the round
                # A source that cannot be read (AnnotationError), or one that failed in
                # a way nobody foresaw (a response cut short, a bug): this service is
                # not planned this step, everyone else is.
                problems[name] = self._demand_problem(name, e)
                # Not planned this step, but its running replicas still hold GPUs:
                # keep those out of everyone else's plan, where the pods really are
                # (the GPUs last planned for it first on each of their nodes).
                kept = self._placed_set(snap, sv, taken, prefer=prev.get(name, frozenset()))
                taken |= _mask(kept)
                frozen |= kept
                continue
            self._logged.pop(name, None)
            # GPUs of a node that went NotReady or away are lost to the service, not
            # given up: the plan may replace them on top of the swap cap (`lost`),
            # instead of counting them as swapped away and shrinking the service to
            # the cap. Its pods still on such a node hold nothing the plan can use.
            base = self._base.get(step, {})
            down = snap.unavailable
            if name in base and not s.shadow:  # mid-step: the same step-(now-1) set as before
                had, lost = base[name]
                lost += sum(1 for x in had if x in down)
            elif name in prev:
                had = frozenset(x for x in prev[name] if x < c.gpus)
                lost = sum(1 for x in had if x in down)
                # Counted before reconciling: GPUs it adds where its pods hold more than
                # the plan gave (a down node included) were never the plan's to lose.
                had = self._reconciled(snap, sv, had, taken)
            else:
                had = self._placed_set(snap, sv, taken)
                lost = sum(1 for x in had if x in down)
            current = frozenset(x for x in had if x not in down)
            self._base = {step: {**base, name: (current, lost)}}
            taken |= _mask(current)
            services.append(model.ServiceState(
                name=name, priority=sv.spec.priority, max_swap=sv.spec.max_swap,
                forecast=fc, past_demand=tuple(int(round(x)) for x in past),
                current_gpus=current,
                reservation=self.demand.reservation(name, max(fc) if fc else 0),
                past_forecast=tuple(int(round(x)) for x in
                                    self.demand.past_forecast(name, past)),
                lost=lost, nodes=sv.nodes, unit=sv.spec.gpus_per_replica,
                most_per_node=sv.spec.gpus_per_replica if sv.apart else 0,
                service_level=sv.spec.service_level,
                past_held=self.past_held(name, step, len(past))))
        # DRA mode: GPUs claims outside the plan hold, by identity
        unavailable = set(snap.unavailable) | frozen | {x for x in snap.held
                                                        if not taken >> x & 1}
        for node, n in snap.foreign.items():
            if node not in snap.node_index:
                continue
            for gpu in snap.node_gpus(node):
                if n <= 0:
                    break
                if not taken >> gpu & 1 and gpu not in unavailable:
                    unavailable.add(gpu)
                    n -= 1
        inp = model.PlanInput(now=step, cluster=c, horizon=s.horizon_steps,
                              queued=tuple(sorted(queued, key=lambda q: (q.arrival_step, q.name))),
                              running=tuple(running), services=tuple(services),
                              unavailable_gpus=frozenset(unavailable),
                              steps_per_day=s.steps_per_day())
        return inp, problems

    def _demand_problem(self, service: str, e: Exception) -> str:
        """Why `service`'s demand could not be read, as its pods and Deployment are told;
        an error other than a bad source is logged once (again when it changes)."""
        if isinstance(e, ann.AnnotationError):
            return str(e)
        why = f"its demand could not be read: {type(e).__name__}: {e}"
        if self._logged.get(service) != why:
            self._logged[service] = why
            log.warning("service %s: %s (kept as it is this step)", service, why,
                        exc_info=e)
        return why

    def _previous_sets(self, step: int) -> dict[str, frozenset[int]]:
        earlier = [k for k in self._sets if k < step]
        return self._sets[max(earlier)] if earlier else {}

    def _reconciled(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo,
                    planned: frozenset[int], taken: int) -> frozenset[int]:
        """The planned set, grown where the service's bound pods hold more GPUs on a
        node than the plan thought (the Deployment controller picks which pods go on
        a scale-down): a gang must never be promised GPUs its pods still hold."""
        out = set(planned)
        for node, n in sv.gpus_by_node.items():
            if node not in snap.node_index:
                continue
            here = snap.node_gpus(node)
            extra = n - sum(1 for g in here if g in out)
            for gpu in reversed(here):
                if extra <= 0:
                    break
                if gpu not in out and not taken >> gpu & 1:
                    out.add(gpu)
                    extra -= 1
        return frozenset(out)

    def _placed_set(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo,
                    taken: int, prefer: frozenset[int] = frozenset()) -> frozenset[int]:
        """The service's GPUs from where its pods run: on each node, those in `prefer`
        first, then from the top (after a restart, or when it cannot be planned)."""
        out: set[int] = set()
        for node, n in sv.gpus_by_node.items():
            if node not in snap.node_index:
                continue
            for gpu in sorted(snap.node_gpus(node), key=lambda x: (x not in prefer, -x)):
                if n <= 0:
                    break
                if not taken >> gpu & 1:
                    out.add(gpu)
                    n -= 1
        return frozenset(out)

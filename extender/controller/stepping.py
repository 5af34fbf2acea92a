"""The round: snapshot, plan, commit the current step, publish.

Every round (`Controller.run_step`, at each step boundary and between them when
the cache changed): snapshot the cache, build the planner input
(`planinput`), call the policy for the whole horizon, then carry out what the
plan says for *now*:

- the leader admits the gangs that start now and the replacements of ended
  members of running gangs, scales and moves the services (`writing`);
- a new `table.Table` is published for the extender verbs (`verbs`), with the
  reason every waiting pod waits (`explaining`);
- the leader tells the pods whose story changed (`explaining.Explainer`);
- the plan view (`planview`) and the metrics' step state are stored.

Every replica plans and publishes; only the leader writes to the cluster. In
shadow mode nobody writes: the round plans and publishes, and `shadowing`
logs what it would have told the pods and measures what it would have done
differently from the cluster's own scheduler.

Owns: the loop (when a round runs), the order of the round, the policy call
(with the step's own admissions put back in the queue, `_plan`), and the
step's numbers for the metrics. May not touch: the cluster directly; every
write goes through the writers, the explainer or the verbs' binding.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from extender import config, metrics
from extender.adapter import dra, gangs, kube, snapshot, watching
from extender.controller import clock as clock_mod
from extender.controller import (
    demand,
    explaining,
    planinput,
    planview,
    shadowing,
    table,
    verbs,
    writing,
)
from extender.planner import headroom, model, policies, servicing

log = logging.getLogger(__name__)

# The wait before retrying a failed round: the first, doubled after each failure in
# a row up to the last (at most a quarter of a step), back to none once a round runs.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 5.0
# Plan times kept for `/plan`'s percentiles: a day of rounds at a re-plan every
# ~10 s, a replay's few per step; 80 KB of floats.
PLAN_TIMES_KEPT = 10_000


@dataclass
class StepResult:
    step: int
    admitted: list[str]
    scaled: dict[str, int]
    plan: model.Plan
    plan_seconds: float


class Controller:
    """The step loop: re-plans the horizon from a snapshot, commits only the current step.

    Its parts, each with the narrow state it owns: `inputs` (the planner input and
    the services' recent GPU sets), `writer` (the leader's writes), `explainer`
    (Events and conditions) and `verbs` (the published table, served to
    kube-scheduler by `extender.api`)."""

    def __init__(self, settings: config.Settings, client: kube.Kube,
                 cache: watching.Cache, *, clock: clock_mod.Clock | None = None,
                 policy: policies.Policy | None = None,
                 prometheus_query: Callable[..., list[float]] | None = None,
                 leader: Callable[[], bool] | None = None) -> None:
        self.settings = settings
        self.client = client
        self.cache = cache
        self.clock = clock or clock_mod.RealClock()
        self.leader = leader or (lambda: True)
        self.policy = policy or self._make_policy()
        self.inputs = planinput.Builder(settings, demand.Reader(settings, prometheus_query))
        self.explainer = explaining.Explainer(client)
        # The writer asks again before each write: the Lease may go in mid-round.
        self.writer = writing.Writer(settings, client, cache, self.clock, self.explainer,
                                     leader=lambda: self.leader() and self.shadow is None)
        self.verbs = verbs.Verbs(settings, client, cache)
        self.shadow = shadowing.Observer(settings) if settings.shadow else None
        self.view: dict[str, Any] = {}
        self.state: metrics.StepState | None = None
        self._dra_problems: dict[str, str] = {}  # pod -> why its claims are not planned
        self._off_plan_seen: dict[str, str] = {}  # pod -> its devices outside its block
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.rounds = 0
        self._plan_times: deque[float] = deque(maxlen=PLAN_TIMES_KEPT)  # seconds, oldest first
        self._plan_times_lock = threading.Lock()

    def _make_policy(self) -> policies.Policy:
        if self.settings.policy == "gpuroster":
            return policies.create("gpuroster", realtime_penalty=self.settings.realtime_penalty,
                                   max_wait_hours=self.settings.max_wait_hours,
                                   max_wait_steps=self.settings.max_wait_steps or None,
                                   service_level=self.settings.service_level,
                                   shift_hours=self.settings.peak_shift_hours,
                                   stand_in_hours=self.settings.stand_in_hours,
                                   spare_fill=self.settings.spare_replicas,
                                   reservation_lead=(None if self.settings.reservation_lead >= 1
                                                     else self.settings.reservation_lead))
        return policies.create(self.settings.policy)

    def plan_times(self) -> list[float]:
        """The policy call's time (seconds) in each of the last rounds that planned, at
        most `PLAN_TIMES_KEPT`, oldest first (the histogram's buckets bound a percentile;
        these give it)."""
        with self._plan_times_lock:
            return list(self._plan_times)

    @property
    def table(self) -> table.Table:
        """The table the last round published (what the verbs answer from)."""
        return self.verbs.table

    # --- time ---------------------------------------------------------------------

    def step_of(self, t: float) -> int:
        # Steps count from the epoch; the default, 0, is a UTC midnight, so steps fall
        # on the wall clock (hourly steps on the hour, a 24-value curve by hour of day)
        # and every replica and restart counts the same steps. A restarted service is
        # past step 0 (which has no previous GPU sets, MODEL.md), so the swap cap holds
        # from its first step, with current sets rebuilt from where the pods run.
        return self.settings.step_of(t)

    def time_of(self, step: int) -> float:
        return self.settings.step_start(step)

    # --- the loop -----------------------------------------------------------------

    def mark_dirty(self, kind: str = "") -> None:
        self._dirty.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="step-loop", daemon=True)
        self._thread.start()

    def stop(self, wait: float = 0.0) -> None:
        """End the loop; with ``wait``, give a round in flight that long to finish."""
        self._stop.set()
        self._dirty.set()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(wait)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        # Between boundaries, re-plan on cache changes (new pods can start this step),
        # at most every `min_gap` seconds; the step number only moves at boundaries.
        min_gap = min(10.0, max(0.2, self.settings.step_seconds / 5))
        tail = config.quiet_tail_seconds(self.settings.step_seconds)
        # A failed round publishes nothing, so the step number stays behind and the
        # boundary test stays true: without a wait the loop would retry at once, on
        # and on (a core burnt, the API server and Prometheus hammered, the verbs
        # starved of the GIL). Retry after a growing wait instead, never past the
        # next boundary, and log the failure once per streak.
        backoff_max = min(BACKOFF_MAX, max(BACKOFF_FIRST, self.settings.step_seconds / 4))
        backoff = 0.0
        failures = 0  # rounds failed in a row
        last = -math.inf
        while not self._stop.is_set():
            if not self.cache.synced():
                self.cache.wait_synced(0.5)
                continue
            now = self.clock.now()
            boundary = self.step_of(now) != self.table.step
            late = self.time_of(self.table.step + 1) - now < tail
            if boundary or (self._dirty.is_set() and now - last >= min_gap and not late):
                self._dirty.clear()
                last = now
                try:
                    self.run_step()
                    self.last_error = None
                    if failures:
                        log.warning("step recovered after %d failed rounds", failures)
                    failures, backoff = 0, 0.0
                    # The cache is a large, acyclic, long-lived heap: keep the cyclic GC
                    # from rescanning it (its full passes are the verbs' p99 outliers).
                    gc.freeze()
                except Exception as e:  # noqa: BLE001 - the loop must survive a bad round
                    self.last_error = f"{type(e).__name__}: {e}"
                    metrics.STEP_FAILURES.inc()
                    failures += 1
                    backoff = min(backoff_max, backoff * 2 if backoff else BACKOFF_FIRST)
                    if failures == 1:
                        log.exception("step failed; retrying in %.1fs, then less often "
                                      "(logged again when a round succeeds)", backoff)
                    else:
                        log.debug("step failed again (%d in a row): %s", failures,
                                  self.last_error)
                    # What the failed round was for is still to do: retried after the
                    # wait (a boundary's round is, since the step has not moved).
                    self._dirty.set()
                    now = self.clock.now()
                    until_next = self.time_of(self.step_of(now) + 1) - now
                    self.clock.wait(self._stop, max(0.01, min(backoff, until_next)))
                continue
            until_boundary = self.time_of(self.table.step + 1) - now
            wait = min(until_boundary, max(0.05, min_gap - (now - last)) if
                       self._dirty.is_set() and not late else until_boundary)
            if self._dirty.is_set():
                self.clock.wait(self._stop, max(0.01, wait))
            else:
                self.clock.wait(self._dirty, max(0.01, min(wait, 5.0)))

    # --- one round ----------------------------------------------------------------

    def take_snapshot(self) -> snapshot.Snapshot:
        c = self.cache
        nodes, pods = c.items("nodes"), c.items("pods")
        problems: dict[str, str] = {}
        if self.settings.dra:  # DRA devices and claims, read as GPUs and GPU requests
            nodes, pods, problems = dra.view(nodes, pods, c.items("resourceslices"),
                                             c.items("resourceclaims"))
            for k, why in problems.items():
                if self._dra_problems.get(k) != why:
                    log.warning("pod %s is not planned: %s", k, why)
            self._dra_problems = problems
        snap = snapshot.build(nodes, pods, c.items("deployments"),
                              c.items("configmaps"), self.settings, c.assumed(),
                              self.settings.namespaces, c.items("priorityclasses"),
                              problems)
        if self.settings.dra:
            snap.node_devices = dra.device_ids(c.items("resourceslices"))
            snap.devices = dra.pod_devices(pods, c.items("resourceclaims"))
            self._off_plan(snap)
            self._held_outside(snap, pods)
        return snap

    def _held_outside(self, snap: snapshot.Snapshot, pods: list[dict[str, Any]]) -> None:
        """DRA mode: the GPUs claims outside the plan hold, by identity, instead of a
        count per node (the plan would otherwise take the node's first free GPUs as
        theirs, plan a gang onto the ones really held, and have its claim refused)."""
        planned = {k for g in snap.gangs.values() if g.admission is not None or g.placed
                   for k in g.pod_keys()} | set(snap.pod_service)
        offsets, counted = dra.held_outside(pods, self.cache.items("resourceclaims"),
                                            self.cache.items("resourceslices"), planned)
        g = snap.cluster.gpus_per_node
        held: set[int] = set()
        for node, idx in offsets.items():
            if node in snap.node_index:
                base = snap.node_index[node] * g
                held.update(base + i for i in idx if i < g)
        snap.held = frozenset(held)
        for node, n in counted.items():
            if node in snap.foreign:
                snap.foreign[node] = max(0, snap.foreign[node] - n)

    def _off_plan(self, snap: snapshot.Snapshot) -> None:
        """Log (once) an admitted pod whose claim holds devices outside its gang's block:
        kube-scheduler reallocated it (its PostFilter may, when the planned node did not
        fit), or something else wrote the claim."""
        seen: dict[str, str] = {}
        for g in snap.gangs.values():
            if g.admission is None:
                continue
            planned = set(snap.block_devices(g.admission.block))
            for k in g.pod_keys():
                off = sorted(set(snap.devices.get(k, ())) - planned)
                if off:
                    seen[k] = ", ".join(off)
                    if self._off_plan_seen.get(k) != seen[k]:
                        log.warning("pod %s of gang %s holds devices outside its block: %s",
                                    k, g.name, seen[k])
        self._off_plan_seen = seen

    def plan_input(self, snap: snapshot.Snapshot,
                   step: int) -> tuple[model.PlanInput, dict[str, str]]:
        """(the planner input for `step`, service -> why its demand could not be read)."""
        return self.inputs.build(snap, step)

    def run_step(self) -> StepResult:
        now = self.clock.now()
        step = self.step_of(now)
        since = self.verbs.mark()  # service pods bound from here on may miss the snapshot
        snap = self.take_snapshot()
        inp, problems = self.plan_input(snap, step)
        t0 = time.perf_counter()
        plan = self._plan(snap, inp)
        took = time.perf_counter() - t0
        metrics.PLAN_DURATION.observe(took)
        with self._plan_times_lock:
            self._plan_times.append(took)
        metrics.STEPS.inc()
        # How far each service is ahead of its static reservation's record, once: the
        # policy's own reading where it took one (gpuroster's hold), else read here, for
        # the plan page and the gauge alike.
        plan.lead.update(servicing.reservation_leads(inp.services, plan.lead))
        # The plan page shows what is being committed, before the writes go out.
        self.view = planview.build(snap, plan, inp, step, self.time_of(step),
                                   self.settings.step_seconds, took,
                                   shadow=self.shadow is not None, now=now,
                                   objective=self.settings.service_level)
        # Every replica plans and answers the scheduler; only the leader commits,
        # and nobody in shadow mode.
        leading = self.leader() and self.shadow is None
        w = self.writer
        admitted, failed = w.admit(snap, plan, step, now) if leading else ({}, {})
        refused = w.refill(snap, now) if leading else {}
        self.inputs.planned(step, plan.service_gpus, (v.name for v in inp.services))
        waiting = explaining.waiting(snap, plan, admitted, failed, refused, self.time_of,
                                     self.settings.step_seconds, w.completing)
        published = table.build(snap, plan, step, self.time_of(step + 1), admitted, problems,
                                waiting)
        self.verbs.publish(published, snap.services, since)
        scaled: dict[str, int] = {}
        if leading:
            scaled = w.scale(snap, plan, step, published.service_planned)
            w.promised(snap, plan, admitted)
            self.explainer.explain(snap, step, now, admitted, problems, published.waiting)
            w.forget_gone(snap)
        self._record(snap, plan, inp, step, now, admitted)
        if self.shadow is not None and self.state is not None:
            self.state.shadow = self.shadow.observe(snap, plan, step, now, self.time_of)
        self.rounds += 1
        return StepResult(step, sorted(admitted), scaled, plan, took)

    def _plan(self, snap: snapshot.Snapshot, inp: model.PlanInput) -> model.Plan:
        """The policy's plan for `inp`, as the step's first round would have made it.

        A round later in the step sees the gangs this step already admitted as
        running. Planning around them pinned is a different search from the one
        that chose them, and a greedy one can then start more now than it would
        have with everything known at the step's start (the simulator's view,
        which plans once per step). So those gangs go back in the queue: if the
        plan still starts each of them now on its block, its other starts are
        what the step's start would have chosen given what is known now (pods
        that came or ended since). Only when what came since changes one of them
        is the plan made around them pinned.
        """
        mine = [r for r in inp.running if r.start_step == inp.now and r.name in snap.gangs
                and snap.gangs[r.name].admission is not None]
        if mine:
            def arrival(r: model.RunningJob) -> int:
                created = snap.gangs[r.name].arrival
                if not created:
                    return inp.now
                return min(inp.now, self.settings.step_of(created))

            requeued = tuple(model.QueuedJob(r.name, r.gpus, r.estimate_steps, arrival(r),
                                             r.priority, r.type) for r in mine)
            names = {r.name for r in mine}
            again = replace(
                inp,
                running=tuple(r for r in inp.running if r.name not in names),
                queued=tuple(sorted(inp.queued + requeued,
                                    key=lambda q: (q.arrival_step, q.name))),
            )
            plan = self.policy.plan(again)
            if all(plan.starts.get(r.name) == r.block for r in mine):
                for r in mine:  # already admitted: the plan shows them as running
                    del plan.starts[r.name]
                    plan.planned_start.pop(r.name, None)
                    plan.planned_block.pop(r.name, None)
                    plan.reasons.pop(r.name, None)
                return plan
        return self.policy.plan(inp)

    # --- observability ------------------------------------------------------------

    def _record(self, snap: snapshot.Snapshot, plan: model.Plan, inp: model.PlanInput,
                step: int, now: float, admitted: Mapping[str, gangs.Admission]) -> None:
        """The round in numbers, for the metrics read at scrape time."""
        st = metrics.StepState(gpus_total=snap.cluster.gpus - len(snap.unavailable), step=step)
        value = 0.0
        for r in inp.running:
            st.allocated_by_workload[r.type] = st.allocated_by_workload.get(r.type, 0) + r.gpus
            value += r.gpus * r.priority
        for q in inp.queued:
            if q.name in admitted:
                st.allocated_by_workload[q.type] = st.allocated_by_workload.get(q.type, 0) + q.gpus
                value += q.gpus * q.priority
            else:
                label = self.settings.priority_label(q.priority)
                st.queue_length[label] = st.queue_length.get(label, 0) + 1
                wait = max(0.0, now - self.time_of(q.arrival_step))
                st.queue_oldest_wait_seconds[label] = max(
                    st.queue_oldest_wait_seconds.get(label, 0.0), wait)
        st.useful_by_workload = dict(st.allocated_by_workload)
        rt = model.REALTIME_TYPE
        for v in inp.services:
            a = len(plan.service_gpus.get(v.name, ()))
            d = v.forecast[0] if v.forecast else 0
            st.service_demand[v.name] = d
            st.service_allocated[v.name] = a
            st.allocated_by_workload[rt] = st.allocated_by_workload.get(rt, 0) + a
            st.useful_by_workload[rt] = st.useful_by_workload.get(rt, 0) + min(a, d)
            value += min(a, d) * v.priority
            self._observe_service_level(st, v, plan, step)
        st.value_rate = value
        self.state = st

    def _observe_service_level(self, st: metrics.StepState, v: model.ServiceState,
                               plan: model.Plan, step: int) -> None:
        """The service's gauges: delivered service level over the last day of steps
        (its past demand against the GPUs planned then: the record the planner's hold
        reads, `planinput.Builder.held`), objective, headroom now."""
        day = self.settings.steps_per_day()
        given = self.inputs.held(v.name)
        start = step - len(v.past_demand)
        pairs = [(v.past_demand[t - start], given[t]) for t in range(max(start, step - day), step)
                 if t in given]
        level = headroom.delivered([d for d, _ in pairs], [a for _, a in pairs])
        if level is not None:
            st.service_level[v.name] = level
        st.service_objective[v.name] = (v.service_level if v.service_level is not None
                                        else self.settings.service_level)
        st.service_headroom[v.name] = plan.headroom.get(v.name, 0)
        st.service_spare[v.name] = plan.spare.get(v.name, 0)
        lead = plan.lead.get(v.name)
        if lead is not None:
            st.service_lead[v.name] = lead

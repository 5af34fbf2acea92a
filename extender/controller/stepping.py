"""The step loop: re-plan the horizon from a snapshot, commit only the current step.

Every round (`run_step`): snapshot the cache, build the planner input, call the
policy, then commit what the plan says for *now*:

- gangs whose planned start is now are admitted as a whole: the admission is
  recorded in memory first, then written on every pod of the gang
  (`gpuroster.io/block`, `admitted-at`, `node`); if any write fails the others
  are undone and the gang stays queued (assume, write, undo). The write is a
  pod update, which also requeues the pods in kube-scheduler;
- each real-time service gets the plan's GPU set and its Deployment the
  matching replica count (scale subresource);
- waiting pods get an Event and a `gpuroster.io/Planned` condition when their
  reason changes.

The verbs (`filter`, `prioritize`, `bind`) read the `Table` published by the
last round and a few counters; they never plan.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from extender import config, metrics
from extender.adapter import annotations as ann
from extender.adapter import kube, objects, prometheus, snapshot, watching
from extender.controller import clock as clock_mod
from extender.planner import forecasting, headroom, model, policies

log = logging.getLogger(__name__)

Obj = dict[str, Any]
HISTORY_KEEP = 7 * 24 * 4  # steps of past demand handed to the planner, at most


@dataclass(frozen=True)
class Table:
    """What the extender verbs read: one immutable value per round, swapped whole."""

    step: int = -1
    next_step_at: float = 0.0
    assigned: Mapping[str, str] = field(default_factory=dict)  # pod key -> node
    waiting: Mapping[str, str] = field(default_factory=dict)  # pod key -> reason
    pod_service: Mapping[str, str] = field(default_factory=dict)
    service_planned: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()


@dataclass
class StepResult:
    step: int
    admitted: list[str]
    scaled: dict[str, int]
    plan: model.Plan
    plan_seconds: float


def format_clock(t: float, step_seconds: float) -> str:
    fmt = "%H:%M" if step_seconds >= 60 else "%H:%M:%S"
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


class Controller:
    def __init__(self, settings: config.Settings, client: kube.Kube,
                 cache: watching.Cache, *, clock: clock_mod.Clock | None = None,
                 policy: policies.Policy | None = None,
                 prometheus_query: Callable[..., list[float]] | None = None,
                 leader: Callable[[], bool] | None = None) -> None:
        self.settings = settings
        self.client = client
        self.cache = cache
        self.clock = clock or clock_mod.RealClock()
        # Steps count from the epoch; the default, 0, is a UTC midnight, so steps fall
        # on the wall clock (hourly steps on the hour, a 24-value curve by hour of day)
        # and every replica and restart counts the same steps. A restarted service is
        # past step 0 (which has no previous GPU sets, MODEL.md), so the swap cap holds
        # from its first step, with current sets rebuilt from where the pods run.
        self.epoch = settings.epoch
        self.leader = leader or (lambda: True)
        self.policy = policy or self._make_policy()
        self.query = prometheus_query or prometheus.query_range
        self.table = Table()
        self.view: dict[str, Any] = {}
        self.state: metrics.StepState | None = None
        self._lock = threading.Lock()
        self._svc_used: dict[str, dict[str, int]] = {}
        self._sets: dict[int, dict[str, frozenset[int]]] = {}  # step -> service GPU sets
        self._given: dict[str, dict[int, int]] = {}  # service -> step -> GPUs planned (a day)
        # step -> the sets each service had before it (fixed at the step's first plan)
        # step -> service -> (its set at the step's start, GPUs it lost with nodes)
        self._base: dict[int, dict[str, tuple[frozenset[int], int]]] = {}
        self._explained: dict[str, str] = {}  # pod key -> last reason written
        self._first_planned: dict[str, float] = {}
        self._forecasts: dict[tuple[str, int], tuple[tuple[int, ...], tuple[float, ...]]] = {}
        self._reservations: dict[str, int] = {}  # service -> peak of its explicit curve
        self._past_forecasts: dict[str, tuple[float, ...]] = {}  # what the curve said before
        self._woken: dict[str, int] = {}
        # service -> (step, replicas added this step, replicas removed this step)
        self._moved: dict[str, tuple[int, int, int]] = {}
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.rounds = 0

    def _make_policy(self) -> policies.Policy:
        if self.settings.policy == "gpuroster":
            return policies.create("gpuroster", realtime_penalty=self.settings.realtime_penalty,
                                   max_wait_steps=self.settings.max_wait_steps,
                                   service_level=self.settings.service_level)
        return policies.create(self.settings.policy)

    # --- time ---------------------------------------------------------------------

    def step_of(self, t: float) -> int:
        return math.floor((t - self.epoch) / self.settings.step_seconds + 1e-9)

    def time_of(self, step: int) -> float:
        return self.epoch + step * self.settings.step_seconds

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
                    # The cache is a large, acyclic, long-lived heap: keep the cyclic GC
                    # from rescanning it (its full passes are the verbs' p99 outliers).
                    gc.freeze()
                except Exception as e:  # noqa: BLE001 - the loop must survive a bad round
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.exception("step failed")
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
        return snapshot.build(c.items("nodes"), c.items("pods"), c.items("deployments"),
                              c.items("configmaps"), self.settings, c.assumed(),
                              self.settings.namespaces, c.items("priorityclasses"))

    def run_step(self) -> StepResult:
        now = self.clock.now()
        step = self.step_of(now)
        snap = self.take_snapshot()
        inp, problems = self.plan_input(snap, step, now)
        t0 = time.perf_counter()
        plan = self._plan(snap, inp)
        took = time.perf_counter() - t0
        metrics.PLAN_DURATION.observe(took)
        metrics.STEPS.inc()
        # The plan page shows what is being committed, before the writes go out.
        self.view = plan_view(snap, plan, inp, step, self.time_of(step),
                              self.settings.step_seconds, took)
        # Every replica plans and answers the scheduler; only the leader commits.
        leading = self.leader()
        admitted, failed = self._admit(snap, plan, step, now) if leading else ({}, {})
        refused = self._refill(snap, now) if leading else {}
        sets = {s: g for s, g in plan.service_gpus.items()}
        self._sets[step] = sets
        for old in [k for k in self._sets if k < step - 2]:
            del self._sets[old]
        self._publish(snap, plan, step, admitted, failed, problems, refused)
        scaled: dict[str, int] = {}
        if leading:
            scaled = self._scale(snap, plan, step, inp)
            self._explain(snap, plan, step, now, admitted, failed, problems)
        self._record(snap, plan, inp, step, now, admitted, took)
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
        mine = [r for r in inp.running if r.start_step == inp.now and r.name in snap.gangs]
        if mine:
            def arrival(r: model.RunningJob) -> int:
                created = snap.gangs[r.name].arrival
                if not created:
                    return inp.now
                at = (created - self.epoch) / self.settings.step_seconds
                return min(inp.now, math.floor(at + 1e-9))

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

    # --- planner input ------------------------------------------------------------

    def plan_input(self, snap: snapshot.Snapshot, step: int,
                   now: float) -> tuple[model.PlanInput, dict[str, str]]:
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
                start = math.floor((g.admission.admitted_at - self.epoch) / s.step_seconds + 1e-9)
                running.append(model.RunningJob(g.name, b.size, b, min(start, step), est, prio,
                                                wtype))
            elif g.error is None and g.waiting_for is None and w is not None:
                arrival = min(step, math.floor((g.arrival - self.epoch) / s.step_seconds + 1e-9))
                queued.append(model.QueuedJob(g.name, g.gpus, est, arrival, prio, wtype, g.nodes))
        services: list[model.ServiceState] = []
        prev = self._previous_sets(step)
        taken = held
        frozen: set[int] = set()  # GPUs of services that cannot be planned this step
        for name, sv in sorted(snap.services.items()):
            try:
                fc, past = self._forecast(snap, sv, step, now)
            except ann.AnnotationError as e:
                problems[name] = str(e)
                # Not planned this step, but its running replicas still hold GPUs:
                # keep those out of everyone else's plan, where the pods really are
                # (the GPUs last planned for it first on each of their nodes).
                kept = self._placed_set(snap, sv, taken, prefer=prev.get(name, frozenset()))
                taken |= _mask(kept)
                frozen |= kept
                continue
            # GPUs of a node that went NotReady or away are lost to the service, not
            # given up: the plan may replace them on top of the swap cap (`lost`),
            # instead of counting them as swapped away and shrinking the service to
            # the cap. Its pods still on such a node hold nothing the plan can use.
            base = self._base.get(step, {})
            down = snap.unavailable
            if name in base:  # re-planning mid-step: the same step-(now-1) set as before
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
                reservation=self._reservations.get(name, max(fc) if fc else 0),
                past_forecast=tuple(int(round(x)) for x in
                                    self._past_forecasts.get(name, past)),
                lost=lost, nodes=sv.nodes, unit=sv.spec.gpus_per_replica,
                most_per_node=sv.spec.gpus_per_replica if sv.apart else 0,
                service_level=sv.spec.service_level))
        unavailable = set(snap.unavailable) | frozen
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

    def _forecast(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo, step: int,
                  now: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
        s = self.settings
        H = s.horizon_steps
        per = sv.spec.gpus_per_replica
        ns = sv.spec.name.split("/", 1)[0]

        def whole(x: float) -> int:
            return int(math.ceil(max(0.0, x) / per - 1e-9) * per)

        cached = self._forecasts.get((sv.spec.name, step))
        if cached is not None and not sv.spec.demand_configmap:
            return cached
        if sv.spec.demand_configmap:
            cm = snap.configmaps.get(f"{ns}/{sv.spec.demand_configmap}")
            if cm is None:
                raise ann.AnnotationError(
                    f"{ann.DEMAND_CONFIGMAP}: ConfigMap {ns}/{sv.spec.demand_configmap} not found")
            d = ann.demand(cm)
            if d.curve:
                # An explicit curve is the forecast: two horizons of it, so the plan
                # sees the peak just past its horizon; fifo reserves its peak.
                L = len(d.curve)
                fc = tuple(whole(d.curve[(step + k) % L]) for k in range(2 * H))
                self._reservations[sv.spec.name] = whole(max(d.curve))
                lo = max(0, step - HISTORY_KEEP)
                told = tuple(float(d.curve[k % L]) for k in range(lo, max(lo, step)))
                self._past_forecasts[sv.spec.name] = told
                # What monitoring saw; where it has not reported a step yet, assume the
                # curve came true, so past demand and past forecast stay step-aligned.
                seen = d.observed
                past = tuple(float(seen[k]) if k < len(seen) else told[k - lo]
                             for k in range(lo, max(lo, step)))
                return fc, past
            history: Sequence[float] = d.history
            spd = d.steps_per_day or s.steps_per_day()
        else:
            assert sv.spec.demand_query is not None
            if not s.prometheus_url:
                raise ann.AnnotationError(
                    f"{ann.DEMAND_QUERY} needs GPUROSTER_PROMETHEUS_URL to be set")
            n = min(HISTORY_KEEP, 4 * 7 * s.steps_per_day())
            end = self.time_of(step)
            history = self.query(s.prometheus_url, sv.spec.demand_query,
                                 end - n * s.step_seconds, end, s.step_seconds)
            spd = s.steps_per_day()
        try:
            f = forecasting.forecast(history, H, spd)
        except ValueError as e:
            raise ann.AnnotationError(f"demand history: {e}") from None
        out = tuple(whole(v) for v in f.values), tuple(history[-HISTORY_KEEP:])
        self._forecasts = {k: v for k, v in self._forecasts.items() if k[1] >= step - 1}
        self._forecasts[(sv.spec.name, step)] = out
        return out

    # --- commit: gangs ------------------------------------------------------------

    def _admit(self, snap: snapshot.Snapshot, plan: model.Plan, step: int,
               now: float) -> tuple[dict[str, snapshot.Admission], dict[str, str]]:
        admitted: dict[str, snapshot.Admission] = {}
        failed: dict[str, str] = {}
        for name, block in sorted(plan.starts.items()):
            gang = snap.gangs.get(name)
            if gang is None or gang.admission is not None or gang.work is None:
                continue
            try:
                per_pod = snapshot.layout(
                    [(ann.key(p), ann.pod_gpus(p.get("spec") or {})) for p in gang.pods],
                    block, snap.cluster, snap.nodes)
            except ann.AnnotationError as e:
                failed[name] = str(e)
                continue
            adm = snapshot.Admission(block=block, admitted_at=now, nodes=per_pod)
            label = block.label(snap.cluster, snap.nodes)
            done: list[Obj] = []
            error = None
            for pod in gang.pods:
                k = ann.key(pod)
                try:
                    self._write_admission(pod, label, now, per_pod[k])
                    done.append(pod)
                except kube.ApiError as e:
                    error = f"admission write failed on {k}: {e}"
                    break
            if error is not None:
                for pod in done:  # undo: no partial gang
                    try:
                        self._patch(pod, objects.admission_undo())
                    except kube.ApiError:
                        log.exception("undo of admission on %s failed", ann.key(pod))
                failed[name] = error
                metrics.GANG_ADMISSIONS.labels(outcome="failed").inc()
                log.warning("gang %s not admitted: %s", name, error)
                continue
            admitted[name] = adm
            metrics.GANG_ADMISSIONS.labels(outcome="admitted").inc()
            w = gang.work
            metrics.QUEUE_WAIT.labels(priority=self._priority_label(w.priority)).observe(
                max(0.0, now - gang.arrival))
            first = self._first_planned.pop(name, None)
            if first is not None:
                metrics.PLANNED_START_DELAY.observe(now - first)
            log.info("admitted gang %s on %s at step %d", name, label, step)
        return admitted, failed

    def _refill(self, snap: snapshot.Snapshot, now: float) -> dict[str, str]:
        """Admit the pods that replace ended members of running gangs, in their places.

        Returns pod key -> why its admission write failed (tried again next round).
        """
        failed: dict[str, str] = {}
        for name, gang in sorted(snap.gangs.items()):
            adm = gang.admission
            if adm is None or not gang.refill:
                continue
            label = adm.block.label(snap.cluster, snap.nodes)
            for pod in gang.pods:
                k = ann.key(pod)
                node = gang.refill.get(k)
                if node is None or k in adm.nodes:
                    continue
                try:
                    self._write_admission(pod, label, adm.admitted_at, node)
                except kube.ApiError as e:
                    failed[k] = f"admission write failed on {k}: {e}"
                    log.warning("replacement %s of gang %s not admitted: %s", k, name, e)
                    continue
                adm.nodes[k] = node
                metrics.GANG_ADMISSIONS.labels(outcome="replaced").inc()
                self._tell(pod, "Admitted", f"replaces an ended pod of gang {name}: block "
                           f"{label}, node {node}", now, True, False)
                log.info("pod %s replaces an ended pod of gang %s on %s", k, name, node)
        return failed

    def _write_admission(self, pod: Obj, label: str, at: float, node: str) -> None:
        """Write a pod's admission record (and lift its scheduling gate); ApiError on failure."""
        gates = (pod.get("spec") or {}).get("schedulingGates")
        self._patch(pod, objects.admission_patch(label, at, node, gates))

    def _patch(self, pod: Obj, patch: Obj) -> None:
        """Patch a pod and put the answer in the cache, so the next round sees the write."""
        m = pod.get("metadata") or {}
        new = self.client.patch_pod(str(m.get("namespace")), str(m.get("name")), patch)
        if isinstance(new, dict) and new.get("metadata"):
            self.cache.put("pods", new)

    def _priority_label(self, p: float) -> str:
        for k, v in self.settings.priority_classes.items():
            if float(v) == p:
                return k
        return f"{p:g}"

    # --- commit: services -------------------------------------------------------

    def _scale(self, snap: snapshot.Snapshot, plan: model.Plan, step: int,
               inp: model.PlanInput) -> dict[str, int]:
        scaled: dict[str, int] = {}
        planned = self.table.service_planned
        for name, gpus in sorted(plan.service_gpus.items()):
            sv = snap.services.get(name)
            if sv is None:
                continue
            per = sv.spec.gpus_per_replica
            want = self._within_swap_budget(sv, len(gpus) // per, step)
            ns, dep = name.split("/", 1)
            if want < sv.replicas:
                self._steer_scale_down(snap, sv, planned.get(name, {}))
            elif want == sv.replicas:
                self._move(snap, sv, planned.get(name, {}), step)
            if want != sv.replicas:
                try:
                    self.client.scale(ns, dep, want)
                    scaled[name] = want
                    up, down = self._moves_in(name, step)
                    self._moved[name] = (step, up + max(0, want - sv.replicas),
                                         down + max(0, sv.replicas - want))
                    log.info("service %s: %d -> %d replicas at step %d", name, sv.replicas,
                             want, step)
                except kube.ApiError as e:
                    log.warning("scaling %s to %d failed: %s", name, want, e)
            # Pending pods of the service may now fit: wake them once per step.
            free = sum(max(0, n - sv.gpus_by_node.get(node, 0))
                       for node, n in planned.get(name, {}).items())
            if free > 0:
                for p in sv.pending:
                    self._wake(p, step)
        return scaled

    def _moves_in(self, service: str, step: int) -> tuple[int, int]:
        """(replicas added, replicas removed) for `service` so far in `step`."""
        st, up, down = self._moved.get(service, (step, 0, 0))
        return (up, down) if st == step else (0, 0)

    def _within_swap_budget(self, sv: snapshot.ServiceInfo, want: int, step: int) -> int:
        """A re-plan mid-step may undo part of the step's first scaling (a gang ended
        just after the boundary and freed GPUs). The plan's swap count is taken from
        the step's starting set, but pods removed earlier in the step are gone: growing
        back costs new pods. So a scale-up after a scale-down in the same step is held
        to what is left of max_swap; a scale-down is never held back (a gang may have
        been promised those GPUs)."""
        up, down = self._moves_in(sv.spec.name, step)
        if down == 0 or want <= sv.replicas:
            return want
        left = max(0, sv.spec.max_swap // sv.spec.gpus_per_replica - up - down)
        held = min(want, sv.replicas + left)
        if held < want:
            log.info("service %s: held at %d replicas (plan %d): %d removed earlier in "
                     "step %d, max_swap %d", sv.spec.name, held, want, down, step,
                     sv.spec.max_swap)
        return held

    def _move(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo,
              planned: Mapping[str, int], step: int) -> None:
        """The plan moved some of the service's GPUs to another node at the same count
        (a gang took the ones it had, or will soon). A replica count cannot say that:
        evict the pods on nodes holding more than the plan gives them there. The
        Deployment replaces each, and the filter puts the new pod where the plan has
        room. A move is one pod out and one in, so at most half of what is left of
        max_swap this step; a disruption budget may refuse (then the next round tries).
        Only in a step's first half: the new pod binds a little after the old one goes,
        and late in a step it would land in the next one, on top of that step's own
        swaps. A later move waits for the next boundary plan."""
        if self.clock.now() - self.time_of(step) > self.settings.step_seconds / 2:
            return
        name, per = sv.spec.name, sv.spec.gpus_per_replica
        up, down = self._moves_in(name, step)
        budget = max(0, sv.spec.max_swap // per - up - down) // 2
        # Room where the plan holds GPUs the service's pods do not use yet, less what
        # its pending pods (replacements on their way) will take.
        room = sum(max(0, n - sv.gpus_by_node.get(node, 0))
                   for node, n in planned.items()) // per - len(sv.pending)
        if budget <= 0 or room <= 0:
            return
        on_node: dict[str, list[Obj]] = {}
        leaving: dict[str, int] = {}
        for k, svc in snap.pod_service.items():
            pod = snap.pods.get(k)
            if svc != name or pod is None or not snapshot.pod_live(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                leaving[node] = leaving.get(node, 0) + per
            else:
                on_node.setdefault(node, []).append(pod)
        victims: list[Obj] = []
        for node, pods in sorted(on_node.items()):
            surplus = sv.gpus_by_node.get(node, 0) - leaving.get(node, 0) - planned.get(node, 0)
            # The newest pods go first: the least warmed up.
            pods.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")),
                      reverse=True)
            victims += pods[:max(0, -(-surplus // per))]
        moved = 0
        for pod in victims[:min(budget, room)]:
            m = pod.get("metadata") or {}
            try:
                self.client.evict(str(m.get("namespace")), str(m.get("name")))
            except kube.ApiError as e:
                log.info("service %s: could not move pod %s off %s: %s", name, m.get("name"),
                         (pod.get("spec") or {}).get("nodeName"), e)
                break
            moved += 1
        if moved:
            self._moved[name] = (step, up + moved, down + moved)
            log.info("service %s: moved %d pod(s) to where the plan holds its GPUs at step %d",
                     name, moved, step)

    def _steer_scale_down(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo,
                          planned: Mapping[str, int]) -> None:
        """Pods on nodes the plan took GPUs from go first (pod-deletion-cost)."""
        for k, svc in snap.pod_service.items():
            if svc != sv.spec.name:
                continue
            pod = snap.pods.get(k)
            if pod is None or not snapshot.pod_live(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            surplus = sv.gpus_by_node.get(node or "", 0) - planned.get(node or "", 0)
            cost = -100 if (not node or surplus > 0) else 100
            current = ann.annotations_of(pod).get(objects.DELETION_COST)
            if current == str(cost):
                continue
            m = pod.get("metadata") or {}
            try:
                self.client.patch_pod(str(m.get("namespace")), str(m.get("name")),
                                      objects.deletion_cost_patch(cost))
            except kube.ApiError as e:
                log.debug("deletion cost on %s: %s", k, e)

    def _wake(self, pod: Obj, step: int) -> None:
        k = ann.key(pod)
        if self._woken.get(k) == step:
            return
        self._woken[k] = step
        m = pod.get("metadata") or {}
        try:
            self.client.patch_pod(str(m.get("namespace")), str(m.get("name")),
                                  objects.wake_patch(step))
        except kube.ApiError as e:
            log.debug("wake %s: %s", k, e)

    # --- the table the verbs read -------------------------------------------------

    def _publish(self, snap: snapshot.Snapshot, plan: model.Plan, step: int,
                 admitted: Mapping[str, snapshot.Admission], failed: Mapping[str, str],
                 problems: Mapping[str, str], refused: Mapping[str, str]) -> None:
        assigned: dict[str, str] = {}
        waiting: dict[str, str] = {}
        for name, g in snap.gangs.items():
            adm = g.admission or admitted.get(name)
            if adm is not None:
                assigned.update(adm.nodes)
                for k in g.pod_keys():  # late pods of an admitted gang
                    if k in adm.nodes:
                        continue
                    node = g.refill.get(k)
                    waiting[k] = g.error or (
                        f"waiting: replaces an ended pod of gang {name} on {node}; "
                        + (f"{refused[k]}; retrying next step" if k in refused
                           else "the leader admits it"))
                continue
            waiting.update({k: self._reason(snap, plan, g, failed) for k in g.pod_keys()})
        g_per = snap.cluster.gpus_per_node
        service_planned: dict[str, dict[str, int]] = {}
        for name, gpus in plan.service_gpus.items():
            per_node: dict[str, int] = {}
            for gpu in gpus:
                i = gpu // g_per
                if i < len(snap.nodes):
                    per_node[snap.nodes[i]] = per_node.get(snap.nodes[i], 0) + 1
            service_planned[name] = per_node
        for name in problems:
            service_planned.setdefault(name, {})
        with self._lock:
            self._svc_used = {n: dict(sv.gpus_by_node) for n, sv in snap.services.items()}
        self.table = Table(step=step, next_step_at=self.time_of(step + 1), assigned=assigned,
                           waiting=waiting, pod_service=dict(snap.pod_service),
                           service_planned=service_planned, nodes=tuple(snap.nodes))

    def _reason(self, snap: snapshot.Snapshot, plan: model.Plan, g: snapshot.Gang,
                failed: Mapping[str, str]) -> str:
        if g.error:
            return g.error if g.error.startswith(snapshot.NODE_LOST) else (
                f"bad annotations: {g.error}")
        if g.waiting_for:
            return g.waiting_for
        why = f"{g.requeued}; " if g.requeued else ""
        if g.name in failed:
            return f"waiting: {why}{failed[g.name]}; retrying next step"
        start = plan.planned_start.get(g.name)
        if start is None:
            return f"waiting: {why}not in the plan's horizon"
        block = plan.planned_block.get(g.name)
        where = f" on {block.label(snap.cluster, snap.nodes).split(':')[0]}" if block else ""
        when = format_clock(self.time_of(start), self.settings.step_seconds)
        return f"waiting: {why}planned start {when}{where} (step {start})"

    # --- why pending ------------------------------------------------------------

    def _explain(self, snap: snapshot.Snapshot, plan: model.Plan, step: int, now: float,
                 admitted: Mapping[str, snapshot.Admission], failed: Mapping[str, str],
                 problems: Mapping[str, str]) -> None:
        for name in plan.planned_start:
            if name not in admitted and name in snap.gangs:
                self._first_planned.setdefault(name, self.time_of(plan.planned_start[name]))
        seen: set[str] = set()
        for name, g in snap.gangs.items():
            if name in admitted:
                for p in g.pods:
                    k = ann.key(p)
                    seen.add(k)
                    node = admitted[name].nodes.get(k, "")
                    msg = (f"admitted at step {step}: block "
                           f"{admitted[name].block.label(snap.cluster, snap.nodes)}, node {node}")
                    self._tell(p, "Admitted", msg, now, True, False)
                continue
            if g.admission is not None and not g.error:
                seen.update(g.pod_keys())
                self._report_down_nodes(snap, g, now)
                continue
            for p in g.pods:
                k = ann.key(p)
                seen.add(k)
                if g.admission is not None and k in g.admission.nodes:
                    continue
                reason = self.table.waiting.get(k)
                if reason is None:
                    continue
                bad = reason.startswith("bad annotations")
                lost = reason.startswith(snapshot.NODE_LOST)
                if bad and self._explained.get(k) != reason:
                    metrics.ANNOTATION_ERRORS.inc()
                self._tell(p, "NodeLost" if lost else "InvalidAnnotations" if bad else "Waiting",
                           reason, now, False, bad or lost)
        for name, problem in problems.items():
            sv = snap.services.get(name)
            if sv is None:
                continue
            for p in sv.pending:
                seen.add(ann.key(p))
                self._tell(p, "InvalidDemand", f"service {name}: {problem}", now, False, True)
        for k in [k for k in self._explained if k not in seen]:
            del self._explained[k]
        # Forget gangs and pods that are gone, so memory follows the cluster.
        for name in [n for n in self._first_planned if n not in snap.gangs]:
            del self._first_planned[name]
        for k in [k for k in self._woken if k not in snap.pods]:
            del self._woken[k]

    def _report_down_nodes(self, snap: snapshot.Snapshot, g: snapshot.Gang, now: float) -> None:
        """A running gang on a node that is not Ready: its GPUs leave the plan; say so."""
        assert g.admission is not None
        per = snap.cluster.gpus_per_node
        down = sorted({snap.nodes[gpu // per] for gpu in g.admission.block.gpus()
                       if gpu in snap.unavailable and gpu // per < len(snap.nodes)})
        if not down:
            return
        msg = (f"gang {g.name} runs on {', '.join(down)}, which is not Ready: its GPUs are out "
               "of the plan until the node is back; nothing else moves")
        if all(self._explained.get(ann.key(p)) == msg for p in g.pods):
            return
        log.warning("%s", msg)
        for p in g.pods:
            self._tell(p, "NodeNotReady", msg, now, True, True)

    def _tell(self, pod: Obj, reason: str, message: str, now: float, status: bool,
              warning: bool) -> None:
        k = ann.key(pod)
        if self._explained.get(k) == message:
            return
        self._explained[k] = message
        m = pod.get("metadata") or {}
        ns, name = str(m.get("namespace")), str(m.get("name"))
        try:
            self.client.create_event(ns, objects.event(pod, reason, message, now, warning))
        except kube.ApiError as e:
            # Not told: try again next round (a slow API server must not eat the Event).
            self._explained.pop(k, None)
            log.info("event on %s not written (%s); retrying next round", k, e)
            return
        try:
            self.client.patch_pod_status(ns, name,
                                         objects.condition_patch(status, reason, message, now))
        except kube.ApiError as e:
            log.info("condition on %s not written: %s", k, e)

    # --- observability ------------------------------------------------------------

    def _record(self, snap: snapshot.Snapshot, plan: model.Plan, inp: model.PlanInput,
                step: int, now: float, admitted: Mapping[str, snapshot.Admission],
                took: float) -> None:
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
                label = self._priority_label(q.priority)
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
            self._observe_service_level(st, v, plan, step, a)
        st.value_rate = value
        self.state = st

    def _observe_service_level(self, st: metrics.StepState, v: model.ServiceState,
                               plan: model.Plan, step: int, allocated: int) -> None:
        """The service's gauges: delivered service level over the last day of steps
        (its past demand against the GPUs planned then), objective, headroom now."""
        day = self.settings.steps_per_day()
        given = self._given.setdefault(v.name, {})
        given[step] = allocated
        for old in [k for k in given if k <= step - day]:
            del given[old]
        start = step - len(v.past_demand)
        pairs = [(v.past_demand[t - start], given[t]) for t in range(max(start, step - day), step)
                 if t in given]
        level = headroom.delivered([d for d, _ in pairs], [a for _, a in pairs])
        if level is not None:
            st.service_level[v.name] = level
        st.service_objective[v.name] = (v.service_level if v.service_level is not None
                                        else self.settings.service_level)
        st.service_headroom[v.name] = plan.headroom.get(v.name, 0)

    # --- the verbs ----------------------------------------------------------------

    def filter(self, pod: Obj, nodes: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """(nodes that pass, failed node -> reason)."""
        t = self.table
        k = ann.key(pod)
        node = t.assigned.get(k) or admitted_node(pod)
        if node is not None:
            if node in nodes:
                return [node], {}  # the others simply drop out; no reasons needed
            why = f"the plan assigns this pod to {node}"
            return [], dict.fromkeys(nodes, why)
        svc = t.pod_service.get(k) or snapshot.deployment_of(pod)
        if svc is not None and svc in t.service_planned:
            return self._filter_service(pod, svc, nodes, t)
        reason = self._waiting(pod, k, t)
        if reason is None:
            return list(nodes), {}
        return [], dict.fromkeys(nodes, reason)

    def verdict(self, pod: Obj) -> str | None:
        """The reason every node fails `pod` for, or None when it depends on the node.

        The filter of a waiting pod sends one reason per candidate node; the HTTP
        layer asks this first and writes that answer without building it per node.
        """
        t = self.table
        k = ann.key(pod)
        if t.assigned.get(k) or admitted_node(pod):
            return None
        svc = t.pod_service.get(k) or snapshot.deployment_of(pod)
        if svc is not None and svc in t.service_planned:
            return None
        return self._waiting(pod, k, t)

    def _waiting(self, pod: Obj, k: str, t: Table) -> str | None:
        """Why a pod with no block and no service waits; None if it is not ours."""
        reason = t.waiting.get(k)
        if reason is None:
            ns = (pod.get("metadata") or {}).get("namespace")
            if self.settings.namespaces and ns not in self.settings.namespaces:
                return None
            when = format_clock(t.next_step_at, self.settings.step_seconds)
            reason = f"waiting: not planned yet (next step at {when})"
        return reason

    def _filter_service(self, pod: Obj, svc: str, nodes: Sequence[str],
                        t: Table) -> tuple[list[str], dict[str, str]]:
        try:
            need = ann.pod_gpus(pod.get("spec") or {})
        except ann.AnnotationError as e:
            return [], {n: str(e) for n in nodes}
        planned = t.service_planned.get(svc, {})
        used = self._svc_used.get(svc, {})
        passed, failed = [], {}
        for n in nodes:
            free = planned.get(n, 0) - used.get(n, 0)
            if free >= need:
                passed.append(n)
            else:
                failed[n] = (f"service {svc}: the plan holds {planned.get(n, 0)} GPUs here "
                             f"for it, {used.get(n, 0)} in use")
        return passed, failed

    def prioritize(self, pod: Obj, nodes: Sequence[str]) -> list[tuple[str, int]]:
        """Non-zero scores only: kube-scheduler adds nothing for a host left out."""
        t = self.table
        k = ann.key(pod)
        node = t.assigned.get(k) or admitted_node(pod)
        if node is not None:
            return [(node, 10)] if node in nodes else []
        svc = t.pod_service.get(k) or snapshot.deployment_of(pod)
        if svc is not None and svc in t.service_planned:
            planned = t.service_planned[svc]
            used = self._svc_used.get(svc, {})
            free = {n: planned.get(n, 0) - used.get(n, 0) for n in planned}
            top = max(free.values(), default=0)
            candidates = set(nodes)
            return [(n, 10 if f == top else 5) for n, f in free.items()
                    if f > 0 and n in candidates]
        return []

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> str | None:
        """Assume, bind, undo on failure. Returns an error message or None."""
        k = f"{namespace}/{name}"
        t = self.table
        pod = self.cache.get("pods", k)
        svc = t.pod_service.get(k) or (snapshot.deployment_of(pod) if pod else None)
        want = t.assigned.get(k) or (admitted_node(pod) if pod else None)
        gpus = 0
        if want is not None:
            if want != node:
                metrics.BINDINGS.labels(outcome="refused").inc()
                return f"pod {k} is assigned to {want} by the plan, not {node}"
        elif svc is not None and svc in t.service_planned:
            gpus = ann.pod_gpus((pod or {}).get("spec") or {}) if pod else 1
            with self._lock:
                used = self._svc_used.setdefault(svc, {})
                free = t.service_planned[svc].get(node, 0) - used.get(node, 0)
                if free < gpus:
                    metrics.BINDINGS.labels(outcome="refused").inc()
                    return f"service {svc}: no planned GPU free on {node}"
                used[node] = used.get(node, 0) + gpus
        elif not (self.settings.namespaces and namespace not in self.settings.namespaces):
            metrics.BINDINGS.labels(outcome="refused").inc()
            return f"pod {k} is not admitted by the plan"
        self.cache.assume(k, node)
        try:
            self.client.bind(namespace, name, uid, node)
        except kube.ApiError as e:
            self.cache.forget(k)
            if gpus:
                with self._lock:
                    used = self._svc_used.setdefault(svc or "", {})
                    used[node] = max(0, used.get(node, 0) - gpus)
            metrics.BINDINGS.labels(outcome="failed").inc()
            return f"binding {k} to {node} failed: {e}"
        metrics.BINDINGS.labels(outcome="bound").inc()
        return None


def admitted_node(pod: Obj) -> str | None:
    """The node the admission annotations give this pod, if the pod is admitted.

    The annotations are the durable record: a follower replica, or this one
    between its writes and its next published table, has them before its table
    does, and kube-scheduler calls filter as soon as it sees the update."""
    a = ann.annotations_of(pod)
    node = a.get(ann.NODE)
    return node if node and ann.BLOCK in a else None


def _mask(gpus: frozenset[int]) -> int:
    m = 0
    for g in gpus:
        m |= 1 << g
    return m


def plan_view(snap: snapshot.Snapshot, plan: model.Plan, inp: model.PlanInput, step: int,
              step_start: float, step_seconds: float, took: float) -> dict[str, Any]:
    """The plan as JSON for `GET /plan`: GPU x step grid over the horizon, jobs, services."""
    c = snap.cluster
    H = inp.horizon
    grid: list[list[str | None]] = [[None] * H for _ in range(c.gpus)]
    for gpu in inp.unavailable_gpus:
        if gpu < c.gpus:
            grid[gpu] = ["(unavailable)"] * H
    jobs: dict[str, Any] = {}
    for r in inp.running:
        end = min(H, r.expected_end(step) - step)
        for gpu in r.block.gpus():
            for k in range(max(0, end)):
                grid[gpu][k] = r.name
        jobs[r.name] = {"state": "running", "gpus": r.gpus, "priority": r.priority,
                        "type": r.type, "block": r.block.label(c, snap.nodes),
                        "start_step": r.start_step, "expected_end_step": r.expected_end(step)}
    for q in inp.queued:
        start = plan.planned_start.get(q.name)
        block = plan.planned_block.get(q.name)
        jobs[q.name] = {"state": "admitted" if q.name in plan.starts else "queued",
                        "gpus": q.gpus, "priority": q.priority, "type": q.type,
                        "arrival_step": q.arrival_step, "planned_start_step": start,
                        "block": block.label(c, snap.nodes) if block else None,
                        "estimate_steps": q.estimate_steps,
                        "reason": plan.reasons.get(q.name)}
        if start is not None and block is not None:
            for k in range(max(0, start - step), min(H, start - step + q.estimate_steps)):
                for gpu in block.gpus():
                    if grid[gpu][k] is None:
                        grid[gpu][k] = q.name
    services: dict[str, Any] = {}
    for v in inp.services:
        now_gpus = sorted(plan.service_gpus.get(v.name, frozenset()))
        counts = list(plan.service_counts.get(v.name, ())) or [len(now_gpus)]
        services[v.name] = {"gpus_now": now_gpus, "counts": counts,
                            "forecast": list(v.forecast[:H]), "max_swap": v.max_swap,
                            "priority": v.priority}
        for gpu in now_gpus:
            if gpu < c.gpus:
                grid[gpu][0] = v.name
        # Later steps: the planned count, drawn on the highest free GPUs (indicative).
        for k in range(1, min(H, len(counts))):
            need = counts[k]
            for gpu in sorted(now_gpus, reverse=True) + list(range(c.gpus - 1, -1, -1)):
                if need <= 0:
                    break
                if grid[gpu][k] is None:
                    grid[gpu][k] = v.name
                    need -= 1
    return {
        "step": step, "step_seconds": step_seconds, "step_start": step_start,
        "step_start_utc": snapshot.format_time(step_start), "horizon": H,
        "nodes": list(snap.nodes), "gpus_per_node": c.gpus_per_node,
        "grid": grid, "jobs": jobs, "services": services,
        "queue": [q.name for q in inp.queued if q.name not in plan.starts],
        "plan_seconds": took,
    }

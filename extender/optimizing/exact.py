"""`gpuroster-full`: an exact CP-SAT model of the horizon, warm-started from the fast plan.

At each step it sees the same `PlanInput` as the fast policy and:

1. runs the fast policy (`gpuroster`) for a complete, legal plan of the horizon;
2. builds a CP-SAT model of steps now .. now+H-1 (offsets k = 0..H-1):
   - per queued job, an optional start k in [0, H) (one boolean per step) and a
     block start among the legal positions (MODEL.md: <= G GPUs inside one
     node, more as whole consecutive nodes); its rectangle (steps x GPUs) runs
     for its whole estimate, past the horizon too, so no plan overlaps there;
   - running jobs and unavailable GPUs as fixed rectangles; one NoOverlap2D;
   - per service and step, a GPU count with |change| <= max_swap, beside the
     jobs under the cluster's capacity; at step now the service's concrete
     GPU set (one optional unit box per GPU), within max_swap of its current
     set and disjoint from every job;
   - objective: sum of gpus x priority x decay weight over the steps a job
     runs (by default its whole estimated run, as the fast policy counts it;
     `reward_past_horizon=False`: the horizon steps only), minus the shortfall
     under the service's target priced at `realtime_penalty` x its priority x
     the same weight (the target is the fast policy's curve: the forecast,
     raised after a recent miss, ramped within the swap cap); tiny
     tie-breakers: hold no GPU a service does not need, swap no GPU needlessly;
3. hints the model with the fast plan, solves within `time_limit_s`, and
   commits only step now: the jobs that start now with their blocks, and the
   services' GPU sets. If CP-SAT finds nothing better than the fast plan (same
   objective, computed the same way) or no solution in time, the fast plan is
   committed.

Services beyond step now are counts, not sets: the swap cap is exact at the
committed step and a count-change cap afterwards (the plan is re-made every
step). Per-step objective, bound and gap are kept in `stats`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from extender.planner import allocating, model, policies, servicing

_SCALE = 1000  # integer objective: reward units x 1000; tie-breakers cost 1 each


@dataclass
class Options:
    # Stop on CP-SAT's deterministic clock (units of work, roughly seconds) so that a run
    # does not depend on machine load: with one worker it repeats exactly. The wall-clock
    # cap only guards against a loaded machine. deterministic_time=None: wall clock only.
    deterministic_time: float | None = 0.25
    time_limit_s: float = 2.0
    workers: int = 1
    realtime_penalty: float = 8.0  # shortfall cost per GPU-step, x the service's priority
    decay: float = 0.03  # weight 1 / (1 + decay * k) for step now + k (as the fast policy)
    max_gpus: int = 512  # larger instances: the fast plan, unsolved
    max_jobs: int = 200
    seed: int = 0
    # Reward a job's whole estimated run (weights decaying on past the horizon, up to
    # `lookahead_cap` steps) as the fast policy does; False counts the horizon only.
    reward_past_horizon: bool = True
    lookahead_cap: int = 96
    error_memory: float = 0.7  # as the fast policy: how long a recent forecast miss counts
    fast_options: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StepStats:
    """One step's solve. `objective`/`fast_objective`/`bound` in the model's units."""

    now: int
    status: str  # CP-SAT status name, or "skipped" (too large) / "trivial" (nothing to decide)
    used: str  # "cp-sat" or "fast": which plan was committed
    objective: float | None
    fast_objective: float
    bound: float | None
    gap: float | None  # CP-SAT's relative gap: (bound - incumbent) / max(1, |bound|)
    seconds: float
    jobs: int
    gpus: int


class Full:
    name = "gpuroster-full"

    def __init__(self, **options: object) -> None:
        self.options = Options(**options)  # type: ignore[arg-type]
        self.fast = policies.create("gpuroster", **self.options.fast_options)
        self.stats: list[StepStats] = []

    def summary(self) -> dict[str, object]:
        """Totals over the steps planned so far: for reports."""
        solved = [x for x in self.stats if x.gap is not None]
        gaps = sorted(x.gap for x in solved if x.gap is not None)
        secs = sorted(x.seconds for x in self.stats)
        statuses: dict[str, int] = {}
        for x in self.stats:
            statuses[x.status] = statuses.get(x.status, 0) + 1
        return {
            "steps": len(self.stats),
            "cp_sat_committed": sum(1 for x in self.stats if x.used == "cp-sat"),
            "statuses": statuses,
            "seconds_p50": secs[len(secs) // 2] if secs else 0.0,
            "seconds_max": secs[-1] if secs else 0.0,
            "gap_median": gaps[len(gaps) // 2] if gaps else None,
            "gap_max": gaps[-1] if gaps else None,
        }

    def plan(self, inp: model.PlanInput) -> model.Plan:
        t0 = time.perf_counter()
        o = self.options
        fast = self.fast.plan(inp)
        n = inp.cluster.gpus
        if not inp.queued and not inp.services:
            self._note(inp, "trivial", "fast", None, 0.0, None, t0)
            return fast
        if n > o.max_gpus or len(inp.queued) > o.max_jobs:
            self._note(inp, "skipped", "fast", None, 0.0, None, t0)
            return fast
        m = _Model(inp, o, self.fast.options if isinstance(self.fast, allocating.Gpuroster)
                   else allocating.Options(), fast.lead)
        fast_obj = m.hint(fast)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = o.time_limit_s
        solver.parameters.num_workers = o.workers
        if o.deterministic_time is not None:
            solver.parameters.max_deterministic_time = o.deterministic_time
        solver.parameters.random_seed = o.seed
        status = solver.solve(m.cp)
        name = solver.status_name(status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            self._note(inp, name, "fast", None, fast_obj, None, t0)
            return fast
        obj = m.main_objective(solver)
        # CP-SAT's own bound and gap (its objective includes the tie-breakers, a few units
        # of 1 / _SCALE each, so the bound is in reward units to that precision).
        bound = solver.best_objective_bound / _SCALE
        top = solver.best_objective_bound
        gap = max(0.0, top - solver.objective_value) / max(1.0, abs(top))
        if obj <= fast_obj + 1e-9:
            self._note(inp, name, "fast", obj, fast_obj, bound, t0, gap)
            return fast
        self._note(inp, name, "cp-sat", obj, fast_obj, bound, t0, gap)
        return m.plan(solver, fast)

    def _note(
        self,
        inp: model.PlanInput,
        status: str,
        used: str,
        obj: float | None,
        fast_obj: float,
        bound: float | None,
        t0: float,
        gap: float | None = None,
    ) -> None:
        self.stats.append(
            StepStats(
                now=inp.now,
                status=status,
                used=used,
                objective=obj,
                fast_objective=fast_obj,
                bound=bound,
                gap=gap,
                seconds=time.perf_counter() - t0,
                jobs=len(inp.queued),
                gpus=inp.cluster.gpus,
            )
        )


def legal_starts(size: int, cluster: model.Cluster) -> list[int]:
    """First GPU of every legal block of `size` (MODEL.md)."""
    return [p for p in range(cluster.gpus - size + 1) if model.Block(p, size).is_legal(cluster)]


class _Model:
    """The CP-SAT model of one step's horizon."""

    def __init__(self, inp: model.PlanInput, o: Options, fast: allocating.Options,
                 read: dict[str, float | None] | None = None) -> None:
        self.inp = inp
        self.o = o
        c = inp.cluster
        self.H = H = max(1, inp.horizon)
        n = c.gpus
        cp = self.cp = cp_model.CpModel()
        longest = max((q.estimate_steps for q in inp.queued), default=1)
        W = H + min(longest, o.lookahead_cap) if o.reward_past_horizon else H
        self.weights = [1.0 / (1.0 + o.decay * k) for k in range(W)]
        span = H + max((q.estimate_steps for q in inp.queued), default=1)
        for r in inp.running:
            span = max(span, r.expected_end(inp.now) - inp.now)
        x_boxes: list[cp_model.IntervalVar] = []
        y_boxes: list[cp_model.IntervalVar] = []
        self.used_fixed = [0] * H  # GPUs held by running jobs / unavailable, per step

        unavailable = sorted(inp.unavailable_gpus)
        for g in unavailable:
            x_boxes.append(cp.new_fixed_size_interval_var(0, span, f"na{g}.t"))
            y_boxes.append(cp.new_fixed_size_interval_var(g, 1, f"na{g}.g"))
        for k in range(H):
            self.used_fixed[k] += len(unavailable)
        for r in inp.running:
            end = r.expected_end(inp.now) - inp.now
            x_boxes.append(cp.new_fixed_size_interval_var(0, end, f"{r.name}.t"))
            y_boxes.append(cp.new_fixed_size_interval_var(r.block.start, r.gpus, f"{r.name}.g"))
            for k in range(min(end, H)):
                self.used_fixed[k] += r.gpus

        # Queued jobs: start booleans, block start, rectangle.
        self.x: dict[str, list[cp_model.IntVar]] = {}
        self.present: dict[str, cp_model.IntVar] = {}
        self.y: dict[str, cp_model.IntVar] = {}
        self.reward: dict[str, list[float]] = {}
        running_at: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(H)]
        for q in inp.queued:
            starts = legal_starts(q.gpus, c)
            if not starts:
                continue
            d = max(1, q.estimate_steps)
            xs = [cp.new_bool_var(f"{q.name}@{k}") for k in range(H)]
            pres = cp.new_bool_var(f"{q.name}.on")
            cp.add(sum(xs) == pres)
            s = cp.new_int_var(0, H - 1, f"{q.name}.s")
            cp.add(s == sum(k * xk for k, xk in enumerate(xs)))
            y = cp.new_int_var_from_domain(cp_model.Domain.from_values(starts), f"{q.name}.y")
            x_boxes.append(cp.new_optional_fixed_size_interval_var(s, d, pres, f"{q.name}.t"))
            y_boxes.append(cp.new_optional_fixed_size_interval_var(y, q.gpus, pres, f"{q.name}.g"))
            self.x[q.name], self.present[q.name], self.y[q.name] = xs, pres, y
            self.reward[q.name] = [
                q.gpus * q.priority * sum(self.weights[k : min(k + d, W)]) for k in range(H)
            ]
            for k in range(H):
                for k2 in range(k, min(k + d, H)):
                    running_at[k2].append((q.gpus, xs[k]))

        # Services: counts per step, concrete set at step 0.
        self.count: dict[str, list[cp_model.IntVar]] = {}
        self.short: dict[str, list[cp_model.IntVar]] = {}
        self.hold0: dict[str, list[cp_model.IntVar]] = {}
        self.forecast: dict[str, list[int]] = {}
        swaps: list[cp_model.IntVar] = []
        # The services' demand to plan against: the fast plan's curves, headroom for the
        # recent error and the peak's timing tolerance included (the same `Options`).
        told = {v.name: servicing.forecast_curve(v, H, inp.steps_per_day) for v in inp.services}
        # How far each service is ahead of its static reservation's record: as the fast
        # plan read it (once a round), else read here; the plan carries it for the gauge.
        self.lead = servicing.reservation_leads(inp.services, read)
        rooms = allocating.held_to_reservation(
            inp, fast, told, allocating.service_rooms(inp, fast, told), self.lead)
        floors = allocating.service_floors(inp, fast, told, self.lead)
        for v in inp.services:
            f = servicing.service_curve(v, H, inp.now, inp.steps_per_day, o.error_memory,
                                        room=rooms[v.name], forecast=told[v.name],
                                        limit=servicing.ceiling(v, fast.headroom_cap),
                                        floor=floors[v.name])
            self.forecast[v.name] = f
            a = [cp.new_int_var(0, n, f"{v.name}#{k}") for k in range(H)]
            sf = [cp.new_int_var(0, max(0, f[k]), f"{v.name}!{k}") for k in range(H)]
            for k in range(H):
                cp.add(sf[k] >= f[k] - a[k])
            for k in range(1, H):
                cp.add(a[k] - a[k - 1] <= v.max_swap)
                cp.add(a[k - 1] - a[k] <= v.max_swap)
            h = [cp.new_bool_var(f"{v.name}^{g}") for g in range(n)]
            cp.add(sum(h) == a[0])
            for g in range(n):
                x_boxes.append(
                    cp.new_optional_fixed_size_interval_var(0, 1, h[g], f"{v.name}^{g}.t")
                )
                y_boxes.append(
                    cp.new_optional_fixed_size_interval_var(g, 1, h[g], f"{v.name}^{g}.g")
                )
            if inp.now > 0:
                changed = [1 - h[g] if g in v.current_gpus else h[g] for g in range(n)]
                cp.add(sum(changed) <= v.max_swap + v.lost)  # lost GPUs: replaced, not swapped
                sw = cp.new_int_var(0, n, f"{v.name}.swap")
                cp.add(sw == sum(changed))
                swaps.append(sw)
            self.count[v.name], self.short[v.name], self.hold0[v.name] = a, sf, h
        cp.add_no_overlap_2d(x_boxes, y_boxes)

        # Capacity, counted (redundant with the boxes at step 0, needed after it).
        for k in range(H):
            load = sum(g * xv for g, xv in running_at[k]) + sum(a[k] for a in self.count.values())
            cp.add(load <= n - self.used_fixed[k])

        # Objective: integer coefficients.
        terms = []
        for name, xs in self.x.items():
            terms += [round(_SCALE * self.reward[name][k]) * xs[k] for k in range(H)]
        for v in inp.services:
            for k in range(H):
                cost = round(_SCALE * o.realtime_penalty * v.priority * self.weights[k])
                terms.append(-cost * self.short[v.name][k])
                terms.append(-1 * self.count[v.name][k])  # tie-break: hold only what is needed
        terms += [-1 * sw for sw in swaps]  # tie-break: keep the GPUs it has
        cp.maximize(sum(terms))

    # --- the fast plan as a hint and as the bar to beat ------------------------------

    def hint(self, fast: model.Plan) -> float:
        """Hint every variable from the fast plan; return its main objective."""
        cp, H, now = self.cp, self.H, self.inp.now
        total = 0.0
        for name, xs in self.x.items():
            start = fast.planned_start.get(name)
            k0 = None if start is None or not 0 <= start - now < H else start - now
            for k in range(H):
                cp.add_hint(xs[k], k == k0)
            cp.add_hint(self.present[name], k0 is not None)
            if k0 is not None:
                cp.add_hint(self.y[name], fast.planned_block[name].start)
                total += self.reward[name][k0]
        for v in self.inp.services:
            counts = list(fast.service_counts.get(v.name, ()))[:H]
            counts += [counts[-1] if counts else 0] * (H - len(counts))
            now_set = fast.service_gpus.get(v.name, frozenset())
            counts[0] = len(now_set)
            f = self.forecast[v.name]
            for k in range(H):
                cp.add_hint(self.count[v.name][k], counts[k])
                short = max(0, f[k] - counts[k])
                cp.add_hint(self.short[v.name][k], short)
                total -= self._penalty(v, k) * short
            for g, hv in enumerate(self.hold0[v.name]):
                cp.add_hint(hv, g in now_set)
        return total

    def _penalty(self, v: model.ServiceState, k: int) -> float:
        return self.o.realtime_penalty * v.priority * self.weights[k]

    def main_objective(self, solver: cp_model.CpSolver) -> float:
        """The objective without tie-breakers, in reward units (as `hint` computes it)."""
        total = 0.0
        for name, xs in self.x.items():
            for k in range(self.H):
                if solver.boolean_value(xs[k]):
                    total += self.reward[name][k]
        for v in self.inp.services:
            for k in range(self.H):
                total -= self._penalty(v, k) * solver.value(self.short[v.name][k])
        return total

    def plan(self, solver: cp_model.CpSolver, fast: model.Plan) -> model.Plan:
        c = self.inp.cluster
        out = model.Plan(now=self.inp.now)
        out.lead = dict(self.lead)
        for name, xs in self.x.items():
            if not solver.boolean_value(self.present[name]):
                out.reasons[name] = "no room within the plan's horizon"
                continue
            k = next(k for k in range(self.H) if solver.boolean_value(xs[k]))
            size = next(q.gpus for q in self.inp.queued if q.name == name)
            b = model.Block(int(solver.value(self.y[name])), size)
            assert b.is_legal(c)
            out.planned_start[name] = self.inp.now + k
            out.planned_block[name] = b
            if k == 0:
                out.starts[name] = b
            else:
                out.reasons[name] = f"planned start at step {self.inp.now + k}"
        for v in self.inp.services:
            out.service_gpus[v.name] = frozenset(
                g for g, hv in enumerate(self.hold0[v.name]) if solver.boolean_value(hv)
            )
            out.service_counts[v.name] = tuple(int(solver.value(a)) for a in self.count[v.name])
        return out


@policies.register("gpuroster-full")
def _create(**options: object) -> Full:
    return Full(**options)

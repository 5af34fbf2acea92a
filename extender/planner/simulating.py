"""The simulator: runs any policy over a scenario, step by step, committing only the current step.

At step t the policy sees only what is known then: arrived jobs with their
estimates (not their true durations), services' forecasts and the true demand
of past steps. Whatever it plans, only `starts` and `service_gpus` for step t
are committed, after being checked against MODEL.md's rules; a policy that
answers an illegal step is a bug and stops the run with `IllegalPlan`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from extender.planner import blocks, model, policies

EMPTY = -1


class IllegalPlan(RuntimeError):
    """A policy's answer for the current step breaks a rule of MODEL.md."""


@dataclass
class Run:
    """The outcome of one policy on one scenario."""

    scenario: model.Scenario
    policy: str
    grid: np.ndarray  # (gpus, steps) int32: index into `names`, EMPTY for an idle cell
    names: list[str]
    starts: dict[str, tuple[int, model.Block]] = field(default_factory=dict)
    plan_seconds: list[float] = field(default_factory=list)
    plans: list[model.Plan] = field(default_factory=list)

    def named_grid(self) -> list[list[str | None]]:
        names = self.names
        return [[names[i] if i >= 0 else None for i in row] for row in self.grid.tolist()]


def extend_curve(curve: tuple[int, ...], start: int, length: int, period: int) -> tuple[int, ...]:
    """curve[start : start+length], continued past its end by repeating the last period."""
    out = list(curve[start : start + length])
    n = len(curve)
    while len(out) < length:
        t = start + len(out)
        src = t - period * ((t - n) // period + 1) if period > 0 else n - 1
        out.append(curve[max(0, min(n - 1, src))])
    return tuple(out)


def plan_input(
    s: model.Scenario,
    t: int,
    running: dict[str, tuple[model.Job, model.Block, int]],
    started: set[str],
    service_sets: dict[str, frozenset[int]],
    held: dict[str, list[int]] | None = None,
) -> model.PlanInput:
    H = s.horizon_steps
    period = s.steps_per_day
    queued = tuple(
        model.QueuedJob(j.name, j.gpus, j.estimate_steps, j.arrival_step, j.priority, j.type)
        for j in s.jobs
        if j.arrival_step <= t and j.name not in started
    )
    run = tuple(
        model.RunningJob(j.name, j.gpus, b, start, j.estimate_steps, j.priority, j.type)
        for j, b, start in running.values()
    )
    window = s.duration_steps
    services = tuple(
        model.ServiceState(
            name=v.name,
            priority=v.priority,
            max_swap=v.max_swap,
            forecast=extend_curve(v.forecast, t, 2 * H, period),
            past_demand=v.demand[:t],
            current_gpus=service_sets.get(v.name, frozenset()),
            reservation=max(v.forecast[:window]) if window else 0,
            past_forecast=v.forecast[:t],
            service_level=v.service_level,
            past_held=tuple(held.get(v.name, ())) if held else (),
        )
        for v in s.services
    )
    return model.PlanInput(t, s.cluster, H, queued, run, services, frozenset(), period)


def check_step(inp: model.PlanInput, plan: model.Plan) -> None:
    """Raise IllegalPlan if committing `plan` at step inp.now would break a rule."""
    c = inp.cluster
    all_gpus = (1 << c.gpus) - 1
    queued = {q.name: q for q in inp.queued}
    used = 0
    for r in inp.running:
        used |= r.block.mask
    for name, b in plan.starts.items():
        q = queued.get(name)
        if q is None:
            raise IllegalPlan(f"step {inp.now}: starts {name!r}, which is not queued")
        if b.size != q.gpus or not b.is_legal(c):
            raise IllegalPlan(f"step {inp.now}: {name!r} needs a legal block of {q.gpus}, got {b}")
        if b.mask & ~q.allowed(c):
            raise IllegalPlan(f"step {inp.now}: {name!r} block {b} is on a node it may not use")
        if used & b.mask:
            raise IllegalPlan(f"step {inp.now}: {name!r} block {b} overlaps GPUs in use")
        used |= b.mask
    known = {v.name: v for v in inp.services}
    for name, gpus in plan.service_gpus.items():
        v = known.get(name)
        if v is None:
            raise IllegalPlan(f"step {inp.now}: GPUs for unknown service {name!r}")
        m = blocks.mask_of(gpus)
        if m & ~all_gpus:
            raise IllegalPlan(f"step {inp.now}: {name!r} given GPUs outside the cluster")
        if used & m:
            raise IllegalPlan(f"step {inp.now}: {name!r} given GPUs in use")
        used |= m
        if v.unit > 1 or v.most_per_node:
            for node, here in collections.Counter(x // c.gpus_per_node for x in gpus).items():
                if here % v.unit:
                    raise IllegalPlan(f"step {inp.now}: {name!r} holds {here} GPUs on node "
                                      f"{node}, not whole replicas of {v.unit}")
                if v.most_per_node and here > v.most_per_node:
                    raise IllegalPlan(f"step {inp.now}: {name!r} holds {here} GPUs on node "
                                      f"{node}, over its {v.most_per_node} a node")
        if inp.now > 0:
            swapped = len(gpus ^ v.current_gpus)
            if swapped > v.max_swap:
                raise IllegalPlan(
                    f"step {inp.now}: {name!r} swaps {swapped} GPUs (max_swap {v.max_swap})"
                )
    if inp.now > 0:
        for v in inp.services:
            if v.name not in plan.service_gpus and len(v.current_gpus) > v.max_swap:
                raise IllegalPlan(
                    f"step {inp.now}: {v.name!r} dropped {len(v.current_gpus)} GPUs "
                    f"(max_swap {v.max_swap})"
                )


def simulate(
    s: model.Scenario,
    policy: policies.Policy | str,
    *,
    keep_plans: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Run:
    """Run `policy` over the scenario's window and return the committed grid."""
    pol = policies.create(policy) if isinstance(policy, str) else policy
    N, T = s.cluster.gpus, s.duration_steps
    names = [j.name for j in s.jobs] + [v.name for v in s.services]
    index = {n: i for i, n in enumerate(names)}
    jobs = {j.name: j for j in s.jobs}
    grid = np.full((N, T), EMPTY, dtype=np.int32)
    out = Run(s, pol.name, grid, names)
    running: dict[str, tuple[model.Job, model.Block, int]] = {}
    started: set[str] = set()
    service_sets: dict[str, frozenset[int]] = {}
    held: dict[str, list[int]] = {v.name: [] for v in s.services}
    for t in range(T):
        for name, (j, _, start) in list(running.items()):
            if start + j.duration_steps <= t:
                del running[name]
        inp = plan_input(s, t, running, started, service_sets, held)
        t0 = time.perf_counter()
        plan = pol.plan(inp)
        out.plan_seconds.append(time.perf_counter() - t0)
        check_step(inp, plan)
        if keep_plans:
            out.plans.append(plan)
        for name, b in plan.starts.items():
            running[name] = (jobs[name], b, t)
            started.add(name)
            out.starts[name] = (t, b)
        service_sets = {v.name: plan.service_gpus.get(v.name, frozenset()) for v in s.services}
        for name, (_, b, _) in running.items():
            grid[b.start : b.end, t] = index[name]
        for name, gpus in service_sets.items():
            held[name].append(len(gpus))
            if gpus:
                grid[sorted(gpus), t] = index[name]
        if progress:
            progress(t + 1, T)
    return out

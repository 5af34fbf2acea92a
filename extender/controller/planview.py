"""The plan as people look at it: `GET /plan`, `/plan/view` and `gpuroster plan`.

Owns: `build`, a pure function from one round's snapshot, planner input and
plan to JSON: the GPU x step grid over the horizon (running jobs, planned
starts, services' planned counts, unavailable GPUs), the jobs with their state,
block and reason, the services with their forecast, and the queue.

May not touch: anything. It reads the round's values, changes none of them and
writes nowhere; the round stores what it returns for the HTTP layer to serve.
"""

from __future__ import annotations

from typing import Any

from extender.adapter import snapshot
from extender.planner import model


def build(snap: snapshot.Snapshot, plan: model.Plan, inp: model.PlanInput, step: int,
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

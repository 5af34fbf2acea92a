"""The plan as people look at it: `GET /plan`, `/plan/view` and `gpuroster plan`.

Owns: `build`, a pure function from one round's snapshot, planner input and
plan to JSON: the GPU x step grid over the horizon (running jobs, planned
starts, services' planned counts, unavailable GPUs), the jobs with their state,
block and reason, the services with their forecast, and the queue. For each
waiting job: since when, and what it waits for (its planned start and the jobs
holding the GPUs of its block until then, or why it is not planned).

May not touch: anything. It reads the round's values, changes none of them and
writes nowhere; the round stores what it returns for the HTTP layer to serve.
"""

from __future__ import annotations

from typing import Any

from extender.adapter import annotations as ann
from extender.adapter import snapshot
from extender.planner import model


def build(snap: snapshot.Snapshot, plan: model.Plan, inp: model.PlanInput, step: int,
          step_start: float, step_seconds: float, took: float, *, shadow: bool = False,
          now: float | None = None, objective: float | None = None) -> dict[str, Any]:
    """The plan as JSON for `GET /plan`: GPU x step grid over the horizon, jobs, services
    (`objective`: a service's service level objective where it sets none)."""
    c = snap.cluster
    H = inp.horizon
    grid: list[list[str | None]] = [[None] * H for _ in range(c.gpus)]
    for gpu in inp.unavailable_gpus:
        if gpu < c.gpus:
            grid[gpu] = ["(unavailable)"] * H
    jobs: dict[str, Any] = {}
    for r in inp.running:
        name = snapshot.gang_of_piece(r.name)  # a placed gang's pieces are one job
        end = min(H, r.expected_end(step) - step)
        for gpu in r.block.gpus():
            for k in range(max(0, end)):
                grid[gpu][k] = name
        label = r.block.label(c, snap.nodes)
        if name in jobs:
            jobs[name]["gpus"] += r.gpus
            jobs[name]["block"] += f", {label}"
            if "planned_devices" in jobs[name]:
                jobs[name]["planned_devices"] += snap.block_devices(r.block)
            continue
        g = snap.gangs.get(name)
        jobs[name] = {"state": "running", "gpus": r.gpus, "priority": r.priority,
                      "type": r.type, "block": label,
                      "start_step": r.start_step, "expected_end_step": r.expected_end(step),
                      "expected_end_utc": ann.format_time(
                          step_start + (r.expected_end(step) - step) * step_seconds),
                      "placed_by": "scheduler" if g is not None and g.placed is not None
                      else "gpuroster"}
        if snap.node_devices and g is not None:  # DRA mode: the devices, by identity
            jobs[name]["devices"] = {k: snap.devices.get(k, []) for k in g.pod_keys()}
            jobs[name]["planned_devices"] = snap.block_devices(r.block)
    for q in inp.queued:
        start = plan.planned_start.get(q.name)
        block = plan.planned_block.get(q.name)
        g = snap.gangs.get(q.name)
        jobs[q.name] = {"state": "admitted" if q.name in plan.starts else "queued",
                        "gpus": q.gpus, "priority": q.priority, "type": q.type,
                        "arrival_step": q.arrival_step, "planned_start_step": start,
                        "planned_start_utc": ann.format_time(
                            step_start + (start - step) * step_seconds)
                        if start is not None else None,
                        "block": block.label(c, snap.nodes) if block else None,
                        "estimate_steps": q.estimate_steps,
                        "waiting_since_utc": ann.format_time(g.arrival)
                        if g is not None and g.arrival else None,
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
        sv = snap.services.get(v.name)
        per = sv.spec.gpus_per_replica if sv is not None else 1
        services[v.name] = {"gpus_now": now_gpus, "counts": counts,
                            "forecast": list(v.forecast[:H]), "max_swap": v.max_swap,
                            "priority": v.priority, "gpus_per_replica": per,
                            "replicas_planned": len(now_gpus) // max(1, per),
                            "replicas_actual": sv.replicas if sv is not None else None,
                            "gpus_in_use": sum(sv.gpus_by_node.values()) if sv else 0,
                            # Why it holds more than its forecast now: headroom for the
                            # forecast's recent error, spares on idle GPUs; how far it is
                            # ahead of its static reservation's record (None: no record).
                            "headroom": plan.headroom.get(v.name, 0),
                            "spare": plan.spare.get(v.name, 0),
                            "service_level_objective": (v.service_level
                                                        if v.service_level is not None
                                                        else objective),
                            "reservation_lead": plan.lead.get(v.name)}
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
    queue = [q.name for q in inp.queued if q.name not in plan.starts]
    for q in inp.queued:
        _waits_for(jobs[q.name], grid, plan.planned_block.get(q.name), q.name, step)
    # Gangs not in the planner's input: incomplete, or with annotations it cannot read.
    for name, g in sorted(snap.gangs.items()):
        if name in jobs or g.admission is not None or g.placed is not None:
            continue
        if not (g.waiting_for or g.error):
            continue
        jobs[name] = {"state": "held", "gpus": g.gpus, "type": g.work.workload if g.work
                      else None, "priority": g.work.priority if g.work else None,
                      "waiting_since_utc": ann.format_time(g.arrival) if g.arrival
                      else None, "reason": g.waiting_for or f"bad annotations: {g.error}",
                      "planned_start_step": None, "block": None}
    return {
        "shadow": shadow, "now_utc": ann.format_time(now if now is not None
                                                          else step_start),
        "step": step, "step_seconds": step_seconds, "step_start": step_start,
        "step_start_utc": ann.format_time(step_start), "horizon": H,
        "nodes": list(snap.nodes), "gpus_per_node": c.gpus_per_node,
        "grid": grid, "jobs": jobs, "services": services,
        "queue": queue,
        "plan_seconds": took,
    }


def _waits_for(job: dict[str, Any], grid: list[list[str | None]], block: model.Block | None,
               name: str, step: int) -> None:
    """The jobs and services holding the GPUs of a waiting job's planned block in the
    steps before its start: what it waits for."""
    start = job.get("planned_start_step")
    if block is None or start is None:
        job["waits_for"] = []
        return
    seen: list[str] = []
    for k in range(0, max(0, start - step)):
        for gpu in block.gpus():
            if gpu < len(grid) and k < len(grid[gpu]):
                holder = grid[gpu][k]
                if holder is not None and holder != name and holder not in seen:
                    seen.append(holder)
    job["waits_for"] = seen

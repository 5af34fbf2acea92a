"""Shadow mode: what the plan would have done, beside what the cluster's scheduler did.

In shadow mode the round plans and publishes as usual but writes nothing; this
module is what it does instead of the writers and the explainer:

- tells the log, once per change, what it would have told each waiting gang's
  pods (the `Planned` condition's text: "planned start 14:00 on node-3");
- counts, when the cluster's scheduler starts a gang, how that start compares
  with the plan (on time, later, earlier, unplanned; on the plan's nodes or not);
- measures now: the waiting gangs the plan would start and their GPUs, idle
  GPUs, each service's planned replicas beside its Deployment's, and pods held
  by gpuroster's scheduling gate (which nobody lifts in shadow mode).

May not touch: the cluster (it has no client), the plan, or the table. It reads
the round's snapshot and plan and keeps only its own memory of the last round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from extender import config, metrics
from extender.adapter import annotations as ann
from extender.adapter import objects, snapshot
from extender.controller import explaining
from extender.planner import model

log = logging.getLogger(__name__)


class Observer:
    """One per controller in shadow mode; `observe` once a round."""

    def __init__(self, settings: config.Settings) -> None:
        self.settings = settings
        # gang -> (the plan's start step for it, the nodes of its planned block), as the
        # last round that saw it waiting had them
        self._planned: dict[str, tuple[int | None, frozenset[str]]] = {}
        self._first_now: dict[str, int] = {}  # gang -> first step the plan started it
        self._told: dict[str, str] = {}  # gang -> the reason last logged
        self._gated: set[str] = set()  # gated pods already warned about

    def observe(self, snap: snapshot.Snapshot, plan: model.Plan, step: int, now: float,
                step_start: Callable[[int], float]) -> metrics.Shadow:
        out = metrics.Shadow()
        self._starts(snap, plan, step, now)
        for name, g in sorted(snap.gangs.items()):
            if g.placed is not None or g.admission is not None:
                continue
            out.waiting_gangs += 1
            block = plan.planned_block.get(name)
            nodes = block_nodes(snap, block) if block else frozenset()
            if g.waiting_for or g.error:
                # Not plannable now (incomplete, or another scheduler placed part of it):
                # what the plan last said for it stands.
                self._planned.setdefault(name, (None, frozenset()))
            else:
                self._planned[name] = (plan.planned_start.get(name), nodes)
            if name in plan.starts:
                self._first_now.setdefault(name, step)
                out.would_start_gangs += 1
                out.would_start_gpus += g.gpus
            why = explaining.gang_reason(snap, plan, g, {}, step_start,
                                         self.settings.step_seconds)
            if name in plan.starts:
                why = f"would start now on {block.label(snap.cluster, snap.nodes)}" if block \
                    else why
            if self._told.get(name) != why:
                self._told[name] = why
                log.info("shadow: gang %s (%d pods): %s", name, len(g.pods), why)
        for gone in [n for n in self._planned if n not in snap.gangs]:
            self._planned.pop(gone, None)
            self._first_now.pop(gone, None)
            self._told.pop(gone, None)
        self._services(snap, plan, out)
        out.idle_gpus = self._idle(snap, plan)
        self._gates(snap, out)
        return out

    def _starts(self, snap: snapshot.Snapshot, plan: model.Plan, step: int, now: float) -> None:
        """Gangs the cluster's scheduler placed since the last round, against the plan."""
        for name, g in sorted(snap.gangs.items()):
            if g.placed is None or name not in self._planned:
                continue
            planned_start, planned_nodes = self._planned.pop(name)
            first = self._first_now.pop(name, None)
            self._told.pop(name, None)
            placed_step = self.settings.step_of(g.placed_at) if g.placed_at else step
            if first is not None:
                versus = "later" if placed_step > first else "on_time"
                metrics.SHADOW_START_DELAY.observe(
                    max(0.0, (g.placed_at or now) - self.settings.step_start(first)))
            elif planned_start is None:
                versus = "unplanned"
            else:
                versus = "earlier" if planned_start > placed_step else "on_time"
                metrics.SHADOW_START_DELAY.observe(
                    (g.placed_at or now) - self.settings.step_start(planned_start))
            metrics.SHADOW_GANG_STARTS.labels(versus=versus).inc()
            for node in g.placed.values():
                where = ("unplanned" if not planned_nodes else
                         "planned" if node in planned_nodes else "other")
                metrics.SHADOW_POD_PLACEMENTS.labels(node=where).inc()
            nodes = ", ".join(sorted(set(g.placed.values())))
            plan_said = (f"the plan started it at step {first}" if first is not None else
                         f"the plan had it at step {planned_start}" if planned_start is not None
                         else "the plan had no start for it")
            on = f" on {', '.join(sorted(planned_nodes))}" if planned_nodes else ""
            log.info("shadow: gang %s started by the cluster's scheduler on %s at step %d (%s); "
                     "%s%s", name, nodes, placed_step, versus, plan_said, on)

    def _services(self, snap: snapshot.Snapshot, plan: model.Plan, out: metrics.Shadow) -> None:
        for name, sv in sorted(snap.services.items()):
            per = max(1, sv.spec.gpus_per_replica)
            gpus = plan.service_gpus.get(name)
            if gpus is not None:
                out.replicas_planned[name] = len(gpus) // per
            out.replicas_actual[name] = sv.replicas
            want = out.replicas_planned.get(name)
            key = f"service {name}"
            said = f"would set {want} replicas (Deployment has {sv.replicas})"
            if want is not None and want != sv.replicas and self._told.get(key) != said:
                self._told[key] = said
                log.info("shadow: %s: %s", key, said)

    @staticmethod
    def _idle(snap: snapshot.Snapshot, plan: model.Plan) -> int:
        """GPUs no pod holds now on usable nodes (what the cluster leaves idle)."""
        held = sum(snap.foreign.values())
        for g in snap.gangs.values():
            if g.placed is not None:
                held += sum(ann.pod_gpus(p.get("spec") or {}) for p in g.pods)
            elif g.admission is not None:
                held += g.admission.block.size
        for sv in snap.services.values():
            held += sum(sv.gpus_by_node.values())
        return max(0, snap.cluster.gpus - len(snap.unavailable) - held)

    def _gates(self, snap: snapshot.Snapshot, out: metrics.Shadow) -> None:
        gated = set()
        for k, p in snap.pods.items():
            gates = (p.get("spec") or {}).get("schedulingGates") or []
            if any(gt.get("name") == objects.ADMISSION_GATE for gt in gates):
                gated.add(k)
        out.gated_pods = len(gated)
        for k in sorted(gated - self._gated):
            log.warning("shadow: pod %s carries the scheduling gate %s, which shadow mode never "
                        "lifts: it waits for nobody. Create pods without it while gpuroster is "
                        "in shadow mode", k, objects.ADMISSION_GATE)
        self._gated = gated



def block_nodes(snap: snapshot.Snapshot, block: model.Block) -> frozenset[str]:
    """The names of the nodes a block lies on."""
    g = snap.cluster.gpus_per_node
    return frozenset(snap.nodes[i] for i in range(block.start // g, (block.end - 1) // g + 1)
                     if i < len(snap.nodes))

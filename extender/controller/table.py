"""The Table: what a round decided, in the terms the extender verbs look up.

One immutable value per round, built here from the round's snapshot, plan and
admissions, then swapped in whole (`verbs.Verbs.publish`), so a verb in flight
reads one round or the next, never a mix.

Owns: the `Table` type and `build`, a pure function. It decides nothing (the
plan and the admissions did) and writes nothing; the waiting reasons come in
already written (`explaining.waiting`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.adapter import gangs, snapshot
from extender.planner import model


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


def build(snap: snapshot.Snapshot, plan: model.Plan, step: int, next_step_at: float,
          admitted: Mapping[str, gangs.Admission], problems: Mapping[str, str],
          waiting: Mapping[str, str]) -> Table:
    """The table of a round: admitted pods on their nodes, every service's planned GPUs
    per node (none for a service that could not be planned: `problems`)."""
    assigned: dict[str, str] = {}
    for name, g in snap.gangs.items():
        adm = g.admission or admitted.get(name)
        if adm is not None:
            assigned.update(adm.nodes)
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
    return Table(step=step, next_step_at=next_step_at, assigned=assigned,
                 waiting=waiting, pod_service=dict(snap.pod_service),
                 service_planned=service_planned, nodes=tuple(snap.nodes))

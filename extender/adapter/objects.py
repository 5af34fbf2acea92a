"""The writes the controller makes, as plain bodies (pure builders)."""

from __future__ import annotations

import socket
from typing import Any

from extender.adapter import annotations as ann

COMPONENT = "gpuroster"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


# Pods may be created with this scheduling gate (spec.schedulingGates): kube-scheduler
# then never tries them before their gang is admitted, and lifting the gate at
# admission sends them straight to its active queue, with no backoff to sit out.
ADMISSION_GATE = ann.PREFIX + "admission"


def admission_patch(block_label: str, admitted_at: float, node: str,
                    gates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    patch: dict[str, Any] = {"metadata": {"annotations": {
        ann.BLOCK: block_label,
        ann.ADMITTED_AT: ann.format_time(admitted_at),
        ann.NODE: node,
    }}}
    if gates and any(g.get("name") == ADMISSION_GATE for g in gates):
        rest = [g for g in gates if g.get("name") != ADMISSION_GATE]
        patch["spec"] = {"schedulingGates": rest or None}  # merge patch: the list is replaced
    return patch


def admission_undo() -> dict[str, Any]:
    return {"metadata": {"annotations": {ann.BLOCK: None, ann.ADMITTED_AT: None, ann.NODE: None}}}


def wake_patch(step: int) -> dict[str, Any]:
    """Any pod update requeues an unschedulable pod in kube-scheduler (EXTENDER.md)."""
    return {"metadata": {"annotations": {ann.PREFIX + "planned-step": str(step)}}}


def deletion_cost_patch(cost: int) -> dict[str, Any]:
    return {"metadata": {"annotations": {DELETION_COST: str(cost)}}}


def condition_patch(status: bool, reason: str, message: str, now: float) -> dict[str, Any]:
    return {"status": {"conditions": [{
        "type": ann.PLANNED_CONDITION,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": ann.format_time(now),
    }]}}


def event(pod: dict[str, Any], reason: str, message: str, now: float,
          warning: bool = False) -> dict[str, Any]:
    m = pod.get("metadata") or {}
    t = ann.format_time(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{m.get('name', 'pod')}.", "namespace": m.get("namespace")},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": m.get("namespace"),
                           "name": m.get("name"), "uid": m.get("uid")},
        "reason": reason,
        "message": message[:1000],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": t, "lastTimestamp": t, "count": 1,
    }

"""Which nodes a pod may run on, as kube-scheduler judges it: node selector, required
node affinity, taints and tolerations.

The plan gives a gang a block on nodes its pods can actually use; a block on a node
the scheduler then refuses (a taint the pod does not tolerate, a `nodeSelector` for
another GPU type) would leave the gang Pending on a plan that cannot happen. This is
the subset of kube-scheduler's NodeAffinity and TaintToleration filters that decides
placement by node labels and taints; pure functions over plain objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]

# Taints a pod must tolerate to be scheduled; PreferNoSchedule only steers.
_BLOCKING = ("NoSchedule", "NoExecute")


def fits(pod_spec: Obj, node: Obj) -> bool:
    """True if kube-scheduler's node-affinity and taint filters would pass `node`."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms is not None and not any(_term_matches(t or {}, labels, meta) for t in terms):
        return False
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in _BLOCKING and not any(
                _tolerates(t or {}, taint) for t in tolerations):
            return False
    return True


HOSTNAME = "kubernetes.io/hostname"


def one_per_node(template: Obj) -> bool:
    """True if a pod template's required pod anti-affinity keeps its pods apart, one to
    a node: a term on `kubernetes.io/hostname`, over the pods' own namespace, whose
    label selector matches the template's own labels. (Other topology keys and
    topology spread constraints are not read.)"""
    labels = (template.get("metadata") or {}).get("labels") or {}
    anti = (((template.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity")
            or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
    for term in anti:
        term = term or {}
        if term.get("topologyKey") != HOSTNAME or term.get("namespaceSelector") is not None:
            continue
        if term.get("namespaces"):
            continue  # other namespaces' pods: not a rule among its own replicas alone
        selector = term.get("labelSelector")
        if selector is None:
            continue  # a nil selector matches no pod
        if (all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
                and all(_expression(e or {}, labels)
                        for e in selector.get("matchExpressions") or [])):
            return True
    return False


def _term_matches(term: Obj, labels: Mapping[str, str], meta: Obj) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node (as in kube-scheduler)
    return (all(_expression(e or {}, labels) for e in exprs)
            and all(_expression(f or {}, {"metadata.name": str(meta.get("name", ""))})
                    for f in fields))


def _expression(e: Obj, labels: Mapping[str, str]) -> bool:
    key, op = e.get("key", ""), e.get("operator", "")
    values: Sequence[str] = e.get("values") or []
    has = key in labels
    value = labels.get(key)
    if op == "In":
        return has and value in values
    if op == "NotIn":
        return not has or value not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        try:
            have, want = int(str(value)), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False  # an operator the API server would have refused


def _tolerates(t: Obj, taint: Obj) -> bool:
    if t.get("effect") and t.get("effect") != taint.get("effect"):
        return False
    op = t.get("operator") or "Equal"
    if not t.get("key"):
        return op == "Exists"  # an empty key with Exists tolerates every taint
    if t.get("key") != taint.get("key"):
        return False
    return op == "Exists" or (t.get("value") or "") == (taint.get("value") or "")

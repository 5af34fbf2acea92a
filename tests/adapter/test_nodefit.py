"""kube-scheduler's node-affinity and taint filters, as gpuroster applies them to plans."""

from __future__ import annotations

from typing import Any

import pytest

from extender.adapter import nodefit


def a_node(labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
           name: str = "n1") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints} if taints else {}}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


H100 = {"gpu": "h100", "zone": "a", "gen": "5"}
NO_SCHEDULE = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}


@pytest.mark.parametrize(("spec", "node", "expect"), [
    ({}, a_node(H100), True),
    ({"nodeSelector": {"gpu": "h100"}}, a_node(H100), True),
    ({"nodeSelector": {"gpu": "a100"}}, a_node(H100), False),
    ({"nodeSelector": {"gpu": "h100", "zone": "b"}}, a_node(H100), False),
    (required({"matchExpressions": [expr("gpu", "In", "a100", "h100")]}), a_node(H100), True),
    (required({"matchExpressions": [expr("gpu", "NotIn", "h100")]}), a_node(H100), False),
    (required({"matchExpressions": [expr("spot", "NotIn", "true")]}), a_node(H100), True),
    (required({"matchExpressions": [expr("gpu", "Exists")]}), a_node(H100), True),
    (required({"matchExpressions": [expr("gpu", "DoesNotExist")]}), a_node(H100), False),
    (required({"matchExpressions": [expr("gen", "Gt", "4")]}), a_node(H100), True),
    (required({"matchExpressions": [expr("gen", "Lt", "4")]}), a_node(H100), False),
    (required({"matchExpressions": [expr("zone", "Gt", "4")]}), a_node(H100), False),
    # terms are ORed, expressions within a term ANDed
    (required({"matchExpressions": [expr("gpu", "In", "a100")]},
              {"matchExpressions": [expr("zone", "In", "a")]}), a_node(H100), True),
    (required({"matchExpressions": [expr("gpu", "In", "h100"), expr("zone", "In", "b")]}),
     a_node(H100), False),
    (required({}), a_node(H100), False),  # an empty term matches no node
    (required({"matchFields": [expr("metadata.name", "In", "n1")]}), a_node(H100), True),
    (required({"matchFields": [expr("metadata.name", "In", "n2")]}), a_node(H100), False),
    # taints
    ({}, a_node(taints=[NO_SCHEDULE]), False),
    ({}, a_node(taints=[{**NO_SCHEDULE, "effect": "PreferNoSchedule"}]), True),
    ({}, a_node(taints=[{**NO_SCHEDULE, "effect": "NoExecute"}]), False),
    ({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "reserved"}]},
     a_node(taints=[NO_SCHEDULE]), True),
    ({"tolerations": [{"key": "gpu", "value": "other"}]}, a_node(taints=[NO_SCHEDULE]), False),
    ({"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
     a_node(taints=[NO_SCHEDULE]), True),
    ({"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]},
     a_node(taints=[NO_SCHEDULE]), False),
    ({"tolerations": [{"operator": "Exists"}]}, a_node(taints=[NO_SCHEDULE]), True),
    ({"tolerations": [{"key": "gpu", "operator": "Exists"}]},
     a_node(taints=[NO_SCHEDULE, {"key": "other", "effect": "NoSchedule"}]), False),
], ids=lambda x: "")
def test_fits_like_kube_scheduler(spec: dict[str, Any], node: dict[str, Any],
                                  expect: bool) -> None:
    assert nodefit.fits(spec, node) is expect


def apart(term: dict[str, Any] | None, labels: dict[str, str] | None = None,
          kind: str = "requiredDuringSchedulingIgnoredDuringExecution") -> dict[str, Any]:
    """A pod template labelled `labels` (app=chat) with one pod anti-affinity `term`."""
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if term is not None:
        spec["affinity"] = {"podAntiAffinity": {kind: [term]}}
    return {"metadata": {"labels": labels if labels is not None else {"app": "chat"}},
            "spec": spec}


HOST = "kubernetes.io/hostname"


@pytest.mark.parametrize(("template", "one"), [
    (apart({"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "chat"}}}), True),
    (apart({"topologyKey": HOST, "labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["chat", "x"]}]}}), True),
    (apart({"topologyKey": HOST, "labelSelector": {}}), True),  # empty: every pod
    (apart({"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "other"}}}), False),
    (apart({"topologyKey": "topology.kubernetes.io/zone",
            "labelSelector": {"matchLabels": {"app": "chat"}}}), False),
    (apart({"topologyKey": HOST}), False),  # nil selector: no pod
    (apart({"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "chat"}},
            "namespaces": ["elsewhere"]}), False),
    (apart({"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "chat"}},
            "namespaceSelector": {}}), False),
    (apart({"weight": 1, "podAffinityTerm": {"topologyKey": HOST, "labelSelector": {}}},
           kind="preferredDuringSchedulingIgnoredDuringExecution"), False),
    (apart(None), False),
], ids=["own-labels", "own-labels-by-expression", "every-pod", "other-pods", "zone",
        "nil-selector", "other-namespace", "namespace-selector", "preferred-only", "none"])
def test_one_per_node_reads_required_anti_affinity_to_its_own_pods(
        template: dict[str, Any], one: bool) -> None:
    assert nodefit.one_per_node(template) is one

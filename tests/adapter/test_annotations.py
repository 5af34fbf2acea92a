"""Pod and Deployment annotations -> specs, or an error naming the problem."""

from __future__ import annotations

from typing import Any

import pytest

from extender import config
from extender.adapter import annotations as ann
from extender.planner import model
from tests.kubefake import configmap, deployment, make_pod

S = config.Settings()


@pytest.mark.parametrize(("pod", "gang", "size", "gpus", "prio", "seconds"), [
    (make_pod("p").gpus(2), "ns/pod:p", 1, 2, 2.0, 6 * 3600),
    (make_pod("p").gpus(4).gang("g", 2).priority("critical").duration("90m"), "ns/g", 2, 4,
     8.0, 5400),
    (make_pod("p").gpus(1).priority("3.5").workload("quantization"), "ns/pod:p", 1, 1, 3.5,
     3600),
    (make_pod("p").gpus(8).duration("1h30m").workload("batch-inference"), "ns/pod:p", 1, 8,
     2.0, 5400),
], ids=["defaults", "gang", "number-priority", "compound-duration"])
def test_pod_work(pod: object, gang: str, size: int, gpus: int, prio: float,
                  seconds: float) -> None:
    w = ann.pod_work(pod.build(), S)  # type: ignore[attr-defined]
    assert (w.gang, w.gang_size, w.gpus, w.priority, w.duration_seconds) == (
        gang, size, gpus, prio, seconds)


def test_priority_class_name_maps_through_configuration() -> None:
    pod = make_pod("p").gpus(1).build()
    pod["spec"]["priorityClassName"] = "high"
    assert ann.pod_work(pod, S).priority == 4.0


VALUES = config.Settings(priority_class_values={"critical": 1000000, "high": 1000, "low": -5})


@pytest.mark.parametrize(("class_name", "value", "prio"), [
    ("team-gold", 2000000000, 8.0),  # at or above the highest threshold
    ("team-gold", 1000000, 8.0),  # the threshold itself
    ("team-silver", 5000, 4.0),
    ("team-bronze", 999, 1.0),  # below high, above low
    ("team-none", -6, 2.0),  # below every threshold: the default class
    ("high", 0, 4.0),  # a class of that name wins over the value
    (None, None, 2.0),  # no PriorityClass at all
], ids=["top", "threshold", "middle", "lowest", "below-all", "name-first", "none"])
def test_priority_class_value_maps_through_configuration(
        class_name: str | None, value: int | None, prio: float) -> None:
    pod = make_pod("p").gpus(1).build()
    if class_name is not None:
        pod["spec"]["priorityClassName"] = class_name
    if value is not None:
        pod["spec"]["priority"] = value  # what the API server resolves on admission
    assert ann.pod_work(pod, VALUES).priority == prio


def test_priority_class_value_is_not_used_without_the_mapping_or_over_the_annotation() -> None:
    pod = make_pod("p").gpus(1).build()
    pod["spec"]["priority"] = 2000000000
    assert ann.pod_work(pod, S).priority == 2.0  # no mapping configured: the default
    annotated = make_pod("p").gpus(1).priority("low").build()
    annotated["spec"]["priority"] = 2000000000
    assert ann.pod_work(annotated, VALUES).priority == 1.0
    odd = make_pod("p").gpus(1).build()
    odd["spec"]["priority"] = True  # not a number the API server would write
    assert ann.pod_work(odd, VALUES).priority == 2.0


def test_deployment_takes_the_class_its_pod_template_names() -> None:
    d = deployment("chat", gpus=2, notes={"gpuroster.io/demand-configmap": "c"})
    d["spec"]["template"]["spec"]["priorityClassName"] = "critical"
    assert ann.service_spec(d, S).priority == 8.0  # type: ignore[union-attr]
    d["metadata"]["annotations"]["gpuroster.io/priority"] = "low"  # the annotation wins
    assert ann.service_spec(d, S).priority == 1.0  # type: ignore[union-attr]



def priority_class(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name}, "value": value, "globalDefault": default}


def test_deployment_gets_the_value_of_the_priority_class_its_template_names() -> None:
    """A pod template carries no resolved spec.priority; with the cluster's PriorityClasses
    the Deployment gets the class its pods will get (VALUES: high from 1000)."""
    pcs = {"gold": priority_class("gold", 5000), "tiny": priority_class("tiny", -100)}
    d = deployment("chat", notes={"gpuroster.io/demand-configmap": "c"})
    d["spec"]["template"]["spec"]["priorityClassName"] = "gold"
    assert ann.service_spec(d, VALUES).priority == 2.0  # type: ignore[union-attr]  # unknown
    assert ann.service_spec(d, VALUES, pcs).priority == 4.0  # type: ignore[union-attr]
    assert ann.service_spec(d, S, pcs).priority == 2.0  # type: ignore[union-attr]  # by name
    d["spec"]["template"]["spec"]["priorityClassName"] = "tiny"  # under every threshold
    assert ann.service_spec(d, VALUES, pcs).priority == 2.0  # type: ignore[union-attr]
    d["spec"]["template"]["spec"]["priorityClassName"] = "missing"
    assert ann.service_spec(d, VALUES, pcs).priority == 2.0  # type: ignore[union-attr]


def test_a_template_without_a_class_gets_the_global_default() -> None:
    pcs = {"a": priority_class("a", 2000000, default=True), "b": priority_class("b", 1500, True),
           "c": priority_class("c", 9)}
    assert ann.resolved_priority({}, pcs) == 1500  # several defaults: the lowest
    assert ann.resolved_priority({"priorityClassName": "c"}, pcs) == 9
    assert ann.resolved_priority({"priority": 7, "priorityClassName": "c"}, pcs) == 7  # a pod's
    assert ann.resolved_priority({}, {"c": pcs["c"]}) is None
    d = deployment("chat", notes={"gpuroster.io/demand-configmap": "c"})
    assert ann.service_spec(d, VALUES, pcs).priority == 4.0  # type: ignore[union-attr]

@pytest.mark.parametrize(("pod", "needle"), [
    (make_pod("p"), "requests no nvidia.com/gpu"),
    (make_pod("p").gpus(1).workload("fishing"), "unknown workload type 'fishing'"),
    (make_pod("p").gpus(1).workload("realtime-inference"), "belongs on a Deployment"),
    (make_pod("p").gpus(1).priority("-1"), "positive"),
    (make_pod("p").gpus(1).priority("urgent"), "neither a positive number"),
    (make_pod("p").gpus(1).duration("forever"), "unparsable duration"),
    (make_pod("p").gpus(1).duration("0s"), "positive"),
    (make_pod("p").gpus(1).annotate(**{"gpuroster.io/gang": "g"}), "needs gpuroster.io/gang-size"),
    (make_pod("p").gpus(1).gang("g", 0), "at least 1"),
    (make_pod("p").gpus(1).annotate(**{"gpuroster.io/gang-size": "2"}), "gang is missing"),
], ids=["no-gpu", "workload", "realtime-pod", "negative", "class", "duration", "zero",
        "no-size", "size-0", "size-no-gang"])
def test_bad_pod_annotations(pod: object, needle: str) -> None:
    with pytest.raises(ann.AnnotationError, match=None) as e:
        ann.pod_work(pod.build(), S)  # type: ignore[attr-defined]
    assert needle in str(e.value)


def test_service_spec_and_its_problems() -> None:
    d = deployment("chat", gpus=2, notes={"gpuroster.io/demand-configmap": "c",
                                      "gpuroster.io/max-swap": "3",
                                      "gpuroster.io/priority": "high"})
    s = ann.service_spec(d, S)
    assert s == ann.ServiceSpec("ns/chat", 4.0, 3, 2, "c", None)
    assert ann.service_spec({"metadata": {"name": "x"}}, S) is None
    with pytest.raises(ann.AnnotationError, match="demand"):
        ann.service_spec(deployment("chat"), S)
    with pytest.raises(ann.AnnotationError, match="max-swap"):
        ann.service_spec(deployment("chat", notes={"gpuroster.io/demand-configmap": "c",
                                               "gpuroster.io/max-swap": "lots"}), S)


@pytest.mark.parametrize(("raw", "level"), [(None, None), ("0.99", 0.99), (" 0.95 ", 0.95),
                                             ("99.9%", 0.999)])
def test_service_level_annotation(raw: str | None, level: float | None) -> None:
    notes = {"gpuroster.io/demand-configmap": "c"}
    if raw is not None:
        notes["gpuroster.io/service-level"] = raw
    s = ann.service_spec(deployment("chat", notes=notes), S)
    assert s is not None and s.service_level == pytest.approx(level) if level else (
        s is not None and s.service_level is None)


@pytest.mark.parametrize("raw", ["1", "0", "1.5", "-0.2", "100%", "high", "", "nan"])
def test_bad_service_level_is_a_clear_error(raw: str) -> None:
    d = deployment("chat", notes={"gpuroster.io/demand-configmap": "c",
                                  "gpuroster.io/service-level": raw})
    with pytest.raises(ann.AnnotationError, match="gpuroster.io/service-level: .* share of demand"):
        ann.service_spec(d, S)


def test_demand_configmap() -> None:
    d = ann.demand(configmap("c", curve="[1, 2, 3]", history="4,5 6"))
    assert d.curve == (1.0, 2.0, 3.0) and d.history == (4.0, 5.0, 6.0)
    for bad in ({"curve": "[1, -2]"}, {"curve": "x"}, {}, {"history": "{}"}):
        with pytest.raises(ann.AnnotationError):
            ann.demand(configmap("c", **bad))


@pytest.mark.parametrize(("block", "label"), [
    (model.Block(3, 2), "gpu-node-0:3-4"),
    (model.Block(8, 8), "gpu-node-1:0-7"),
    (model.Block(8, 16), "gpu-node-1..gpu-node-2"),
])
def test_block_labels_round_trip(block: model.Block, label: str) -> None:
    names = ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    c = model.Cluster(3, 8)
    assert block.label(c, names) == label
    assert ann.parse_block(label, {n: i for i, n in enumerate(names)}, 8) == block


def test_block_on_a_missing_node_is_an_error() -> None:
    with pytest.raises(ann.AnnotationError, match="cannot place"):
        ann.parse_block("gone:0-3", {"gpu-node-0": 0}, 8)


@pytest.mark.parametrize(("label", "nodes"), [
    ("gpu-node-0:3-4", ["gpu-node-0"]),
    ("gpu-node-1..gpu-node-2", ["gpu-node-1", "gpu-node-2"]),
    ("host:with:colons:0-7", ["host:with:colons"]),
    ("gpu-node-0", ["gpu-node-0"]),  # malformed, but its node is still the one named
])
def test_block_nodes_names_what_parse_block_reads(label: str, nodes: list[str]) -> None:
    assert ann.block_nodes(label) == nodes


@pytest.mark.parametrize("label", [
    "gpu-node-0", "gpu-node-0:", "gpu-node-0:4-3", "gpu-node-0:0-8", "gpu-node-1..gpu-node-0",
    "gpu-node-0:a-b"])
def test_malformed_block_labels_are_refused(label: str) -> None:
    with pytest.raises(ann.AnnotationError, match="cannot place"):
        ann.parse_block(label, {"gpu-node-0": 0, "gpu-node-1": 1}, 8)


@pytest.mark.parametrize(("text", "seconds"), [
    ("6h", 21600), ("90m", 5400), ("2d", 172800), ("20s", 20), ("1h30m", 5400), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert config.parse_duration(text) == seconds


@pytest.mark.parametrize("workload", ["realtime-inferense", "Realtime-Inference", ""])
def test_a_deployment_of_an_unknown_workload_type_is_an_error(workload: str) -> None:
    # Not None ("not a service"): its pods would be planned as training jobs.
    d = deployment("chat", notes={"gpuroster.io/workload": workload,
                                  "gpuroster.io/demand-configmap": "c"})
    with pytest.raises(ann.AnnotationError,
                       match=f"gpuroster.io/workload: unknown workload type '{workload}'"):
        ann.service_spec(d, S)


@pytest.mark.parametrize("workload", [*model.BATCH_TYPES, None])
def test_a_deployment_of_batch_work_or_none_is_not_a_service(workload: str | None) -> None:
    d = deployment("jobs")
    del d["metadata"]["annotations"]["gpuroster.io/workload"]
    if workload is not None:
        d["metadata"]["annotations"]["gpuroster.io/workload"] = workload
    assert ann.service_spec(d, S) is None  # its pods are read as batch pods, as before


def test_a_lone_pod_and_a_gang_of_the_same_name_are_different_gangs() -> None:
    lone = ann.pod_work(make_pod("llm").gpus(2).build(), S)
    gang = ann.pod_work(make_pod("llm-0").gpus(2).gang("llm", 2).build(), S)
    assert (lone.gang, gang.gang) == ("ns/pod:llm", "ns/llm")
    # A gang named as a lone pod's gang is escaped, and so is one named as an escaped one.
    odd = ann.pod_work(make_pod("x").gpus(2).gang("pod:llm", 1).build(), S)
    odder = ann.pod_work(make_pod("y").gpus(2).gang("gang:pod:llm", 1).build(), S)
    assert len({lone.gang, gang.gang, odd.gang, odder.gang}) == 4
    assert odd.gang == "ns/gang:pod:llm"


def test_an_empty_priority_is_an_error_like_an_empty_workload() -> None:
    with pytest.raises(ann.AnnotationError, match="gpuroster.io/priority: '' is neither"):
        ann.pod_work(make_pod("p").gpus(1).priority("").build(), S)
    d = deployment("chat", notes={"gpuroster.io/demand-configmap": "c",
                                  "gpuroster.io/priority": " "})
    with pytest.raises(ann.AnnotationError, match="gpuroster.io/priority"):
        ann.service_spec(d, S)
    assert ann.priority(None, S.priority_classes, "low") == 1.0  # absent: the fallback


@pytest.mark.parametrize(("pod", "needle"), [
    (make_pod("p").gpus(1).gang("g", 1).annotate(**{"gpuroster.io/gang-size": "1_6"}),
     "gang-size: '1_6' is not a whole number"),
    (make_pod("p").gpus(1).gang("g", 1).annotate(**{"gpuroster.io/gang-size": "\uff12"}),
     "is not a whole number"),  # a full-width 2
    (make_pod("p").gpus(1).duration("\uff16h"), "unparsable duration"),  # a full-width 6
    (make_pod("p").gpus(1).duration("\u0666h"), "unparsable duration"),  # an Arabic-Indic 6
    (make_pod("p").gpus(1).priority("1_0"), "neither a positive number"),
    (make_pod("p").gpus(1).priority("\uff13"), "neither a positive number"),
], ids=["size-underscore", "size-full-width", "duration-full-width", "duration-arabic",
        "priority-underscore", "priority-full-width"])
def test_numbers_in_annotations_are_ascii_digits_only(pod: Any, needle: str) -> None:
    with pytest.raises(ann.AnnotationError) as e:
        ann.pod_work(pod.build(), S)
    assert needle in str(e.value)


@pytest.mark.parametrize(("notes", "needle"), [
    ({"gpuroster.io/max-swap": "1_0"}, "max-swap: '1_0' is not a whole number"),
    ({"gpuroster.io/max-swap": "\uff12"}, "is not a whole number"),
    ({"gpuroster.io/service-level": "0.9_9"}, "service-level"),
])
def test_numbers_in_deployment_annotations_are_ascii_digits_only(notes: dict[str, str],
                                                                 needle: str) -> None:
    d = deployment("chat", notes={"gpuroster.io/demand-configmap": "c", **notes})
    with pytest.raises(ann.AnnotationError, match=needle):
        ann.service_spec(d, S)


def test_whole_numbers_still_read_as_before() -> None:
    assert ann.pod_work(make_pod("p").gpus(1).gang("g", 1).annotate(
        **{"gpuroster.io/gang-size": " 4 "}).build(), S).gang_size == 4
    d = deployment("chat", notes={"gpuroster.io/demand-configmap": "c",
                                  "gpuroster.io/max-swap": "0"})
    assert ann.service_spec(d, S).max_swap == 0  # type: ignore[union-attr]
    with pytest.raises(ann.AnnotationError, match="'-1' must be >= 0"):  # the docs' message
        ann.service_spec({**d, "metadata": {**d["metadata"], "annotations": {
            **d["metadata"]["annotations"], "gpuroster.io/max-swap": "-1"}}}, S)
    assert ann.demand(configmap("c", curve="[1]", **{"steps-per-day": "96"})).steps_per_day == 96
    with pytest.raises(ann.AnnotationError, match="steps-per-day"):
        ann.demand(configmap("c", curve="[1]", **{"steps-per-day": "9_6"}))


@pytest.mark.parametrize("nodes", [
    ["gpu-node-1", "gpu-node-10", "gpu-node-2"],  # a node came between the two: 24 GPUs
    ["gpu-node-1", "gpu-node-10", "gpu-node-11", "gpu-node-12", "gpu-node-2"],  # 40 GPUs
])
def test_a_multi_node_block_that_now_reads_as_no_legal_block_is_refused(
        nodes: list[str]) -> None:
    with pytest.raises(ann.AnnotationError, match="not a legal block"):
        ann.parse_block("gpu-node-1..gpu-node-2", {n: i for i, n in enumerate(nodes)}, 8)

"""Parse the `gpuroster.io/*` annotations of pods and Deployments (KUBERNETES.md).

Pure functions over plain dicts (an object's JSON). A problem is reported as
`AnnotationError` with a message naming the annotation and the reason; the
controller turns it into an Event on the pod.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from extender import config
from extender.planner import headroom, model

PREFIX = "gpuroster.io/"
WORKLOAD = PREFIX + "workload"
PRIORITY = PREFIX + "priority"
GANG = PREFIX + "gang"
GANG_SIZE = PREFIX + "gang-size"
EXPECTED_DURATION = PREFIX + "expected-duration"
MAX_DURATION_SECONDS = 366 * 86400.0  # beyond this an estimate is garbage, not a plan
MAX_SWAP = PREFIX + "max-swap"
DEMAND_CONFIGMAP = PREFIX + "demand-configmap"
DEMAND_QUERY = PREFIX + "demand-query"
SERVICE_LEVEL = PREFIX + "service-level"  # share of demanded GPU-steps promised, in (0, 1)
# Written by the system: the durable record of admission.
BLOCK = PREFIX + "block"
ADMITTED_AT = PREFIX + "admitted-at"
NODE = PREFIX + "node"  # the node this pod of the gang goes to (inside the block)
GPU_RESOURCE = "nvidia.com/gpu"
TOPOLOGY_ORDER = PREFIX + "topology-order"
PLANNED_CONDITION = PREFIX + "Planned"


class AnnotationError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class PodWork:
    """What a batch-like pod asks for."""

    gang: str  # `gang_key`: "<namespace>/<gang>", or "<namespace>/pod:<pod>" for a lone pod
    gang_size: int
    gpus: int
    workload: str
    priority: float
    duration_seconds: float


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str  # "<namespace>/<deployment>"
    priority: float
    max_swap: int
    gpus_per_replica: int
    demand_configmap: str | None
    demand_query: str | None
    service_level: float | None = None  # None: the `service_level` setting


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(t: float) -> str:
    # Sub-second: steps may be seconds long, and admitted-at fixes a gang's start step.
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")



def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    a = meta(obj).get("annotations")
    return a if isinstance(a, Mapping) else {}


def key(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    ns = m.get("namespace") or ""
    return f"{ns}/{m.get('name', '')}" if ns else str(m.get("name", ""))


_QUANTITY_SUFFIXES = (("Ki", 2.0**10), ("Mi", 2.0**20), ("Gi", 2.0**30), ("Ti", 2.0**40),
                      ("Pi", 2.0**50), ("Ei", 2.0**60), ("k", 1e3), ("M", 1e6), ("G", 1e9),
                      ("T", 1e12), ("P", 1e15), ("E", 1e18), ("m", 1e-3))


LONE = "pod:"  # a pod without a gang is its own gang, named `<namespace>/pod:<pod name>`
_ESCAPE = "gang:"


def gang_key(namespace: str, gang: str | None, pod_name: str) -> str:
    """The name of a pod's gang: `<namespace>/<gang>`, or `<namespace>/pod:<pod name>` for
    a pod without one. A lone pod named like a gang of its namespace must not join it,
    and a gang name is any string: the rare one that starts as a lone pod's name does
    (or as an escaped one) is escaped, `<namespace>/gang:<gang>`, so no two meet. Kept in
    memory only: no record on the cluster holds it, so it may change across versions."""
    if not gang:
        return f"{namespace}/{LONE}{pod_name}"
    if gang.startswith((LONE, _ESCAPE)):
        return f"{namespace}/{_ESCAPE}{gang}"
    return f"{namespace}/{gang}"


_WHOLE = re.compile(r"[+-]?[0-9]+")


def whole(raw: str, what: str) -> int:
    """A whole number written in ASCII digits (`int` alone would also take "1_6" as 16
    and full-width or other scripts' digits). Raises AnnotationError."""
    text = str(raw).strip()
    if not _WHOLE.fullmatch(text):
        raise AnnotationError(f"{what}: {raw!r} is not a whole number")
    return int(text)


def _plain_number(text: str) -> bool:
    """`float` takes "1_0" as 10 and digits of any script; an annotation takes ASCII only."""
    return text.isascii() and "_" not in text


def _quantity(value: Any) -> int:
    """An integer resource quantity (`"2"`, `2`); extended resources are whole."""
    if isinstance(value, bool):
        raise AnnotationError(f"bad {GPU_RESOURCE} quantity {value!r}")
    if isinstance(value, int):
        return value
    return _parse_quantity(str(value))


@functools.lru_cache(maxsize=256)
def _parse_quantity(value: str) -> int:
    # Cached: every round reads every GPU pod's quantity, and a cluster has a handful.
    text = value.strip()
    scale = 1.0
    # The API server writes quantities canonically: 1000000 comes back as "1M".
    for suffix, factor in _QUANTITY_SUFFIXES:
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    try:
        f = float(text) * scale
    except ValueError:
        raise AnnotationError(f"bad {GPU_RESOURCE} quantity {value!r}") from None
    if not math.isfinite(f) or f != int(f) or f < 0:
        raise AnnotationError(f"bad {GPU_RESOURCE} quantity {value!r}")
    return int(f)


def pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    """GPUs a pod (spec) requests: sum over containers (requests, else limits);
    init containers count by their maximum, as the scheduler does."""
    def of(c: Mapping[str, Any]) -> int:
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            v = (res.get(part) or {}).get(GPU_RESOURCE)
            if v is not None:
                return _quantity(v)
        return 0

    main = sum(of(c) for c in pod_spec.get("containers") or [] if isinstance(c, Mapping))
    init = max((of(c) for c in pod_spec.get("initContainers") or [] if isinstance(c, Mapping)),
               default=0)
    return max(main, init)


def priority(value: str | None, classes: Mapping[str, float], fallback: str) -> float:
    """`value`: the annotation, or a class name; None (absent) is the `fallback` class.
    An empty annotation is an error, as an empty workload, gang-size or duration is."""
    if value is None:
        return float(classes[fallback])
    v = value.strip()
    if v in classes:
        return float(classes[v])
    try:
        if not _plain_number(v):
            raise ValueError
        p = float(v)
    except ValueError:
        raise AnnotationError(
            f"{PRIORITY}: {value!r} is neither a positive number nor a class "
            f"({', '.join(sorted(classes))})") from None
    if not (p > 0 and math.isfinite(p)):
        raise AnnotationError(f"{PRIORITY}: {value!r} must be a positive number")
    return p


def resolved_priority(spec: Mapping[str, Any],
                      priority_classes: Mapping[str, Mapping[str, Any]]) -> int | None:
    """The `spec.priority` the API server gives a pod of this spec: its own when set (a
    pod), else its PriorityClass's value, else the global default class's (the lowest if
    several), else None. ``priority_classes``: PriorityClass objects by name."""
    value = spec.get("priority")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    name = spec.get("priorityClassName")
    if name:
        pc = priority_classes.get(str(name))
        chosen = [pc] if pc is not None else []
    else:
        chosen = [pc for pc in priority_classes.values() if pc.get("globalDefault")]
    values = [v for pc in chosen if isinstance(v := pc.get("value"), int)]
    return min(values) if values else None


def class_from_spec(spec: Mapping[str, Any], settings: config.Settings) -> str | None:
    """The class of a pod (or pod template) without a priority annotation, or None for the
    default: its `priorityClassName` when that names a class; else, when
    `priority_class_values` is set, the class with the highest value at or below the
    pod's `spec.priority` (the API server resolves it from the PriorityClass on
    admission; a pod template has none)."""
    name = spec.get("priorityClassName")
    if name in settings.priority_classes:
        return str(name)
    value = spec.get("priority")
    if not settings.priority_class_values or not isinstance(value, int) or isinstance(
            value, bool):
        return None
    fits = [(v, k) for k, v in settings.priority_class_values.items() if v <= value]
    return max(fits)[1] if fits else None


def pod_work(pod: Mapping[str, Any], settings: config.Settings) -> PodWork:
    """The batch-like work a pod asks for. Raises AnnotationError."""
    m = meta(pod)
    ns = str(m.get("namespace") or "default")
    a = annotations_of(pod)
    spec = pod.get("spec") or {}
    gpus = pod_gpus(spec)
    if gpus <= 0:
        raise AnnotationError(f"pod requests no {GPU_RESOURCE}")
    workload = a.get(WORKLOAD, "training")
    if workload not in model.BATCH_TYPES:
        if workload == model.REALTIME_TYPE:
            raise AnnotationError(
                f"{WORKLOAD}: {model.REALTIME_TYPE} belongs on a Deployment, not a bare pod")
        raise AnnotationError(
            f"{WORKLOAD}: unknown workload type {workload!r} "
            f"(one of {', '.join(model.BATCH_TYPES)})")
    gang_name = a.get(GANG)
    gang = gang_key(ns, gang_name, str(m.get("name", "")))
    if gang_name is None or gang_name == "":
        size = 1
        if GANG_SIZE in a and a[GANG_SIZE].strip() != "1":
            raise AnnotationError(f"{GANG_SIZE} is set but {GANG} is missing")
    else:
        raw = a.get(GANG_SIZE)
        if raw is None:
            raise AnnotationError(f"{GANG}={gang_name!r} needs {GANG_SIZE}")
        size = whole(raw, GANG_SIZE)
        if size < 1:
            raise AnnotationError(f"{GANG_SIZE}: {raw!r} must be at least 1")
    pclass = a.get(PRIORITY)
    if pclass is None:
        pclass = class_from_spec(spec, settings)
    prio = priority(pclass, settings.priority_classes, settings.default_priority)
    raw_d = a.get(EXPECTED_DURATION)
    if raw_d is None:
        raw_d = settings.default_durations.get(workload)
        if raw_d is None:
            raise AnnotationError(f"{EXPECTED_DURATION} missing and no default for {workload}")
    try:
        seconds = config.parse_duration(raw_d)
    except ValueError as e:
        raise AnnotationError(f"{EXPECTED_DURATION}: {e}") from None
    if seconds > MAX_DURATION_SECONDS:
        raise AnnotationError(f"{EXPECTED_DURATION}: {raw_d!r} is longer than a year")
    return PodWork(gang=gang, gang_size=size, gpus=gpus, workload=workload, priority=prio,
                   duration_seconds=seconds)


def service_spec(dep: Mapping[str, Any], settings: config.Settings,
                 priority_classes: Mapping[str, Mapping[str, Any]] | None = None,
                 ) -> ServiceSpec | None:
    """A real-time service from a Deployment, or None if it is not one (no workload
    annotation, or a batch type: its pods are read as batch pods). Raises AnnotationError,
    also for an unknown workload type: a typo of `realtime-inference` must not turn a
    service's pods into training jobs.

    A pod template carries no resolved `spec.priority`: with ``priority_classes`` (the
    cluster's PriorityClasses by name) it gets the value its pods will get."""
    a = annotations_of(dep)
    workload = a.get(WORKLOAD)
    if workload is None or workload in model.BATCH_TYPES:
        return None
    if workload != model.REALTIME_TYPE:
        raise AnnotationError(
            f"{WORKLOAD}: unknown workload type {workload!r} "
            f"(one of {', '.join((*model.BATCH_TYPES, model.REALTIME_TYPE))})")
    pclass = a.get(PRIORITY)
    if pclass is None:
        template = ((dep.get("spec") or {}).get("template") or {}).get("spec") or {}
        value = resolved_priority(template, priority_classes or {})
        pclass = class_from_spec({**template, "priority": value}, settings)
    prio = priority(pclass, settings.priority_classes, settings.default_priority)
    raw = a.get(MAX_SWAP, "2")
    swap = whole(raw, MAX_SWAP)
    if swap < 0:
        raise AnnotationError(f"{MAX_SWAP}: {raw!r} must be >= 0")
    template = ((dep.get("spec") or {}).get("template") or {}).get("spec") or {}
    per = pod_gpus(template)
    if per <= 0:
        raise AnnotationError(f"the pod template requests no {GPU_RESOURCE}")
    cm, query = a.get(DEMAND_CONFIGMAP), a.get(DEMAND_QUERY)
    if not cm and not query:
        raise AnnotationError(f"needs {DEMAND_CONFIGMAP} or {DEMAND_QUERY}")
    return ServiceSpec(name=key(dep), priority=prio, max_swap=swap, gpus_per_replica=per,
                       demand_configmap=cm or None, demand_query=query or None,
                       service_level=service_level(a.get(SERVICE_LEVEL)))


def service_level(raw: str | None) -> float | None:
    """The `gpuroster.io/service-level` objective: a share in (0, 1) such as "0.99", or a
    percentage such as "99%"; absent: None (the setting's default)."""
    if raw is None:
        return None
    text = raw.strip()
    try:
        if not _plain_number(text):
            raise ValueError
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        return headroom.check_objective(value)
    except ValueError:
        raise AnnotationError(
            f"{SERVICE_LEVEL}: {raw!r} is not a share of demand in (0, 1) such as \"0.99\" "
            "(or a percentage below 100%, such as \"99%\")") from None


def numbers(text: str, what: str) -> list[float]:
    """A JSON list or a comma/space separated list of non-negative numbers."""
    t = text.strip()
    try:
        values = json.loads(t) if t.startswith("[") else [float(x) for x in
                                                          t.replace(",", " ").split()]
    except ValueError:
        raise AnnotationError(f"{what}: not a list of numbers") from None
    if not isinstance(values, list):
        raise AnnotationError(f"{what}: not a list of numbers")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise AnnotationError(f"{what}: {v!r} is not a non-negative number")
        out.append(float(v))
    return out


@dataclass(frozen=True, slots=True)
class Demand:
    """A demand ConfigMap: `curve` (GPUs per step, counted from the epoch, cyclic)
    and/or `history` (GPUs per step, oldest first, ending at the latest step)."""

    curve: tuple[float, ...] = ()
    history: tuple[float, ...] = ()
    steps_per_day: int | None = None
    observed: tuple[float, ...] = ()  # true demand of past steps, from the epoch (with `curve`)


def demand(configmap: Mapping[str, Any]) -> Demand:
    data = configmap.get("data") or {}
    curve = numbers(data["curve"], "curve") if data.get("curve") else []
    history = numbers(data["history"], "history") if data.get("history") else []
    observed = numbers(data["observed"], "observed") if data.get("observed") else []
    if not curve and not history:
        raise AnnotationError(f"ConfigMap {key(configmap)} has neither 'curve' nor 'history'")
    spd = None
    if data.get("steps-per-day"):
        try:
            spd = whole(data["steps-per-day"], "steps-per-day")
        except AnnotationError:
            raise AnnotationError("steps-per-day: not a whole number") from None
    return Demand(tuple(curve), tuple(history), spd, tuple(observed))


def _split_block(label: str) -> tuple[str, str, str | None]:
    """A block label's first node, last node and, for a block inside one node, its GPU
    range: `node-3:0-3` -> (node-3, node-3, "0-3"); `node-4..node-5` -> (node-4, node-5,
    None). A node name may itself hold ':', so the range follows the last one."""
    if ".." in label:
        first, last = label.split("..", 1)
        return first, last, None
    node, colon, rng = label.rpartition(":")
    if not colon:  # no range at all: parse_block refuses it
        return label, label, ""
    return node, node, rng


def block_nodes(label: str) -> list[str]:
    """The node names a block label mentions (`node-3:0-3`, `node-4..node-5`)."""
    first, last, rng = _split_block(label)
    return [first] if rng is not None else [first, last]


def parse_block(label: str, node_index: Mapping[str, int], gpus_per_node: int) -> model.Block:
    """Inverse of `model.Block.label` with real node names. Raises AnnotationError.

    A multi-node label names only its first and last node: a node that came between
    them in topology order since (or went) widens or narrows what it reads as. What
    reads as no legal block is refused here; `gangs` checks the nodes it spans."""
    first, last, rng = _split_block(label)
    try:
        if rng is None:
            i, j = node_index[first], node_index[last]
            if j < i:
                raise ValueError
            block = model.Block(i * gpus_per_node, (j - i + 1) * gpus_per_node)
        else:
            lo, hi = (int(x) for x in rng.split("-", 1))
            if not 0 <= lo <= hi < gpus_per_node:
                raise ValueError
            block = model.Block(node_index[first] * gpus_per_node + lo, hi - lo + 1)
    except (ValueError, KeyError):
        raise AnnotationError(f"{BLOCK}: cannot place {label!r} on the current nodes") from None
    if not block.is_legal(model.Cluster(nodes=len(node_index), gpus_per_node=gpus_per_node)):
        why = " (nodes came or went between its first and last)" if rng is None else ""
        raise AnnotationError(f"{BLOCK}: {label!r} now reads as {block.size} GPUs, "
                              f"not a legal block{why}")
    return block

"""Scenario documents, version 1 (MODEL.md): validate and build; pure (no file I/O).

Every problem is reported at once, each naming the file, the field and the
reason; a file with any problem yields no scenario, so nothing half-runs.
Unknown keys are ignored so that later, compatible extensions still load, and an
optional field given as null (`estimate_steps:`, `forecast: null`) is taken as absent:
MODEL.md says nothing of nulls, and YAML writes an empty value as one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.planner import headroom, model

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


@dataclass(frozen=True)
class Problem:
    field: str
    reason: str


class ScenarioError(ValueError):
    """A scenario file is unreadable or invalid. `problems` lists each bad field."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = [f"{source}: {p.field}: {p.reason}" for p in self.problems]
        super().__init__("invalid scenario\n  " + "\n  ".join(lines))


class _Checker:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def fail(self, field: str, reason: str) -> None:
        self.problems.append(Problem(field, reason))

    def integer(
        self,
        obj: Mapping[str, Any],
        key: str,
        where: str,
        *,
        minimum: int,
        default: int | None = None,
    ) -> int | None:
        field = f"{where}.{key}" if where else key
        if default is not None and obj.get(key) is None:
            return default  # an optional field given as null is absent
        if key not in obj:
            self.fail(field, "is required")
            return None
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(field, f"must be an integer, got {value!r}")
            return None
        if value < minimum:
            self.fail(field, f"must be >= {minimum}, got {value}")
            return None
        return value

    def number(self, obj: Mapping[str, Any], key: str, where: str) -> float | None:
        field = f"{where}.{key}"
        if key not in obj:
            self.fail(field, "is required")
            return None
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(field, f"must be a number, got {value!r}")
            return None
        if not math.isfinite(value) or value <= 0:
            self.fail(field, f"must be a positive finite number, got {value!r}")
            return None
        return float(value)

    def name(self, obj: Mapping[str, Any], key: str, where: str) -> str | None:
        field = f"{where}.{key}" if where else key
        value = obj.get(key)
        if not isinstance(value, str) or not _NAME.match(value):
            self.fail(field, f"must match [a-z0-9-] (lowercase, digits, dashes), got {value!r}")
            return None
        return value

    def curve(
        self, obj: Mapping[str, Any], key: str, where: str, length: int | None, *, required: bool
    ) -> tuple[int, ...] | None:
        field = f"{where}.{key}"
        if key not in obj or (obj[key] is None and not required):
            if required:
                self.fail(field, "is required")
            return None  # absent, or optional and given as null: the same
        value = obj[key]
        if not isinstance(value, list):
            self.fail(field, f"must be a list of non-negative integers, got {type(value).__name__}")
            return None
        bad = [
            i for i, v in enumerate(value) if isinstance(v, bool) or not isinstance(v, int) or v < 0
        ]
        if bad:
            self.fail(
                field, f"entry {bad[0]} must be a non-negative integer, got {value[bad[0]]!r}"
            )
            return None
        if length is not None and len(value) < length:
            self.fail(
                field,
                f"has {len(value)} entries, shorter than the window (duration_steps = {length})",
            )
            return None
        return tuple(value)


def parse(data: Any, source: str = "<memory>") -> model.Scenario:
    """Validate a decoded scenario document and build the scenario, or raise ScenarioError."""
    c = _Checker()
    if not isinstance(data, Mapping):
        raise ScenarioError(source, [Problem("<document>", "must be a mapping of fields")])
    version = data.get("version")
    # The integer 1 only: `true` and `1.0` compare equal to 1 in Python, and are not it.
    if isinstance(version, bool) or not isinstance(version, int) or version != 1:
        c.fail("version", f"must be the integer 1, got {version!r}")
    name = c.name(data, "name", "")
    description = data.get("description")
    if description is None:  # optional: absent or null
        description = ""
    elif not isinstance(description, str):
        c.fail("description", "must be a string")
        description = ""

    cluster: model.Cluster | None = None
    raw_cluster = data.get("cluster")
    if not isinstance(raw_cluster, Mapping):
        c.fail("cluster", "is required: {nodes: N, gpus_per_node: G}")
    else:
        nodes = c.integer(raw_cluster, "nodes", "cluster", minimum=1)
        per_node = c.integer(raw_cluster, "gpus_per_node", "cluster", minimum=1)
        if nodes is not None and per_node is not None:
            cluster = model.Cluster(nodes, per_node)

    step_minutes = c.integer(data, "step_minutes", "", minimum=1)
    horizon = c.integer(data, "horizon_steps", "", minimum=1)
    window = c.integer(data, "duration_steps", "", minimum=1)

    seen: dict[str, str] = {}

    def unique(item_name: str | None, field: str) -> None:
        if item_name is None:
            return
        if item_name in seen:
            c.fail(field, f"duplicate name {item_name!r} (also {seen[item_name]})")
        else:
            seen[item_name] = field

    jobs: list[model.Job] = []
    for raw, job_name, where in _entries(c, data, "jobs", unique):
        kind = raw.get("type")
        if kind not in model.BATCH_TYPES:
            c.fail(f"{where}.type", f"must be one of {', '.join(model.BATCH_TYPES)}, got {kind!r}")
        gpus = c.integer(raw, "gpus", where, minimum=1)
        if gpus is not None:
            if not model.is_power_of_two(gpus):
                c.fail(f"{where}.gpus", f"must be a power of two, got {gpus}")
                gpus = None
            elif cluster is not None:
                g = cluster.gpus_per_node
                if gpus > cluster.gpus:
                    c.fail(
                        f"{where}.gpus",
                        f"{gpus} GPUs is larger than the cluster ({cluster.gpus} GPUs)",
                    )
                    gpus = None
                elif gpus > g and gpus % g:
                    c.fail(
                        f"{where}.gpus",
                        f"{gpus} GPUs is more than a node ({g}) but not a whole number of nodes",
                    )
                    gpus = None
        duration = c.integer(raw, "duration_steps", where, minimum=1)
        estimate = c.integer(
            raw, "estimate_steps", where, minimum=1, default=duration if duration is not None else 1
        )
        arrival = c.integer(raw, "arrival_step", where, minimum=0)
        priority = c.number(raw, "priority", where)
        if (
            None not in (job_name, gpus, duration, estimate, arrival, priority)
            and kind in model.BATCH_TYPES
        ):
            jobs.append(
                model.Job(
                    str(job_name),
                    str(kind),
                    int(gpus or 0),
                    int(duration or 0),
                    int(estimate or 0),
                    int(arrival or 0),
                    float(priority or 0),
                )
            )

    services: list[model.Service] = []
    for raw, svc_name, where in _entries(c, data, "services", unique):
        priority = c.number(raw, "priority", where)
        max_swap = c.integer(raw, "max_swap", where, minimum=0)
        demand = c.curve(raw, "demand", where, window, required=True)
        # A forecast covers the window like the demand: MODEL.md's fifo reserves "the
        # peak of its forecast over the window", which a shorter one does not define.
        forecast = c.curve(raw, "forecast", where, window, required=False)
        level = _service_level(c, raw, where)
        if None not in (svc_name, priority, max_swap, demand):
            assert demand is not None
            services.append(
                model.Service(
                    str(svc_name),
                    float(priority or 0),
                    int(max_swap or 0),
                    demand,
                    forecast if forecast is not None else demand,
                    level,
                )
            )

    if c.problems:
        raise ScenarioError(source, c.problems)
    assert name and cluster and step_minutes and horizon and window
    return model.Scenario(
        name,
        description,
        cluster,
        step_minutes,
        horizon,
        window,
        tuple(jobs),
        tuple(services),
        source,
    )


def _service_level(c: _Checker, raw: Mapping[str, Any], where: str) -> float | None:
    """A service's optional `service_level` (an extension of version 1: the share of its
    demanded GPU-steps it must get, in (0, 1); absent or null: the planner's default)."""
    value = raw.get("service_level")
    if value is None:
        return None
    try:
        return headroom.check_objective(value)
    except ValueError as e:
        c.fail(f"{where}.service_level", str(e).removeprefix("service level "))
        return None


def _entries(
    c: _Checker, data: Mapping[str, Any], key: str, unique: Callable[[str | None, str], None]
) -> Iterator[tuple[Mapping[str, Any], str | None, str]]:
    """The mappings listed under `key` (absent or null: none), each with its checked name
    and where it is for messages ("jobs[3] (train-a)"); a bad list or entry is reported
    and skipped."""
    raw_list = data.get(key, [])
    if raw_list is None:
        return
    if not isinstance(raw_list, list):
        c.fail(key, "must be a list")
        return
    for i, raw in enumerate(raw_list):
        where = f"{key}[{i}]"
        if not isinstance(raw, Mapping):
            c.fail(where, "must be a mapping")
            continue
        item_name = c.name(raw, "name", where)
        unique(item_name, f"{where}.name")
        yield raw, item_name, f"{where} ({item_name})" if item_name else where


def to_document(s: model.Scenario) -> dict[str, Any]:
    """The version-1 document for a scenario (round-trips through `parse`)."""
    return {
        "version": 1,
        "name": s.name,
        "description": s.description,
        "cluster": {"nodes": s.cluster.nodes, "gpus_per_node": s.cluster.gpus_per_node},
        "step_minutes": s.step_minutes,
        "horizon_steps": s.horizon_steps,
        "duration_steps": s.duration_steps,
        "jobs": [
            {
                "name": j.name,
                "type": j.type,
                "gpus": j.gpus,
                "duration_steps": j.duration_steps,
                "estimate_steps": j.estimate_steps,
                "arrival_step": j.arrival_step,
                "priority": _num(j.priority),
            }
            for j in s.jobs
        ],
        "services": [
            {
                "name": v.name,
                "priority": _num(v.priority),
                "max_swap": v.max_swap,
                "demand": list(v.demand),
                "forecast": list(v.forecast),
                **({"service_level": v.service_level} if v.service_level is not None else {}),
            }
            for v in s.services
        ],
    }


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x

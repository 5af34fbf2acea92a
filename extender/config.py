"""Settings of `gpuroster serve`: one dataclass, read from flags and `GPUROSTER_*` env.

Flags win over the environment, the environment over the defaults. Every
setting is validated once here, so the rest of the service trusts them.
The env names are part of the Helm chart's contract: do not rename.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

DEFAULT_PRIORITY_CLASSES: dict[str, float] = {"critical": 8, "high": 4, "normal": 2, "low": 1}
DEFAULT_DURATIONS: dict[str, str] = {
    "training": "6h",
    "batch-inference": "2h",
    "quantization": "1h",
}
POLICIES = ("gpuroster", "fifo", "priority-skip", "priority-easy")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
GPU_MODES = ("device-plugin", "dra")

# [0-9], not \d: \d also takes other scripts' digits (a full-width "6h" read as 6h).
_DURATION = re.compile(r"^\s*(?:([0-9]+(?:\.[0-9]+)?)\s*(d|h|m|s|ms))+\s*$")
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|d|h|m|s)")
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class ConfigError(ValueError):
    """A setting has a bad value; the message names the setting."""


def parse_duration(text: str) -> float:
    """`6h`, `90m`, `2d`, `1h30m`, `20s` -> seconds. Raises ValueError."""
    if not isinstance(text, str) or not _DURATION.match(text):
        raise ValueError(f"unparsable duration {text!r} (expected e.g. 6h, 90m, 2d, 1h30m)")
    total = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text))
    if total <= 0 or not math.isfinite(total):
        raise ValueError(f"duration {text!r} must be positive")
    return total


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


@dataclass(frozen=True)
class Settings:
    policy: str = "gpuroster"
    step_seconds: float = 3600.0
    step_minutes: float = 0.0  # planning minutes per step; 0: step_seconds / 60 (no compression)
    horizon_steps: int = 24
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    prometheus_url: str = ""
    realtime_penalty: float = 8.0
    # The starvation bound: a job that has waited this many hours of planning time is
    # planned first (the same wait at any step length); `max_wait_steps` > 0 gives it in
    # steps instead (`allocating.Options.max_wait_hours`).
    max_wait_hours: float = 48.0
    max_wait_steps: int = 0
    # A service's objective when its Deployment sets no gpuroster.io/service-level: the
    # share of its demanded GPU-steps the headroom over its forecast is sized to cover
    # (why 0.995: docs/options.md).
    service_level: float = 0.995
    # Hours a service's peak may come early or late: until its demand has been seen through
    # a swing of its forecast, the plan holds the forecast widened by this much each way
    # (at most an eighth of the horizon), then by the lag seen. 0: off. 3 by default: the
    # 1-3 h a forecast from the same hours a day or week earlier misses the peak by.
    peak_shift_hours: float = 3.0
    # Until a service has four days of its own forecast error, a forecast that zigzags or
    # turns at a single step three times (a copy of past demand) stands in with its
    # jitter: its departures from its running median over this many hours each side.
    # 0: off (a forecast that zigzags on purpose).
    stand_in_hours: float = 3.0
    # GPUs idle now that no job is planned on by the next step go to services whose
    # demand ran above their forecast in the last day, as spare replicas up to their
    # planned peak (given back at the next step, within max-swap). False: services hold
    # their forecast and headroom only.
    spare_replicas: bool = True
    # Once a service has got this share of its demand more than its static reservation
    # (its forecast's peak, held all day) would have given it, over the steps planned
    # in the last week, its plan holds no more than that reservation, or its forecast
    # raised by its typical error where that is more: headroom for rarer errors gives
    # way to batch work (spare replicas still reach it). 1: off (never that far ahead).
    reservation_lead: float = 0.01
    priority_classes: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))
    default_priority: str = "normal"
    # class name -> lowest Kubernetes PriorityClass value that maps to it; a pod with no
    # priority annotation and no class of that name gets the class of its spec.priority.
    priority_class_values: Mapping[str, int] = field(default_factory=dict)
    default_durations: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_DURATIONS))
    gpus_per_node: int = 0  # 0: read from node allocatable (8 when no node says)
    port: int = 8888
    bind_address: str = "0.0.0.0"
    leader_elect: bool = False
    lease_namespace: str = "default"
    lease_name: str = "gpuroster"
    # A Deployment in lease_namespace that owns the Lease: deleted with it (the chart's own).
    lease_owner: str = ""
    # A SIGKILLed leader's Lease is taken over about this long after its last renewal.
    lease_seconds: float = 10.0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    log_level: str = "INFO"
    kubeconfig: str = ""  # empty: in-cluster
    epoch: float = 0.0  # unix time of step 0; the default 0 (a UTC midnight) aligns steps
    # to the wall clock
    resync_seconds: float = 300.0
    max_body_bytes: int = 64 * 1024 * 1024
    # Plan and publish, never write to the cluster; the verbs let kube-scheduler place
    # every pod as if the extender were absent (docs/try-it-first.md).
    shadow: bool = False
    # How GPUs reach pods: the nvidia.com/gpu extended resource (device plugin), or DRA
    # devices (ResourceSlices and ResourceClaims; docs/dra.md).
    gpus: str = "device-plugin"

    @property
    def dra(self) -> bool:
        return self.gpus == "dra"

    def __post_init__(self) -> None:
        validate(self)

    def model_step_seconds(self) -> float:
        """Planning time a step stands for: durations and days are counted in it.
        Equal to the wall step unless time is compressed (tests, replays, demo)."""
        return self.step_minutes * 60.0 if self.step_minutes else self.step_seconds

    def steps_per_day(self) -> int:
        return max(1, round(86400.0 / self.model_step_seconds()))

    def duration_steps(self, seconds: float) -> int:
        """Whole steps covering `seconds` of planning time (at least one)."""
        return max(1, math.ceil(seconds / self.model_step_seconds() - 1e-9))

    def step_of(self, t: float) -> int:
        """The step that unix time `t` falls in (steps count from `epoch`)."""
        return math.floor((t - self.epoch) / self.step_seconds + 1e-9)

    def step_start(self, step: int) -> float:
        """The unix time `step` begins at."""
        return self.epoch + step * self.step_seconds

    def priority_label(self, priority: float) -> str:
        """The class name of a priority weight (for metrics labels), else the number."""
        for k, v in self.priority_classes.items():
            if float(v) == priority:
                return k
        return f"{priority:g}"


def quiet_tail_seconds(step_seconds: float) -> float:
    """The last moments of a step in which the controller does not re-plan: a plan
    then would commit for a step about to end, and the boundary plan would redo it
    with a fresh swap budget (twice the churn in one step's time). Changes that late
    wait for the boundary plan."""
    return min(1.0, step_seconds / 10)


def validate(s: Settings) -> None:
    def bad(name: str, why: str) -> ConfigError:
        return ConfigError(f"GPUROSTER_{name.upper()}: {why}")

    if s.policy not in POLICIES:
        raise bad("policy", f"unknown policy {s.policy!r}; known: {', '.join(POLICIES)}")
    if not (s.step_seconds > 0 and math.isfinite(s.step_seconds)):
        raise bad("step_seconds", f"must be a positive number, got {s.step_seconds!r}")
    if not (s.step_minutes >= 0 and math.isfinite(s.step_minutes)):
        raise bad("step_minutes", f"must be >= 0, got {s.step_minutes!r}")
    if s.horizon_steps < 1:
        raise bad("horizon_steps", f"must be >= 1, got {s.horizon_steps}")
    if s.realtime_penalty < 0:
        raise bad("realtime_penalty", f"must be >= 0, got {s.realtime_penalty}")
    if not (s.max_wait_hours > 0 and math.isfinite(s.max_wait_hours)):
        raise bad("max_wait_hours", f"must be a positive number, got {s.max_wait_hours!r}")
    if s.max_wait_steps < 0:
        raise bad("max_wait_steps", f"must be >= 0, got {s.max_wait_steps}")
    if not (0.0 < s.service_level < 1.0):
        raise bad("service_level", f"must be a share of demand in (0, 1), got {s.service_level}")
    if not (s.peak_shift_hours >= 0 and math.isfinite(s.peak_shift_hours)):
        raise bad("peak_shift_hours", f"must be >= 0, got {s.peak_shift_hours!r}")
    if not (s.stand_in_hours >= 0 and math.isfinite(s.stand_in_hours)):
        raise bad("stand_in_hours", f"must be >= 0, got {s.stand_in_hours!r}")
    if not (0.0 <= s.reservation_lead <= 1.0):
        raise bad("reservation_lead", f"must be a share of demand in [0, 1] (1: off), "
                  f"got {s.reservation_lead!r}")
    if not s.priority_classes:
        raise bad("priority_classes", "needs at least one class")
    for k, v in s.priority_classes.items():
        if not isinstance(v, int | float) or isinstance(v, bool) or not v > 0:
            raise bad("priority_classes", f"class {k!r} needs a positive number, got {v!r}")
    if s.default_priority not in s.priority_classes:
        raise bad("default_priority",
                  f"{s.default_priority!r} is not one of {sorted(s.priority_classes)}")
    for k, v in s.priority_class_values.items():
        if k not in s.priority_classes:
            raise bad("priority_class_values",
                      f"{k!r} is not one of the priority classes {sorted(s.priority_classes)}")
        if not isinstance(v, int) or isinstance(v, bool) or not -(2**31) <= v < 2**31:
            raise bad("priority_class_values",
                      f"class {k!r} needs a whole PriorityClass value (32-bit), got {v!r}")
    for k, d in s.default_durations.items():
        try:
            parse_duration(d)
        except ValueError as e:
            raise bad("default_durations", f"{k}: {e}") from None
    if s.gpus_per_node < 0:
        raise bad("gpus_per_node", f"must be >= 0, got {s.gpus_per_node}")
    if not 0 <= s.port <= 65535:
        raise bad("port", f"must be 0..65535, got {s.port}")
    if bool(s.tls_cert_file) != bool(s.tls_key_file):
        raise bad("tls_cert_file", "TLS needs both GPUROSTER_TLS_CERT_FILE and _KEY_FILE")
    if s.log_level.upper() not in LOG_LEVELS:
        raise bad("log_level", f"one of {', '.join(LOG_LEVELS)}, got {s.log_level!r}")
    if not (3 <= s.lease_seconds <= 300):
        raise bad("lease_seconds", f"must be 3..300, got {s.lease_seconds}")
    if s.resync_seconds <= 0:
        raise bad("resync_seconds", "must be positive")
    if s.max_body_bytes < 1024:
        raise bad("max_body_bytes", "must be at least 1024")
    if s.gpus not in GPU_MODES:
        raise bad("gpus", f"one of {', '.join(GPU_MODES)}, got {s.gpus!r}")


# name, env suffix, parser from text, help
_Parser = Any
_FIELDS: tuple[tuple[str, _Parser, str], ...] = (
    ("policy", str, "planning policy: " + " | ".join(POLICIES)),
    ("step_seconds", float, "step length in seconds (production 900-3600; seconds in tests)"),
    ("step_minutes", float, "planning minutes one step stands for (0: step_seconds/60); "
     "set it to compress time: durations and days count in it"),
    ("horizon_steps", int, "steps the planner looks ahead"),
    ("namespaces", lambda t: tuple(x.strip() for x in t.split(",") if x.strip()),
     "comma list of namespaces to manage (empty: all)"),
    ("prometheus_url", str, "Prometheus base URL for gpuroster.io/demand-query"),
    ("realtime_penalty", float, "cost of a real-time GPU-step short, x the service priority"),
    ("max_wait_hours", float, "starvation bound: a job that has waited this many hours is "
     "planned before all others (48)"),
    ("max_wait_steps", int, "the starvation bound in steps instead, when above 0 (0)"),
    ("service_level", float, "a service's objective when it sets no gpuroster.io/service-level: "
     "share of demanded GPU-steps the headroom over its forecast is sized for (0.995)"),
    ("peak_shift_hours", float, "hours a service's peak may come early or late: until its "
     "demand shows when, the plan holds the forecast widened by this much each way (3; 0: off)"),
    ("stand_in_hours", float, "until a service has four days of forecast error, a forecast that "
     "zigzags (or turns at a single step three times) stands in with its departures from its "
     "running median over this many hours each side (3; 0: off)"),
    ("spare_replicas", _bool, "give GPUs idle now (no job planned on them next step) to "
     "services whose demand ran above their forecast in the last day, as spare replicas up "
     "to their planned peak (true)"),
    ("reservation_lead", float, "share of a service's demand it may get above what its static "
     "reservation (its forecast's peak) would have given it before its headroom over that "
     "reservation gives way to batch work (0.01; 1: off)"),
    ("priority_classes", json.loads, "JSON object: class name -> weight"),
    ("default_priority", str, "class used when a pod names none"),
    ("priority_class_values", json.loads,
     "JSON object: class name -> lowest PriorityClass value mapped to it (empty: by name only)"),
    ("default_durations", json.loads, "JSON object: workload type -> duration (6h, 90m)"),
    ("gpus_per_node", int, "GPUs per node (0: from node allocatable)"),
    ("port", int, "HTTP port"),
    ("bind_address", str, "HTTP bind address"),
    ("leader_elect", _bool, "take a Lease before acting (several replicas)"),
    ("lease_namespace", str, "namespace of the leader Lease"),
    ("lease_name", str, "name of the leader Lease"),
    ("lease_owner", str, "Deployment in the Lease's namespace that owns the Lease, so that "
     "deleting it deletes the Lease (empty: none)"),
    ("lease_seconds", float, "leader Lease duration: a dead leader is replaced after about this"),
    ("tls_cert_file", str, "serve HTTPS with this certificate"),
    ("tls_key_file", str, "and this key"),
    ("log_level", str, "DEBUG | INFO | WARNING | ERROR"),
    ("kubeconfig", str, "kubeconfig path (empty: in-cluster config)"),
    ("epoch", float, "unix time of step 0 (0: 1970-01-01T00:00Z, steps on the wall clock)"),
    ("resync_seconds", float, "full relist of the cache every this many seconds"),
    ("max_body_bytes", int, "largest extender request body accepted"),
    ("shadow", _bool, "shadow mode: plan and publish (plan page, metrics, log) but never "
     "write to the cluster; filter passes every node, bind is refused"),
    ("gpus", str, "how pods get GPUs: device-plugin (nvidia.com/gpu) | dra (devices from "
     "ResourceSlices; an admitted gang's claims are allocated its planned devices)"),
)

# Booleans that may be given as a bare flag (`--shadow`) as well as with a value.
_BARE_FLAGS = frozenset({"shadow"})


def env_name(name: str) -> str:
    return "GPUROSTER_" + name.upper()


def parser(prog: str = "gpuroster serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run the gpuroster extender and controller.")
    for name, _, help_text in _FIELDS:
        bare: dict[str, Any] = {"nargs": "?", "const": "true"} if name in _BARE_FLAGS else {}
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None,
                       help=f"{help_text} [env {env_name(name)}]", **bare)
    return p


def load(argv: Sequence[str] = (), env: Mapping[str, str] | None = None,
         prog: str = "gpuroster serve") -> Settings:
    """Settings from flags and environment. Raises ConfigError naming the setting."""
    import os

    env = os.environ if env is None else env
    args = parser(prog).parse_args(list(argv))
    values: dict[str, Any] = {}
    known = {f.name for f in fields(Settings)}
    for name, convert, _ in _FIELDS:
        assert name in known
        raw = getattr(args, name)
        if raw is None:
            raw = env.get(env_name(name))
        if raw is None or (raw == "" and name not in ("namespaces",)):
            continue
        try:
            values[name] = convert(raw)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{env_name(name)}: cannot parse {raw!r}: {e}") from None
    for name in ("priority_classes", "priority_class_values", "default_durations"):
        if name in values and not isinstance(values[name], dict):
            raise ConfigError(f"{env_name(name)}: needs a JSON object")
    if "log_level" in values:
        values["log_level"] = values["log_level"].upper()
    return Settings(**values)

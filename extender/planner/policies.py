"""The policy protocol and the registry of every policy the benchmark runs.

A policy is any object with a `name` and `plan(PlanInput) -> Plan`. It may keep
state between steps, so the simulator (and the controller) create a fresh one
per run with `create(name, **options)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from extender.planner import model


class Policy(Protocol):
    name: str

    def plan(self, inp: model.PlanInput) -> model.Plan: ...


_FACTORIES: dict[str, Callable[..., Policy]] = {}


def register(name: str) -> Callable[[Callable[..., Policy]], Callable[..., Policy]]:
    def wrap(factory: Callable[..., Policy]) -> Callable[..., Policy]:
        _FACTORIES[name] = factory
        return factory

    return wrap


def _load_builtin() -> None:
    # Import for the side effect of registering; kept here so callers import one module.
    from extender.planner import allocating, fifo, peers  # noqa: F401


def names() -> list[str]:
    _load_builtin()
    return list(_FACTORIES)


def create(name: str, **options: Any) -> Policy:
    """A fresh policy. `gpuroster-full` lives outside the pure planner (it needs
    OR-Tools): it is known here once `extender.optimizing.exact` is imported."""
    _load_builtin()
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"unknown policy {name!r}; known: {', '.join(sorted(_FACTORIES))}"
        ) from None
    return factory(**options)

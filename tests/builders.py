"""Builders for test scenarios: `scenario().nodes(1, 4).job("a", gpus=2, d=2).build()`."""

from __future__ import annotations

from typing import Any

from extender.planner import model
from extender.planner import scenario as scenario_doc


class ScenarioBuilder:
    def __init__(self, name: str = "t") -> None:
        self.doc: dict[str, Any] = {
            "version": 1,
            "name": name,
            "description": "test",
            "cluster": {"nodes": 1, "gpus_per_node": 8},
            "step_minutes": 60,
            "horizon_steps": 24,
            "duration_steps": 10,
            "jobs": [],
            "services": [],
        }

    def nodes(self, n: int, per_node: int) -> ScenarioBuilder:
        self.doc["cluster"] = {"nodes": n, "gpus_per_node": per_node}
        return self

    def window(self, steps: int, horizon: int = 24) -> ScenarioBuilder:
        self.doc["duration_steps"] = steps
        self.doc["horizon_steps"] = horizon
        return self

    def job(
        self,
        name: str,
        *,
        gpus: int = 1,
        d: int = 1,
        arrival: int = 0,
        priority: float = 1,
        estimate: int | None = None,
        type: str = "training",
    ) -> ScenarioBuilder:
        j: dict[str, Any] = {
            "name": name,
            "type": type,
            "gpus": gpus,
            "duration_steps": d,
            "arrival_step": arrival,
            "priority": priority,
        }
        if estimate is not None:
            j["estimate_steps"] = estimate
        self.doc["jobs"].append(j)
        return self

    def service(
        self,
        name: str,
        demand: list[int],
        *,
        priority: float = 5,
        max_swap: int = 2,
        forecast: list[int] | None = None,
    ) -> ScenarioBuilder:
        s: dict[str, Any] = {
            "name": name,
            "priority": priority,
            "max_swap": max_swap,
            "demand": demand,
        }
        if forecast is not None:
            s["forecast"] = forecast
        self.doc["services"].append(s)
        return self

    def build(self) -> model.Scenario:
        return scenario_doc.parse(self.doc, "<test>")


def scenario(name: str = "t") -> ScenarioBuilder:
    return ScenarioBuilder(name)

"""kube-scheduler extender v1 wire types (k8s.io/kube-scheduler/extender/v1).

The Go structs carry no JSON tags, so the keys are the Go field names. The Pod
and Node objects inside are core/v1 types, whose keys are lowerCamel (they do
have tags): they stay plain dicts here, passed through untouched.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class _Wire(BaseModel):
    # Unknown keys are ignored (newer schedulers may add fields); known keys are exact.
    model_config = ConfigDict(extra="ignore", frozen=True)


class NodeList(_Wire):
    """core/v1 NodeList as JSON: {"metadata": {...}, "items": [Node, ...]}."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[StrictStr] | None = None


class ExtenderFilterResult(_Wire):
    Nodes: NodeList | None = None
    NodeNames: list[StrictStr] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Wire):
    Host: StrictStr
    Score: StrictInt  # 0..MaxExtenderPriority (10); Go will not decode 5.0 into int64


class ExtenderBindingArgs(_Wire):
    PodName: StrictStr
    PodNamespace: StrictStr
    PodUID: StrictStr = ""
    Node: StrictStr


class ExtenderBindingResult(_Wire):
    Error: str = ""


MAX_EXTENDER_PRIORITY = 10


def node_name(node: dict[str, Any]) -> str | None:
    meta = node.get("metadata")
    if isinstance(meta, dict):
        name = meta.get("name")
        if isinstance(name, str):
            return name
    return None

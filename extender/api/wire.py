"""kube-scheduler extender v1 wire types (k8s.io/kube-scheduler/extender/v1).

The Go structs carry no JSON tags, so the keys are the Go field names. The Pod
and Node objects inside are core/v1 types, whose keys are lowerCamel (they do
have tags): they stay plain dicts here, passed through untouched.
"""

from __future__ import annotations

import json
import re
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


# --- lean views for the hot path ----------------------------------------------------
# A full NodeList can be megabytes; building Python dicts for it costs tens of ms.
# These views parse the same JSON (in pydantic-core, without Python objects for the
# ignored fields) keeping only the node names; `raw_nodes` then slices out the few
# Node objects a filter answer must echo back.


class _NodeMeta(_Wire):
    name: StrictStr | None = None


class _NodeName(_Wire):
    metadata: _NodeMeta | None = None


class _NodeNames(_Wire):
    items: list[_NodeName] = Field(default_factory=list)


class ExtenderArgsLean(_Wire):
    """ExtenderArgs with Nodes reduced to their names (same JSON in, same validation)."""

    Pod: dict[str, Any]
    Nodes: _NodeNames | None = None
    NodeNames: list[StrictStr] | None = None

    def node_names(self) -> list[str | None]:
        if self.NodeNames is not None:
            return list(self.NodeNames)
        assert self.Nodes is not None
        return [n.metadata.name if n.metadata else None for n in self.Nodes.items]


# Where Go writes a Node: `{"metadata":{"name":"N"` opens every item of a NodeList.
_GO_NODE = re.compile(rb'\{"metadata":\{"name":"([a-zA-Z0-9.\-]+)"')
# A NodeNames list as Go writes it; a name matched here needs no JSON escapes.
_GO_NAMES = re.compile(rb'"[a-zA-Z0-9.\-]+"(?:,"[a-zA-Z0-9.\-]+")*')
_DECODER = json.JSONDecoder()


def raw_nodes(body: bytes, names: list[str]) -> list[bytes] | None:
    """The raw JSON of the Node objects named `names`, cut out of an ExtenderArgs body.

    kube-scheduler (Go) writes each Node as `{"metadata":{"name":"N",...`; each
    candidate found that way is decoded on its own and checked. None when any
    is not found like that: the caller falls back to a full parse.
    """
    if not names:
        return []
    opener = b'{"metadata":{"name":'
    out = []
    for name in names:
        needle = opener + json.dumps(name).encode()
        at = body.find(needle)
        if at < 0 or body.find(needle, at + 1) >= 0:
            return None
        nxt = body.find(opener, at + 1)
        chunk = body[at: nxt if nxt >= 0 else len(body)].decode("utf-8", errors="replace")
        try:
            obj, end = _DECODER.raw_decode(chunk)
        except ValueError:
            return None
        if node_name(obj) != name:
            return None
        out.append(chunk[:end].encode("utf-8"))
    return out


def _go_pod(body: bytes, start: int, stop: int) -> dict[str, Any] | None:
    """The Pod object that fills body[start:stop] exactly, or None (then the marker
    found after it was inside the Pod: not Go's layout after all)."""
    try:
        text = body[:stop].decode("utf-8", errors="strict")
        pod, end = _DECODER.raw_decode(text, start)
    except (ValueError, UnicodeDecodeError):
        return None
    return pod if isinstance(pod, dict) and end == len(text) else None


def fast_node_names(body: bytes) -> tuple[dict[str, Any], list[str]] | None:
    """(Pod, node names) of a Go-written ExtenderArgs with a full NodeList, without
    parsing the nodes: the Pod is decoded, the names are matched where Go writes them
    (`{"metadata":{"name":"N"` opens every item; a Node has no nested ObjectMeta).
    None unless the body has exactly Go's shape: the caller then parses it fully.
    """
    head = b'{"Pod":'
    if not body.startswith(head) or not body.endswith(b']},"NodeNames":null}'):
        return None
    tail = len(b']},"NodeNames":null}')
    marker = b',"Nodes":{"metadata":{'
    at = body.find(marker)
    if at < 0:
        return None
    pod = _go_pod(body, len(head), at)
    if pod is None:
        return None
    items_at = body.find(b'"items":[', at)
    if items_at < 0:
        return None
    start, stop = items_at + 9, len(body) - tail
    if stop > start and not body.startswith(b'{"metadata":{"name":', start):
        return None
    names = [m.decode() for m in _GO_NODE.findall(body, start, stop)]
    return pod, names


def fast_names(body: bytes) -> tuple[dict[str, Any], list[str]] | None:
    """(Pod, NodeNames) of a Go-written ExtenderArgs with NodeNames (nodeCacheCapable),
    without a general parse of the name list: Go writes it last, as
    `,"Nodes":null,"NodeNames":["a","b"]}`, and a node name needs no escapes. None
    unless the body has exactly that shape: the caller then parses it fully.
    """
    head, marker = b'{"Pod":', b',"Nodes":null,"NodeNames":['
    if not body.startswith(head) or not body.endswith(b"]}"):
        return None
    at = body.rfind(marker)
    if at < 0:
        return None
    start, stop = at + len(marker), len(body) - 2
    if stop > start and _GO_NAMES.fullmatch(body, start, stop) is None:
        return None
    pod = _go_pod(body, len(head), at)
    if pod is None:
        return None
    names = body[start + 1:stop - 1].decode().split('","') if stop > start else []
    return pod, names

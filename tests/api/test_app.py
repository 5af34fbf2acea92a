"""The HTTP edge: golden wire fixtures both ways, and 400s (never 500s) on bad bodies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from extender import metrics
from extender.api import app as app_mod
from extender.api import page, wire

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "extender"
WHY = "waiting: planned start 14:00 on gpu-node-1 (step 14)"
WAITING = 'waiting: "gang" g \u00e9t\u00e9 \\ 3 of 4 pods exist'  # quotes, a backslash, non-ASCII


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes().strip()


class StandIn:
    """Verbs that pass gpu-node-1 only: the HTTP layer is under test, not the plan."""

    def __init__(self) -> None:
        self.binds: list[tuple[str, str, str | None, str]] = []

    def filter(self, pod: dict[str, Any], nodes: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        if pod["metadata"]["name"] == "waiting":
            return [], dict.fromkeys(nodes, WAITING)
        return [n for n in nodes if n == "gpu-node-1"], {n: WHY for n in nodes
                                                         if n != "gpu-node-1"}

    def verdict(self, pod: dict[str, Any]) -> str | None:
        # A pod named "waiting" fails everywhere, as the controller's waiting pods do.
        return WAITING if pod["metadata"]["name"] == "waiting" else None

    def prioritize(self, pod: dict[str, Any], nodes: Sequence[str]) -> list[tuple[str, int]]:
        return [(n, 10 if n == "gpu-node-1" else 0) for n in nodes]

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> str | None:
        self.binds.append((namespace, name, uid, node))
        if node != "gpu-node-2":
            return f"pod {namespace}/{name} is assigned to gpu-node-2 by the plan, not {node}"
        return None


@pytest.fixture
def verbs() -> StandIn:
    return StandIn()


@pytest.fixture
def client(verbs: StandIn) -> TestClient:
    view = {"step": 3, "step_seconds": 3600.0, "step_start": 1_700_000_000.0, "horizon": 2,
            "nodes": ["gpu-node-0"], "gpus_per_node": 2, "grid": [["ns/a", None], [None, None]],
            "queue": ["ns/b"], "jobs": {}, "services": {}}
    return TestClient(app_mod.create_app(verbs, view=lambda: view, max_body_bytes=4096 * 1024))


# --- golden fixtures, both directions ---------------------------------------------------


@pytest.mark.parametrize(("args", "result"), [
    ("filter-args-nodenames.json", "filter-result-nodenames.json"),
    ("filter-args-nodelist.json", "filter-result-nodelist.json"),
], ids=["node-names", "node-list"])
def test_filter_matches_the_golden_answer(client: TestClient, args: str, result: str) -> None:
    r = client.post("/filter", content=fixture(args))
    assert r.status_code == 200
    assert r.json() == json.loads(fixture(result))
    # and byte for byte, in Go's key order
    assert r.content == fixture(result)


@pytest.mark.parametrize("args", ["filter-args-nodenames.json", "filter-args-nodelist.json"])
def test_a_pod_failing_everywhere_gets_the_same_answer_by_every_path(client: TestClient,
                                                                     args: str) -> None:
    # The verdict path writes the per-node reasons without building them; the general
    # path (pretty-printed body: no fast parse, no verdict) must read the same.
    doc = json.loads(fixture(args))
    doc["Pod"]["metadata"]["name"] = "waiting"
    compact = json.dumps(doc, separators=(",", ":")).encode()
    assert (wire.fast_names(compact) or wire.fast_node_names(compact)) is not None
    fast = client.post("/filter", content=compact)
    slow = client.post("/filter", content=json.dumps(doc, indent=1).encode())
    assert fast.status_code == slow.status_code == 200
    assert fast.json() == slow.json()
    assert fast.json()["FailedAndUnresolvableNodes"] == dict.fromkeys(
        ["gpu-node-0", "gpu-node-1", "gpu-node-2"], WAITING)
    assert fast.json()["Nodes" if "nodelist" in args else "NodeNames"] in (
        [], {"metadata": {}, "items": []})


def test_filter_with_pretty_printed_nodes_falls_back_to_a_full_parse(client: TestClient) -> None:
    doc = json.loads(fixture("filter-args-nodelist.json"))
    r = client.post("/filter", content=json.dumps(doc, indent=2).encode())
    assert r.status_code == 200
    assert r.json() == json.loads(fixture("filter-result-nodelist.json"))


@pytest.mark.parametrize("args", ["filter-args-nodenames.json", "filter-args-nodelist.json"])
def test_prioritize_answers_a_bare_list_with_integer_scores(client: TestClient,
                                                            args: str) -> None:
    r = client.post("/prioritize", content=fixture(args))
    assert r.status_code == 200
    assert r.content == fixture("prioritize-result.json")
    assert all(isinstance(h["Score"], int) for h in r.json())


def test_bind_round_trip(client: TestClient, verbs: StandIn) -> None:
    r = client.post("/bind", content=fixture("bind-args.json"))
    assert r.status_code == 200
    assert r.content == fixture("bind-result-error.json")
    assert verbs.binds == [("team-a", "train-0", "6b1d0c3e-0000-4000-8000-000000000001",
                            "gpu-node-1")]
    ok = json.loads(fixture("bind-args.json")) | {"Node": "gpu-node-2"}
    r = client.post("/bind", json=ok)
    assert r.content == fixture("bind-result.json")


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*-args-*.json")))
def test_wire_models_read_the_go_fixtures(name: str) -> None:
    args = wire.ExtenderArgs.model_validate_json(fixture(name))
    lean = wire.ExtenderArgsLean.model_validate_json(fixture(name))
    names: list[str | None] = list(args.NodeNames or [])
    names = names or [wire.node_name(n) for n in (args.Nodes.items if args.Nodes else [])]
    assert lean.node_names() == names == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    assert args.Pod["metadata"]["name"] == "train-0"


def test_wire_models_write_go_keys() -> None:
    res = wire.ExtenderFilterResult(NodeNames=["gpu-node-1"],
                                    FailedAndUnresolvableNodes={"gpu-node-0": WHY,
                                                                "gpu-node-2": WHY})
    assert res.model_dump_json().encode() == fixture("filter-result-nodenames.json")
    assert wire.ExtenderBindingResult().model_dump_json().encode() == fixture("bind-result.json")
    hp = [wire.HostPriority(Host="gpu-node-1", Score=10).model_dump()]
    assert json.dumps(hp, separators=(",", ":")).encode() == fixture("prioritize-result.json")
    bind = wire.ExtenderBindingArgs.model_validate_json(fixture("bind-args.json"))
    assert bind.model_dump_json().encode() == fixture("bind-args.json")


def test_fast_path_agrees_with_the_full_parse() -> None:
    body = fixture("filter-args-nodelist.json")
    fast = wire.fast_node_names(body)
    assert fast is not None
    pod, names = fast
    full = wire.ExtenderArgs.model_validate_json(body)
    assert pod == full.Pod
    assert names == [wire.node_name(n) for n in full.Nodes.items]  # type: ignore[union-attr]
    raw = wire.raw_nodes(body, ["gpu-node-2"])
    assert raw is not None and json.loads(raw[0]) == full.Nodes.items[2]  # type: ignore[union-attr]
    assert wire.fast_node_names(fixture("filter-args-nodenames.json")) is None


def test_fast_names_agrees_with_the_full_parse_or_steps_aside() -> None:
    body = fixture("filter-args-nodenames.json")
    full = wire.ExtenderArgs.model_validate_json(body)
    assert wire.fast_names(body) == (full.Pod, full.NodeNames)
    empty = body[:body.rindex(b"[")] + b"[]}"
    assert wire.fast_names(empty) == (full.Pod, [])
    assert wire.fast_names(fixture("filter-args-nodelist.json")) is None
    # not exactly Go's layout: the general parser decides
    pod = json.loads(body)["Pod"]
    sneaky = {"Pod": {**pod, "x": ',"Nodes":null,"NodeNames":["evil"]}'},
              "Nodes": None, "NodeNames": ["gpu-node-0"]}
    got = wire.fast_names(json.dumps(sneaky, separators=(",", ":")).encode())
    assert got is not None and got[1] == ["gpu-node-0"]
    for odd in (json.dumps(json.loads(body), indent=1).encode(),  # pretty-printed
                body.replace(b'"gpu-node-1"', b'"gpu\\u002dnode-1"'),  # an escape
                body.replace(b'"gpu-node-1"', b"7"),  # not a string
                body.replace(b'"NodeNames":[', b'"NodeNames":[,')):
        assert wire.fast_names(odd) is None, odd[-80:]


# --- bad bodies ---------------------------------------------------------------------


@pytest.mark.parametrize(("verb", "body", "needle"), [
    ("filter", b"{not json", "malformed JSON"),
    ("filter", b"", "empty request body"),
    ("filter", b"[]", "not a ExtenderArgs"),
    ("filter", b'"Pod"', "not a ExtenderArgs"),
    ("filter", b'{"NodeNames": ["a"]}', "Pod"),
    ("filter", b'{"Pod": {}, "NodeNames": ["a"]}', "metadata.name"),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}}}', "NodeNames or Nodes"),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}', "NodeNames"),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{}]}}',
     "metadata.name is missing"),
    ("filter", b'{"Pod": {"metadata": {"name": "p"}, "spec": 7}, "NodeNames": []}', "spec"),
    ("prioritize", b'{"Pod": 3, "NodeNames": []}', "Pod"),
    ("prioritize", b"\xff\xfe", "malformed JSON"),
    ("bind", b"", "empty request body"),
    ("bind", b'{"PodName": "p"}', "PodNamespace"),
    ("bind", b'{"PodName": 1, "PodNamespace": "n", "Node": "x"}', "PodName"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 12 else None)
def test_malformed_bodies_get_400_with_a_message(client: TestClient, verb: str, body: bytes,
                                                 needle: str) -> None:
    r = client.post("/" + verb, content=body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["Error"]


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
def test_oversized_body_gets_413(client: TestClient, verb: str) -> None:
    r = client.post("/" + verb, content=b" " * (4096 * 1024 + 1))
    assert r.status_code == 413
    assert "exceeds" in r.json()["Error"]
    # and a declared length past the limit is refused before the body is read
    r = client.post("/" + verb, content=b"{}", headers={"Content-Length": str(64 << 20)})
    assert r.status_code == 413 and f"of {64 << 20} bytes" in r.json()["Error"], r.text


def test_verb_exception_is_a_json_500_not_a_crash(verbs: StandIn) -> None:
    def boom(pod: dict[str, Any], nodes: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        raise RuntimeError("boom")

    verbs.filter = boom  # type: ignore[method-assign]
    c = TestClient(app_mod.create_app(verbs), raise_server_exceptions=False)
    r = c.post("/filter", content=fixture("filter-args-nodenames.json"))
    assert r.status_code == 500 and "RuntimeError" in r.json()["Error"]
    assert c.get("/healthz").status_code == 200


def test_a_bind_that_raises_is_a_json_500_and_is_timed(verbs: StandIn) -> None:
    def boom(namespace: str, name: str, uid: str | None, node: str) -> str | None:
        raise RuntimeError("boom")

    verbs.bind = boom  # type: ignore[method-assign]
    labels = {"verb": "bind", "outcome": "error"}
    name = "gpuroster_extender_request_duration_seconds_count"
    before = metrics.REGISTRY.get_sample_value(name, labels) or 0.0
    c = TestClient(app_mod.create_app(verbs), raise_server_exceptions=False)
    r = c.post("/bind", content=fixture("bind-args.json"))
    assert r.status_code == 500 and r.json() == {"Error": "internal error: RuntimeError"}
    assert metrics.REGISTRY.get_sample_value(name, labels) == before + 1


# --- the rest of the surface ----------------------------------------------------------


def test_plan_health_metrics_and_page(client: TestClient) -> None:
    assert client.get("/plan").json()["queue"] == ["ns/b"]
    assert client.get("/healthz").text == "ok"
    assert client.get("/readyz").status_code == 200
    client.post("/filter", content=fixture("filter-args-nodenames.json"))
    m = client.get("/metrics").text
    assert 'gpuroster_extender_request_duration_seconds_count{outcome="pass",verb="filter"}' in m
    html = client.get("/plan/view").text
    assert "ns/a" in html and "class='now'" in html and "gpu-node-0:1" in html


def test_page_without_a_plan() -> None:
    assert "No plan yet" in page.render({})


def test_readyz_follows_readiness(verbs: StandIn) -> None:
    c = TestClient(app_mod.create_app(verbs, ready=lambda: False))
    assert c.get("/readyz").status_code == 503


def test_lifespan_runs_start_and_stop(verbs: StandIn) -> None:
    calls: list[str] = []
    app = app_mod.create_app(verbs, on_start=lambda: calls.append("start"),
                             on_stop=lambda: calls.append("stop"))
    with TestClient(app) as c:
        assert calls == ["start"]
        c.get("/healthz")
    assert calls == ["start", "stop"]

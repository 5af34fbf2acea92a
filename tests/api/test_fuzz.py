"""Bad input at the extender verbs, generated: never a 500, never a hung worker.

The real app and the real controller (over the in-memory `FakeKube`, one plan
step run) take the bodies, so unknown pods, unknown nodes and NodeNames not
in the cache go through the same code kube-scheduler's calls do:

- hypothesis: raw bytes, arbitrary JSON values, ExtenderArgs / binding args
  with every field of the wrong type, well-formed args naming pods and nodes
  nobody knows, bodies around the size limit;
- schemathesis: the verbs' OpenAPI (written here from the wire models: the
  service publishes none) in positive and negative modes, checked for server
  errors, undocumented status codes and schema-conforming 200 answers.

Allowed answers: 200 with a valid extender answer (`Error` set where it
refuses), or 400/413 with a JSON `{"Error": "..."}`. Every request must answer
within `SLOW` seconds.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender import config
from extender.adapter import kube
from extender.api import wire
from extender.controller import main
from tests import kubefake

LIMIT = 64 * 1024
SLOW = 2.0  # seconds: far above the verbs' p99 (< 5 ms, loadbench); a hang trips it
VERBS = ("filter", "prioritize", "bind")
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


class _Kube(kubefake.FakeKube):
    """The fake, answering a bind of a pod it does not hold as the API server does: 404."""

    def bind(self, namespace: str, name: str, uid: str | None, node: str) -> None:
        if f"{namespace}/{name}" not in self.objects["pods"]:
            raise kube.ApiError(404, f'pods "{name}" not found')
        super().bind(namespace, name, uid, node)


def _cluster() -> kubefake.FakeKube:
    fake = _Kube()
    for i in range(4):
        fake.add("nodes", kubefake.node(i))
    for i in range(2):  # an admittable 2x4 gang
        fake.add("pods", kubefake.make_pod(f"g-{i}").gpus(4).gang("g", 2).build())
    fake.add("pods", kubefake.make_pod("odd").gpus(3).gang("odd", 1).build())  # bad gang
    return fake


@pytest.fixture(scope="module")
def app() -> Any:
    settings_ = config.Settings(step_seconds=3600, namespaces=("ns",), max_body_bytes=LIMIT)
    controller, application = main.build(settings_, client=_cluster())
    for inf in controller.cache.all():
        inf.relist()
    controller.run_step()
    return application


@pytest.fixture(scope="module")
def client(app: Any) -> TestClient:
    return TestClient(app, raise_server_exceptions=False)


class Seen:
    """Status codes seen per verb, printed at the end of each test."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.codes: dict[str, dict[int, int]] = {}
        self.slowest = 0.0

    def add(self, verb: str, code: int, took: float) -> None:
        by = self.codes.setdefault(verb, {})
        by[code] = by.get(code, 0) + 1
        self.slowest = max(self.slowest, took)

    def report(self) -> None:
        print(f"[fuzz] {self.what}: status codes per verb {self.codes}; "
              f"slowest answer {self.slowest * 1000:.1f} ms")


def post(client: TestClient, verb: str, body: bytes, seen: Seen) -> Any:
    t0 = time.perf_counter()
    r = client.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
    took = time.perf_counter() - t0
    seen.add(verb, r.status_code, took)
    assert took < SLOW, f"/{verb} took {took:.1f}s on {body[:200]!r}"
    assert r.status_code in (200, 400, 413), (verb, r.status_code, r.text[:300], body[:300])
    doc = r.json()
    if r.status_code != 200:
        assert isinstance(doc, dict) and isinstance(doc.get("Error"), str) and doc["Error"], doc
        return doc
    if verb == "filter":
        res = wire.ExtenderFilterResult.model_validate(doc)
        assert res.Error == "" or not (res.NodeNames or res.Nodes)
    elif verb == "prioritize":
        assert isinstance(doc, list)
        for h in doc:
            assert isinstance(h["Host"], str) and isinstance(h["Score"], int)
            assert 0 <= h["Score"] <= wire.MAX_EXTENDER_PRIORITY
    else:
        wire.ExtenderBindingResult.model_validate(doc)
    return doc


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=5),
    max_leaves=30)
names = st.text(min_size=0, max_size=70)
pods = st.one_of(
    json_values,
    st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
        {"name": json_values | names, "namespace": json_values | names})}),
    st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
        {"name": names, "namespace": st.sampled_from(["ns", "other", ""])}),
        "spec": json_values}))
node_lists = st.one_of(json_values, st.fixed_dictionaries({"items": st.lists(
    st.one_of(json_values, st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
        {"name": json_values | names})})), max_size=6)}))
args = st.fixed_dictionaries({}, optional={
    "Pod": pods, "NodeNames": json_values | st.lists(json_values | names, max_size=8),
    "Nodes": node_lists})
bind_args = st.fixed_dictionaries({}, optional={
    "PodName": json_values | names, "PodNamespace": json_values | names,
    "PodUID": json_values | names, "Node": json_values | names})


@pytest.mark.parametrize("verb", VERBS)
def test_raw_bytes_get_a_clear_answer(client: TestClient, verb: str) -> None:
    seen = Seen(f"raw bytes to /{verb}")

    @FUZZ
    @given(body=st.binary(max_size=2048))
    def check(body: bytes) -> None:
        post(client, verb, body, seen)

    check()
    seen.report()


@pytest.mark.parametrize("verb", VERBS)
def test_any_json_value_gets_a_clear_answer(client: TestClient, verb: str) -> None:
    seen = Seen(f"arbitrary JSON to /{verb}")

    @FUZZ
    @given(doc=json_values)
    def check(doc: Any) -> None:
        post(client, verb, json.dumps(doc).encode(), seen)

    check()
    seen.report()


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_extender_args_with_wrong_types_get_a_clear_answer(client: TestClient, verb: str) -> None:
    seen = Seen(f"ExtenderArgs with wrong-typed fields to /{verb}")

    @FUZZ
    @given(doc=args)
    def check(doc: Any) -> None:
        post(client, verb, json.dumps(doc).encode(), seen)

    check()
    seen.report()


def test_binding_args_with_wrong_types_get_a_clear_answer(client: TestClient) -> None:
    seen = Seen("ExtenderBindingArgs with wrong-typed fields to /bind")

    @FUZZ
    @given(doc=bind_args)
    def check(doc: Any) -> None:
        post(client, "bind", json.dumps(doc).encode(), seen)

    check()
    seen.report()


def test_unknown_pods_and_nodes_get_a_valid_refusal(client: TestClient) -> None:
    """Well-formed calls about pods and nodes nobody knows: 200, nothing passes, reasons."""
    seen = Seen("unknown pods / nodes, well-formed")
    refused = [0]

    @FUZZ
    @given(pod=st.text(min_size=1, max_size=60), ns=st.sampled_from(["ns", "ns2"]),
           nodes=st.lists(st.text(min_size=1, max_size=60), max_size=20, unique=True))
    def check(pod: str, ns: str, nodes: list[str]) -> None:
        body = {"Pod": {"metadata": {"name": pod, "namespace": ns}}, "NodeNames": nodes,
                "Nodes": None}
        raw = json.dumps(body).encode()
        doc = post(client, "filter", raw, seen)
        managed = ns == "ns"
        if managed and not pod.startswith("g-"):
            assert doc["NodeNames"] == [], doc  # an unplanned pod passes nowhere
            assert set(doc["FailedAndUnresolvableNodes"]) == set(nodes)
            refused[0] += 1
        post(client, "prioritize", raw, seen)
        b = post(client, "bind", json.dumps({"PodName": pod, "PodNamespace": "ns",
                                            "PodUID": "", "Node": nodes[0] if nodes else "x"}
                                           ).encode(), seen)
        if not pod.startswith("g-"):
            assert "not admitted" in b["Error"], b

    check()
    seen.report()
    print(f"[fuzz] unknown pods refused on every node: {refused[0]} calls")


def test_known_pod_with_node_names_not_in_the_cache(client: TestClient) -> None:
    """The admitted gang's pod asked about nodes the cache has never seen: no node passes."""
    seen = Seen("admitted pod, NodeNames not in the cache")
    body = {"Pod": {"metadata": {"name": "g-0", "namespace": "ns"}},
            "NodeNames": ["ghost-1", "ghost-2"], "Nodes": None}
    doc = post(client, "filter", json.dumps(body).encode(), seen)
    assert doc["NodeNames"] == []
    assert all("the plan assigns this pod to" in r
               for r in doc["FailedAndUnresolvableNodes"].values()), doc
    b = post(client, "bind", json.dumps({"PodName": "g-0", "PodNamespace": "ns",
                                        "Node": "ghost-1"}).encode(), seen)
    assert "assigned to" in b["Error"]
    seen.report()
    print(f"[fuzz] filter answer: {doc['FailedAndUnresolvableNodes']}")


@pytest.mark.parametrize("size", [LIMIT - 1, LIMIT + 1, 50 * LIMIT])
def test_bodies_at_and_past_the_limit(client: TestClient, size: int) -> None:
    seen = Seen(f"a {size}-byte body (limit {LIMIT})")
    def body(verb: str) -> bytes:  # valid JSON of exactly `size` bytes (unknown keys pad it)
        doc: dict[str, Any] = ({"PodName": "p", "PodNamespace": "ns", "Node": "gpu-node-0"}
                               if verb == "bind" else
                               {"Pod": {"metadata": {"name": "p", "namespace": "ns"}},
                                "NodeNames": ["gpu-node-0"]})
        doc["Pad"] = ""
        doc["Pad"] = "x" * (size - len(json.dumps(doc)))
        return json.dumps(doc).encode()

    for verb in VERBS:
        raw = body(verb)
        assert len(raw) == size
        doc = post(client, verb, raw, seen)
        if size > LIMIT:
            assert "exceeds" in doc["Error"], doc
        else:
            assert not isinstance(doc, dict) or "exceeds" not in doc.get("Error", ""), doc
    raw = body("filter")
    # and a chunked body with no Content-Length: the stream is cut at the limit too
    def chunks() -> Any:
        for i in range(0, len(raw), 8192):
            yield raw[i:i + 8192]

    t0 = time.perf_counter()
    r = client.post("/filter", content=chunks(), headers={"Content-Type": "application/json"})
    seen.add("filter(chunked)", r.status_code, time.perf_counter() - t0)
    assert r.status_code == (413 if size > LIMIT else 200), r.text[:200]
    seen.report()


def test_the_service_still_answers_after_the_fuzzing(client: TestClient) -> None:
    # /readyz: the step loop thread is not started here (one step run by hand), so
    # /healthz, which watches that thread, has nothing to say.
    assert client.get("/readyz").status_code == 200
    # One bad call of its own, so the count read below does not hang on the order the
    # module's tests ran in.
    assert client.post("/filter", content=b"{not json").status_code == 400
    r = client.post("/filter", content=json.dumps(
        {"Pod": {"metadata": {"name": "g-0", "namespace": "ns"}},
         "NodeNames": ["gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3"]}).encode())
    assert r.status_code == 200 and len(r.json()["NodeNames"]) == 1
    metrics = client.get("/metrics").text
    assert 'outcome="bad_request"' in metrics
    print("[fuzz] afterwards: /readyz ok, the admitted pod still passes on its one node "
          f"{r.json()['NodeNames']}")


# --- schemathesis ----------------------------------------------------------------------


def openapi() -> dict[str, Any]:
    """The verbs as OpenAPI 3.0, from the wire models (the app publishes no schema)."""
    from pydantic.json_schema import models_json_schema

    _, defs = models_json_schema(
        [(m, "validation") for m in (wire.ExtenderArgs, wire.ExtenderFilterResult,
                                     wire.HostPriority, wire.ExtenderBindingArgs,
                                     wire.ExtenderBindingResult)],
        ref_template="#/components/schemas/{model}")
    schemas = defs["$defs"]
    # A Pod the verbs can read (metadata.name): positive cases then reach the plan.
    schemas["ExtenderArgs"]["properties"]["Pod"] = {
        "type": "object", "required": ["metadata"], "properties": {"metadata": {
            "type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"}}}}}
    schemas["ExtenderArgs"]["required"] = ["Pod", "NodeNames"]
    error = {"description": "bad request", "content": {"application/json": {"schema": {
        "type": "object", "required": ["Error"], "properties": {"Error": {"type": "string"}}}}}}

    def op(args: str, answer: dict[str, Any]) -> dict[str, Any]:
        return {"post": {
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{args}"}}}},
            "responses": {"200": {"description": "answer", "content": {
                "application/json": {"schema": answer}}}, "400": error, "413": error}}}

    return {
        "openapi": "3.0.3", "info": {"title": "gpuroster extender verbs", "version": "1"},
        "paths": {
            "/filter": op("ExtenderArgs", {"$ref": "#/components/schemas/ExtenderFilterResult"}),
            "/prioritize": op("ExtenderArgs", {"type": "array", "items": {
                "$ref": "#/components/schemas/HostPriority"}}),
            "/bind": op("ExtenderBindingArgs",
                        {"$ref": "#/components/schemas/ExtenderBindingResult"}),
        },
        "components": {"schemas": schemas},
    }


def test_schemathesis_over_the_verbs(app: Any) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    from schemathesis.specs.openapi.checks import (
        response_schema_conformance,
        status_code_conformance,
    )

    schema = schemathesis.openapi.from_dict(openapi())
    schema.app = app
    seen = Seen("schemathesis (positive and negative cases)")
    count = [0]
    for operation in schema.get_all_operations():
        op = operation.ok()

        @settings(max_examples=100, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE)
               | op.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE))
        def check(case: Any) -> None:
            t0 = time.perf_counter()
            response = case.call()
            took = time.perf_counter() - t0
            seen.add(case.operation.path.strip("/"), response.status_code, took)
            count[0] += 1
            assert took < SLOW
            assert response.status_code in (200, 400, 413), response.text[:300]
            case.validate_response(response, checks=[status_code_conformance,
                                                     response_schema_conformance])

        check()
    seen.report()
    operations = len(list(schema.get_all_operations()))
    print(f"[fuzz] schemathesis: {count[0]} generated calls over {operations} operations")
    # cases were really generated and sent, to every verb
    assert operations == len(VERBS)
    assert count[0] > 0
    assert sorted(seen.codes) == sorted(VERBS), seen.codes
    assert sum(n for by in seen.codes.values() for n in by.values()) == count[0]

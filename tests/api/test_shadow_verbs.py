"""Shadow mode over HTTP: the service as `gpuroster serve --shadow` builds it answers
kube-scheduler as if it were absent, on the golden wire fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from extender import config
from extender.controller import clock as clock_mod
from extender.controller import main, verbs
from tests.kubefake import FakeKube, make_pod, node

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "extender"
START = 1_700_000_000.0


def serve(shadow: bool) -> tuple[bool, TestClient, FakeKube]:
    fake = FakeKube()
    for i in range(3):
        fake.add("nodes", node(i))
    # the fixtures' pod: one of a gang of two, whose other pod does not exist yet
    fake.add("pods", make_pod("train-0", "team-a").gpus(4).gang("train", 2).build())
    settings = config.Settings(step_seconds=10.0, epoch=START, shadow=shadow)
    ctl, app = main.build(settings, client=fake, clock=clock_mod.FakeClock(START))
    for i in ctl.cache.all():
        i.relist()
    ctl.run_step()
    return shadow, TestClient(app), fake


@pytest.fixture(params=[True, False], ids=["shadow", "in-charge"])
def served(request: pytest.FixtureRequest) -> tuple[bool, TestClient, FakeKube]:
    return serve(request.param)


@pytest.mark.parametrize("args", ["filter-args-nodenames.json", "filter-args-nodelist.json"])
def test_filter_passes_every_node_only_in_shadow_mode(
        served: tuple[bool, TestClient, FakeKube], args: str) -> None:
    shadow, client, _ = served
    r = client.post("/filter", content=(FIXTURES / args).read_bytes())
    assert r.status_code == 200
    body = r.json()
    names = body["NodeNames"] if body["NodeNames"] is not None else [
        n["metadata"]["name"] for n in body["Nodes"]["items"]]
    if shadow:
        assert names == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
        assert body["FailedAndUnresolvableNodes"] == {}
    else:  # an incomplete gang waits: every node fails, with the reason
        assert names == []
        assert "1 of 2 pods" in json.dumps(body["FailedAndUnresolvableNodes"])


def test_prioritize_scores_no_node_and_bind_is_refused_in_shadow_mode() -> None:
    _, client, fake = serve(shadow=True)
    r = client.post("/prioritize",
                    content=(FIXTURES / "filter-args-nodenames.json").read_bytes())
    assert r.status_code == 200 and r.json() == []
    r = client.post("/bind", content=(FIXTURES / "bind-args.json").read_bytes())
    assert r.status_code == 200 and r.json()["Error"] == verbs.SHADOW_BIND
    assert fake.calls == [] and fake.events == []
    m = client.get("/metrics").text
    assert "gpuroster_shadow_mode 1.0" in m
    assert "Shadow mode." in client.get("/plan/view").text
    assert client.get("/plan").json()["shadow"] is True


def test_while_rounds_fail_the_plan_and_its_page_say_why() -> None:
    # A failed round publishes nothing: the plan served is the last one, and says so.
    fake = FakeKube()
    fake.add("nodes", node(0))
    settings = config.Settings(step_seconds=10.0, epoch=START)
    ctl, app = main.build(settings, client=fake, clock=clock_mod.FakeClock(START))
    for i in ctl.cache.all():
        i.relist()
    ctl.run_step()
    client = TestClient(app)
    assert "last_error" not in client.get("/plan").json()
    ctl.last_error = "RuntimeError: the API server said <no>"
    assert client.get("/plan").json()["last_error"] == "RuntimeError: the API server said <no>"
    page = client.get("/plan/view").text
    assert "Rounds are failing" in page and "said &lt;no&gt;" in page
    ctl.last_error = None
    assert "Rounds are failing" not in client.get("/plan/view").text

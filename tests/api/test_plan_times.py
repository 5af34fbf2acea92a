"""`/plan`'s plan times: the percentiles of the policy call over the rounds kept, as
MODEL.md's result files give them (a cluster replay's `plan_ms` is read from here)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from extender import config
from extender.controller import clock as clock_mod
from extender.controller import main, stepping
from tests.kubefake import FakeKube, make_pod, node

START = 1_700_000_000.0


def built() -> tuple[stepping.Controller, TestClient]:
    fake = FakeKube()
    for i in range(2):
        fake.add("nodes", node(i))
    fake.add("pods", make_pod("train-0", "team-a").gpus(4).gang("train", 1).build())
    settings = config.Settings(step_seconds=10.0, epoch=START)
    ctl, app = main.build(settings, client=fake, clock=clock_mod.FakeClock(START))
    for i in ctl.cache.all():
        i.relist()
    return ctl, TestClient(app)


def test_before_the_first_round_the_plan_is_empty_and_has_no_times() -> None:
    _, client = built()
    assert client.get("/plan").json() == {}


def test_plan_ms_are_the_percentiles_of_the_rounds_timed() -> None:
    ctl, client = built()
    results = [ctl.run_step() for _ in range(5)]
    view = client.get("/plan").json()
    took = [r.plan_seconds * 1e3 for r in results]
    assert ctl.plan_times() == [r.plan_seconds for r in results]
    assert view["plan_ms"]["rounds"] == 5
    assert view["plan_ms"]["max"] == pytest.approx(max(took), abs=1e-4)
    assert view["plan_ms"]["p50"] == pytest.approx(sorted(took)[2], abs=1e-4)
    assert 0 < view["plan_ms"]["p50"] <= view["plan_ms"]["p99"] <= view["plan_ms"]["max"]
    # the last round's own time is still there, as before
    assert view["plan_seconds"] == results[-1].plan_seconds


def test_only_the_last_rounds_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stepping, "PLAN_TIMES_KEPT", 3)
    ctl, client = built()
    results = [ctl.run_step() for _ in range(5)]
    assert ctl.plan_times() == [r.plan_seconds for r in results[2:]]
    assert client.get("/plan").json()["plan_ms"]["rounds"] == 3


def test_the_plan_page_says_how_long_planning_takes() -> None:
    ctl, client = built()
    for _ in range(3):
        ctl.run_step()
    timed = client.get("/plan").json()["plan_ms"]
    page = client.get("/plan/view").text
    assert (f"Planned in {timed['p50']:.2f} ms at the median, {timed['p99']:.2f} ms at p99 "
            "over the last 3 rounds.") in page

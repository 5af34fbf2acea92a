"""A round that fails, a demand source that breaks oddly, a bind during a round, a rollout."""

from __future__ import annotations

import http.client
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from extender import metrics
from extender.controller import stepping, verbs
from tests.controller.test_stepping import Rig, gang
from tests.kubefake import configmap, deployment, make_pod
from tests.waiting import wait_until


class _Backoffs:
    """The waits the loop begins on its stop event (the wait after a failed round), read
    from the fake clock's record: each is listed once its deadline is fixed, so moving
    the clock after seeing it always ends it."""

    def __init__(self, rig: Rig) -> None:
        self.clock, self.stop = rig.clock, rig.ctl._stop

    def __call__(self) -> list[float]:
        return [s for e, s in list(self.clock.waits) if e is self.stop]

    def __len__(self) -> int:
        return len(self())


def _failures() -> float:
    return metrics.REGISTRY.get_sample_value("gpuroster_step_failures_total") or 0.0


# --- a failed round: a growing wait, not a spin -------------------------------------------


def test_a_failed_round_is_retried_after_a_growing_wait_not_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig()
    gang(rig.fake, "g", 2, 2)
    calls: list[int] = []
    real = rig.ctl.plan_input

    def broken(snap: Any, step: int) -> Any:
        calls.append(step)
        raise RuntimeError("one bad round")

    rig.ctl.plan_input = broken  # type: ignore[method-assign]
    waits = _Backoffs(rig)
    before = _failures()
    caplog.set_level(logging.DEBUG, logger="extender.controller.stepping")
    rig.ctl.start()
    try:
        wait_until(lambda: len(waits) >= 1, what="the wait after the first failed round")
        time.sleep(0.4)
        # The fake clock has not moved: the retry waits (it used to run tens of
        # thousands of rounds in this time).
        assert len(calls) == 1
        rig.clock.advance(stepping.BACKOFF_FIRST)
        wait_until(lambda: len(waits) >= 2, what="the wait after the second failed round")
        assert len(calls) == 2
        rig.clock.advance(stepping.BACKOFF_FIRST)  # the second wait is twice the first
        time.sleep(0.3)
        assert len(calls) == 2
        rig.clock.advance(stepping.BACKOFF_FIRST)
        wait_until(lambda: len(waits) >= 3, what="the wait after the third failed round")
        assert len(calls) == 3
        assert waits() == [0.5, 1.0, 2.0]
        assert _failures() - before == len(calls)
        assert rig.ctl.last_error == "RuntimeError: one bad round"
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "step failed" in errors[0].getMessage()  # once a streak
        assert rig.ctl.rounds == 0
        # Mended: the next retry runs the round, and the wait is gone.
        rig.ctl.plan_input = real  # type: ignore[method-assign]
        rig.clock.advance(stepping.BACKOFF_MAX)
        # The WARNING is the loop's last word on the mended round: once it is there,
        # the round count, the error and the table are settled too.
        wait_until(lambda: any(r.getMessage() == "step recovered after 3 failed rounds"
                               for r in caplog.records),
                   what="the WARNING 'step recovered after 3 failed rounds'")
        assert rig.ctl.rounds >= 1
        assert rig.ctl.last_error is None
        assert rig.ctl.table.step == rig.ctl.step_of(rig.clock.now())
    finally:
        rig.ctl.stop(wait=10)  # not left running into the next test
    assert not rig.ctl.alive()


def test_the_wait_after_a_failed_round_never_runs_past_the_next_boundary() -> None:
    rig = Rig(step=1.0)  # a quarter of a step is under the first wait: all waits 0.5 s
    calls: list[float] = []

    def broken(snap: Any, step: int) -> Any:
        calls.append(rig.clock.now())
        raise RuntimeError("bad")

    rig.ctl.plan_input = broken  # type: ignore[method-assign]
    waits = _Backoffs(rig)
    rig.ctl.start()
    try:
        for i in range(1, 6):
            wait_until(lambda i=i: len(waits) >= i,  # type: ignore[misc]
                       what=f"wait number {i} after a failed round")
            rig.clock.advance(0.5)
        wait_until(lambda: len(calls) >= 6, what="the sixth round")
        assert waits() == [0.5] * len(waits)  # capped
    finally:
        rig.ctl.stop(wait=10)  # not left running into the next test
    assert not rig.ctl.alive()


def test_the_wait_after_a_failed_round_ends_at_the_next_boundary() -> None:
    rig = Rig()  # 10 s steps
    rig.clock.advance(9.2)

    def broken(snap: Any, step: int) -> Any:
        raise RuntimeError("bad")

    rig.ctl.plan_input = broken  # type: ignore[method-assign]
    waits = _Backoffs(rig)
    rig.ctl.start()
    try:
        wait_until(lambda: len(waits) >= 1, what="the wait after the first failed round")
        rig.clock.advance(0.5)
        wait_until(lambda: len(waits) >= 2, what="the wait after the second failed round")
        assert waits()[:2] == [0.5, pytest.approx(0.3)]  # not 1 s: a new step
    finally:
        rig.ctl.stop(wait=10)  # not left running into the next test
    assert not rig.ctl.alive()


# --- one service's demand read fails oddly: that service's problem only ---------------------


def _services_and_a_gang(rig: Rig) -> None:
    rig.fake.add("configmaps", configmap("d", curve="2"))
    rig.fake.add("deployments", deployment("good", replicas=1,
                                           notes={"gpuroster.io/demand-configmap": "d"}))
    rig.fake.add("deployments", deployment("chat", replicas=1,
                                           notes={"gpuroster.io/demand-query": "sum(x)"}))
    rig.fake.add("pods", make_pod("chat-abc12-x").gpus(1).owned_by_deployment("chat")
                 .on("gpu-node-1").build())
    rig.fake.add("pods", make_pod("chat-abc12-y").gpus(1).owned_by_deployment("chat").build())
    gang(rig.fake, "g", 2, 2)


def _check_only_chat_is_held(rig: Rig, r: stepping.StepResult, needle: str) -> None:
    assert r.admitted == ["ns/g"]  # everyone else is planned and committed
    deps = rig.fake.objects["deployments"]
    assert deps["ns/good"]["spec"]["replicas"] == 2
    assert deps["ns/chat"]["spec"]["replicas"] == 1  # kept as it is
    assert rig.ctl.table.service_planned["ns/chat"] == {}
    said = [e["message"] for e in rig.fake.events if e["reason"] == "InvalidDemand"]
    assert said and all(m.startswith("service ns/chat: ") and needle in m for m in said)
    # Its running replica's GPU (on gpu-node-1, the top one) is nobody else's.
    held = 15
    assert all(held not in b.gpus() for b in r.plan.starts.values())
    assert all(held not in gpus for gpus in r.plan.service_gpus.values())


def test_a_service_whose_demand_read_raises_anything_does_not_fail_the_round(
        caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(prometheus_url="http://prom:9090")
    _services_and_a_gang(rig)

    def cut(*a: Any, **kw: Any) -> list[float]:
        raise KeyError("a bug in the reader")

    rig.ctl.inputs.demand.query = cut
    r = rig.step()
    _check_only_chat_is_held(rig, r, "its demand could not be read: KeyError")
    logged = [x for x in caplog.records if "service ns/chat" in x.getMessage()]
    assert len(logged) == 1
    rig.advance()
    assert len([x for x in caplog.records if "service ns/chat" in x.getMessage()]) == 1


class _Cut:
    """A Prometheus answer cut short."""

    def __enter__(self) -> _Cut:
        return self

    def __exit__(self, *a: object) -> None:
        return None

    def read(self) -> bytes:
        raise http.client.IncompleteRead(b'{"status":"succ', 4000)


def test_a_prometheus_answer_cut_short_holds_that_service_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(prometheus_url="http://prom:9090")
    _services_and_a_gang(rig)
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=0: _Cut())
    r = rig.step()
    _check_only_chat_is_held(rig, r, "Prometheus query failed")


# --- a service pod bound while the round plans still counts --------------------------------


def _one_replica(rig: Rig, *names: str) -> str:
    rig.fake.add("configmaps", configmap("d", curve="1"))
    rig.fake.add("deployments", deployment("svc", replicas=1,
                                           notes={"gpuroster.io/demand-configmap": "d"}))
    for n in names:
        rig.fake.add("pods", make_pod(f"svc-abc12-{n}").gpus(1).owned_by_deployment("svc")
                     .build())
    rig.step()
    (node,) = [n for n, v in rig.ctl.table.service_planned["ns/svc"].items() if v]
    return node


def _during_next_round(rig: Rig, at: str, act: Callable[[], Any]) -> None:
    """Run the next round with `act` called just after its `mark` ("mark") or its
    snapshot ("snapshot"): a bind kube-scheduler makes while the round plans."""
    owner, name = (rig.verbs, "mark") if at == "mark" else (rig.ctl, "take_snapshot")
    real = getattr(owner, name)

    def wrapped() -> Any:
        out = real()
        act()
        return out

    setattr(owner, name, wrapped)
    try:
        rig.advance()
    finally:
        delattr(owner, name)


def _verdict_on(rig: Rig, pod: str, node: str) -> str:
    passed, failed = rig.verbs.filter(rig.fake.pod(f"ns/svc-abc12-{pod}"), [node])
    return "passes" if passed == [node] else failed[node]


def test_a_service_pod_bound_while_the_round_plans_still_holds_its_gpu() -> None:
    rig = Rig(nodes=1)
    node = _one_replica(rig, "a", "b")  # one replica planned; a and b both pending
    assert _verdict_on(rig, "b", node) == "passes"
    _during_next_round(rig, "snapshot",
                       lambda: rig.verbs.bind("ns", "svc-abc12-a", None, node))
    # The round's snapshot saw a pending; its publish must not forget that a holds the GPU.
    assert "holds 1 GPUs here for it, 1 in use;" in _verdict_on(rig, "b", node)
    assert "no planned GPU free" in (rig.verbs.bind("ns", "svc-abc12-b", None, node) or "")
    rig.advance()  # the next snapshot counts a itself: once, not twice
    assert "holds 1 GPUs here for it, 1 in use;" in _verdict_on(rig, "b", node)


def test_a_bind_between_the_mark_and_the_snapshot_is_counted_once() -> None:
    rig = Rig(nodes=1)
    node = _one_replica(rig, "a", "b")
    _during_next_round(rig, "mark", lambda: rig.verbs.bind("ns", "svc-abc12-a", None, node))
    assert "holds 1 GPUs here for it, 1 in use;" in _verdict_on(rig, "b", node)


def test_a_bind_that_fails_while_the_round_plans_is_taken_back_once() -> None:
    rig = Rig(nodes=1)
    node = _one_replica(rig, "a", "b")
    rig.fake.fail_bind.add("ns/svc-abc12-a")

    def bind_a() -> None:
        assert "failed" in (rig.verbs.bind("ns", "svc-abc12-a", None, node) or "")

    _during_next_round(rig, "snapshot", bind_a)
    assert _verdict_on(rig, "b", node) == "passes"
    assert rig.cache.assumed() == {}


def _rollout(rig: Rig, strategy: dict[str, Any] | None) -> tuple[str, dict[str, str]]:
    rig.fake.add("configmaps", configmap("d", curve="1"))
    dep = deployment("svc", replicas=1, notes={"gpuroster.io/demand-configmap": "d"})
    if strategy is not None:
        dep["spec"]["strategy"] = strategy
    rig.fake.add("deployments", dep)
    rig.fake.add("pods", make_pod("svc-abc12-old").gpus(1).owned_by_deployment("svc").build())
    rig.step()
    (node,) = [n for n, v in rig.ctl.table.service_planned["ns/svc"].items() if v]
    assert rig.verbs.bind("ns", "svc-abc12-old", None, node) is None
    rig.step()
    rig.fake.add("pods", make_pod("svc-def34-new").gpus(1).owned_by_deployment("svc", "def34")
                 .build())
    rig.advance()
    passed, failed = rig.verbs.filter(rig.fake.pod("ns/svc-def34-new"),
                                      ["gpu-node-0", "gpu-node-1"])
    assert passed == []
    return node, failed


def test_a_surge_pod_of_a_default_rollout_is_told_to_set_max_surge_0() -> None:
    _, failed = _rollout(Rig(nodes=2), None)
    assert all(why.endswith(verbs.SURGE_HINT) and "maxSurge: 0" in why
               for why in failed.values())


@pytest.mark.parametrize("strategy", [
    {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
    {"type": "Recreate"},
], ids=["max-surge-0", "recreate"])
def test_no_surge_hint_when_the_deployment_cannot_surge(strategy: dict[str, Any]) -> None:
    _, failed = _rollout(Rig(nodes=2), strategy)
    assert failed and not any("maxSurge" in why for why in failed.values())

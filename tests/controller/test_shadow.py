"""Shadow mode: the round plans and publishes, writes nothing, and measures the difference."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest

from extender import config, metrics
from extender.adapter import annotations as ann
from extender.adapter import kube
from extender.api import page
from extender.controller import clock as clock_mod
from extender.controller import main, shadowing, stepping, verbs
from extender.planner import model
from tests.kubefake import FakeKube, configmap, deployment, make_pod, node

START = 1_700_000_000.0
NODES = ["gpu-node-0", "gpu-node-1"]


class ShadowRig:
    """`gpuroster serve --shadow` as `main.build` wires it, on a fake API server."""

    def __init__(self, nodes: int = 2, **kw: Any) -> None:
        self.fake = FakeKube()
        for i in range(nodes):
            self.fake.add("nodes", node(i))
        self.clock = clock_mod.FakeClock(START)
        self.settings = config.Settings(step_seconds=10.0, epoch=START, shadow=True, **kw)
        ctl, self.app = main.build(self.settings, client=self.fake, clock=self.clock)
        assert isinstance(ctl, stepping.Controller)
        self.ctl = ctl

    def step(self, steps: int = 0) -> stepping.StepResult:
        self.clock.advance(steps * self.settings.step_seconds)
        for i in self.ctl.cache.all():
            i.relist()
        return self.ctl.run_step()

    def place(self, key: str, node_name: str, at: float) -> None:
        """Bind a pod as kube-scheduler would, without gpuroster."""
        pod = copy.deepcopy(self.fake.pod(key))
        pod["spec"]["nodeName"] = node_name
        pod["status"] = {"phase": "Running", "conditions": [{
            "type": "PodScheduled", "status": "True",
            "lastTransitionTime": f"2023-11-14T22:13:{20 + int(at - START):02d}Z"}]}
        self.fake.add("pods", pod)


def gang(fake: FakeKube, name: str, pods: int, gpus: int, d: str = "60s",
         priority: str | None = None) -> list[str]:
    keys = []
    for i in range(pods):
        b = make_pod(f"{name}-{i}").gpus(gpus).gang(name, pods).duration(d)
        if priority:
            b.priority(priority)
        fake.add("pods", b.build())
        keys.append(f"ns/{name}-{i}")
    return keys


def counter(name: str, **labels: str) -> float:
    v = metrics.REGISTRY.get_sample_value(name, labels)
    return v or 0.0


def test_the_shadow_client_refuses_every_write() -> None:
    fake = FakeKube()
    fake.add("pods", make_pod("p").gpus(1).build())
    refused: list[str] = []
    ro = kube.ReadOnly(fake, on_write=refused.append)
    assert ro.list("pods", None)[0][0]["metadata"]["name"] == "p"
    writes: list[Callable[[], object]] = [
        lambda: ro.bind("ns", "p", None, "n"), lambda: ro.patch_pod("ns", "p", {}),
        lambda: ro.patch_pod_status("ns", "p", {}), lambda: ro.create_event("ns", {}),
        lambda: ro.scale("ns", "d", 1), lambda: ro.evict("ns", "p")]
    for w in writes:
        with pytest.raises(kube.ApiError, match="shadow mode"):
            w()
    assert refused == ["bind", "patch", "patch_status", "create_event", "scale", "evict"]
    assert fake.calls == [] and fake.events == []


def test_shadow_plans_publishes_and_writes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    rig = ShadowRig()
    keys = gang(rig.fake, "train", 2, 4)
    gang(rig.fake, "late", 1, 8, priority="low")  # 8 + 8 + 3 > 16: something waits
    rig.fake.add("configmaps", configmap("chat-demand", curve="[3]"))
    rig.fake.add("deployments", deployment("chat", replicas=1, notes={
        "gpuroster.io/demand-configmap": "chat-demand"}))
    before = copy.deepcopy(rig.fake.objects)
    blocked = counter("gpuroster_shadow_writes_blocked_total", verb="patch")
    with caplog.at_level(logging.INFO, logger="extender.controller.shadowing"):
        r = rig.step()
        rig.step(1)
    # The plan is made as it would be: it starts work now ...
    assert r.plan.starts and r.admitted == []
    # ... but no write was even attempted: not on the API, not at the read-only client.
    assert rig.fake.calls == [] and rig.fake.events == []
    assert rig.fake.objects == before
    assert counter("gpuroster_shadow_writes_blocked_total", verb="patch") == blocked
    # The verbs let kube-scheduler place pods as if the extender were absent.
    pod = rig.fake.pod(keys[0])
    assert rig.ctl.verbs.filter(pod, NODES) == (NODES, {})
    assert rig.ctl.verbs.verdict(pod) is None
    assert rig.ctl.verbs.prioritize(pod, NODES) == []
    assert rig.ctl.verbs.bind("ns", "train-0", None, "gpu-node-0") == verbs.SHADOW_BIND
    assert rig.fake.calls == []
    # What it would have told the pods goes to the log.
    said = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "shadow: gang ns/" in said and ("would start now" in said or "planned start" in said)
    st = rig.ctl.state
    assert st is not None and st.shadow is not None
    want = st.shadow.replicas_planned["ns/chat"]
    # Towards the forecast of 3 from what really runs (no pod yet), within the default
    # max-swap of 2 a step: nothing carried the first step's plan out.
    assert want == 2
    assert f"service ns/chat: would set {want} replicas (Deployment has 1)" in said
    # Its metrics: what it would do now that the cluster does not.
    started = list(r.plan.starts)
    assert st.shadow.would_start_gangs == len(started) >= 1
    assert st.shadow.would_start_gpus == sum(rig.ctl.take_snapshot().gangs[n].gpus
                                             for n in started)
    assert st.shadow.replicas_actual == {"ns/chat": 1}
    assert st.shadow.waiting_gangs == 2
    text = metrics.exposition().decode()
    assert "gpuroster_shadow_mode 1.0" in text
    assert f'gpuroster_shadow_service_replicas_planned{{service="ns/chat"}} {float(want)}' in text
    assert f"gpuroster_shadow_would_start_gpus {float(st.shadow.would_start_gpus)}" in text
    # The plan page is the operator's screen.
    html = page.render(rig.ctl.view)
    assert "Shadow mode." in html and "<svg" in html and "ns/train" in html
    assert "Waiting: what each job waits for" in html


def test_a_gang_the_scheduler_placed_runs_in_the_plan_and_is_compared() -> None:
    rig = ShadowRig(nodes=1)
    first = gang(rig.fake, "a", 2, 4, d="30s")  # fills the node: 8 GPUs
    gang(rig.fake, "b", 1, 8, d="30s")
    r0 = rig.step()
    assert r0.plan.starts == {"ns/a": model.Block(0, 8)}
    assert r0.plan.planned_start["ns/b"] == 3  # after a's three steps
    later = counter("gpuroster_shadow_gang_starts_total", versus="later")
    planned_pods = counter("gpuroster_shadow_pod_placements_total", node="planned")
    # (no _sum: a histogram with negative buckets has none)
    upto5 = counter("gpuroster_shadow_start_delay_seconds_bucket", le="5.0")
    upto30 = counter("gpuroster_shadow_start_delay_seconds_bucket", le="30.0")
    # kube-scheduler places gang a one step later than the plan started it.
    for k in first:
        rig.place(k, "gpu-node-0", START + 10)
    rig.step(1)
    snap = rig.ctl.take_snapshot()
    assert snap.gangs["ns/a"].placed == {k: "gpu-node-0" for k in first}
    assert snap.gangs["ns/a"].placed_blocks == [model.Block(0, 8)]
    assert snap.foreign == {}  # running work, not GPUs lost for the whole horizon
    view = rig.ctl.view
    assert view["jobs"]["ns/a"]["state"] == "running"
    assert view["jobs"]["ns/a"]["placed_by"] == "scheduler"
    # b waits for a: its start slid a step with a's late start, on a's GPUs.
    b = view["jobs"]["ns/b"]
    assert b["planned_start_step"] == 4 and b["waits_for"] == ["ns/a"]
    assert counter("gpuroster_shadow_gang_starts_total", versus="later") == later + 1
    assert counter("gpuroster_shadow_pod_placements_total", node="planned") == planned_pods + 2
    # 10 s later than the plan started it
    assert counter("gpuroster_shadow_start_delay_seconds_bucket", le="5.0") == upto5
    assert counter("gpuroster_shadow_start_delay_seconds_bucket", le="30.0") == upto30 + 1
    html = page.render(view)
    assert "kube-scheduler" in html and "its GPUs are held by" in html


def test_gated_pods_are_counted_and_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    from extender.adapter import objects

    rig = ShadowRig()
    rig.fake.add("pods", make_pod("g-0").gpus(1).gang("g", 1).gated(objects.ADMISSION_GATE)
                 .build())
    with caplog.at_level(logging.WARNING, logger="extender.controller.shadowing"):
        rig.step()
    st = rig.ctl.state
    assert st is not None and st.shadow is not None and st.shadow.gated_pods == 1
    assert any("never lifts" in rec.getMessage() for rec in caplog.records)
    assert rig.fake.calls == []  # the gate stays: shadow mode lifts nothing


def test_a_partly_placed_gang_holds_its_gpus_and_waits() -> None:
    rig = ShadowRig()
    keys = gang(rig.fake, "p", 2, 4)
    rig.place(keys[0], "gpu-node-1", START)
    rig.step()
    snap = rig.ctl.take_snapshot()
    g = snap.gangs["ns/p"]
    assert g.placed is None and g.waiting_for and "1 of 2 pods" in g.waiting_for
    assert snap.foreign == {"gpu-node-1": 4}
    assert rig.ctl.view["jobs"]["ns/p"]["state"] == "held"


def test_without_shadow_the_verbs_still_hold_pods_to_the_plan() -> None:
    fake = FakeKube()
    fake.add("nodes", node(0))
    settings = config.Settings(step_seconds=10.0, epoch=START)
    ctl, _ = main.build(settings, client=fake, clock=clock_mod.FakeClock(START))
    assert ctl.shadow is None and not isinstance(ctl.client, kube.ReadOnly)
    fake.add("pods", make_pod("w").gpus(1).gang("w", 2).build())  # incomplete: waits
    for i in ctl.cache.all():
        i.relist()
    ctl.run_step()
    passed, _ = ctl.verbs.filter(fake.pod("ns/w"), ["gpu-node-0"])
    assert passed == []
    assert ann.BLOCK not in (fake.pod("ns/w")["metadata"].get("annotations") or {})


def test_block_nodes_names_every_node_of_a_wide_block() -> None:
    rig = ShadowRig(nodes=2)
    rig.step()
    snap = rig.ctl.take_snapshot()
    assert shadowing.block_nodes(snap, model.Block(0, 16)) == frozenset(NODES)
    assert shadowing.block_nodes(snap, model.Block(8, 4)) == frozenset(["gpu-node-1"])


def test_a_service_holds_where_its_pods_run_not_what_a_plan_gave_it() -> None:
    """No plan is carried out in shadow mode: a service's current GPUs are where its
    pods run each round, so GPUs another scheduler gave someone else are not planned
    for it (they would be, from the last plan's set, in normal mode)."""
    rig = ShadowRig()
    rig.fake.add("configmaps", configmap("d", curve="[3]"))
    rig.fake.add("deployments", deployment("chat", replicas=1, notes={
        "gpuroster.io/demand-configmap": "d"}))
    rig.fake.add("pods", make_pod("chat-abc12-0").gpus(1).owned_by_deployment("chat")
                 .on("gpu-node-0").build())
    rig.step()
    # kube-scheduler fills node 1 with a single 8-GPU job the plan never saw waiting.
    rig.fake.add("pods", make_pod("fill-0").gpus(8).gang("fill", 1).on("gpu-node-1").build())
    rig.step(1)
    planned = rig.ctl.table.service_planned["ns/chat"]
    assert set(planned) == {"gpu-node-0"} and sum(planned.values()) == 3, planned


def test_a_gang_placed_one_pod_at_a_time_is_compared_with_the_plan_before() -> None:
    """kube-scheduler binds a gang's pods one by one: the round in between sees it
    partly placed (not plannable), which must not erase the plan it had for it."""
    rig = ShadowRig(nodes=1)
    keys = gang(rig.fake, "a", 2, 4, d="30s")
    r0 = rig.step()
    assert "ns/a" in r0.plan.starts
    on_time = counter("gpuroster_shadow_gang_starts_total", versus="on_time")
    unplanned = counter("gpuroster_shadow_gang_starts_total", versus="unplanned")
    rig.place(keys[0], "gpu-node-0", START + 1)
    rig.step()
    rig.place(keys[1], "gpu-node-0", START + 2)
    rig.step()
    assert counter("gpuroster_shadow_gang_starts_total", versus="on_time") == on_time + 1
    assert counter("gpuroster_shadow_gang_starts_total", versus="unplanned") == unplanned
    assert rig.ctl.take_snapshot().gangs["ns/a"].placed_at == START + 2

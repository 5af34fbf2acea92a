"""The step loop on a fake API server: admission, waits, restart, binding, services."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from extender import config, metrics
from extender.adapter import annotations as ann
from extender.adapter import watching
from extender.controller import clock as clock_mod
from extender.controller import demand, planinput, stepping
from tests.kubefake import FakeKube, configmap, deployment, make_pod, node
from tests.waiting import wait_until

START = 1_700_000_000.0  # 2023-11-14T22:13:20Z


class Rig:
    def __init__(self, nodes: int = 2, policy: str = "gpuroster", step: float = 10.0,
                 fake: FakeKube | None = None, **settings: Any) -> None:
        self.fake = fake or FakeKube()
        if fake is None:
            for i in range(nodes):
                self.fake.add("nodes", node(i))
        self.clock = clock_mod.FakeClock(START)
        self.settings = config.Settings(policy=policy, step_seconds=step, epoch=START,
                                        **settings)
        self.cache = watching.Cache(self.fake, dra=self.settings.dra)
        self.ctl = stepping.Controller(self.settings, self.fake, self.cache, clock=self.clock)
        self.verbs = self.ctl.verbs  # what kube-scheduler calls, through the api
        self.sync()

    def sync(self) -> None:
        for i in self.cache.all():
            i.relist()

    def step(self) -> stepping.StepResult:
        self.sync()
        r = self.ctl.run_step()
        self.sync()
        return r

    def advance(self, steps: int = 1) -> stepping.StepResult:
        self.clock.advance(steps * self.settings.step_seconds)
        return self.step()

    def notes(self, key: str) -> dict[str, str]:
        return dict(self.fake.pod(key)["metadata"].get("annotations") or {})


def gang(fake: FakeKube, name: str, pods: int, gpus: int, **kw: Any) -> list[str]:
    keys = []
    for i in range(pods):
        b = make_pod(f"{name}-{i}").gpus(gpus).gang(name, pods).duration(kw.get("d", "30s"))
        if "priority" in kw:
            b.priority(kw["priority"])
        fake.add("pods", b.build())
        keys.append(f"ns/{name}-{i}")
    return keys


def service_pods(rig: Rig, n: int, node: str) -> None:
    """`n` running 1-GPU replicas of Deployment "svc" on `node`."""
    for i in range(n):
        rig.fake.add("pods", make_pod(f"svc-abc12-{i}").gpus(1).owned_by_deployment("svc")
                     .on(node).build())


def test_gang_of_four_is_admitted_whole_on_one_node() -> None:
    rig = Rig()
    keys = gang(rig.fake, "g", 4, 2)
    r = rig.step()
    assert r.admitted == ["ns/g"]
    blocks = {rig.notes(k)[ann.BLOCK] for k in keys}
    nodes = {rig.notes(k)[ann.NODE] for k in keys}
    assert len(blocks) == 1 and len(nodes) == 1
    (n,) = nodes
    for k in keys:
        pod = rig.fake.pod(k)
        passed, failed = rig.verbs.filter(pod, ["gpu-node-0", "gpu-node-1"])
        assert passed == [n] and failed == {}  # the others drop out silently
        other = "gpu-node-1" if n == "gpu-node-0" else "gpu-node-0"
        assert rig.verbs.filter(pod, [other]) == ([], {other: f"the plan assigns this pod to {n}"})
        scores = dict(rig.verbs.prioritize(pod, ["gpu-node-0", "gpu-node-1"]))
        assert scores[n] == 10


def test_incomplete_gang_waits_and_says_why() -> None:
    rig = Rig()
    gang(rig.fake, "g", 3, 2)  # gang-size 3 but ...
    rig.fake.delete("pods", "ns/g-2")  # ... only two exist
    r = rig.step()
    assert r.admitted == []
    passed, failed = rig.verbs.filter(rig.fake.pod("ns/g-0"), ["gpu-node-0"])
    assert passed == []
    assert "2 of 3 pods" in failed["gpu-node-0"]
    assert any("2 of 3" in e["message"] for e in rig.fake.events)


@pytest.mark.parametrize(("notes", "expect"), [
    ({"gpuroster.io/workload": "fishing"}, "unknown workload type"),
    ({"gpuroster.io/priority": "urgent!"}, "neither a positive number"),
    ({"gpuroster.io/expected-duration": "soon"}, "unparsable duration"),
    ({"gpuroster.io/gang": "x", "gpuroster.io/gang-size": "two"}, "not a whole number"),
], ids=["workload", "priority", "duration", "gang-size"])
def test_bad_annotations_get_an_event_and_disturb_nothing(notes: dict[str, str],
                                                          expect: str) -> None:
    rig = Rig()
    rig.fake.add("pods", make_pod("bad").gpus(2).annotate(**notes).build())
    good = gang(rig.fake, "ok", 1, 2)
    r = rig.step()
    assert r.admitted == ["ns/ok"]
    _, failed = rig.verbs.filter(rig.fake.pod("ns/bad"), ["gpu-node-0"])
    assert expect in failed["gpu-node-0"]
    warn = [e for e in rig.fake.events if e["involvedObject"]["name"] == "bad"]
    assert warn and warn[0]["type"] == "Warning" and expect in warn[0]["message"]
    assert ann.BLOCK in rig.notes(good[0])
    assert ann.BLOCK not in rig.notes("ns/bad")


def test_non_power_of_two_gang_is_rejected() -> None:
    rig = Rig()
    gang(rig.fake, "odd", 3, 2)
    rig.step()
    _, failed = rig.verbs.filter(rig.fake.pod("ns/odd-0"), ["gpu-node-0"])
    assert "power of two" in failed["gpu-node-0"]


def test_sixteen_gpu_gang_takes_two_whole_nodes() -> None:
    rig = Rig(nodes=3)
    keys = gang(rig.fake, "big", 2, 8)
    assert rig.step().admitted == ["ns/big"]
    nodes = sorted(rig.notes(k)[ann.NODE] for k in keys)
    assert nodes in (["gpu-node-0", "gpu-node-1"], ["gpu-node-1", "gpu-node-2"])
    assert ".." in rig.notes(keys[0])[ann.BLOCK]


def test_gang_waits_for_room_then_starts() -> None:
    rig = Rig(nodes=1)
    first = gang(rig.fake, "a", 1, 8, d="20s")
    assert rig.step().admitted == ["ns/a"]
    gang(rig.fake, "b", 1, 8)
    assert rig.step().admitted == []
    _, failed = rig.verbs.filter(rig.fake.pod("ns/b-0"), ["gpu-node-0"])
    assert "planned start" in failed["gpu-node-0"]
    # a runs and finishes; b starts in a later step, not before.
    pod = rig.fake.pod(first[0])
    pod["spec"]["nodeName"] = "gpu-node-0"
    pod["status"]["phase"] = "Succeeded"
    rig.fake.add("pods", pod)
    assert rig.advance().admitted == ["ns/b"]


def test_higher_priority_later_gang_goes_first() -> None:
    rig = Rig(nodes=1)
    gang(rig.fake, "run", 1, 8, d="20s")
    rig.step()
    gang(rig.fake, "low", 1, 8, priority="low")
    rig.clock.advance(1)
    gang(rig.fake, "high", 1, 8, priority="critical")
    rig.step()
    done = rig.fake.pod("ns/run-0")
    done["status"]["phase"] = "Succeeded"
    rig.fake.add("pods", done)
    assert rig.advance().admitted == ["ns/high"]


def test_failed_write_keeps_what_was_written_and_the_rest_follows() -> None:
    """Written records are never undone (kube-scheduler may have bound those pods): the
    gang is admitted and its other pods are written as soon as their writes go through."""
    rig = Rig()
    keys = gang(rig.fake, "g", 4, 2)
    rig.fake.fail_patch.add(keys[2])
    r = rig.step()
    assert r.admitted == []
    assert ann.BLOCK not in rig.notes(keys[2])
    written = [k for k in keys if k != keys[2]]
    assert len({rig.notes(k)[ann.BLOCK] for k in written}) == 1
    passed, failed = rig.verbs.filter(rig.fake.pod(keys[2]), ["gpu-node-0"])
    assert passed == [] and "retrying" in failed["gpu-node-0"]
    assert failed["gpu-node-0"].startswith("waiting: completes the admission of gang ns/g (3 of "
                                           "4 pods written) on gpu-node-")
    rig.fake.fail_patch.clear()
    assert rig.advance().admitted == []  # not admitted again: the rest is written
    assert len({rig.notes(k)[ann.BLOCK] for k in keys}) == 1
    assert len({rig.notes(k)[ann.ADMITTED_AT] for k in keys}) == 1


def end(rig: Rig, key: str, phase: str = "Failed") -> None:
    pod = rig.fake.pod(key)
    pod["spec"]["nodeName"] = rig.notes(key)[ann.NODE]
    pod["status"]["phase"] = phase
    rig.fake.add("pods", pod)


def test_a_jobs_replacement_for_a_failed_member_runs_in_its_place() -> None:
    rig = Rig(nodes=3)
    keys = gang(rig.fake, "g", 2, 8, d="600s")  # 16 GPUs: two whole nodes
    assert rig.step().admitted == ["ns/g"]
    end(rig, keys[0])
    end(rig, keys[1], "Running")
    n = rig.notes(keys[0])[ann.NODE]
    rig.fake.add("pods", make_pod("g-0-retry").gpus(8).gang("g", 2).duration("600s")
                 .gated(ann.PREFIX + "admission").build())
    rig.fake.fail_patch.add("ns/g-0-retry")  # the first write fails: it waits and says why
    rig.advance()
    assert ann.BLOCK not in rig.notes("ns/g-0-retry")
    _, failed = rig.verbs.filter(rig.fake.pod("ns/g-0-retry"), [n])
    assert "replaces an ended pod of gang ns/g" in failed[n] and "retrying" in failed[n]
    rig.fake.fail_patch.clear()
    r = rig.advance()
    assert r.admitted == []  # not a new admission: the gang's block is unchanged
    notes = rig.notes("ns/g-0-retry")
    assert notes[ann.BLOCK] == rig.notes(keys[1])[ann.BLOCK]
    assert notes[ann.ADMITTED_AT] == rig.notes(keys[1])[ann.ADMITTED_AT]
    assert notes[ann.NODE] == n
    assert rig.fake.pod("ns/g-0-retry")["spec"].get("schedulingGates") is None
    nodes = ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    assert rig.verbs.filter(rig.fake.pod("ns/g-0-retry"), nodes)[0] == [n]
    assert any(e["involvedObject"]["name"] == "g-0-retry" and "replaces" in e["message"]
               for e in rig.fake.events)


# Failed: a Job retrying. Succeeded: a Job with parallelism below completions starting
# its next pods under the same gang annotation.
@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_a_gang_whose_pods_all_ended_is_admitted_again_whole_when_replaced(phase: str) -> None:
    rig = Rig(nodes=1)
    keys = gang(rig.fake, "g", 2, 4, d="600s")
    assert rig.step().admitted == ["ns/g"]
    for k in keys:
        end(rig, k, phase)
    rig.fake.add("pods", make_pod("g-0-retry").gpus(4).gang("g", 2).duration("600s").build())
    assert rig.advance().admitted == []  # one of two: the new gang waits for the other
    _, failed = rig.verbs.filter(rig.fake.pod("ns/g-0-retry"), ["gpu-node-0"])
    assert "1 of 2 pods" in failed["gpu-node-0"]
    rig.fake.add("pods", make_pod("g-1-retry").gpus(4).gang("g", 2).duration("600s").build())
    assert rig.advance().admitted == ["ns/g"]
    new = {rig.notes(f"ns/g-{i}-retry")[ann.ADMITTED_AT] for i in range(2)}
    assert len(new) == 1 and new != {rig.notes(keys[0])[ann.ADMITTED_AT]}


def test_a_gang_goes_to_the_nodes_its_node_selector_names() -> None:
    fake = FakeKube()
    for i, kind in enumerate(("a100", "a100", "h100")):
        n = node(i)
        n["metadata"]["labels"]["gpu"] = kind
        fake.add("nodes", n)
    rig = Rig(fake=fake)
    pod = make_pod("h-0").gpus(4).gang("h", 1).duration("60s").build()
    pod["spec"]["nodeSelector"] = {"gpu": "h100"}
    rig.fake.add("pods", pod)
    assert rig.step().admitted == ["ns/h"]
    assert rig.notes("ns/h-0")[ann.NODE] == "gpu-node-2"  # not the fullest or lowest node
    odd = make_pod("x-0").gpus(4).gang("x", 1).build()
    odd["spec"]["nodeSelector"] = {"gpu": "b200"}
    rig.fake.add("pods", odd)
    assert rig.advance().admitted == []
    _, failed = rig.verbs.filter(rig.fake.pod("ns/x-0"), ["gpu-node-0"])
    assert "no GPU node fits" in failed["gpu-node-0"]


def test_a_service_whose_template_no_node_fits_is_reported_on_its_pods() -> None:
    rig = Rig()
    dep = deployment("chat", notes={"gpuroster.io/demand-configmap": "c"})
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"gpu": "b200"}
    rig.fake.add("deployments", dep)
    rig.fake.add("configmaps", configmap("c", curve="[1]"))
    rig.fake.add("pods", make_pod("chat-abc12-1").gpus(1).owned_by_deployment("chat").build())
    rig.step()
    _, failed = rig.verbs.filter(rig.fake.pod("ns/chat-abc12-1"), ["gpu-node-0"])
    assert "no GPU node fits its pod template" in failed["gpu-node-0"]
    told = [e for e in rig.fake.events if e["involvedObject"]["name"] == "chat-abc12-1"]
    assert told and told[-1]["reason"] == "InvalidAnnotations"


def test_restart_rebuilds_from_annotations_and_never_readmits() -> None:
    rig = Rig()
    keys = gang(rig.fake, "g", 4, 2)
    rig.step()
    before = {k: rig.notes(k) for k in keys}
    patches = len([c for c in rig.fake.calls if c[0] == "patch"])
    gang(rig.fake, "h", 1, 8)
    again = Rig(fake=rig.fake)  # a new process: fresh memory, same cluster
    again.clock.advance(35)
    r = again.step()
    assert "ns/g" not in r.admitted
    assert {k: again.notes(k) for k in keys} == before
    node = before[keys[0]][ann.NODE]
    assert again.verbs.filter(rig.fake.pod(keys[1]), ["gpu-node-0", "gpu-node-1"])[0] == [node]
    assert r.admitted == ["ns/h"] and again.notes("ns/h-0")[ann.NODE] != node
    new_patches = [c for c in rig.fake.calls[patches:] if c[0] == "patch" and c[1] in keys]
    assert new_patches == []


def test_bind_assumes_and_undoes_on_failure() -> None:
    rig = Rig()
    keys = gang(rig.fake, "g", 2, 2)
    rig.step()
    n = rig.notes(keys[0])[ann.NODE]
    other = "gpu-node-1" if n == "gpu-node-0" else "gpu-node-0"
    assert "assigned to" in (rig.verbs.bind("ns", "g-0", None, other) or "")
    rig.fake.fail_bind.add(keys[0])
    assert "failed" in (rig.verbs.bind("ns", "g-0", None, n) or "")
    assert rig.cache.assumed() == {}
    rig.fake.fail_bind.clear()
    assert rig.verbs.bind("ns", "g-0", None, n) is None
    assert rig.fake.pod(keys[0])["spec"]["nodeName"] == n
    assert rig.verbs.bind("ns", "stranger", None, n) is not None


def test_unknown_pod_waits_for_the_next_step() -> None:
    rig = Rig()
    rig.step()
    _, failed = rig.verbs.filter(make_pod("new").gpus(1).build(), ["gpu-node-0"])
    assert "not planned yet" in failed["gpu-node-0"]


def test_service_follows_its_curve_within_the_swap_cap() -> None:
    # The curve as written: the peak's timing tolerance (on by default) would widen it.
    rig = Rig(nodes=1, peak_shift_hours=0.0)
    rig.fake.add("configmaps", configmap("chat-demand", curve="[2, 4, 6, 2]"))
    rig.fake.add("deployments", deployment("chat", replicas=0, notes={
        "gpuroster.io/demand-configmap": "chat-demand", "gpuroster.io/max-swap": "2"}))
    replicas, wanted = [], []
    for k in range(5):
        r = rig.step() if k == 0 else rig.advance()
        replicas.append(rig.fake.objects["deployments"]["ns/chat"]["spec"]["replicas"])
        wanted.append(rig.ctl.view["services"]["ns/chat"]["forecast"][0])
        assert r.step == k
    # step 0: no cap yet (2); then +2 per step at most; down to 2 once the curve drops
    assert wanted == [2, 4, 6, 2, 2]
    assert replicas == [2, 4, 6, 4, 2]
    for a, b in zip(replicas, replicas[1:], strict=False):
        assert abs(a - b) <= 2
    # the curve drops 6 -> 2 at step 3: the cap holds it at 4 there, and it reaches 2 at step 4
    assert replicas[3] == 4 > wanted[3]
    assert replicas[4] == wanted[4] == 2
    view = rig.ctl.view
    assert view["step"] == 4
    assert view["services"]["ns/chat"]["forecast"][:6] == [2, 4, 6, 2, 2, 4]


def test_service_pods_go_where_the_plan_holds_gpus() -> None:
    rig = Rig(nodes=2)
    rig.fake.add("configmaps", configmap("d", curve="3"))
    rig.fake.add("deployments", deployment("svc", replicas=3, notes={
        "gpuroster.io/demand-configmap": "d"}))
    rig.fake.add("pods", make_pod("svc-abc12-x").gpus(1).owned_by_deployment("svc").build())
    rig.step()
    planned = rig.ctl.table.service_planned["ns/svc"]
    assert sum(planned.values()) == 3
    passed, _ = rig.verbs.filter(rig.fake.pod("ns/svc-abc12-x"), ["gpu-node-0", "gpu-node-1"])
    assert passed and all(planned.get(n, 0) > 0 for n in passed)


def test_a_replica_of_two_gpus_gets_both_on_one_node() -> None:
    """The top free GPUs are one on each node (gpu-node-1 holds 7 GPUs of jobs): a
    2-GPU replica must get two on gpu-node-0, or its pod would fit nowhere."""
    rig = Rig(nodes=2)
    for name, gpus, on, lo in [("a", 4, "gpu-node-0", 0), ("b", 4, "gpu-node-1", 0),
                               ("c", 2, "gpu-node-1", 4), ("d", 1, "gpu-node-1", 6)]:
        rig.fake.add("pods", make_pod(f"{name}-0").gpus(gpus).gang(name, 1).duration("10h")
                     .annotate(**{ann.BLOCK: f"{on}:{lo}-{lo + gpus - 1}", ann.NODE: on,
                                  ann.ADMITTED_AT: ann.format_time(START)})
                     .on(on).build())
    rig.fake.add("configmaps", configmap("d", curve="4"))
    rig.fake.add("deployments", deployment("svc", replicas=0, gpus=2, notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "4"}))
    rig.step()
    assert rig.ctl.table.service_planned["ns/svc"] == {"gpu-node-0": 4}
    assert rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 2
    rig.fake.add("pods", make_pod("svc-abc12-0").gpus(2).owned_by_deployment("svc").build())
    rig.sync()
    passed, _ = rig.verbs.filter(rig.fake.pod("ns/svc-abc12-0"), ["gpu-node-0", "gpu-node-1"])
    assert passed == ["gpu-node-0"]


def test_replicas_kept_apart_by_anti_affinity_get_a_node_each() -> None:
    """Required anti-affinity among the service's own pods on the hostname: the plan
    holds one replica a node (packed at the top of one node, kube-scheduler would refuse
    all but the first)."""
    rig = Rig(nodes=4)
    rig.fake.add("configmaps", configmap("d", curve="3"))
    dep = deployment("svc", replicas=0, notes={"gpuroster.io/demand-configmap": "d",
                                               "gpuroster.io/max-swap": "4"})
    template = dep["spec"]["template"]
    template["metadata"] = {"labels": {"app": "svc"}}
    template["spec"]["affinity"] = {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "svc"}}}]}}
    rig.fake.add("deployments", dep)
    rig.step()
    planned = rig.ctl.table.service_planned["ns/svc"]
    assert planned == {"gpu-node-1": 1, "gpu-node-2": 1, "gpu-node-3": 1}
    assert rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 3


def test_plan_view_has_the_grid() -> None:
    rig = Rig(nodes=1)
    gang(rig.fake, "g", 1, 4)
    rig.step()
    v = rig.ctl.view
    assert len(v["grid"]) == 8 and len(v["grid"][0]) == 24
    assert sum(1 for row in v["grid"] if row[0] == "ns/g") == 4


def test_missing_demand_configmap_is_reported_on_pending_pods() -> None:
    rig = Rig(nodes=1)
    rig.fake.add("deployments", deployment("svc", replicas=1, notes={
        "gpuroster.io/demand-configmap": "nope"}))
    rig.fake.add("pods", make_pod("svc-abc12-x").gpus(1).owned_by_deployment("svc").build())
    rig.step()
    (said,) = [e for e in rig.fake.events if e["reason"] == "InvalidDemand"]
    assert said["message"] == ("service ns/svc: gpuroster.io/demand-configmap: "
                               "ConfigMap ns/nope not found")


@pytest.mark.parametrize("steps", [1, 3], ids=["first-step", "steps-later"])
def test_a_service_whose_demand_breaks_keeps_its_gpus_out_of_the_plan(steps: int) -> None:
    """Its running replicas still hold GPUs: no gang is promised them, its replica
    count is left alone, and once the demand source is mended it is planned again."""
    rig = Rig(nodes=1)
    rig.fake.add("deployments", deployment("svc", replicas=6, notes={
        "gpuroster.io/demand-configmap": "nope"}))
    service_pods(rig, 6, "gpu-node-0")
    rig.step()
    for _ in range(steps - 1):
        rig.advance()
    wide = gang(rig.fake, "wide", 1, 4, d="1h")
    narrow = gang(rig.fake, "narrow", 1, 2, d="1h")
    r = rig.step()
    assert r.admitted == ["ns/narrow"]
    assert ann.BLOCK not in rig.notes(wide[0]) and ann.BLOCK in rig.notes(narrow[0])
    assert not [c for c in rig.fake.calls if c[0] == "scale"]
    held = [row[0] for row in rig.ctl.view["grid"]]
    assert held.count("ns/narrow") == 2 and held.count(None) == 0
    rig.fake.add("configmaps", configmap("nope", curve="6"))
    r = rig.advance()
    assert r.plan.service_gpus["ns/svc"] and len(r.plan.service_gpus["ns/svc"]) == 6
    assert ann.BLOCK not in rig.notes(wide[0])


def test_a_service_whose_demand_breaks_is_held_where_its_pods_run() -> None:
    """Frozen on the node its pods are on, not on the GPUs the last plan gave it."""
    rig = Rig(nodes=2)
    rig.fake.add("configmaps", configmap("d", curve="2"))
    rig.fake.add("deployments", deployment("svc", replicas=2, notes={
        "gpuroster.io/demand-configmap": "d"}))
    rig.step()
    (planned,) = [n for n, k in rig.ctl.table.service_planned["ns/svc"].items() if k]
    other = "gpu-node-0" if planned == "gpu-node-1" else "gpu-node-1"
    service_pods(rig, 2, other)
    rig.fake.delete("configmaps", "ns/d")
    keys = gang(rig.fake, "whole", 1, 8, d="1h")
    r = rig.advance()
    assert r.admitted == ["ns/whole"]
    assert rig.notes(keys[0])[ann.NODE] == planned


def test_follower_answers_from_annotations_but_never_writes() -> None:
    rig = Rig()
    keys = gang(rig.fake, "g", 2, 2)
    rig.step()  # the leader admits
    node = rig.notes(keys[0])[ann.NODE]
    gang(rig.fake, "later", 1, 8)
    follower = Rig(fake=rig.fake)
    follower.ctl.leader = lambda: False
    calls = len(rig.fake.calls)
    events = len(rig.fake.events)
    r = follower.step()
    assert r.admitted == [] and rig.fake.calls[calls:] == [] and len(rig.fake.events) == events
    assert follower.verbs.filter(rig.fake.pod(keys[0]), ["gpu-node-0", "gpu-node-1"])[0] == [node]
    _, failed = follower.verbs.filter(rig.fake.pod("ns/later-0"), ["gpu-node-0"])
    assert "waiting" in failed["gpu-node-0"]


def test_default_steps_fall_on_the_wall_clock_and_a_daily_curve_on_the_hour() -> None:
    """Without --epoch, two replicas (or one restarted) started at different times count
    the same steps, hourly steps begin on the hour, and a 24-value curve is read by UTC
    hour of day: a restart does not shift the peak to other hours."""
    t = 1_767_270_600.0  # 2026-01-01T12:30:00Z
    fake = FakeKube()
    fake.add("nodes", node(0))
    fake.add("configmaps", configmap("d", curve=json.dumps(list(range(24)))))
    fake.add("deployments", deployment("svc", notes={"gpuroster.io/demand-configmap": "d"}))
    for started in (t, t + 1000.0):  # the second replica starts 1000 s later
        clock = clock_mod.FakeClock(started)
        ctl = stepping.Controller(config.Settings(step_seconds=3600), fake,
                                  watching.Cache(fake), clock=clock)
        assert ctl.step_of(t + 1000.0) == int(t // 3600)
        assert ctl.time_of(ctl.step_of(started)) == t - 1800.0  # 12:00, the hour's start
    cache = watching.Cache(fake)
    for i in cache.all():
        i.relist()
    ctl = stepping.Controller(config.Settings(step_seconds=3600), fake, cache,
                              clock=clock_mod.FakeClock(t))
    ctl.run_step()
    assert ctl.view["services"]["ns/svc"]["forecast"][:3] == [12, 13, 14]


def test_demand_from_history_goes_through_the_forecaster() -> None:
    rig = Rig(nodes=1)
    day = [1] * 6 + [4] * 12 + [1] * 6
    rig.fake.add("configmaps", configmap("h", history=",".join(str(x) for x in day * 7),
                                         **{"steps-per-day": "24"}))
    rig.fake.add("deployments", deployment("svc", notes={"gpuroster.io/demand-configmap": "h"}))
    rig.step()
    fc = rig.ctl.view["services"]["ns/svc"]["forecast"]
    assert len(fc) == 24 and max(fc) == 4 and min(fc) == 1


def test_demand_from_a_prometheus_query() -> None:
    asked: list[tuple[str, str]] = []

    def query(url: str, expr: str, start: float, end: float, step: float) -> list[float]:
        asked.append((url, expr))
        return [3.0] * 48

    fake = FakeKube()
    fake.add("nodes", node(0))
    fake.add("deployments", deployment("svc", notes={"gpuroster.io/demand-query": "sum(x)"}))
    clock = clock_mod.FakeClock(START)
    settings = config.Settings(step_seconds=3600, epoch=START, prometheus_url="http://prom:9090")
    cache = watching.Cache(fake)
    for i in cache.all():
        i.relist()
    ctl = stepping.Controller(settings, fake, cache, clock=clock, prometheus_query=query)
    ctl.run_step()
    assert asked == [("http://prom:9090", "sum(x)")]
    assert ctl.view["services"]["ns/svc"]["forecast"][:3] == [3, 3, 3]
    assert fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 3


def test_demand_query_without_prometheus_is_reported() -> None:
    rig = Rig(nodes=1)
    rig.fake.add("deployments", deployment("svc", replicas=1,
                                           notes={"gpuroster.io/demand-query": "sum(x)"}))
    rig.fake.add("pods", make_pod("svc-abc12-x").gpus(1).owned_by_deployment("svc").build())
    rig.step()
    assert any("GPUROSTER_PROMETHEUS_URL" in e["message"] for e in rig.fake.events)


def _parked(rig: Rig, what: str, since: int = 0, on: threading.Event | None = None) -> None:
    """Wait until the loop sits in a wait on the fake clock begun after the first `since`
    (the last one, on the event `on` if given). The clock records a wait once its
    deadline is fixed; moving the clock while the loop is between reading the time and
    starting its wait would push that deadline past the move, and the loop would sleep
    through it."""
    def parked() -> bool:
        waits = list(rig.clock.waits)
        return len(waits) > since and (on is None or waits[-1][0] is on)

    wait_until(parked, what=what)


def test_the_loop_steps_on_the_clock_it_is_given() -> None:
    rig = Rig()
    rig.ctl.start()
    try:
        _parked(rig, "the loop's first round and the wait after it")
        first = rig.ctl.table.step
        rounds = rig.ctl.rounds
        time.sleep(0.3)
        assert rig.ctl.table.step == first  # the fake clock has not moved
        rig.clock.advance(rig.settings.step_seconds)
        # A round publishes its table before it counts itself: wait for both.
        wait_until(lambda: rig.ctl.table.step == first + 1 and rig.ctl.rounds > rounds,
                   what="the boundary's round (the next step's table, counted)")
        assert rig.ctl.alive()
    finally:
        rig.ctl.stop(wait=10)  # not left running into the next test
    assert not rig.ctl.alive()


def test_a_new_pod_mid_step_is_planned_without_waiting_for_the_boundary() -> None:
    rig = Rig()
    rig.ctl.start()
    try:
        _parked(rig, "the loop's first round and the wait after it")
        rig.clock.advance(rig.settings.step_seconds / 2)  # min gap passes, same step
        gang(rig.fake, "g", 1, 2)
        rig.sync()
        rig.ctl.mark_dirty("pods")
        wait_until(lambda: ann.BLOCK in rig.notes("ns/g-0"), what="g admitted mid-step")
    finally:
        rig.ctl.stop(wait=10)  # not left running into the next test
    assert not rig.ctl.alive()


def test_a_pod_in_a_step_s_last_tenth_waits_for_the_boundary_plan() -> None:
    rig = Rig()
    rig.ctl.start()
    try:
        _parked(rig, "the loop's first round and the wait after it")
        first = rig.ctl.table.step
        rig.clock.advance(rig.settings.step_seconds * 0.95)  # the quiet tail
        gang(rig.fake, "g", 1, 2)
        rig.sync()
        seen = len(rig.clock.waits)
        rig.ctl.mark_dirty("pods")
        _parked(rig, "the loop's wait for the boundary, a change pending", seen,
                on=rig.ctl._stop)
        time.sleep(0.5)
        assert ann.BLOCK not in rig.notes("ns/g-0"), "planned in the tail"
        assert rig.ctl.table.step == first
        rig.clock.advance(rig.settings.step_seconds * 0.05)
        # The admission is written before the round publishes its table: wait for both.
        wait_until(lambda: ann.BLOCK in rig.notes("ns/g-0")
                   and rig.ctl.table.step == first + 1,
                   what="g admitted at the boundary, the next step's table published")
    finally:
        rig.ctl.stop(wait=10)  # not left running into the next test
    assert not rig.ctl.alive()


def test_pods_of_a_badly_annotated_service_are_never_planned_as_batch() -> None:
    rig = Rig(nodes=1)
    rig.fake.add("deployments", deployment("svc", replicas=1, notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "lots"}))
    rig.fake.add("pods", make_pod("svc-abc12-x").gpus(1).owned_by_deployment("svc").build())
    r = rig.step()
    assert r.admitted == []
    _, failed = rig.verbs.filter(rig.fake.pod("ns/svc-abc12-x"), ["gpu-node-0"])
    assert "Deployment ns/svc" in failed["gpu-node-0"] and "max-swap" in failed["gpu-node-0"]
    assert any("max-swap" in e["message"] and e["type"] == "Warning" for e in rig.fake.events)


def test_replanning_mid_step_keeps_the_swap_cap() -> None:
    rig = Rig(nodes=1)
    rig.fake.add("configmaps", configmap("d", curve="8"))
    rig.fake.add("deployments", deployment("svc", notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "2"}))
    rig.clock.advance(rig.settings.step_seconds)  # step 1: the cap applies
    rig.step()
    assert rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 2
    # its pods land; a re-plan in the same step must not grow it again
    service_pods(rig, 2, "gpu-node-0")
    rig.clock.advance(1)
    rig.step()
    assert rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 2
    rig.advance()
    assert rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 4


class Scripted:
    """A stand-in planner that gives the service the next count of a script: the
    commit logic is under test here, not the planner's choice."""

    name = "scripted"

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def plan(self, inp: Any) -> Any:
        from extender.planner import model
        n = self.counts.pop(0)
        return model.Plan(now=inp.now, service_gpus={"ns/svc": frozenset(range(n))})


def test_a_mid_step_scale_up_after_a_scale_down_stays_within_max_swap() -> None:
    # The boundary plan sheds one replica (a gang still holds GPUs); a re-plan in the
    # same step, after the gang ended, wants two more than that. The pod that went
    # is gone, so only one may come back: one out plus one in is the cap of 2.
    rig = Rig(nodes=2)
    rig.fake.add("configmaps", configmap("d", curve="8"))
    rig.fake.add("deployments", deployment("svc", replicas=7, notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "2"}))
    rig.ctl.policy = Scripted([6, 8, 8, 9, 6])

    def replicas() -> int:
        return int(rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"])

    rig.clock.advance(rig.settings.step_seconds)
    rig.step()
    assert replicas() == 6
    rig.clock.advance(1)
    rig.step()
    assert replicas() == 7  # held: 1 out, 1 in
    rig.clock.advance(rig.settings.step_seconds - 1)
    rig.step()
    assert replicas() == 8  # a new step, a new budget
    rig.advance()
    assert replicas() == 9
    rig.clock.advance(1)
    rig.step()
    assert replicas() == 6  # a scale-down is never held: a gang may need those GPUs


def test_gpus_of_a_service_with_a_broken_demand_source_stay_out_of_the_plan() -> None:
    # Eight replicas run on node 0; their demand ConfigMap is missing. The service
    # cannot be planned, but a new 8-GPU gang must not be promised node 0.
    rig = Rig(nodes=2)
    rig.fake.add("deployments", deployment("svc", replicas=8, notes={
        "gpuroster.io/demand-configmap": "missing"}))
    service_pods(rig, 8, "gpu-node-0")
    keys = gang(rig.fake, "big", 1, 8)
    r = rig.step()
    assert "ns/big" in r.admitted
    assert rig.notes(keys[0])[ann.BLOCK] == "gpu-node-1:0-7"


def test_admission_lifts_the_admission_gate_and_keeps_other_gates() -> None:
    rig = Rig(nodes=1)
    rig.fake.add("pods", make_pod("gated-0").gpus(4).gang("gated", 1).priority("high")
                 .gated("gpuroster.io/admission", "example.com/quota").build())
    rig.fake.add("pods", make_pod("later-0").gpus(8).gang("later", 1).priority("low")
                 .gated("gpuroster.io/admission").build())
    r = rig.step()
    assert r.admitted == ["ns/gated"]
    gates = rig.fake.pod("ns/gated-0")["spec"].get("schedulingGates")
    assert gates == [{"name": "example.com/quota"}]  # ours lifted, the other kept
    # the gang that does not fit yet stays gated: kube-scheduler never sees it
    assert rig.fake.pod("ns/later-0")["spec"]["schedulingGates"] == [
        {"name": "gpuroster.io/admission"}]


def test_service_pods_where_the_plan_did_not_put_them_still_hold_their_gpus() -> None:
    # The plan keeps the service's two GPUs on one node; the Deployment controller
    # left its pods on the other. A whole-node gang must not be promised that node.
    rig = Rig(nodes=2)
    rig.fake.add("configmaps", configmap("d", curve="2"))
    rig.fake.add("deployments", deployment("svc", replicas=2, notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "0"}))
    rig.step()
    planned = rig.ctl.table.service_planned["ns/svc"]
    (planned_node,) = [n for n, k in planned.items() if k]
    other = "gpu-node-0" if planned_node == "gpu-node-1" else "gpu-node-1"
    service_pods(rig, 2, other)
    keys = gang(rig.fake, "whole", 1, 8)
    r = rig.advance()
    assert "ns/whole" not in r.admitted, rig.notes(keys[0]).get(ann.BLOCK)


def test_observed_demand_not_yet_reported_is_filled_from_the_curve() -> None:
    # Monitoring has reported step 0 only; planning step 3 must still see three past
    # steps, aligned with what the curve said for them.
    rig = Rig(nodes=1)
    rig.fake.add("configmaps", configmap("d", curve="[2, 4]", observed="[5]"))
    rig.fake.add("deployments", deployment("svc", notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "2"}))
    rig.clock.advance(3 * rig.settings.step_seconds)
    rig.sync()
    inp, problems = rig.ctl.plan_input(rig.ctl.take_snapshot(), 3)
    assert problems == {}
    (sv,) = inp.services
    assert sv.past_demand == (5, 4, 2)
    assert sv.past_forecast == (2, 4, 2)


def squeezed_service(max_swap: int) -> Rig:
    """Node 0: six GPUs held outside the plan, two free. Node 1: six replicas of `svc`
    (demand 6), created a minute apart, two GPUs free."""
    rig = Rig(nodes=2)
    rig.fake.add("configmaps", configmap("d", curve="6"))
    rig.fake.add("deployments", deployment("svc", replicas=6, notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": str(max_swap)}))
    rig.fake.add("pods", make_pod("other").gpus(6).on("gpu-node-0").build())
    for i in range(6):
        rig.fake.add("pods", make_pod(f"svc-abc12-{i}").gpus(1).owned_by_deployment("svc")
                     .on("gpu-node-1").created(f"2023-11-14T22:0{i}:00Z").build())
    return rig


def test_a_gang_that_takes_a_service_s_gpus_moves_its_pods_by_eviction() -> None:
    # Node 0: six GPUs held outside the plan, two free. Node 1: six service replicas,
    # two free. A 4-GPU gang fits only on node 1 if two replicas move to node 0: the
    # count stays 6, so only evicting the two pods there can make the move happen.
    rig = squeezed_service(max_swap=4)
    rig.step()  # the service as it is: no move without a reason
    assert not [c for c in rig.fake.calls if c[0] == "evict"]
    keys = gang(rig.fake, "four", 1, 4)
    # The service can hand over only what its swap cap allows per step, so the plan
    # moves two replicas now and starts the gang on their GPUs next step.
    r = rig.advance()
    assert r.plan.planned_start.get("ns/four") == 2
    evicted = [c[1] for c in rig.fake.calls if c[0] == "evict"]
    assert evicted == ["ns/svc-abc12-5", "ns/svc-abc12-4"]  # the newest two
    assert rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 6
    # Their replacements (the ReplicaSet's job) may only go to node 0.
    for i in range(2):
        rig.fake.add("pods", make_pod(f"svc-abc12-new{i}").gpus(1)
                     .owned_by_deployment("svc").build())
    rig.sync()
    for i in range(2):
        passed, _ = rig.verbs.filter(rig.fake.pod(f"ns/svc-abc12-new{i}"),
                                   ["gpu-node-0", "gpu-node-1"])
        assert passed == ["gpu-node-0"]
        rig.fake.bind("ns", f"svc-abc12-new{i}", None, "gpu-node-0")
    r = rig.advance()
    assert "ns/four" in r.admitted
    assert rig.notes(keys[0])[ann.BLOCK].startswith("gpu-node-1:")
    assert len([c for c in rig.fake.calls if c[0] == "evict"]) == 2  # nothing more moved


def test_a_move_stays_within_max_swap_and_a_refused_eviction_changes_nothing_else() -> None:
    # The same squeeze with max_swap 2: one move (one out, one in) per step at most.
    # A disruption budget refuses the first eviction: nothing else is evicted, the
    # budget is not spent, and the next round tries again.
    rig = squeezed_service(max_swap=2)
    rig.step()
    gang(rig.fake, "four", 1, 4)
    rig.fake.fail_evict.add("ns/svc-abc12-5")
    rig.advance()
    evictions = [c[1] for c in rig.fake.calls if c[0] == "evict"]
    assert evictions == ["ns/svc-abc12-5"]  # refused, and nothing after it
    assert rig.ctl.writer.moves_in("ns/svc", rig.ctl.table.step) == (0, 0)
    rig.fake.fail_evict.clear()
    rig.clock.advance(1)
    rig.step()
    evictions = [c[1] for c in rig.fake.calls if c[0] == "evict"]
    assert evictions == ["ns/svc-abc12-5", "ns/svc-abc12-5"]  # one move: the cap of 2
    assert rig.ctl.writer.moves_in("ns/svc", rig.ctl.table.step) == (1, 1)


def test_a_move_due_late_in_a_step_waits_for_the_next_boundary() -> None:
    # The replacement binds a little after the eviction: past half a step it would
    # count in the next step's swaps. So the round in step 1's second half moves
    # nothing, and the boundary plan of step 2 makes the move.
    rig = squeezed_service(max_swap=4)
    rig.step()
    gang(rig.fake, "four", 1, 4)
    rig.clock.advance(1.6 * rig.settings.step_seconds)
    rig.step()
    assert not [c for c in rig.fake.calls if c[0] == "evict"]
    rig.clock.advance(0.4 * rig.settings.step_seconds)
    rig.step()
    evicted = [c[1] for c in rig.fake.calls if c[0] == "evict"]
    assert evicted == ["ns/svc-abc12-5", "ns/svc-abc12-4"]


def test_a_later_round_in_the_step_starts_no_more_than_the_steps_plan() -> None:
    # A queue (found by search) where the planner, re-run with the step's own
    # starts pinned, finds room now that its first search left for later work:
    # planned once per step (the simulator) j2 waits; re-planned after admitting,
    # it would start. The round after an admission must not start it either.
    rig = Rig(nodes=1)
    gang(rig.fake, "r0", 1, 4, d="50s")
    assert rig.step().admitted == ["ns/r0"]
    rig.advance(2)
    for name, gpus, steps in [("j0", 8, 10), ("j1", 4, 4), ("j2", 2, 7), ("j3", 1, 2),
                              ("j4", 8, 7)]:
        gang(rig.fake, name, 1, gpus, d=f"{steps * 10}s")
    first = rig.step()
    assert first.admitted == ["ns/j3"]
    # The premise: planning around the admitted gangs pinned would start j2 now.
    inp, _ = rig.ctl.plan_input(rig.ctl.take_snapshot(), 2)
    assert set(rig.ctl.policy.plan(inp).starts) == {"ns/j2"}
    rig.clock.advance(1)
    assert rig.step().admitted == []
    assert ann.BLOCK not in rig.notes("ns/j2-0")


def test_verdict_is_the_filter_answer_whenever_it_gives_one() -> None:
    rig = Rig()
    gang(rig.fake, "ok", 1, 2)
    gang(rig.fake, "big", 1, 16)  # two 8-GPU nodes: waits behind ok
    rig.fake.add("pods", make_pod("bad").gpus(2).annotate(
        **{"gpuroster.io/priority": "urgent!"}).build())
    rig.fake.add("pods", make_pod("partial").gpus(2).gang("partial", 2).build())
    rig.step()
    nodes = ["gpu-node-0", "gpu-node-1"]
    seen = {}
    for key in ("ns/ok-0", "ns/big-0", "ns/bad", "ns/partial"):
        pod = rig.fake.pod(key)
        why = rig.verbs.verdict(pod)
        passed, failed = rig.verbs.filter(pod, nodes)
        if why is not None:
            assert (passed, failed) == ([], dict.fromkeys(nodes, why)), key
        seen[key] = why
    assert seen["ns/ok-0"] is None  # admitted: the answer depends on the node
    assert all(seen[k] for k in ("ns/big-0", "ns/bad", "ns/partial")), seen


def test_a_deployment_takes_its_priority_from_the_priority_class_value() -> None:
    """With priority_class_values set, the cache watches PriorityClasses and a real-time
    Deployment whose template names one gets the class its value maps to; a class that
    appears later is picked up at the next round."""
    fake = FakeKube()
    fake.add("nodes", node(0))
    fake.add("configmaps", configmap("d", curve="[1]"))
    dep = deployment("svc", notes={"gpuroster.io/demand-configmap": "d"})
    dep["spec"]["template"]["spec"]["priorityClassName"] = "serving"
    fake.add("deployments", dep)
    settings = config.Settings(step_seconds=10, epoch=START,
                               priority_class_values={"critical": 1000000, "high": 1000})
    cache = watching.Cache(fake, priority_classes=True)
    ctl = stepping.Controller(settings, fake, cache, clock=clock_mod.FakeClock(START + 10))

    def priority() -> float:
        for i in cache.all():
            i.relist()
        ctl.run_step()
        return float(ctl.view["services"]["ns/svc"]["priority"])

    assert priority() == 2.0  # no such PriorityClass yet: the default class
    fake.add("priorityclasses", {"metadata": {"name": "serving"}, "value": 2000000})
    assert priority() == 8.0  # critical: 1000000 <= 2000000
    assert watching.Cache(fake).items("priorityclasses") == []  # not watched unless asked


def test_demand_above_its_curve_gets_headroom_and_the_gauges_show_it() -> None:
    rig = Rig(nodes=2)
    rig.fake.add("configmaps", configmap("d", curve="2"))
    rig.fake.add("deployments", deployment("chat", notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "4",
        "gpuroster.io/service-level": "0.99"}))
    rig.step()
    for _ in range(2):  # the curve comes true: no headroom
        rig.advance()
    st = rig.ctl.state
    assert st is not None
    assert st.service_headroom["ns/chat"] == 0 and st.service_level["ns/chat"] == 1.0
    assert st.service_objective["ns/chat"] == 0.99
    # monitoring sees 5 GPUs of demand for the next steps, against a curve of 2
    for k in range(3, 7):
        rig.fake.objects["configmaps"]["ns/d"]["data"]["observed"] = ",".join(
            ["2"] * 3 + ["5"] * (k - 3))
        rig.advance()
    st = rig.ctl.state
    assert st is not None
    assert st.service_headroom["ns/chat"] >= 2
    assert st.service_level["ns/chat"] < 0.99
    assert rig.fake.objects["deployments"]["ns/chat"]["spec"]["replicas"] >= 4
    metrics.set_state_source(lambda: rig.ctl.state)
    try:
        text = metrics.exposition().decode()
    finally:
        metrics.set_state_source(lambda: None)
    assert 'gpuroster_realtime_headroom_gpus{service="ns/chat"}' in text
    assert 'gpuroster_realtime_spare_gpus{service="ns/chat"}' in text
    # Its headroom gave it more than a reservation of the curve's 2 would have: ahead.
    assert st.service_lead["ns/chat"] > 0.01
    # The plan view says the same: what it holds over the forecast, and why.
    shown = rig.ctl.view["services"]["ns/chat"]
    assert shown["headroom"] == st.service_headroom["ns/chat"]
    assert shown["spare"] == st.service_spare["ns/chat"]
    assert shown["service_level_objective"] == 0.99
    assert shown["reservation_lead"] == st.service_lead["ns/chat"]
    assert 'gpuroster_realtime_reservation_lead{service="ns/chat"}' in text
    assert 'gpuroster_realtime_service_level_objective{service="ns/chat"} 0.99' in text


def test_a_policy_that_reads_no_lead_still_shows_it_on_the_page_and_the_gauge() -> None:
    # fifo holds its reservation and reads no record; the controller reads the lead once
    # for it, and the plan page and the gauge show the same figure.
    rig = Rig(nodes=2, policy="fifo")
    rig.fake.add("configmaps", configmap("d", curve="2"))
    rig.fake.add("deployments", deployment("chat", notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "4"}))
    rig.step()
    assert rig.ctl.view["services"]["ns/chat"]["reservation_lead"] is None  # no record yet
    for _ in range(3):
        rig.advance()
    st = rig.ctl.state
    assert st is not None and "ns/chat" in st.service_lead
    assert rig.ctl.view["services"]["ns/chat"]["reservation_lead"] == st.service_lead["ns/chat"]


@pytest.mark.parametrize(("bursts", "room"), [(False, False), (True, True)],
                         ids=["history-repeats", "bursts-the-forecaster-missed"])
def test_headroom_from_a_history_is_the_forecasters_error_replayed(bursts: bool,
                                                                   room: bool) -> None:
    rig = Rig(nodes=2)
    day = [1] * 6 + [4] * 12 + [1] * 6
    last = [x + 3 if bursts and h % 5 == 2 else x for h, x in enumerate(day)]
    rig.fake.add("configmaps", configmap("h", history=",".join(
        str(x) for x in day * 6 + last), **{"steps-per-day": "24"}))
    rig.fake.add("deployments", deployment("svc", notes={"gpuroster.io/demand-configmap": "h",
                                                         "gpuroster.io/max-swap": "8"}))
    rig.step()
    st = rig.ctl.state
    assert st is not None
    assert (st.service_headroom["ns/svc"] > 0) == room, st.service_headroom


def _headroom_at_first_step(rig: Rig, curve: list[int]) -> int:
    """The headroom the first plan holds for a service told `curve` (ConfigMap), nothing
    of its demand seen yet."""
    rig.fake.add("configmaps", configmap("d", curve="[" + ", ".join(map(str, curve)) + "]"))
    rig.fake.add("deployments", deployment("chat", notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "8"}))
    rig.step()
    st = rig.ctl.state
    assert st is not None
    return st.service_headroom["ns/chat"]


@pytest.mark.parametrize(("hours", "room"), [(0.0, False), (3.0, True), (None, True)])
def test_the_peak_shift_setting_reaches_the_plan(hours: float | None, room: bool) -> None:
    # A peak three steps ahead, nothing seen yet: with a timing tolerance (the default:
    # None) the plan holds the forecast widened toward it now (headroom over the
    # forecast); without, none.
    rig = Rig(nodes=1) if hours is None else Rig(nodes=1, peak_shift_hours=hours)
    assert (_headroom_at_first_step(rig, [2, 2, 2, 6, 6, 2, 2, 2]) > 0) == room


@pytest.mark.parametrize(("hours", "room"), [(0.0, False), (2.0, True), (None, True)])
def test_the_stand_in_setting_reaches_the_plan(hours: float | None, room: bool) -> None:
    # A forecast that zigzags and does not repeat within the day (a copy of yesterday's
    # demand), no error seen yet: with the stand-in (the default: None) its jitter
    # stands in for the error to come (headroom over it); with 0, none. (No timing
    # tolerance, which would hold headroom of its own.)
    extra: dict[str, Any] = {} if hours is None else {"stand_in_hours": hours}
    rig = Rig(nodes=1, step=3600.0, peak_shift_hours=0.0, **extra)
    day = [3, 4, 3, 5, 3, 4, 4, 6, 4, 5, 4, 5, 5, 6, 5, 4, 5, 3, 4, 3, 4, 2, 3, 2]
    told = day + [x + (1 if h % 3 == 0 else 0) for h, x in enumerate(day)]
    assert (_headroom_at_first_step(rig, told) > 0) == room


@pytest.mark.parametrize("spare", [True, False], ids=["spare-replicas", "no-spare-replicas"])
def test_a_service_over_its_forecast_gets_more_within_its_reservation(spare: bool) -> None:
    rig = Rig(nodes=2, spare_replicas=spare)
    rig.fake.add("configmaps", configmap("d", curve=",".join(["2"] * 6 + ["6"] * 6 + ["2"] * 12)))
    rig.fake.add("deployments", deployment("chat", notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "4"}))
    rig.step()
    rig.advance()
    st = rig.ctl.state
    assert st is not None and st.service_spare["ns/chat"] == 0  # the curve came true
    rig.fake.objects["configmaps"]["ns/d"]["data"]["observed"] = "3"  # one GPU over it
    rig.advance()
    st = rig.ctl.state
    assert st is not None
    replicas = rig.fake.objects["deployments"]["ns/chat"]["spec"]["replicas"]
    held = st.service_allocated["ns/chat"]
    assert replicas == held
    # Over its forecast, it is planned for more than the miss (its curve covers the worst
    # step seen, `servicing.cover`), and never more than its reservation, the peak of 6.
    assert 3 < held <= 6
    if not spare:
        assert st.service_spare["ns/chat"] == 0


def test_a_late_pod_of_an_admitted_gang_with_bad_annotations_gets_a_warning() -> None:
    rig = Rig(nodes=1)
    keys = gang(rig.fake, "g", 2, 2, d="600s")
    assert rig.step().admitted == ["ns/g"]
    for k in keys:
        end(rig, k, "Running")
    rig.fake.add("pods", make_pod("g-2").gpus(2).gang("g", 2).duration("600s")
                 .priority("urgent!").build())
    counted = metrics.REGISTRY.get_sample_value("gpuroster_annotation_errors_total") or 0.0
    rig.advance()
    _, failed = rig.verbs.filter(rig.fake.pod("ns/g-2"), ["gpu-node-0"])
    assert failed["gpu-node-0"].startswith("bad annotations: gpuroster.io/priority: 'urgent!'")
    (told,) = [e for e in rig.fake.events if e["involvedObject"]["name"] == "g-2"]
    assert (told["type"], told["reason"]) == ("Warning", "InvalidAnnotations")
    assert told["message"] == failed["gpu-node-0"]
    assert metrics.REGISTRY.get_sample_value("gpuroster_annotation_errors_total") == counted + 1
    assert all(ann.BLOCK in rig.notes(k) for k in keys)  # the running pods are left alone


def test_pods_of_a_deployment_with_a_misspelt_workload_get_a_warning_not_a_block() -> None:
    rig = Rig(nodes=1)
    rig.fake.add("deployments", deployment("svc", replicas=1, notes={
        "gpuroster.io/workload": "realtime-inferense", "gpuroster.io/demand-configmap": "d"}))
    rig.fake.add("pods", make_pod("svc-abc12-x").gpus(1).owned_by_deployment("svc").build())
    counted = metrics.REGISTRY.get_sample_value("gpuroster_annotation_errors_total") or 0.0
    r = rig.step()
    assert r.admitted == [] and ann.BLOCK not in rig.notes("ns/svc-abc12-x")
    _, failed = rig.verbs.filter(rig.fake.pod("ns/svc-abc12-x"), ["gpu-node-0"])
    assert failed["gpu-node-0"] == (
        "bad annotations: Deployment ns/svc: gpuroster.io/workload: unknown workload type "
        "'realtime-inferense' (one of training, batch-inference, quantization, "
        "realtime-inference)")
    (told,) = [e for e in rig.fake.events if e["involvedObject"]["name"] == "svc-abc12-x"]
    assert (told["type"], told["reason"]) == ("Warning", "InvalidAnnotations")
    assert metrics.REGISTRY.get_sample_value("gpuroster_annotation_errors_total") == counted + 1


def test_each_service_carries_the_gpus_it_was_planned_at_the_steps_before() -> None:
    # What the guard against the static reservation reads (`ServiceState.past_held`):
    # one count a past step, paired with its demand from the end, the last step's last.
    rig = Rig(nodes=1)
    rig.fake.add("configmaps", configmap("d", curve="[2, 4, 3]"))
    rig.fake.add("deployments", deployment("svc", notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "4"}))
    planned: list[int] = []
    for _ in range(4):
        rig.step() if not planned else rig.advance()
        planned.append(sum(rig.ctl.table.service_planned["ns/svc"].values()))
    inp, _ = rig.ctl.plan_input(rig.ctl.take_snapshot(), 4)
    (sv,) = inp.services
    assert sv.past_held == tuple(planned)
    # No gpuroster.io/service-level: the plan view shows the default objective.
    assert rig.ctl.view["services"]["ns/svc"]["service_level_objective"] == 0.995
    assert len(sv.past_held) <= len(sv.past_demand)
    # A step the controller did not plan breaks the record: it restarts after it.
    inp, _ = rig.ctl.plan_input(rig.ctl.take_snapshot(), 6)
    assert inp.services[0].past_held == ()


def test_the_record_of_what_services_were_planned_is_one_week_and_counts_a_service_given_none(
) -> None:
    # One record serves both the planner's hold (`past_held`) and the delivered service
    # level gauge (`held`): a service the round planned but the plan gave no GPUs held 0
    # there; steps a week old go, and so does a service not planned for a week.
    settings = config.Settings(step_seconds=3600.0)  # 24 steps a day: a week is 168
    b = planinput.Builder(settings, demand.Reader(settings))
    b.planned(0, {"a": frozenset({0, 1})}, ["a", "b"])
    assert dict(b.held("a")) == {0: 2} and dict(b.held("b")) == {0: 0}
    for step in range(1, 168):
        b.planned(step, {"a": frozenset({step % 4})}, ["a"])
    assert min(b.held("a")) == 0 and len(b.held("a")) == 168
    assert b.past_held("b", 1, 5) == (0,) and b.past_held("b", 2, 5) == ()  # b: no step 1
    b.planned(168, {"a": frozenset()}, ["a"])
    assert min(b.held("a")) == 1 and b.held("a")[168] == 0  # step 0 is a week old
    assert dict(b.held("b")) == {}  # not planned since step 0: forgotten
    assert b.past_held("a", 169, 3) == (1, 1, 0)
    with pytest.raises(TypeError):
        b.held("a")[0] = 5  # type: ignore[index]  # read only

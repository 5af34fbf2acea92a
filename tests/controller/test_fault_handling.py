"""Unit tests for what the fault and bad-input runs found (see e2e/test_faults.py,
e2e/test_bad_input.py): each pins one fix on the fake API server."""

from __future__ import annotations

import pytest

from extender.adapter import annotations as ann
from extender.adapter import kube
from extender.controller import verbs
from tests.controller.test_stepping import Rig, gang
from tests.kubefake import FakeKube, configmap, deployment, make_pod, node


@pytest.mark.parametrize(("text", "gpus"), [("1M", 1_000_000), ("4k", 4000), ("1Ki", 1024),
                                            ("8", 8), ("1e3", 1000)])
def test_gpu_quantities_as_the_api_server_writes_them(text: str, gpus: int) -> None:
    assert ann.pod_gpus({"containers": [{"resources": {"requests": {ann.GPU_RESOURCE: text}}}]}
                        ) == gpus


def test_a_pod_asking_a_million_gpus_is_told_not_ignored() -> None:
    rig = Rig()
    rig.fake.add("pods", make_pod("huge").gpus(1).duration("30s").build())
    rig.fake.objects["pods"]["ns/huge"]["spec"]["containers"][0]["resources"] = {
        "requests": {ann.GPU_RESOURCE: "1M"}, "limits": {ann.GPU_RESOURCE: "1M"}}
    rig.step()
    (e,) = [e for e in rig.fake.events if e["involvedObject"]["name"] == "huge"]
    assert e["type"] == "Warning" and "1000000 GPUs" in e["message"]


def test_a_gang_size_beyond_the_cluster_is_an_error_not_an_endless_wait() -> None:
    rig = Rig()
    rig.fake.add("pods", make_pod("p").gpus(2).gang("g", 10**20).duration("30s").build())
    rig.step()
    (e,) = [e for e in rig.fake.events if e["involvedObject"]["name"] == "p"]
    assert e["reason"] == "InvalidAnnotations" and "the cluster has 16" in e["message"]


def test_an_expected_duration_over_a_year_is_an_error() -> None:
    rig = Rig()
    rig.fake.add("pods", make_pod("p").gpus(2).duration("9" * 30 + "d").build())
    r = rig.step()
    assert r.admitted == []
    assert "longer than a year" in rig.fake.events[0]["message"]


def test_a_follower_passes_an_admitted_pod_on_its_annotated_node() -> None:
    rig = Rig()
    pod = make_pod("p").gpus(8).annotate(**{ann.BLOCK: "gpu-node-1:0-7",
                                            ann.NODE: "gpu-node-1"}).build()
    # the table has not caught up (no round yet): the pod's own annotations decide
    assert rig.verbs.filter(pod, ["gpu-node-0", "gpu-node-1"]) == (["gpu-node-1"], {})
    assert rig.verbs.prioritize(pod, ["gpu-node-0", "gpu-node-1"]) == [("gpu-node-1", 10)]
    assert verbs.admitted_node(make_pod("q").annotate(**{ann.NODE: "x"}).build()) is None


class FlakyEvents(FakeKube):
    def __init__(self) -> None:
        super().__init__()
        self.refuse_events = 1

    def create_event(self, namespace: str, body: dict[str, object]) -> None:
        if self.refuse_events:
            self.refuse_events -= 1
            raise kube.ApiError(0, "timeout")
        super().create_event(namespace, body)


def test_an_event_the_api_server_dropped_is_written_next_round() -> None:
    fake = FlakyEvents()
    for i in range(2):
        fake.add("pods", make_pod(f"bad-{i}").gpus(3).duration("30s").build())
        fake.add("nodes", node(i))
    rig = Rig(fake=fake)
    rig.step()
    assert len(fake.events) == 1  # the first Event was lost
    rig.advance()
    assert sorted(e["involvedObject"]["name"] for e in fake.events) == ["bad-0", "bad-1"]


def test_an_admitted_event_the_api_server_dropped_is_written_once_next_round() -> None:
    fake = FlakyEvents()
    fake.add("nodes", node(0))
    rig = Rig(fake=fake)
    keys = gang(fake, "g", 1, 8)
    assert rig.step().admitted == ["ns/g"]
    assert fake.events == []  # the Admitted Event was lost; the gang now runs
    rig.advance()
    rig.advance()
    told = [e for e in fake.events if e["reason"] == "Admitted"]
    assert [e["involvedObject"]["name"] for e in told] == [keys[0].split("/")[1]]
    assert "admitted at step" in told[0]["message"]


def test_a_running_gang_on_a_not_ready_node_is_reported_once() -> None:
    rig = Rig(nodes=2)
    keys = gang(rig.fake, "g", 1, 8)
    rig.step()
    on = rig.notes(keys[0])[ann.NODE]
    rig.fake.add("nodes", node(int(on.rsplit("-", 1)[1]), ready=False))
    rig.advance()
    rig.advance()
    told = [e for e in rig.fake.events if e["reason"] == "NodeNotReady"]
    assert len(told) == 1 and on in told[0]["message"] and told[0]["type"] == "Warning"


def test_a_gang_whose_node_goes_before_any_pod_binds_is_admitted_again_elsewhere() -> None:
    rig = Rig(nodes=2)
    keys = gang(rig.fake, "g", 2, 4)
    r = rig.step()
    assert r.admitted == ["ns/g"]
    first = rig.notes(keys[0])[ann.NODE]
    rig.fake.delete("nodes", first)  # no pod of g was bound
    r = rig.advance()
    assert r.admitted == ["ns/g"]
    again = {rig.notes(k)[ann.NODE] for k in keys}
    assert len(again) == 1 and first not in again
    assert rig.notes(keys[0])[ann.BLOCK].startswith(again.pop() + ":")
    assert rig.verbs.filter(rig.fake.pod(keys[0]), [first, "gpu-node-0", "gpu-node-1"])[0] == [
        rig.notes(keys[0])[ann.NODE]]


def test_a_gang_whose_node_goes_while_its_pods_sit_there_is_reported_not_moved() -> None:
    rig = Rig(nodes=2)
    keys = gang(rig.fake, "g", 1, 8)
    rig.step()
    on = rig.notes(keys[0])[ann.NODE]
    pod = rig.fake.pod(keys[0])
    pod["spec"]["nodeName"] = on  # bound: it ran there
    pod["status"]["phase"] = "Running"
    rig.fake.add("pods", pod)
    rig.fake.delete("nodes", on)
    r = rig.advance()
    assert r.admitted == []
    assert rig.notes(keys[0])[ann.NODE] == on
    told = [e for e in rig.fake.events if e["reason"] == "NodeLost"]
    assert told and on in told[-1]["message"]


def test_a_requeued_gang_that_must_wait_says_why() -> None:
    rig = Rig(nodes=2)
    keys = gang(rig.fake, "g", 1, 8)
    rig.step()
    first = rig.notes(keys[0])[ann.NODE]
    gang(rig.fake, "big", 1, 8)  # takes the other node at the next step
    rig.advance()
    rig.fake.delete("nodes", first)
    rig.advance()
    said = [e["message"] for e in rig.fake.events if e["reason"] == "Waiting"
            and keys[0].split("/")[1] in str(e.get("involvedObject", e))]
    assert any(f"admitted to {first}, which went before any of its pods bound" in m
               for m in said), said


def test_a_service_on_a_node_gone_not_ready_keeps_its_replicas_and_is_planned_elsewhere() -> None:
    # The GPUs of a NotReady node leave the plan at once; a service's replicas there are
    # lost, not swapped away: its count must not fall (2 -> 0 broke the swap cap on the
    # cluster), and the plan holds GPUs for it on a node that is left.
    rig = Rig(nodes=2)
    rig.fake.add("configmaps", configmap("d", curve="2"))
    rig.fake.add("deployments", deployment("svc", replicas=2, notes={
        "gpuroster.io/demand-configmap": "d", "gpuroster.io/max-swap": "1"}))
    rig.step()
    planned = rig.ctl.table.service_planned["ns/svc"]
    (on,) = [n for n, k in planned.items() if k]
    for i in range(2):
        rig.fake.add("pods", make_pod(f"svc-abc12-{i}").gpus(1).owned_by_deployment("svc")
                     .on(on).build())
    rig.advance()
    rig.fake.add("nodes", node(int(on.rsplit("-", 1)[1]), ready=False))
    for _ in range(3):
        rig.advance()
        assert rig.fake.objects["deployments"]["ns/svc"]["spec"]["replicas"] == 2
    planned = rig.ctl.table.service_planned["ns/svc"]
    assert planned.get(on, 0) == 0 and sum(planned.values()) == 2, planned

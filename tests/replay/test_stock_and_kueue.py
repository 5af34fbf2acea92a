"""The stock-scheduler and Kueue peers' pure parts: what they submit, how they scale,
how their grid is read back from pods."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from extender.planner import legality, metrics, model
from extender.replay import readback, world
from extender.replay.peers import kueue, stock
from tests.builders import scenario

ROOT = Path(__file__).resolve().parents[2]


def _seen(job: str, node: int, gpus: int, uid: str | None = None) -> tuple[str, str]:
    # (pod uid, node), as a sample keeps a job's pods; the GPUs per pod follow the job
    return (uid or f"{job}-{node}", f"bench-node-{node}")


def _sample(t: int, jobs: dict[str, list[tuple[str, str]]],
            services: dict[str, list[tuple[str, str]]] | None = None) -> readback.Sample:
    return readback.Sample(t, 0.0, services or {}, job_pods=jobs)


def _rebuild(s: object, samples: list[readback.Sample]) -> tuple[readback.Rebuilt, list[str]]:
    notes: list[str] = []
    assert isinstance(s, model.Scenario)
    return readback.rebuild_from_pods(s, samples, notes), notes


def test_a_partial_gang_holds_its_gpus_without_running_and_starts_when_its_last_pod_runs() -> None:
    # Two nodes of 4. "big" is 8 GPUs: two whole-node pods. Its first pod binds in step 0,
    # the second only in step 2: steps 0-1 are held (allocated, not useful), the job's
    # 2 steps of duration run 2-3.
    s = scenario().nodes(2, 4).window(5).job("big", gpus=8, d=2).build()
    a, b = _seen("big", 0, 4, "a"), _seen("big", 1, 4, "b")
    samples = [_sample(0, {"big": [a]}), _sample(1, {"big": [a]}), _sample(2, {"big": [a, b]}),
               _sample(3, {"big": [a, b]}), _sample(4, {})]
    r, notes = _rebuild(s, samples)
    assert r.starts == {"big": 2} and r.held is not None
    assert (r.grid[:, 2:4] == 0).all() and (r.grid[:, [0, 1, 4]] == -1).all()
    assert (r.held[0:4, 0:2] == 0).all() and (r.held[4:8, :] == -1).all()
    assert (r.held[:, 2:] == -1).all()
    m = metrics.compute(s, r.grid)
    assert m.utilization == pytest.approx(100 * 16 / 40)  # the held steps count for nothing
    assert m.jobs_completed == 1
    assert not legality.violations(s, r.grid)
    assert any("held by gangs not all running" in n for n in notes)


def test_a_gang_on_nodes_that_are_not_consecutive_is_drawn_where_it_ran_and_judged_illegal() -> (
    None
):
    s = scenario().nodes(3, 2).window(2).job("g", gpus=4, d=2).build()
    pods = [_seen("g", 0, 2, "x"), _seen("g", 2, 2, "y")]
    r, _ = _rebuild(s, [_sample(0, {"g": pods}), _sample(1, {"g": pods})])
    assert set(map(int, (r.grid[:, 0] == 0).nonzero()[0])) == {0, 1, 4, 5}
    assert any("not a legal contiguous block" in v for v in legality.violations(s, r.grid))


def test_pods_are_drawn_on_the_lowest_run_of_their_node_free_for_their_whole_life() -> None:
    # One node of 4: a (2 GPUs) runs steps 0-1, b (2 GPUs) steps 1-2: b goes above a.
    s = scenario().nodes(1, 4).window(3).job("a", gpus=2, d=2).job("b", gpus=2, d=2,
                                                                  arrival=1).build()
    pa, pb = _seen("a", 0, 2), _seen("b", 0, 2)
    samples = [_sample(0, {"a": [pa]}), _sample(1, {"a": [pa], "b": [pb]}),
               _sample(2, {"b": [pb]})]
    r, _ = _rebuild(s, samples)
    assert r.grid[:, 0].tolist() == [0, 0, -1, -1]
    assert r.grid[:, 1].tolist() == [0, 0, 1, 1]
    assert r.grid[:, 2].tolist() == [-1, -1, 1, 1]
    assert not legality.violations(s, r.grid)


def test_services_are_drawn_around_job_pods_and_held_gpus() -> None:
    s = (scenario().nodes(1, 4).window(2).job("big", gpus=4, d=1)
         .service("chat", [1, 1]).build())
    # a 4-GPU job is one pod on a 4-GPU node; nothing else fits beside it
    p = _seen("big", 0, 4)
    samples = [_sample(0, {"big": [p]}, {"chat": []}),
               _sample(1, {}, {"chat": [("c1", "bench-node-0")]})]
    r, _ = _rebuild(s, samples)
    assert r.grid[3, 1] == 1 and (r.grid[:, 0] == 0).all()


@pytest.mark.parametrize(
    ("t", "current", "demand_before", "swap", "want"),
    [(0, 0, None, 2, 3), (1, 3, 7, 2, 5), (1, 5, 1, 2, 3), (1, 3, 4, 2, 4)],
    ids=["first-step-forecast", "up-by-the-cap", "down-by-the-cap", "within-the-cap"],
)
def test_reactive_replicas_follow_last_steps_demand_within_the_swap_cap(
    t: int, current: int, demand_before: int | None, swap: int, want: int
) -> None:
    demand = [demand_before if demand_before is not None else 0, 0]
    s = scenario().window(2).service("chat", demand, forecast=[3, 3], max_swap=swap).build()
    assert kueue.reactive_replicas(s.services[0], t, current) == want


def test_kueue_gets_the_gpus_the_services_do_not_reserve() -> None:
    s = (scenario().nodes(2, 8).window(3).service("a", [1, 1, 1], forecast=[1, 4, 2])
         .service("b", [1, 1, 1], forecast=[2, 2, 2]).build())
    assert kueue.quota(s, reactive=False) == 16 - 4 - 2
    assert kueue.quota(s, reactive=True) == 16


def test_a_job_becomes_a_suspended_indexed_job_with_one_pod_per_node_sized_piece() -> None:
    s = scenario().nodes(2, 8).job("big", gpus=16, priority=4).job("small", gpus=2).build()
    big = kueue.job_body(s.jobs[0], 8, "ns")
    small = kueue.job_body(s.jobs[1], 8, "ns")
    assert big["spec"]["suspend"] is True and big["spec"]["completionMode"] == "Indexed"
    assert big["spec"]["parallelism"] == big["spec"]["completions"] == 2
    req = big["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert req == {"nvidia.com/gpu": "8"}
    assert big["metadata"]["labels"][kueue.QUEUE_LABEL] == kueue.QUEUE
    assert big["metadata"]["labels"][kueue.PRIORITY_LABEL] == "gpuroster-bench-p4"
    assert small["spec"]["template"]["metadata"]["annotations"] == {
        kueue.REQUIRED_TOPOLOGY: kueue.HOSTNAME}
    spec = big["spec"]["template"]["spec"]
    assert spec["schedulerName"] == stock.SCHEDULER_NAME and spec["restartPolicy"] == "Never"
    assert [len(world.job_pods(j, 8, "ns")) for j in s.jobs] == [2, 1]


def test_priority_classes_never_preempt_and_keep_the_order_of_priorities() -> None:
    s = (scenario().window(1).job("a", priority=1).job("b", priority=2.5)
         .service("c", [1], priority=5).build())
    pcs = stock.priority_classes(s)
    assert [p["value"] for p in pcs] == [1000, 2500, 5000]
    assert {p["preemptionPolicy"] for p in pcs} == {"Never"}
    assert pcs[1]["metadata"]["name"] == "gpuroster-bench-p2-5"


def test_the_kueue_setup_fills_only_what_the_recorded_configuration_marks_filled() -> None:
    setup = kueue.render(quota=12, priorities=[1, 4, 4], namespace="ns", step_seconds=2.5,
                         health_port=1, webhook_port=2, cert_dir=Path("/c"))
    cfg = setup.configuration
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["waitForPodsReady"]["timeout"] == "2.5s"
    assert cfg["waitForPodsReady"]["blockAdmission"] is False
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 2, "certDir": "/c"}
    kinds = [o["kind"] for o in setup.objects]
    assert kinds == ["Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue",
                     "WorkloadPriorityClass", "WorkloadPriorityClass"]
    cq = setup.objects[2]["spec"]
    assert cq["queueingStrategy"] == "BestEffortFIFO"
    assert cq["preemption"] == {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"}
    assert cq["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 12
    assert setup.objects[3]["metadata"]["namespace"] == "ns"
    with pytest.raises(ValueError, match="quota"):
        kueue.render(quota=-1, priorities=[], namespace="ns", step_seconds=1, health_port=1,
                     webhook_port=2, cert_dir=Path("/c"))


def test_the_build_pins_the_kueue_version_the_replay_runs() -> None:
    script = (ROOT / "extender" / "localcluster" / "build-control-plane.sh").read_text()
    pinned = re.search(r'KUEUE_VERSION="\$\{KUEUE_VERSION:-(v[0-9.]+)\}"', script)
    assert pinned and pinned.group(1) == kueue.VERSION

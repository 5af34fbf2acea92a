"""The replay's read-back: the grid rebuilt from what the cluster did."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from extender.adapter import annotations as ann
from extender.replay import readback, world
from tests.builders import scenario


def _job_pod(job: str, block: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=f"{job}-0", labels={"gpuroster.io/job": job},
                                  annotations={ann.BLOCK: block}),
        spec=k8s.V1PodSpec(containers=[], node_name="bench-node-0"))


def _moves(row_of_step: list[int]) -> int:
    return sum(1 for a, b in zip(row_of_step, row_of_step[1:], strict=False) if a != b)


def test_a_service_pod_with_no_gpu_free_for_its_whole_life_moves_as_little_as_it_can() -> None:
    # One node of 4 GPUs. c holds GPUs 0-1 throughout; a holds GPU 3 in step 1, b holds
    # GPU 2 in step 3. A service pod lives steps 0-3: no GPU is free all that time, but
    # GPU 2 is free for steps 0-2 and GPU 3 for step 3 on: one move, not two.
    s = (scenario().nodes(1, 4).window(4)
         .job("c", gpus=2, d=4).job("a", gpus=1, d=1).job("b", gpus=1, d=1)
         .service("chat", [1, 1, 1, 1]).build())
    pods = [_job_pod("c", "bench-node-0:0-1"), _job_pod("a", "bench-node-0:3-3"),
            _job_pod("b", "bench-node-0:2-2")]
    bound = {0: {"c"}, 1: {"c", "a"}, 2: {"c", "a"}, 3: {"c", "a", "b"}}
    samples = [readback.Sample(t, 0.0, {"chat": [("uid-1", "bench-node-0")]}, bound[t])
               for t in range(4)]
    notes: list[str] = []
    grid, starts, _ = readback.rebuild(s, pods, samples, 0.0, 1.0, notes)
    assert starts == {"c": 0, "a": 1, "b": 3}
    svc = len(s.jobs)  # the service's index in the grid
    where = [int(next(g for g in range(4) if grid[g, t] == svc)) for t in range(4)]
    assert where == [2, 2, 2, 3], grid
    assert _moves(where) == 1
    assert not [n for n in notes if "no free GPU" in n]


class _Pods:
    """A CoreV1Api that lists the given pods (the sample's only call)."""

    def __init__(self, pods: list[k8s.V1Pod]) -> None:
        self.pods = pods

    def list_namespaced_pod(self, ns: str, label_selector: str = "") -> k8s.V1PodList:
        return k8s.V1PodList(items=self.pods)


def _gang_pod(job: str, i: int, node: str | None) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=f"{job}-{i}", uid=f"{job}-{i}",
                                  labels={world.BENCH_LABEL: "job", world.JOB_LABEL: job}),
        spec=k8s.V1PodSpec(containers=[], node_name=node),
        status=k8s.V1PodStatus(phase="Running" if node else "Pending"))


def test_a_gang_counts_bound_only_with_all_its_pods_and_a_partial_one_stays_visible() -> None:
    # Two nodes of 4 GPUs; "big" needs 8 GPUs: two whole-node pods. Pods made by a
    # controller (a batch/v1 Job) may not all exist yet: one pod, bound, is not a gang.
    s = scenario().nodes(2, 4).window(4).job("big", gpus=8, d=2).job("small", gpus=1, d=1).build()
    one = readback.sample(_Pods([_gang_pod("big", 0, "bench-node-0"),
                                 _gang_pod("small", 0, "bench-node-1")]), "ns", 0, s)
    assert one.bound_jobs == {"small"}
    assert one.job_pods["big"] == [("big-0", "bench-node-0")]
    two = readback.sample(_Pods([_gang_pod("big", 0, "bench-node-0"),
                                 _gang_pod("big", 1, "bench-node-1")]), "ns", 1, s)
    assert two.bound_jobs == {"big"}
    half = readback.sample(_Pods([_gang_pod("big", 0, "bench-node-0"),
                                  _gang_pod("big", 1, None)]), "ns", 2, s)
    assert half.bound_jobs == set()


class _Patches:
    """A CoreV1Api that lists the given pods and records the patches sent to them."""

    def __init__(self, pods: list[k8s.V1Pod]) -> None:
        self.pods = pods
        self.patched: dict[str, str] = {}

    def list_namespaced_pod(self, namespace: str, label_selector: str = "") -> object:
        return k8s.V1PodList(items=self.pods)

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.patched[name] = body["metadata"]["annotations"][world.SIMULATED_RUNTIME]


def _admitted_pod(job: str, step: int) -> k8s.V1Pod:
    p = _job_pod(job, "bench-node-0:0-0")
    assert p.metadata is not None and p.metadata.annotations is not None  # _job_pod sets both
    p.metadata.annotations[ann.ADMITTED_AT] = f"1970-01-01T00:00:{10 * step + 1:02d}Z"
    return p


def test_a_gang_bound_a_step_after_its_admission_runs_its_duration_from_the_admission() -> None:
    # Steps of 10 s from t0 = 0. "late" was admitted in step 1 and bound in step 2 (GPUs
    # still held by a service's pod on its way out); "prompt" was admitted and bound in
    # step 1; "stale" was admitted in step 0 and bound in step 2, not a step's delay.
    s = (scenario().nodes(1, 4).window(10)
         .job("late", gpus=1, d=3).job("prompt", gpus=1, d=3).job("stale", gpus=1, d=3)
         .build())
    core = _Patches([_admitted_pod("late", 1), _admitted_pod("prompt", 1),
                     _admitted_pod("stale", 0)])
    world.schedule_ends(core, "ns", s, 0.0, 10.0, {"late": 2, "prompt": 1, "stale": 2}, [])

    def step_of(end: str) -> int:
        return int(world.ts(end) // 10)

    assert step_of(core.patched["late-0"]) == 3  # its last step: 1 + 3 - 1
    assert step_of(core.patched["prompt-0"]) == 3
    assert step_of(core.patched["stale-0"]) == 4  # from its bind: 2 + 3 - 1
    samples = [readback.Sample(t, 0.0, {}, {"late"} if t >= 2 else set()) for t in range(4)]
    notes: list[str] = []
    _, starts, ends = readback.rebuild(s, [_admitted_pod("late", 1)], samples, 0.0, 10.0, notes)
    assert (starts["late"], ends["late"]) == (1, 4)  # drawn from its admission, as it ran
    assert any("admitted in step 1, its gang bound in step 2" in n for n in notes)

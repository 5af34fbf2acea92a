"""`gpuroster whatif` rebuilds a replay from Prometheus alone, exactly.

A small scenario (four 4-GPU nodes, two services, jobs of 1, 2 and 4 GPUs, one
of which waits for a whole node, and a two-pod gang) is replayed on a control
plane of its own under the stock kube-scheduler (the `default` peer), its pods
annotated as a gpuroster user annotates them before adopting it (gang, workload;
priority and expected
duration on some jobs only: the others' come from their PriorityClass and from
what was observed). A real Prometheus (the harness's build) scrapes, every
second, the kube-state-metrics stand-in (e2e/ksm_standin.py: the Go module proxy
refuses KSM itself; it writes KSM v2's series, started with the allowlist flags
docs/try-it-first.md gives), and a gauge of one service's true demand, which its
Deployment names in `gpuroster.io/demand-query` (the stock peer holds the service
at its peak: the static reservation). Then `gpuroster whatif` reads Prometheus
alone and must give every job's arrival step, GPUs, gang, priority and duration
as replayed, both services' demand (one from its query, one from its replica
history), the GPU-hours the reservation held above demand, and the replay's
read-back grid cell for cell (and its GPUs held by a partial gang, if any).

The step mapping is explicit: the replay counts an event in step k when its
sample of step k (0.85 into the step) first sees it, and the stock peer acts
right after each sample; so whatif's steps are cut 2 s before each sample, in
the quiet part of the step, and Kubernetes' whole-second times (rounded down)
stay inside their step.
"""

from __future__ import annotations

import json
import subprocess
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import yaml

from e2e.ksm_standin import KsmStandin
from e2e.test_prometheus import Gauge, instant, running_prometheus
from extender import cli, replay
from extender.adapter import annotations as ann
from extender.localcluster import binaries_dir, free_port, processes
from extender.localcluster.waiting import wait_for
from extender.planner import model
from extender.replay import driving, world
from extender.replay.peers import Context, stock
from extender.whatif import reading
from tests.builders import scenario

STEP_SECONDS = 6.0
STEP_MINUTES = 60
CUT_BEFORE_SAMPLE = 2.0
# jobs told their priority and expected duration by annotation; the rest by their
# PriorityClass and their observed duration
ANNOTATED = {"wide": 2, "one": 3, "big": 2}  # job -> expected duration (steps)
INFER_DEMAND = [1, 0, 0, 1, 1, 0, 0, 1]
DEMAND_QUERY = 'max(demand_gpus{job="demand"})'


def _scenario() -> model.Scenario:
    return (
        scenario("whatif-small").nodes(4, 4).window(8)
        .job("wide", gpus=4, d=2, arrival=0, priority=4)
        .job("wide2", gpus=4, d=2, arrival=0, priority=1)
        .job("wide3", gpus=4, d=2, arrival=0, priority=2)  # runs unless a service has its node
        .job("half", gpus=2, d=3, arrival=1, priority=2)
        .job("queued", gpus=4, d=2, arrival=1, priority=2)  # no whole node free until step 2
        .job("big", gpus=8, d=2, arrival=4, priority=8)
        .job("late", gpus=2, d=2, arrival=5, priority=1)
        .job("one", gpus=1, d=1, arrival=6, priority=1)
        .job("last", gpus=1, d=1, arrival=7, priority=2)
        .service("chat", [1] * 8, priority=5)
        .service("infer", INFER_DEMAND, priority=2)  # held at its peak, 1, by the stock peer
        .build()
    )


class AnnotatedStockPeer(stock.DefaultPeer):
    """The stock scheduler, its job pods annotated as a user of gpuroster annotates them,
    `infer`'s Deployment naming its demand query."""

    def setup(self, ctx: Context) -> None:
        super().setup(ctx)
        ctx.apps.patch_namespaced_deployment("infer", ctx.namespace, {"metadata": {
            "annotations": {ann.DEMAND_QUERY: DEMAND_QUERY}}})

    def submit(self, ctx: Context, job: model.Job, t: int) -> None:
        g = ctx.scenario.cluster.gpus_per_node
        count, _ = world.gang_shape(job, g)
        annotations = {ann.GANG: job.name, ann.GANG_SIZE: str(count), ann.WORKLOAD: job.type}
        if job.name in ANNOTATED:
            annotations[ann.PRIORITY] = f"{job.priority:g}"
            annotations[ann.EXPECTED_DURATION] = f"{ANNOTATED[job.name] * STEP_MINUTES}m"
        for pod in world.job_pods(job, g, ctx.namespace, annotations=annotations,
                                  spec=stock.pod_extras(job.priority)):
            ctx.core.create_namespaced_pod(ctx.namespace, pod)


@contextmanager
def kube_state_metrics(kubeconfig: str, work: Path) -> Iterator[str]:
    """host:port of kube-state-metrics' /metrics for the cluster of `kubeconfig`: the real
    one where the control-plane build has it (KSM_VERSION set in build-control-plane.sh;
    never so far: the module proxy refuses it, so this branch has not run), else the
    stand-in. Either way with the allowlist flags the docs give (`reading.KSM_ARGS`)."""
    found = sorted(binaries_dir().glob("kube-state-metrics-*"))
    print(f"[e2e] kube-state-metrics: {found[-1].name if found else 'the stand-in'}")
    if not found:
        standin = KsmStandin(world.api(kubeconfig), reading.KSM_ARGS)
        standin.start()
        try:
            yield f"127.0.0.1:{standin.port}"
        finally:
            standin.stop()
        return
    port, telemetry = free_port(), free_port()
    work.mkdir(parents=True, exist_ok=True)
    with (work / "kube-state-metrics.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(found[-1]), f"--kubeconfig={kubeconfig}", "--host=127.0.0.1", f"--port={port}",
             "--telemetry-host=127.0.0.1", f"--telemetry-port={telemetry}",
             "--resources=pods,nodes,deployments,replicasets", *reading.KSM_ARGS],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        processes.stop_process(proc)


def _named(grid: np.ndarray, names: list[str]) -> list[list[str | None]]:
    return [[names[i] if i >= 0 else None for i in row] for row in grid.tolist()]


def test_whatif_rebuilds_a_stock_scheduler_replay_from_prometheus_alone(tmp_path: Path) -> None:
    s = _scenario()
    S, T = STEP_SECONDS, s.duration_steps
    with replay.local_cluster() as (kubeconfig, port):
        # infer's true demand in step t, set right after the replay's sample of step t-1
        gauge = Gauge(INFER_DEMAND[0])

        def next_demand(t: int, peer: object) -> None:
            gauge.value = INFER_DEMAND[min(t + 1, T - 1)]

        try:
            bins = types.SimpleNamespace(bin_dir=binaries_dir())
            with kube_state_metrics(kubeconfig, tmp_path / "ksm") as ksm, running_prometheus(
                    bins, tmp_path, {"ksm": ksm, "demand": f"127.0.0.1:{gauge.port}"}) as url:  # type: ignore[arg-type]
                wait_for(lambda: instant(url, 'up{job="ksm"} == 1'), 30,
                         "Prometheus to scrape kube-state-metrics (or its stand-in)")
                started = time.time()
                rep = replay.play(s, AnnotatedStockPeer(), kubeconfig, port, step_seconds=S,
                                  work_dir=tmp_path / "replay", on_step=next_demand)
                print(f"[e2e] replay: {time.time() - started:.0f} s; starts {rep.starts}; "
                      f"notes {rep.notes}")
                origin = rep.t0 - (1 - driving.SAMPLE_AT) * S - CUT_BEFORE_SAMPLE
                until = origin + T * S
                # Scraped past the window's end (not a fixed while after it): both targets'
                # last scrape, which Prometheus stamps on `up`, is later than `until`.
                wait_for(lambda: all(instant(url, f'timestamp(up{{job="{job}"}}) > {until + 1:.3f}')
                                     for job in ("ksm", "demand")), 30,
                         "Prometheus to scrape kube-state-metrics and the demand gauge past "
                         "the window's end")
                classes = {stock.priority_class(p): p for p in (1, 2, 4, 5, 8)}
                out = tmp_path / "whatif"
                t = time.time()
                rc = cli.main(["whatif", "--prometheus", url, "--since", f"{origin:.3f}",
                               "--until", f"{until:.3f}", "--step", f"{S:g}s",
                               "--step-minutes", str(STEP_MINUTES), "--out", str(out),
                               "--name", "whatif-small", "--namespace", "gpuroster-bench",
                               "--priority-classes", json.dumps({**classes, "normal": 2})])
                print(f"[e2e] whatif: {time.time() - t:.1f} s")
                assert rc == 0
        finally:
            gauge.httpd.shutdown()
    # every job ran inside the window in the replay: the comparison is whole; and one
    # waited (no whole node was free in step 1), so a start after arrival is compared too
    assert set(rep.starts) == {j.name for j in s.jobs}, rep.starts
    assert rep.starts["queued"] > 1, rep.starts
    rebuilt = yaml.safe_load((out / "scenario.yaml").read_text())
    summary = json.loads((out / "whatif.json").read_text())
    got = {j["name"]: j for j in rebuilt["jobs"]}
    assert set(got) == {j.name for j in s.jobs}, summary["notes"]
    G = s.cluster.gpus_per_node
    for j in s.jobs:
        r = got[j.name]
        seen = (r["arrival_step"], r["gpus"], summary["jobs"][j.name]["pods"], r["priority"],
                r["duration_steps"])
        assert seen == (j.arrival_step, j.gpus, world.gang_shape(j, G)[0], j.priority,
                        j.duration_steps), (j.name, seen, summary["notes"])
        src = summary["jobs"][j.name]
        if j.name in ANNOTATED:
            assert (src["priority"], src["estimate"]) == ("annotation", "annotation")
            assert r["estimate_steps"] == ANNOTATED[j.name]
        else:
            assert src["priority"] == f"PriorityClass {stock.priority_class(j.priority)}"
            assert (src["estimate"], r["estimate_steps"]) == ("observed", j.duration_steps)
    assert rebuilt["cluster"] == {"nodes": 4, "gpus_per_node": 4}
    services = {v["name"]: v for v in rebuilt["services"]}
    assert (services["chat"]["demand"], services["chat"]["priority"]) == ([1] * T, 5)
    assert (services["infer"]["demand"], services["infer"]["priority"]) == (INFER_DEMAND, 2)
    # the stock peer held infer at its peak all along: each step below it is a GPU-hour
    # reserved, not used
    held_idle = sum(max(INFER_DEMAND) - d for d in INFER_DEMAND)
    assert summary["verdict"]["actual"]["reserved_idle_gpu_hours"] == held_idle
    # what happened, cell for cell as the replay read it back
    actual = json.loads((out / "whatif-small.actual.json").read_text())
    assert actual["grid"] == _named(rep.grid, rep.names)
    assert rep.held is not None
    assert actual["held"] == _named(rep.held, rep.names)
    assert actual["source"] == "prometheus"
    print("[e2e] whatif verdict:", json.dumps(summary["verdict"]))

"""Reading back what the cluster did: samples each step, the grid at the end.

Peer-independent: it reads pods by the labels `world` defines (who created
them does not matter), so a gang is bound when `world.gang_shape` pods of it
are, whatever object made them. A sample also keeps every bound job pod
(`Sample.job_pods`, those still holding GPUs), so a gang whose pods did not all
run stays visible: `rebuild` notes it ("partial gang") and draws only whole
gangs; `rebuild_from_pods`, for peers that can leave gangs partial, draws every
pod and counts a partial gang's GPUs as held: allocated, not useful.

Where a job's GPUs are is the admission block annotation (`gpuroster.io/block`,
the adapter's public contract) by default; a peer whose scheduler writes none
passes its own `BlockReader` to `rebuild`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from extender.adapter import annotations as ann
from extender.planner import model, observed
from extender.replay import world


@dataclass
class Sample:
    step: int
    at: float
    service_pods: dict[str, list[tuple[str, str]]]  # service -> [(pod uid, node)]
    bound_jobs: set[str] = field(default_factory=set)  # jobs whose whole gang is bound
    done_jobs: set[str] = field(default_factory=set)  # jobs whose pods all finished
    # job -> [(pod uid, node)] of its pods holding GPUs (bound, not finished, not
    # being deleted), whole gangs or not
    job_pods: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


@dataclass
class Rebuilt:
    """A replay's grid: `grid` holds what ran (jobs whose whole gang runs, services);
    `held`, if any, the job holding each GPU whose gang does not all run."""

    grid: np.ndarray
    starts: dict[str, int]
    ends: dict[str, int]
    held: np.ndarray | None = None


@dataclass(frozen=True)
class StepView:
    """What the cluster looked like late in one step: for live tables and progress."""

    step: int
    steps: int
    job_gpus: int  # GPUs held by running job pods
    queued_jobs: int  # jobs submitted whose gang is not bound yet
    demand: dict[str, int]  # service -> true demand this step
    replicas: dict[str, int]  # service -> bound pods this step
    gpus: int
    useful: int  # job GPUs + per service min(replicas, demand)
    value: float  # MODEL.md's value of this step


# (job name, all its pods, node name -> node index, GPUs per node, notes) ->
# the job's block, or None (with a note) when it cannot be placed on the grid.
BlockReader = Callable[[str, Sequence[Any], dict[str, int], int, list[str]], "model.Block | None"]


def admission_block(
    name: str, members: Sequence[Any], node_index: dict[str, int], g: int, notes: list[str]
) -> model.Block | None:
    """The block gpuroster (or its fifo) admitted the gang to, from its annotation."""
    label = (members[0].metadata.annotations or {}).get(ann.BLOCK)
    if not label:
        notes.append(f"{name}: bound without a {ann.BLOCK} annotation")
        return None
    return ann.parse_block(label, node_index, g)


def pod_churn(samples: list[Sample], services: list[str]) -> dict[str, list[int]]:
    """Per service and step: pods that appeared plus pods that went since the step
    before, by uid: what the swap cap means for pods, which carry no GPU identity."""
    out: dict[str, list[int]] = {}
    for name in services:
        prev: set[str] | None = None
        steps = []
        for sample in samples:
            now = {uid for uid, _ in sample.service_pods.get(name, [])}
            steps.append(0 if prev is None else len(now ^ prev))
            prev = now
        out[name] = steps
    return out


def sample(core: Any, ns: str, t: int, s: model.Scenario) -> Sample:
    """The pods of the replay late in step t."""
    g = s.cluster.gpus_per_node
    size = {j.name: world.gang_shape(j, g)[0] for j in s.jobs}
    out: dict[str, list[tuple[str, str]]] = {v.name: [] for v in s.services}
    gangs: dict[str, list[bool]] = {}
    finished: dict[str, list[bool]] = {}
    placed: dict[str, list[tuple[str, str]]] = {}
    for p in core.list_namespaced_pod(ns, label_selector=world.BENCH_LABEL).items:
        labels = p.metadata.labels or {}
        if labels.get(world.BENCH_LABEL) == "job":
            job = labels.get(world.JOB_LABEL, "")
            gangs.setdefault(job, []).append(bool(p.spec.node_name))
            phase = p.status.phase if p.status else None
            over = phase in ("Succeeded", "Failed")
            if p.spec.node_name and not over and p.metadata.deletion_timestamp is None:
                placed.setdefault(job, []).append((p.metadata.uid, p.spec.node_name))
            finished.setdefault(job, []).append(over)
            continue
        app = labels.get("app")
        if app in out and p.spec.node_name and p.metadata.deletion_timestamp is None:
            out[app].append((p.metadata.uid, p.spec.node_name))

    def whole(name: str, members: list[bool]) -> bool:
        return bool(members) and all(members) and len(members) >= size.get(name, 0)

    bound = {name for name, members in gangs.items() if whole(name, members)}
    done = {name for name, members in finished.items() if whole(name, members)}
    return Sample(t, time.time(), out, bound, done, placed)


def view(sample: Sample, s: model.Scenario, submitted: set[str], t: int) -> StepView:
    jobs = {j.name: j for j in s.jobs}
    running = {n for n in sample.bound_jobs - sample.done_jobs if n in jobs}
    replicas = {v.name: len(sample.service_pods.get(v.name, [])) for v in s.services}
    return StepView(
        step=t,
        steps=s.duration_steps,
        job_gpus=sum(jobs[n].gpus for n in running),
        queued_jobs=len(submitted - sample.bound_jobs),
        demand={v.name: v.demand[t] for v in s.services},
        replicas=replicas,
        gpus=s.cluster.gpus,
        useful=sum(jobs[n].gpus for n in running)
        + sum(min(replicas[v.name], v.demand[t]) for v in s.services),
        value=sum(jobs[n].gpus * jobs[n].priority for n in running)
        + sum(min(replicas[v.name], v.demand[t]) * v.priority for v in s.services),
    )


def first_bound(samples: list[Sample]) -> dict[str, int]:
    """The step each job really started: the first sample with its whole gang bound."""
    out: dict[str, int] = {}
    for smp in samples:
        for name in smp.bound_jobs:
            out.setdefault(name, smp.step)
    return out


def rebuild(
    s: model.Scenario,
    pods: list[Any],
    samples: list[Sample],
    t0: float,
    S: float,
    notes: list[str],
    block_of: BlockReader = admission_block,
) -> tuple[np.ndarray, dict[str, int], dict[str, int]]:
    """The grid as the cluster ran it: job blocks from admission, services from samples."""
    G, N, T = s.cluster.gpus_per_node, s.cluster.gpus, s.duration_steps
    node_index = {f"{world.NODE_PREFIX}{i}": i for i in range(s.cluster.nodes)}
    bound_at = first_bound(samples)
    index = {j.name: i for i, j in enumerate(s.jobs)}
    nj = len(s.jobs)
    grid = np.full((N, T), -1, dtype=np.int32)
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    by_job: dict[str, list[Any]] = {}
    for p in pods:
        by_job.setdefault((p.metadata.labels or {}).get(world.JOB_LABEL, ""), []).append(p)
    jobs = {j.name: j for j in s.jobs}
    for name, members in sorted(by_job.items()):
        j = jobs.get(name)
        if j is None:
            continue
        a = members[0].metadata.annotations or {}
        bound = [p for p in members if p.spec.node_name]
        if not bound:
            continue
        size = max(len(members), world.gang_shape(j, G)[0])
        if len(bound) != size:
            notes.append(f"{name}: only {len(bound)} of {size} pods bound (partial gang)")
        block = block_of(name, members, node_index, G, notes)
        if block is None:
            continue
        if name not in bound_at:
            notes.append(f"{name}: bound after the last sample")
            continue
        bound_step = bound_at[name]
        admitted = world.admitted_step(a, t0, S)
        if admitted is not None and admitted != bound_step:
            notes.append(
                f"{name}: admitted in step {admitted}, its gang bound in step "
                f"{bound_step} (GPUs still held by pods on their way out)"
            )
        # Drawn from the step its duration runs from, as `world.schedule_ends` ends it.
        start = world.run_start(a, bound_step, t0, S)
        finished = [_finished_at(p) for p in members]
        end = start + j.duration_steps
        if all(f is not None for f in finished):
            ended = int(np.floor((max(f for f in finished if f) - t0) / S + 1e-9))
            if abs(ended - end) > 1:  # finishedAt has whole seconds: +-1 step is noise
                notes.append(f"{name}: ended in step {ended}, its true duration says {end}")
        if start >= T:
            continue
        starts[name], ends[name] = start, end
        if start < j.arrival_step:
            notes.append(f"{name}: admitted in step {start}, before its arrival {j.arrival_step}")
        grid[block.start : block.end, start : min(end, T)] = index[name]
    # Services: Kubernetes counts GPUs per node, not which ones. A pod never changes
    # node, so it is drawn on one GPU of its node that stays free (of job blocks and
    # other service pods) for its whole life, highest first; only where none does
    # is it drawn in runs: from each step, on the GPU that stays free the longest
    # (fewest moves for this pod; a move is bookkeeping, the pod never left).
    lives: dict[str, tuple[int, str, list[int]]] = {}  # uid -> (service, node, steps)
    for smp in samples:
        for k, v in enumerate(s.services):
            for uid, node in smp.service_pods.get(v.name, []):
                lives.setdefault(uid, (k, node, []))[2].append(smp.step)
    for _uid, (k, node, steps) in sorted(lives.items(), key=lambda x: (x[1][2][0], x[0])):
        i = node_index.get(node)
        if i is None:
            continue
        observed.draw_service_pod(grid, range(i * G + G - 1, i * G - 1, -1), steps, nj + k,
                                  notes, f"{s.services[k].name}: a pod finds no free GPU on {node}")
    return grid, starts, ends


def _finished_at(pod: Any) -> float | None:
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        term = cs.state.terminated if cs.state else None
        if term is not None and term.finished_at is not None:
            return world.ts(term.finished_at)
    if pod.status and pod.status.phase == "Succeeded" and pod.status.conditions:
        times = [c.last_transition_time for c in pod.status.conditions if c.last_transition_time]
        if times:
            return max(world.ts(x) for x in times)
    return None


def gang_starts(s: model.Scenario, samples: list[Sample]) -> dict[str, int]:
    """The step each job's whole gang first held its GPUs: every one of its pods running."""
    g = s.cluster.gpus_per_node
    out: dict[str, int] = {}
    for smp in samples:
        for j in s.jobs:
            if j.name not in out and len(smp.job_pods.get(j.name, [])) >= world.gang_shape(j, g)[0]:
                out[j.name] = smp.step
    return out


def rebuild_from_pods(s: model.Scenario, samples: list[Sample], notes: list[str]) -> Rebuilt:
    """The grid from the samples alone, for peers whose scheduler writes no block.

    Kubernetes gives pods no GPU index, so each job pod is drawn on the lowest run
    of GPUs of its node free for its whole life (apart, with a note, if there is no
    such run), services as `rebuild` draws them (`planner.observed.draw`, which
    `gpuroster whatif` draws with too). A job starts in the first step all of its
    pods run; its cells are in `grid` for the steps of its duration in which they
    all run, and in `held` (allocated, not useful) for every other step a pod of it
    holds GPUs. A gang on nodes that are not consecutive is drawn where it ran: the
    legality check names the rule broken.
    """
    G, T = s.cluster.gpus_per_node, s.duration_steps
    node_names = [f"{world.NODE_PREFIX}{i}" for i in range(s.cluster.nodes)]
    node_index = {n: i for i, n in enumerate(node_names)}
    index = {j.name: i for i, j in enumerate(s.jobs)}
    jobs = {j.name: j for j in s.jobs}
    starts = gang_starts(s, samples)
    useful: dict[str, set[int]] = {}
    for name, start in starts.items():
        j = jobs[name]
        need = world.gang_shape(j, G)[0]
        useful[name] = {
            smp.step for smp in samples
            if start <= smp.step < start + j.duration_steps
            and len(smp.job_pods.get(name, [])) >= need
        }
    lives: dict[str, tuple[str, str, list[int]]] = {}  # uid -> (job, node, steps)
    for smp in samples:
        for job, pods in smp.job_pods.items():
            for uid, node in pods:
                lives.setdefault(uid, (job, node, []))[2].append(smp.step)
    job_lives = [
        observed.JobPodLife(uid, index[job], node_index[node],
                            world.gang_shape(s.jobs[index[job]], G)[1], tuple(steps))
        for uid, (job, node, steps) in lives.items()
        if job in index and node in node_index
    ]
    services = {v.name: k for k, v in enumerate(s.services)}
    svc_lives: dict[str, tuple[int, str, list[int]]] = {}
    for smp in samples:
        for name, pods in smp.service_pods.items():
            for uid, node in pods:
                if name in services:
                    svc_lives.setdefault(uid, (services[name], node, []))[2].append(smp.step)
    service_lives = [observed.ServicePodLife(uid, k, node_index[node], tuple(steps))
                     for uid, (k, node, steps) in svc_lives.items() if node in node_index]
    for name in sorted(useful):
        ran = len(useful[name])
        if ran and ran != min(jobs[name].duration_steps, T - starts[name]):
            notes.append(f"{name}: its whole gang ran {ran} of its "
                         f"{jobs[name].duration_steps} steps")
    grid, held = observed.draw(s, job_lives, service_lives, useful, notes, node_names)
    ends = {n: st + jobs[n].duration_steps for n, st in starts.items() if st < T}
    return Rebuilt(grid, {n: st for n, st in starts.items() if st < T}, ends, held)

"""From what Prometheus recorded to a scenario and the grid of what happened; pure.

Time: step k is [origin + k*step, origin + (k+1)*step). A pod holds its GPUs in
step k when it started before the step's end and had not ended by it: from the
step of its start time to the step before that of its end (completion time, else
the last scrape that saw it; still there at the window's end: past the window).
Kubernetes records these times in whole seconds.

A job is a gang (the `gpuroster.io/gang` annotation, else the Job, JobSet or
PyTorchJob owning its pods, else the pod alone). It arrives in the step its
first pod was created, starts in the step its last pod started, ends in the step
its last pod ended; its GPUs are the sum of its pods' requests. Its priority is
the `gpuroster.io/priority` annotation, else its PriorityClass's name mapped by
the configured classes, else the default class; its estimate the
`gpuroster.io/expected-duration` annotation, else its observed duration. A
service is a Deployment whose pods request GPUs: its demand is its
`gpuroster.io/demand-query` where it has one, else its replica history. Every
fallback taken and everything left out is a note; nothing is guessed silently.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from extender import config
from extender.adapter import annotations as ann
from extender.planner import model, observed
from extender.planner import scenario as scenario_doc
from extender.whatif import reading

GANG_OWNERS = ("Job", "JobSet", "PyTorchJob")
DEFAULT_MAX_SWAP = 2


@dataclass
class Source:
    """Where each field of a reconstructed job came from, for the report."""

    gang: str  # "annotation" | "owner Job x" | "pod"
    priority: str  # "annotation" | "PriorityClass x" | "default"
    estimate: str  # "annotation" | "observed"
    pods: int


@dataclass
class Rebuilt:
    scenario: model.Scenario
    job_lives: list[observed.JobPodLife]
    service_lives: list[observed.ServicePodLife]
    useful: dict[str, set[int]]
    node_names: list[str]
    sources: dict[str, Source]
    notes: list[str] = field(default_factory=list)


class NothingToReplay(ValueError):
    pass


def _name(text: str) -> str:
    n = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return n or "x"


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


@dataclass
class _Gang:
    namespace: str
    key: str
    how: str
    pods: list[reading.Pod] = field(default_factory=list)


def _gang_of(p: reading.Pod) -> tuple[str, str]:
    g = p.annotations.get(ann.GANG)
    if g:
        return g, "annotation"
    if p.labels.get(reading.JOBSET_LABEL):
        return p.labels[reading.JOBSET_LABEL], "owner JobSet"
    if p.owner_kind in GANG_OWNERS and p.owner_name:
        return p.owner_name, f"owner {p.owner_kind}"
    return p.name, "pod"


def build(h: reading.History, settings: config.Settings, name: str,
          step_minutes: int, horizon_steps: int = 24) -> Rebuilt:
    w = h.window
    T = w.steps
    notes: list[str] = []
    # nodes in topology order where every GPU node is labelled, else by name
    if h.node_order and all(n in h.node_order for n in h.nodes):
        node_names = sorted(h.nodes, key=lambda n: (h.node_order[n], _natural(n)))
    else:
        node_names = sorted(h.nodes, key=_natural)
        notes.append(f"nodes ordered by name: no {ann.TOPOLOGY_ORDER} label on every GPU node "
                     f"(kube_node_labels)")
    G = max(h.nodes.values())
    if len(set(h.nodes.values())) > 1:
        notes.append(f"nodes differ in GPUs ({sorted(set(h.nodes.values()))}): the model "
                     f"takes every node as {G} GPUs")
    node_index = {n: i for i, n in enumerate(node_names)}
    cluster = model.Cluster(len(node_names), G)
    if not h.annotations_seen:
        notes.append("no gpuroster.io annotation came through kube_pod_annotations: gangs from "
                     "owners, priorities from PriorityClass names, estimates from observed "
                     "durations (is --metric-annotations-allowlist set?)")

    def held(p: reading.Pod) -> tuple[int, int] | None:
        """[first, end) steps the pod held GPUs (end may pass the window), or None."""
        if p.started is None or not p.node:
            return None
        first = w.step_of(p.started)
        if p.completed is not None:
            end = w.step_of(p.completed)
        elif p.last_seen is None or p.last_seen >= w.until - w.step / 2:
            end = T + 1_000_000  # still there at the window's end
        else:
            end = w.step_of(p.last_seen)
        return first, max(first, end)

    service_pods: dict[tuple[str, str], list[reading.Pod]] = {}
    gangs: dict[tuple[str, str], _Gang] = {}
    for p in h.pods:
        if p.owner_kind == "ReplicaSet" and (p.namespace, p.owner_name) in h.replicaset_owner:
            dep = h.replicaset_owner[(p.namespace, p.owner_name)]
            service_pods.setdefault((p.namespace, dep), []).append(p)
            continue
        key, how = _gang_of(p)
        gangs.setdefault((p.namespace, key), _Gang(p.namespace, key, how)).pods.append(p)

    used: set[str] = set()

    def unique(ns: str, raw: str, uid: str) -> str:
        n = _name(raw)
        if n in used:
            n = _name(f"{ns}-{raw}")
        if n in used:
            n = _name(f"{ns}-{raw}-{uid[:5]}")
        used.add(n)
        return n

    classes = settings.priority_classes
    jobs: list[model.Job] = []
    sources: dict[str, Source] = {}
    lives: dict[str, list[tuple[reading.Pod, tuple[int, int] | None]]] = {}
    spans: dict[str, tuple[int, int]] = {}
    short = estimated = unmapped = 0
    for (ns, key), g in sorted(gangs.items()):
        pods = g.pods
        first = pods[0]
        job = unique(ns, key, first.uid)
        gpus = sum(p.gpus for p in pods)
        a = {k: v for p in pods for k, v in p.annotations.items()}
        size = a.get(ann.GANG_SIZE)
        if size and size.strip().isdigit() and int(size) != len(pods):
            notes.append(f"{job}: {len(pods)} of its gang's {size} pods seen in the window")
        if not model.is_power_of_two(gpus) or gpus > cluster.gpus or (
                gpus > G and gpus % G):
            notes.append(f"{job}: {gpus} GPUs is not a block the model has (a power of two "
                         f"within a node or whole nodes): left out")
            continue
        created = [p.created for p in pods if p.created is not None]
        if not created:
            notes.append(f"{job}: no kube_pod_created for its pods: left out")
            continue
        arrival = w.step_of(min(created))
        spans_of = [held(p) for p in pods]
        ran = all(s is not None for s in spans_of)
        kind = a.get(ann.WORKLOAD, "training")
        if kind not in model.BATCH_TYPES:
            notes.append(f"{job}: workload {kind!r} is not batch-like: taken as training")
            kind = "training"
        try:
            if ann.PRIORITY in a:
                prio, how_p = ann.priority(a[ann.PRIORITY], classes,
                                           settings.default_priority), "annotation"
            elif first.priority_class in classes:
                prio, how_p = float(classes[first.priority_class]), (
                    f"PriorityClass {first.priority_class}")
            else:
                prio, how_p = float(classes[settings.default_priority]), "default"
                unmapped += 1
        except ann.AnnotationError as e:
            notes.append(f"{job}: {e}: default priority taken")
            prio, how_p = float(classes[settings.default_priority]), "default"
        estimate: int | None = None
        if ann.EXPECTED_DURATION in a:
            try:
                estimate = max(1, math.ceil(
                    config.parse_duration(a[ann.EXPECTED_DURATION]) / (step_minutes * 60) - 1e-9))
            except ValueError as e:
                notes.append(f"{job}: {ann.EXPECTED_DURATION}: {e}: observed duration taken")
        if ran:
            starts = [s[0] for s in spans_of if s is not None]
            ends = [s[1] for s in spans_of if s is not None]
            start, end = max(starts), max(ends)
            if end <= start:
                short += 1
                end = start + 1
            if arrival < 0 or start < 0:
                notes.append(f"{job}: arrived or started before the window: taken as arriving "
                             f"at step 0 with the steps it had left")
                arrival, start = max(0, arrival), max(0, start)
            if end > T:
                notes.append(f"{job}: still running at the window's end: its duration "
                             f"({T - start} steps) is a lower bound")
                end = T
            duration = end - start
            spans[job] = (start, end)
        else:
            if estimate is None:
                notes.append(f"{job}: never ran in the window and has no "
                             f"{ann.EXPECTED_DURATION}: left out (it waited from step "
                             f"{max(0, arrival)})")
                continue
            notes.append(f"{job}: never ran in the window: its duration is its "
                         f"{ann.EXPECTED_DURATION} ({estimate} steps)")
            duration = estimate
            arrival = max(0, arrival)
        if arrival >= T:
            continue
        if estimate is None:
            estimated += 1
        jobs.append(model.Job(job, kind, gpus, duration, estimate or duration, arrival, prio))
        sources[job] = Source(g.how if g.how != "annotation" else "annotation", how_p,
                              "annotation" if ann.EXPECTED_DURATION in a else "observed",
                              len(pods))
        lives[job] = list(zip(pods, spans_of, strict=True))
    if not jobs and not service_pods:
        raise NothingToReplay("no GPU job or service could be rebuilt from the window")
    if estimated:
        notes.append(f"{estimated} job(s) without {ann.EXPECTED_DURATION}: the planner is told "
                     f"their observed duration (a perfect estimate, which no scheduler gets)")
    if unmapped:
        notes.append(f"{unmapped} job(s) with neither {ann.PRIORITY} nor a PriorityClass named "
                     f"as a configured class ({', '.join(sorted(classes))}): default class "
                     f"{settings.default_priority!r}")
    if short:
        notes.append(f"{short} job(s) ran less than a step: counted as one step")

    services: list[model.Service] = []
    svc_pods: dict[str, list[tuple[reading.Pod, tuple[int, int] | None]]] = {}
    for (ns, dep), pods in sorted(service_pods.items()):
        d = h.deployments.get((ns, dep))
        svc = unique(ns, dep, pods[0].uid)
        per = max(p.gpus for p in pods)
        a = d.annotations if d else {}
        try:
            if ann.PRIORITY in a:
                prio = ann.priority(a[ann.PRIORITY], classes, settings.default_priority)
            elif pods[0].priority_class in classes:
                prio = float(classes[pods[0].priority_class])
            else:
                prio = float(classes[settings.default_priority])
                notes.append(f"{svc}: no priority annotation or known PriorityClass: default "
                             f"class {settings.default_priority!r}")
        except ann.AnnotationError as e:
            notes.append(f"{svc}: {e}: default priority taken")
            prio = float(classes[settings.default_priority])
        raw_swap = a.get(ann.MAX_SWAP)
        swap = DEFAULT_MAX_SWAP
        if raw_swap is not None and raw_swap.strip().isdigit():
            swap = int(raw_swap)
        else:
            notes.append(f"{svc}: no {ann.MAX_SWAP}: {DEFAULT_MAX_SWAP} taken")
        if d is not None and d.demand is not None:
            missing = sum(v is None for v in d.demand)
            demand = [int(math.ceil(max(0.0, v or 0.0) / per - 1e-9)) * per for v in d.demand]
            if missing:
                notes.append(f"{svc}: its demand query had no value in {missing} step(s): 0")
        else:
            if d is not None and d.demand_error:
                notes.append(f"{svc}: its demand query failed ({d.demand_error}): demand is "
                             f"its replica history")
            else:
                notes.append(f"{svc}: no {ann.DEMAND_QUERY}: demand is its replica history "
                             f"(what was reserved, not what was needed)")
            reps = d.replicas if d is not None else []
            demand = [(v or 0) * per for v in reps] + [0] * (T - len(reps))
        services.append(model.Service(svc, prio, swap, tuple(demand[:T]), tuple(demand[:T])))
        svc_pods[svc] = [(p, held(p)) for p in pods]

    description = (f"gpuroster whatif: {len(jobs)} jobs and {len(services)} services read "
                   f"from Prometheus, {T} steps of {w.step:g} s from unix {w.origin:.3f}")
    # through the version-1 validator: what is written is a file `gpuroster bench` loads
    s = scenario_doc.parse(scenario_doc.to_document(model.Scenario(
        _name(name), description, cluster, step_minutes, horizon_steps, T, tuple(jobs),
        tuple(services), "<whatif>")), "<whatif>")

    index = {j.name: i for i, j in enumerate(s.jobs)}
    job_lives: list[observed.JobPodLife] = []
    useful: dict[str, set[int]] = {}
    for job, members in lives.items():
        for p, span in members:
            if span is None or p.node not in node_index:
                continue
            steps = tuple(range(max(0, span[0]), min(T, span[1])))
            if steps:
                job_lives.append(observed.JobPodLife(p.uid, index[job], node_index[p.node],
                                                     p.gpus, steps))
        if job in spans:
            start, end = spans[job]
            useful[job] = {t for t in range(start, min(end, T))
                           if all(sp is not None and sp[0] <= t < sp[1] for _, sp in members)}
    svc_index = {v.name: k for k, v in enumerate(s.services)}
    service_lives = [
        observed.ServicePodLife(p.uid, svc_index[svc], node_index[p.node],
                                tuple(range(max(0, span[0]), min(T, span[1]))))
        for svc, members in svc_pods.items() for p, span in members
        if span is not None and p.node in node_index and span[1] > max(0, span[0])
    ]
    return Rebuilt(s, job_lives, service_lives, useful, node_names, sources, notes)


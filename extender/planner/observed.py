"""The grid of what a cluster did, drawn from the lives of its pods; pure.

Kubernetes gives a pod a node, never GPU indices, so a grid read from a cluster
is drawn: each job pod on the lowest run of GPUs of its node free for its whole
life (apart, with a note, if there is no such run), each service pod on the
highest GPU of its node free for its whole life (in runs, with a note, where
none is). A job's cells are in `grid` for the steps its whole gang runs
(`useful`), and in `held` (allocated, not useful) for every other step a pod of
it holds GPUs. The replay's read-back (`extender.replay.readback`) and
`gpuroster whatif` (`extender.whatif`) both draw with this, so a replayed grid
and the one rebuilt from Prometheus are drawn the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from extender.planner import model


@dataclass(frozen=True)
class JobPodLife:
    uid: str
    job: int  # index into the scenario's jobs
    node: int  # node index (topology order)
    gpus: int  # the pod's GPUs
    steps: tuple[int, ...]  # steps it held its GPUs, ascending


@dataclass(frozen=True)
class ServicePodLife:
    uid: str
    service: int  # index into the scenario's services
    node: int
    steps: tuple[int, ...]


def _free_for(occ: np.ndarray, gpus: list[int], steps: Sequence[int]) -> bool:
    return bool(np.all(occ[np.ix_(gpus, list(steps))] == -1))


def _free_run(grid: np.ndarray, g: int, steps: Sequence[int], at: int) -> int:
    """How many of steps[at:] in a row GPU g is free for."""
    n = 0
    for t in steps[at:]:
        if grid[g, t] != -1:
            break
        n += 1
    return n


def draw_service_pod(occ: np.ndarray, gpus: Sequence[int], steps: list[int], mark: int,
                     notes: list[str], who: str) -> list[tuple[int, list[int]]]:
    """Draw a service pod alive at `steps` on a node whose GPUs are `gpus` (highest
    first) into `occ` as `mark`: on one GPU free for all of them if there is one, else
    in runs, each on the GPU free the longest from there (ties: the highest GPU); a
    note "`who` at step t" for a step no GPU is free at. Its pieces, (GPU, steps)."""
    whole = next((g for g in gpus if _free_for(occ, [g], steps)), None)
    if whole is not None:
        occ[whole, steps] = mark
        return [(whole, steps)]
    pieces = []
    at = 0
    while at < len(steps):
        run = {g: _free_run(occ, g, steps, at) for g in gpus}
        g = max(gpus, key=lambda x: run[x])
        if run[g] == 0:
            notes.append(f"{who} at step {steps[at]}")
            at += 1
            continue
        piece = steps[at : at + run[g]]
        occ[g, piece] = mark
        pieces.append((g, piece))
        at += run[g]
    return pieces


def draw(
    s: model.Scenario,
    jobs: Sequence[JobPodLife],
    services: Sequence[ServicePodLife],
    useful: Mapping[str, set[int]],
    notes: list[str],
    node_names: Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(grid, held) of the pods' lives; `useful`: job name -> the steps its whole gang ran
    inside its duration; `node_names` name the nodes in notes. Steps outside the window
    are ignored."""

    def node_name(i: int) -> str:
        return node_names[i] if node_names is not None and i < len(node_names) else f"node {i}"

    G, N, T = s.cluster.gpus_per_node, s.cluster.gpus, s.duration_steps
    occ = np.full((N, T), -1, dtype=np.int32)
    grid = np.full((N, T), -1, dtype=np.int32)
    held = np.full((N, T), -1, dtype=np.int32)
    names = [j.name for j in s.jobs]
    for life in sorted(jobs, key=lambda x: (x.steps[0] if x.steps else T, names[x.job], x.uid)):
        steps = [t for t in life.steps if 0 <= t < T]
        if not steps:
            continue
        name, base, gpus = names[life.job], life.node * G, life.gpus
        node = node_name(life.node)
        spot = next((list(range(base + o, base + o + gpus)) for o in range(G - gpus + 1)
                     if _free_for(occ, list(range(base + o, base + o + gpus)), steps)), None)
        if spot is None:
            free = [g for g in range(base, base + G) if _free_for(occ, [g], steps)]
            if len(free) >= gpus:
                spot = free[:gpus]
                notes.append(f"{name}: a pod on {node} drawn on GPUs {spot}, not one run")
        if spot is None:
            notes.append(f"{name}: no {gpus} GPUs of {node} free for a pod's whole life")
            continue
        for t in steps:
            occ[spot, t] = life.job
            if t in useful.get(name, ()):
                grid[spot, t] = life.job
            else:
                held[spot, t] = life.job
    if held.max(initial=-1) >= 0:
        partial = sorted({names[int(x)] for x in np.unique(held[held >= 0])})
        notes.append(f"GPUs held by gangs not all running (allocated, not useful): "
                     f"{', '.join(partial[:8])}{' ...' if len(partial) > 8 else ''}")
    nj = len(s.jobs)
    for svc in sorted(services, key=lambda x: (x.steps[0] if x.steps else T, x.uid)):
        steps = [t for t in svc.steps if 0 <= t < T]
        if not steps:
            continue
        k = svc.service
        gpus_of_node = list(range(svc.node * G + G - 1, svc.node * G - 1, -1))
        who = f"{s.services[k].name}: no free GPU on {node_name(svc.node)}"
        for g, piece in draw_service_pod(occ, gpus_of_node, steps, nj + k, notes, who):
            grid[g, piece] = nj + k
    return grid, held


def service_churn(services: Sequence[ServicePodLife], names: Sequence[str],
                  steps: int) -> dict[str, list[int]]:
    """Per service and step: pods that appeared plus pods that went since the step before
    (the swap cap as a cluster can show it: its pods carry no GPU identity)."""
    at: dict[int, list[set[str]]] = {k: [set() for _ in range(steps)] for k in range(len(names))}
    for p in services:
        for t in p.steps:
            if 0 <= t < steps:
                at[p.service][t].add(p.uid)
    return {names[k]: [0] + [len(sets[t] ^ sets[t - 1]) for t in range(1, steps)]
            for k, sets in at.items()}

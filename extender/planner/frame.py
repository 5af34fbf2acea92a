"""What every pass of one re-plan reads and gives back: the jobs as a pass reads them, the
plan-wide `Frame` each pass starts from, the `Sheet` its trades read, and the `Candidate`
plan it returns; with the reward weights' running sums and the room as bytes that the
passes search.

Purely computational: the standard library and numpy.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from extender.planner import model, options


class Job(NamedTuple):
    """A queued job as every pass of one re-plan reads it (worked out once per plan)."""

    q: model.QueuedJob
    name: str
    d: int  # steps its block is held: its estimate, cut at the window's end
    size: int
    allow: int  # the GPUs it may use
    shape: tuple[int, int, int]  # (size, d, allow): what failures and fronts are kept by
    worth: float  # priority x size: its value a step, before the reward weight
    reach: float  # the most it can add: starting now


NAME = operator.itemgetter(1)  # a Job's name
REACH = operator.itemgetter(7)  # a Job's reach


@dataclass(slots=True)
class Placed:
    name: str
    step: int  # offset from now
    start: int  # its block's first GPU (a Block is made for the winning plan only)
    size: int
    traded: bool = False  # over the services' curve, at a price

    @property
    def block(self) -> model.Block:
        return block_of(self.start, self.size)


@functools.lru_cache(maxsize=8192)
def block_of(start: int, size: int) -> model.Block:
    """A Block, shared (it is frozen): a plan names one per job, and making a frozen
    dataclass costs more than finding it again."""
    return model.Block(start, size)


@dataclass(frozen=True)
class Frame:
    """What every queue order's pass of one re-plan starts from (each copies the lists)."""

    o: options.Options
    cluster: model.Cluster
    W: int  # steps planned: the horizon and the reach beyond it
    R: int  # the latest start planned (reservations past the horizon reach this far)
    occ: list[int]  # GPUs batch work holds (running jobs, lost nodes), per step
    slack: list[int]  # room left for batch work beside the services' curves, per step
    packed: bytearray | None  # `slack` as bytes (`pack`), where every step's room fits in one
    locked: list[int]  # GPUs the services still hold, per step, following their curves
    shrunk: list[int]  # the same if a trade takes their GPUs (shrinking at their swap cap)
    overrun: list[int] | None  # room kept for running jobs' overruns (with services)
    guard: int  # steps a planned job may outlast its estimate, for the services' room
    ceiling: float  # the sum of the jobs' reach: no pass scores more
    groups: list[tuple[int, list[int]]]  # per node set of a limited service: its room
    shortable: list[tuple[float, list[int]]]  # (price a GPU-step, curve), cheapest first
    starving: frozenset[str]  # waited past `max_wait_hours`: planned first
    drain: frozenset[str]  # starving jobs only a trade starts: trade when a block frees


class Sheet(NamedTuple):
    """A pass's grid as its trades read it: the lists the pass fills in as it places jobs
    (`placing.place` makes one a phase: it replaces `slack` between phases), and what
    stays the same over the pass."""

    cluster: model.Cluster
    W: int  # steps planned
    cum: tuple[float, ...]  # the reward weights' running sums (`cumulative_weights`)
    cum_a: npt.NDArray[np.float64]  # the same, as an array
    shortable: list[tuple[float, list[int]]]  # (price a GPU-step, curve), cheapest first
    occ: list[int]  # GPUs batch work holds, per step
    slack: Sequence[int]  # room left for batch work beside the services' curves, per step
    short: list[int]  # GPUs of the services' curves given up to jobs so far, per step


@dataclass
class Opening:
    """The jobs a plain pass started now beside the services' curve, in queue order, before
    the first job it did not (`names`); `whole` once that job came or every job was looked
    at (a pass the bound dropped before may have started more)."""

    names: list[str] = field(default_factory=list)
    whole: bool = False


@dataclass
class Candidate:
    # (name, step, start, size, traded) of each job placed, as in `Placed` (made for the
    # winning plan only)
    placed: list[tuple[str, int, int, int, bool]] = field(default_factory=list)
    score: float = -math.inf
    # GPUs of the services' curves given up to traded jobs, per step (empty: none)
    short: list[int] = field(default_factory=list)


# What `placing.place` returns for a fill-now pass whose first phase started now exactly
# the jobs of a plain pass's `Opening` in the same order: from there on it is that pass.
TWIN = Candidate()


@functools.lru_cache(maxsize=64)
def cumulative_array(decay: float, W: int) -> npt.NDArray[np.float64]:
    """`cumulative_weights` as a read-only array, made once per (decay, W): afresh, it
    was a fair part of a short pass."""
    out = np.asarray(cumulative_weights(decay, W))
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=64)
def cumulative_weights(decay: float, W: int) -> tuple[float, ...]:
    """cum[k]: the reward weight 1 / (1 + decay * i) summed over steps i < k."""
    cum = [0.0]
    for i in range(W):
        cum.append(cum[-1] + 1.0 / (1.0 + decay * i))
    return tuple(cum)


def pack(room: list[int], more: int = 0) -> bytearray | None:
    """`room` as bytes, a step's room below 0 as 0; None when some step's (with `more`) is
    above 255."""
    if max(room, default=0) + more > 255:
        return None
    return bytearray(room if min(room, default=0) >= 0 else (x if x > 0 else 0 for x in room))


@functools.cache
def below(size: int) -> bytes:
    """A translation of packed room (`pack`) to 1 where it is below `size`, else 0."""
    return bytes(1 if x < size else 0 for x in range(256))


@functools.cache
def less(size: int) -> bytes:
    """A translation of packed room (`pack`) to that room less `size`: below 0 is 0
    there, and stays 0."""
    return bytes(max(0, x - size) for x in range(256))


def clear_from(bad: bytearray, k: int, d: int) -> int:
    """The first start from `k` whose run of `d` steps (cut at the window's end) meets no
    step marked 1 in `bad`; len(bad) or more when none does."""
    at = bad.find(_zeros(d), k)
    if at < 0:  # no whole run: one cut at the window's end, past the last marked step
        at = max(k, bad.rfind(1) + 1)
    return at


@functools.cache
def _zeros(n: int) -> bytes:
    return bytes(n)

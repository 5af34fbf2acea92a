"""The legality checker catches every broken rule and passes legal grids."""

from __future__ import annotations

import numpy as np
import pytest

from extender.planner import legality, metrics
from tests.builders import scenario

S = (
    scenario()
    .nodes(2, 4)
    .window(4)
    .job("a", gpus=2, d=2, arrival=1)
    .job("big", gpus=8, d=2)
    .service("svc", [1, 1, 1, 1], max_swap=1)
    .build()
)


def grid(rows: list[str]) -> np.ndarray:
    names = {"a": "a", "B": "big", "s": "svc"}
    named = [[names[c] if c != "." else None for c in row] for row in rows]
    g, _ = metrics.index_grid(S, named)
    return g


# rows are GPUs, columns are steps; big = all 8 GPUs at steps 0-1, then a and the service
LEGAL = ["BBaa", "BBaa", "BBss", "BB..", "BB..", "BB..", "BB..", "BB.."]
IDLE = "...."


def only(**rows: str) -> list[str]:
    out = [IDLE] * 8
    for g, row in rows.items():
        out[int(g[1:])] = row
    return out


def test_legal_grid_passes() -> None:
    assert legality.violations(S, grid(LEGAL)) == []


CASES = {
    "before arrival": (only(g0="aa..", g1="aa.."), "before its arrival"),
    "paused": (only(g0=".a.a", g1=".a.a"), "must run"),
    "moved": (only(g0=".a..", g1=".aa.", g2="..a."), "moved"),
    # same size and lowest GPU, one GPU changed: {0, 1} then {0, 2}
    "one gpu changed": (only(g0=".aa.", g1=".a..", g2="..a."), "moved"),
    "too short": (only(g0=".a..", g1=".a.."), "must run"),
    "split block": (only(g0=".aa.", g2=".aa."), "not a legal contiguous block"),
    "across nodes": (only(g3=".aa.", g4=".aa."), "not a legal contiguous block"),
    "swap over cap": (only(g0="s...", g1=".s.."), "swaps 2"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_broken_rule_is_caught(case: str) -> None:
    rows, expect = CASES[case]
    found = legality.violations(S, grid(rows))
    assert found, f"{case}: not caught"
    if expect:
        assert any(expect in v for v in found), found
    with pytest.raises(legality.IllegalGrid):
        legality.check(S, grid(rows))


def test_a_job_keeps_its_whole_block_at_every_step() -> None:
    # MODEL.md rule 2: {0,1,2,3} at step 0, {0,1,2,5} at step 1 is a move, though the
    # count and the lowest GPU stay the same.
    s = scenario().nodes(1, 8).window(2).job("j", gpus=4, d=2).build()
    named: list[list[str | None]] = [[None, None] for _ in range(8)]
    for gpu in (0, 1, 2, 3):
        named[gpu][0] = "j"
    for gpu in (0, 1, 2, 5):
        named[gpu][1] = "j"
    g, _ = metrics.index_grid(s, named)
    assert legality.violations(s, g) == ["j: block moved or changed size at step 1"]


def test_job_running_past_the_window_is_legal() -> None:
    s = scenario().nodes(1, 2).window(3).job("long", gpus=2, d=10, arrival=1).build()
    g, _ = metrics.index_grid(s, [[None, "long", "long"], [None, "long", "long"]])
    assert legality.violations(s, g) == []


def test_unknown_names_and_shapes_are_rejected() -> None:
    with pytest.raises(ValueError, match="not a job or service"):
        metrics.index_grid(S, [["ghost"] * 4] * 8)
    with pytest.raises(ValueError, match="rows"):
        metrics.index_grid(S, [[None] * 4] * 3)


def test_a_cluster_grid_judges_the_swap_cap_by_pod_churn() -> None:
    # The service's one replica drawn on GPU 0, then GPU 1: two GPU swaps, over max_swap 1
    # on the grid; on a cluster the pod never moved (no churn), so it is legal there,
    # and a real churn over the cap is caught instead.
    moved = only(g0="ss..", g1="..ss")
    assert any("svc: swaps 2" in v for v in legality.violations(S, grid(moved)))
    assert legality.violations(S, grid(moved), churn={"svc": [0, 0, 0, 0]}) == []
    found = legality.violations(S, grid(moved), churn={"svc": [0, 0, 2, 0]})
    assert found == ["svc: 2 pods in and out between steps 1 and 2 (max_swap 1)"]

"""The plan page: the grid, the waiting list with what each job waits for, escaping."""

from __future__ import annotations

from typing import Any

from extender.api import page

EVIL = "ns/<script>alert(1)</script>"


def view(**over: Any) -> dict[str, Any]:
    grid: list[list[str | None]] = [["ns/a", "ns/a", "ns/b", None] for _ in range(4)]
    grid += [["ns/chat", "ns/chat", "ns/chat", "ns/chat"]]
    grid += [[None] * 4 for _ in range(2)]
    grid += [["(unavailable)"] * 4]
    v: dict[str, Any] = {
        "shadow": True, "step": 7, "step_seconds": 3600.0, "step_start": 1_700_000_000.0,
        "step_start_utc": "2023-11-14T22:00:00Z", "horizon": 4,
        "nodes": ["gpu-node-0"], "gpus_per_node": 8, "grid": grid,
        "jobs": {
            "ns/a": {"state": "running", "gpus": 4, "priority": 4.0, "block": "gpu-node-0:0-3",
                     "expected_end_step": 9, "expected_end_utc": "2023-11-15T00:00:00Z",
                     "placed_by": "scheduler"},
            "ns/b": {"state": "queued", "gpus": 4, "priority": 2.0, "block": "gpu-node-0:0-3",
                     "planned_start_step": 9, "planned_start_utc": "2023-11-15T00:00:00Z",
                     "waiting_since_utc": "2023-11-14T21:10:00Z", "waits_for": ["ns/a"]},
            "ns/now": {"state": "admitted", "gpus": 2, "priority": 8.0, "block": "gpu-node-0:5-6",
                       "planned_start_step": 7, "waiting_since_utc": "2023-11-14T21:50:00Z"},
            EVIL: {"state": "held", "gpus": 16, "priority": None,
                   "reason": "waiting: 1 of 2 pods of gang <b>x</b> placed",
                   "waiting_since_utc": "2023-11-14T20:00:00Z"},
        },
        "services": {"ns/chat": {"gpus_now": [4], "forecast": [1, 1, 2, 2],
                                 "replicas_planned": 1, "replicas_actual": 3,
                                 "headroom": 2, "spare": 1}},
    }
    v.update(over)
    return v


def test_the_waiting_list_says_what_each_job_waits_for() -> None:
    html = page.render(view())
    waiting = html[html.index("id=\"waiting\""):html.index("id=\"running\"")]
    # the job the plan would start now first, then by planned start, then the unplanned
    assert waiting.index("ns/now") < waiting.index("ns/b") < waiting.index("&lt;script&gt;")
    assert "(the cluster has not started it)" in waiting  # shadow: nobody started it
    assert "Nov 15 00:00 (step 9)" in waiting and "its GPUs are held by" in waiting
    assert "Nov 14 21:10" in waiting  # waiting since
    assert "not planned" in waiting and "placed" in waiting
    running = html[html.index("id=\"running\""):html.index("id=\"services\"")]
    assert "ns/a" in running and "kube-scheduler" in running
    services = html[html.index("id=\"services\""):]
    assert "<b>(-2)</b>" in services  # it would set 1 replica, the Deployment has 3
    assert "Headroom GPUs" in services and "<td class='r'>2</td><td class='r'>1</td>" in services
    assert "Shadow mode." in html and "1 to start now (2 GPUs), 2 waiting" in html


def test_names_and_reasons_are_escaped_everywhere() -> None:
    html = page.render(view())
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<b>x</b>" not in html


def test_the_grid_is_one_svg_with_a_labelled_row_per_gpu() -> None:
    html = page.render(view(shadow=False))
    svg = html[html.index("<svg"):html.index("</svg>")]
    assert html.count("<svg") == 1
    assert all(f"gpu-node-0:{i}" in svg for i in range(8))
    assert "url(#svc)" in svg  # services hatched
    assert "<title>ns/b</title>" in svg and "class='now'" in svg
    assert "Shadow mode." not in html  # only in shadow mode
    assert "(the cluster has not started it)" not in html

"""Garbage annotations through the real API server and kube-scheduler.

Every bad pod or gang gets a Warning Event naming the problem and stays
pending; a good gang created beside them binds as usual. (Unknown workload
type and a 3-pod gang of 2 GPUs are in test_extender.py; scenario files with
every field wrong are tests/planner/test_scenario.py.)
"""

from __future__ import annotations

import time
from typing import Any

from e2e.test_extender import Extender, extender  # noqa: F401
from extender.localcluster import objects
from extender.localcluster.waiting import wait_for

GOOD = {"gpuroster.io/workload": "training", "gpuroster.io/expected-duration": "30s"}

# name -> (pods, GPUs per pod, annotations per pod (one dict, or one per pod), words the
# Event must contain)
CASES: dict[str, tuple[int, int, Any, tuple[str, ...]]] = {
    "prio-negative": (1, 2, {"gpuroster.io/priority": "-3"}, ("priority",)),
    "prio-nan": (1, 2, {"gpuroster.io/priority": "NaN"}, ("priority",)),
    "prio-huge": (1, 2, {"gpuroster.io/priority": "1e400"}, ("priority",)),
    "prio-word": (1, 2, {"gpuroster.io/priority": "urgent!!"}, ("priority",)),
    "size-negative": (1, 2, {"gpuroster.io/gang": "sn", "gpuroster.io/gang-size": "-1"},
                      ("gang-size",)),
    "size-zero": (1, 2, {"gpuroster.io/gang": "sz", "gpuroster.io/gang-size": "0"},
                  ("gang-size",)),
    "size-nan": (1, 2, {"gpuroster.io/gang": "snan", "gpuroster.io/gang-size": "NaN"},
                 ("gang-size",)),
    "size-huge": (1, 2, {"gpuroster.io/gang": "sh",
                         "gpuroster.io/gang-size": "99999999999999999999"}, ("gang-size",)),
    "dur-negative": (1, 2, {"gpuroster.io/expected-duration": "-5h"}, ("duration",)),
    "dur-nan": (1, 2, {"gpuroster.io/expected-duration": "NaN"}, ("duration",)),
    "dur-huge": (1, 2, {"gpuroster.io/expected-duration": "9" * 40 + "d"}, ("duration",)),
    "gpus-three": (1, 3, {}, ("power of two",)),
    "gpus-huge": (1, 1_000_000, {}, ("GPUs",)),
    "too-big": (5, 8, {"gpuroster.io/gang": "tb", "gpuroster.io/gang-size": "5"}, ("GPUs",)),
    "disagree": (2, 2, [{"gpuroster.io/gang": "dg", "gpuroster.io/gang-size": "2",
                         "gpuroster.io/priority": "high"},
                        {"gpuroster.io/gang": "dg", "gpuroster.io/gang-size": "2",
                         "gpuroster.io/priority": "low"}], ("disagree",)),
}


def test_garbage_annotations_get_an_event_each_and_a_good_gang_still_binds(
        core: Any, namespace: str, extender: Extender) -> None:  # noqa: F811
    bad: dict[str, list[str]] = {}
    for case, (pods, gpus, notes, _) in CASES.items():
        for i in range(pods):
            a = {**GOOD, **(notes[i] if isinstance(notes, list) else notes)}
            name = f"{case}-{i}"
            core.create_namespaced_pod(namespace, objects.pod(name, gpus=gpus, runtime="30s",
                                                              annotations=a))
            bad.setdefault(case, []).append(name)
    good = []
    for i in range(2):
        name = f"good-{i}"
        core.create_namespaced_pod(namespace, objects.pod(name, gpus=4, runtime="30s",
                                                          annotations={
            **GOOD, "gpuroster.io/gang": "good", "gpuroster.io/gang-size": "2"}))
        good.append(name)
    t0 = time.monotonic()

    def bound(names: list[str]) -> bool:
        return all(core.read_namespaced_pod(n, namespace).spec.node_name for n in names)

    wait_for(lambda: bound(good), 30, "the good gang beside the garbage")
    took = time.monotonic() - t0

    def warnings() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for e in core.list_namespaced_event(namespace).items:
            if e.type == "Warning" and e.source and e.source.component == "gpuroster":
                out.setdefault(e.involved_object.name, []).append(f"{e.reason}: {e.message}")
        return out

    deadline = time.monotonic() + 30
    while not all(names[0] in (seen := warnings()) for names in bad.values()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    print(f"[bad-input] good gang bound {took:.1f}s after creation, beside "
          f"{sum(len(v) for v in bad.values())} bad pods in {len(bad)} cases")
    problems = []
    for case, names in bad.items():
        message = " | ".join(seen.get(names[0], [])) or "(no Warning Event)"
        print(f"[bad-input]   {case:14s} -> {message[:160]}")
        if not all(w.lower() in message.lower() for w in CASES[case][3]):
            problems.append(f"{case}: {message}")
        for n in names:
            if core.read_namespaced_pod(n, namespace).spec.node_name:
                problems.append(f"{case}: {n} was bound")
    assert not problems, problems
    assert extender.get("/healthz") == "ok"

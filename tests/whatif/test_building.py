"""whatif's reconstruction, pure: what was read -> the scenario, its sources and its notes."""

from __future__ import annotations

from typing import TypedDict

import pytest

from extender import config
from extender.whatif import building, reading

W = reading.Window(1000.0, 60.0, 6)


def pod(name: str, *, gpus: int = 1, node: str = "n0", start: int = 0, end: int | None = 2,
        owner: tuple[str, str] = ("", ""), cls: str = "", created: int | None = None,
        **kw: str) -> reading.Pod:
    """A GPU pod created (default: at its start) and running from step `start` to `end`
    (None: still there at the window's end)."""
    at = W.origin + start * W.step + 5
    p = reading.Pod("ns", name, f"uid-{name}", gpus,
                    created=W.origin + created * W.step + 1 if created is not None else at,
                    started=at, node=node, priority_class=cls, owner_kind=owner[0],
                    owner_name=owner[1], last_seen=W.until)
    if end is not None:
        p.completed = W.origin + end * W.step + 5
    p.annotations.update({k.replace("_", "-").replace("gpuroster.io-", "gpuroster.io/"): v
                          for k, v in kw.items()})
    return p


def build(*pods: reading.Pod, nodes: int = 2, per: int = 4) -> building.Rebuilt:
    h = reading.History(W, {f"n{i}": per for i in range(nodes)}, {}, list(pods), {}, {}, False)
    return building.build(h, config.Settings(), "t", 60)


@pytest.mark.parametrize(("owner", "label", "gang"), [
    (("Job", "train"), "", "owner Job"),
    (("PyTorchJob", "train"), "", "owner PyTorchJob"),
    (("Job", "train-workers-0"), "train", "owner JobSet"),
], ids=["job", "pytorchjob", "jobset-label"])
def test_a_gang_is_the_pods_of_its_job_jobset_or_pytorchjob(
        owner: tuple[str, str], label: str, gang: str) -> None:
    a, b = pod("a", gpus=4, node="n0", owner=owner), pod("b", gpus=4, node="n1", owner=owner)
    if label:
        a.labels[reading.JOBSET_LABEL] = b.labels[reading.JOBSET_LABEL] = label
    r = build(a, b)
    (j,) = r.scenario.jobs
    assert (j.name, j.gpus, j.duration_steps) == ("train" if label else owner[1], 8, 2)
    assert r.sources[j.name].gang == gang and r.sources[j.name].pods == 2


def test_bare_pods_are_jobs_of_their_own_and_what_is_not_read_is_said() -> None:
    r = build(pod("x", cls="unknown-class"), pod("odd", gpus=3, node="n1"))
    assert [j.name for j in r.scenario.jobs] == ["x"]
    x = r.scenario.jobs[0]
    assert x.priority == config.Settings().priority_classes["normal"]
    notes = " / ".join(r.notes)
    assert "odd: 3 GPUs is not a block" in notes
    assert "neither gpuroster.io/priority nor a PriorityClass" in notes
    assert "observed duration" in notes and "no gpuroster.io annotation" in notes
    assert "nodes ordered by name" in notes


def test_a_job_that_waited_and_one_still_running_keep_their_steps() -> None:
    r = build(pod("waited", created=0, start=2, end=4), pod("long", start=3, end=None))
    jobs = {j.name: j for j in r.scenario.jobs}
    assert (jobs["waited"].arrival_step, jobs["waited"].duration_steps) == (0, 2)
    assert (jobs["long"].arrival_step, jobs["long"].duration_steps) == (3, 3)
    assert r.useful == {"waited": {2, 3}, "long": {3, 4, 5}}
    assert any("long: still running at the window's end" in n for n in r.notes)


# pod()'s **kw for the test below: with its keys named, mypy sees that none of them is
# one of pod()'s typed keywords (a plain dict[str, str] might be `gpus` or `end`).
Annotations = TypedDict("Annotations", {
    "gpuroster.io_gang": str, "gpuroster.io_gang_size": str, "gpuroster.io_priority": str,
    "gpuroster.io_workload": str, "gpuroster.io_expected_duration": str})


def test_annotations_give_gang_priority_type_and_estimate() -> None:
    kw: Annotations = {"gpuroster.io_gang": "g", "gpuroster.io_gang_size": "2",
                       "gpuroster.io_priority": "high", "gpuroster.io_workload": "quantization",
                       "gpuroster.io_expected_duration": "150m"}
    r = build(pod("p0", gpus=2, **kw), pod("p1", gpus=2, **kw))
    (j,) = r.scenario.jobs
    assert (j.name, j.gpus, j.type, j.priority, j.estimate_steps) == ("g", 4, "quantization",
                                                                       4.0, 3)
    assert r.sources["g"].estimate == "annotation"

"""Admission writes that go wrong part way: a failed or unanswered pod write, a Lease lost
mid-round, a shutdown while a round still writes. A gang is never left partly bound and
stuck, never admitted twice, and no two gangs are written onto one block."""

from __future__ import annotations

import threading
from typing import Any

from extender.adapter import annotations as ann
from extender.adapter import kube
from extender.controller import main, writing
from tests.adapter.test_leasing import Clock, Store, elector
from tests.controller.test_stepping import Rig, gang
from tests.kubefake import FakeKube, configmap, deployment, make_pod, node

Obj = dict[str, Any]


class SchedulerRaces(FakeKube):
    """kube-scheduler binds pod g-0 as soon as its admission has landed, while gpuroster
    goes on to write g-1."""

    rig: Rig | None = None

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        notes = (patch.get("metadata") or {}).get("annotations") or {}
        if f"{namespace}/{name}" == "ns/g-1" and self.rig is not None and notes.get(ann.BLOCK):
            at = self.objects["pods"]["ns/g-0"]["metadata"]["annotations"][ann.NODE]
            assert self.rig.verbs.bind("ns", "g-0", None, at) is None
        return super().patch_pod(namespace, name, patch)


def test_a_gang_whose_admission_write_fails_midway_is_never_left_partly_bound() -> None:
    """g-0 is admitted and bound before g-2's write fails. Undoing g-0's record would
    leave it running as someone else's GPUs and the gang waiting forever ("3 of 4 pods
    exist"): the records stay, the rest are written, and a restart reads the whole gang."""
    fake = SchedulerRaces()
    for i in range(2):
        fake.add("nodes", node(i))
    rig = Rig(fake=fake)
    fake.rig = rig
    keys = gang(fake, "g", 4, 2, d="600s")
    fake.fail_patch.add(keys[2])
    rig.step()
    bound = fake.pod(keys[0])["spec"].get("nodeName")
    assert bound is not None and rig.notes(keys[0])[ann.NODE] == bound
    assert ann.BLOCK in rig.notes(keys[0])  # not undone under a bound pod
    assert ann.BLOCK not in rig.notes(keys[2])
    _, failed = rig.verbs.filter(fake.pod(keys[2]), [bound])
    assert "retrying" in failed[bound]
    fake.fail_patch.clear()
    r = rig.advance()
    assert r.admitted == []  # not admitted again: its records are its admission
    blocks = {rig.notes(k)[ann.BLOCK] for k in keys}
    times = {rig.notes(k)[ann.ADMITTED_AT] for k in keys}
    assert len(blocks) == 1 and len(times) == 1
    assert all(rig.verbs.filter(fake.pod(k), ["gpu-node-0", "gpu-node-1"])[0] == [bound]
               for k in keys)
    assert not rig.ctl.table.waiting
    restarted = Rig(fake=fake)
    g = restarted.ctl.take_snapshot().gangs["ns/g"]
    assert g.admission is not None and g.error is None and not g.refill
    assert g.admission.block.label(restarted.ctl.take_snapshot().cluster,
                                   restarted.ctl.take_snapshot().nodes) in blocks
    assert set(g.admission.nodes) == set(keys)


def test_a_pod_whose_admission_was_cut_short_is_told_it_completes_the_gang() -> None:
    rig = Rig()
    keys = gang(rig.fake, "g", 2, 4, d="600s")
    rig.fake.fail_patch.add(keys[1])
    rig.step()
    rig.fake.fail_patch.clear()
    rig.advance()
    assert rig.notes(keys[1])[ann.BLOCK] == rig.notes(keys[0])[ann.BLOCK]
    told = [e["message"] for e in rig.fake.events if e["involvedObject"]["name"] == "g-1"]
    assert any("completes the admission of gang ns/g" in m for m in told)
    assert any(e["involvedObject"]["name"] == "g-0" and "admitted at step" in e["message"]
               for e in rig.fake.events)


class Unanswered(FakeKube):
    """The patch of a pod in `silent` gets no answer (status 0) once; it landed if the
    pod is in `lands`."""

    def __init__(self) -> None:
        super().__init__()
        self.silent: set[str] = set()
        self.lands: set[str] = set()

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        k = f"{namespace}/{name}"
        if k in self.silent:
            self.silent.discard(k)
            if k in self.lands:
                super().patch_pod(namespace, name, patch)
            raise kube.ApiError(0, "read timed out")
        return super().patch_pod(namespace, name, patch)


def _one_node_rig() -> tuple[Rig, Unanswered]:
    fake = Unanswered()
    fake.add("nodes", node(0))
    return Rig(fake=fake), fake


def _blocked(rig: Rig, fake: Unanswered) -> list[str]:
    return [k for k, p in fake.objects["pods"].items()
            if ann.BLOCK in (p["metadata"].get("annotations") or {})]


def test_an_unanswered_admission_write_that_landed_keeps_its_block_from_other_gangs() -> None:
    rig, fake = _one_node_rig()
    (a,) = gang(fake, "a", 1, 8, d="600s", priority="low")
    fake.silent.add(a)
    fake.lands.add(a)
    rig.sync()
    rig.ctl.run_step()  # and the watch does not show the write yet
    assert _blocked(rig, fake) == [a]  # it landed, though the answer never came
    at = rig.notes(a)[ann.ADMITTED_AT]
    # A more urgent gang comes; the watch shows it, but not yet a's record.
    rig.cache.put("pods", fake.add("pods", make_pod("b-0").gpus(8).gang("b", 1)
                                   .duration("30s").priority("critical").build()))
    rig.clock.advance(rig.settings.step_seconds)
    r = rig.ctl.run_step()  # no sync: the watch is late
    assert r.admitted == []
    assert _blocked(rig, fake) == [a] and rig.notes(a)[ann.ADMITTED_AT] == at
    assert any("got no answer" in why for why in rig.ctl.table.waiting.values())
    r = rig.advance()  # the watch shows a's record: a runs on its block, b waits
    assert r.admitted == [] and _blocked(rig, fake) == [a]
    assert rig.notes(a)[ann.ADMITTED_AT] == at


def test_an_unanswered_admission_write_that_did_not_land_is_retried_after_a_while() -> None:
    rig, fake = _one_node_rig()
    (a,) = gang(fake, "a", 1, 8, d="600s")
    fake.silent.add(a)
    rig.step()
    assert _blocked(rig, fake) == []
    assert rig.advance().admitted == []  # still unknown: neither a nor its block moves
    steps = int(writing.UNSURE_SECONDS // rig.settings.step_seconds)
    rig.clock.advance(steps * rig.settings.step_seconds)
    assert rig.step().admitted == ["ns/a"]
    assert _blocked(rig, fake) == [a]


class LosesTheLease(FakeKube):
    """The Lease is lost while the first pod patch is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.leading = True
        self.armed = False

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        out = super().patch_pod(namespace, name, patch)
        if self.armed:
            self.leading = False
        return out


def test_a_leader_that_loses_its_lease_mid_round_writes_no_more_and_the_next_completes() -> None:
    fake = LosesTheLease()
    for i in range(2):
        fake.add("nodes", node(i))
    rig = Rig(fake=fake)
    rig.ctl.leader = lambda: fake.leading
    rig.fake.add("configmaps", configmap("d", curve="2"))
    rig.fake.add("deployments", deployment("svc", replicas=0, notes={
        "gpuroster.io/demand-configmap": "d"}))
    keys = gang(fake, "g", 4, 2, d="600s")
    fake.armed = True
    calls = len(fake.calls)
    rig.step()
    # one write, then nothing: no other pod, no scale (Events are best effort)
    assert [c for c in fake.calls[calls:] if c[0] != "status"] == [("patch", keys[0])]
    assert ann.BLOCK in rig.notes(keys[0])
    assert not any(ann.BLOCK in rig.notes(k) for k in keys[1:])
    fake.armed = False
    follower = Rig(fake=fake)  # takes the Lease over
    r = follower.advance()
    assert r.admitted == []  # the gang's admission is the old leader's record
    assert {follower.notes(k)[ann.BLOCK] for k in keys} == {rig.notes(keys[0])[ann.BLOCK]}
    assert {follower.notes(k)[ann.ADMITTED_AT] for k in keys} == {
        rig.notes(keys[0])[ann.ADMITTED_AT]}


class StuckLoop:
    """A step loop whose round does not end (an API brownout)."""

    def __init__(self) -> None:
        self.round = threading.Event()

    def stop(self, wait: float = 0.0) -> None:
        self.round.wait(wait)

    def alive(self) -> bool:
        return not self.round.is_set()


class NoCache:
    def stop(self) -> None:
        pass


def test_the_lease_is_not_released_while_a_round_still_writes() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.try_once()
    loop = StuckLoop()
    main.shutdown(loop, NoCache(), a, wait=0.01)
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "a"
    assert not b.try_once()  # the follower waits the Lease out
    clock.t += 11
    assert not a.is_leader()  # the stuck round's writes stop at the renew deadline
    clock.t += 5
    assert b.try_once()


def test_the_lease_is_released_once_the_loop_has_ended() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.try_once()
    loop = StuckLoop()
    loop.round.set()
    main.shutdown(loop, NoCache(), a, wait=0.01)
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == ""
    assert b.try_once()

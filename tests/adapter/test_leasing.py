"""Leader election on a Lease: acquire, renew, wait while another holds it, take over."""

from __future__ import annotations

import copy
from typing import Any

from extender.adapter import kube, leasing


class Store:
    """A Lease with optimistic concurrency (resourceVersion), as the API server keeps it."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.fail = False

    def get(self) -> dict[str, Any] | None:
        if self.fail:
            raise kube.ApiError(0, "down")
        return copy.deepcopy(self.lease)

    def create(self, body: dict[str, Any]) -> None:
        if self.lease is not None:
            raise kube.ApiError(409, "exists")
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)

    def update(self, body: dict[str, Any]) -> None:
        assert self.lease is not None
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise kube.ApiError(409, "conflict")
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(store: Store, clock: Clock, who: str) -> leasing.Elector:
    return leasing.Elector(store, who, name="gpuroster", namespace="ns", lease_seconds=15,
                           renew_deadline=10, now=clock, monotonic=clock)


def test_one_leader_at_a_time_and_takeover_after_expiry() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.try_once() and a.is_leader()
    assert not b.try_once() and not b.is_leader()
    clock.t += 5
    assert a.try_once()  # renews
    assert not b.try_once()
    # a dies: b waits out the lease (from when it last saw it change), then takes over
    clock.t += 10
    assert not b.try_once()
    clock.t += 6
    assert b.try_once() and b.is_leader()
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "b"
    assert store.lease["spec"]["leaseTransitions"] == 1
    # a comes back: its leadership lapsed; it sees b's fresh lease and stays follower
    assert not a.is_leader()
    assert not a.try_once()


def test_leader_steps_down_when_it_cannot_renew() -> None:
    store, clock = Store(), Clock()
    a = elector(store, clock, "a")
    assert a.try_once()
    store.fail = True
    clock.t += 5
    assert a.try_once()  # still inside the renew deadline
    clock.t += 6
    assert not a.try_once() and not a.is_leader()


def test_a_leader_that_shuts_down_releases_and_a_follower_takes_over_at_once() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.try_once()
    assert not b.try_once()
    clock.t += 1  # far inside a's 15 s Lease
    assert a.release() and not a.is_leader()
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == ""
    assert b.try_once() and b.is_leader()
    assert store.lease["spec"]["holderIdentity"] == "b"
    assert store.lease["spec"]["leaseTransitions"] == 1


def test_release_leaves_a_lease_it_does_not_hold_alone() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    assert a.try_once()
    assert not b.try_once()
    assert not elector(store, clock, "c").release()  # a follower has nothing to give up
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "a"
    # a's Lease lapsed and b took it while a was cut off: a must not clear b's holder
    clock.t += 16
    assert b.try_once()
    a._leader_until = clock.t + 5  # a still believes it leads (its renew deadline)
    assert not a.release() and not a.is_leader()
    assert store.lease["spec"]["holderIdentity"] == "b"


def test_a_failed_release_is_left_to_expiry() -> None:
    store, clock = Store(), Clock()
    a = elector(store, clock, "a")
    assert a.try_once()
    store.fail = True
    assert not a.release() and not a.is_leader()  # stops committing all the same
    store.fail = False
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "a"

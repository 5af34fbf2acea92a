"""Leader election on a Lease: acquire, renew, wait while another holds it, take over."""

from __future__ import annotations

import copy
import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

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


# --- the Lease's owner (the chart's Deployment) -----------------------------------------------

OWNER = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gpuroster", "uid": "u-1"}


class Apps:
    """read_namespaced_deployment as the API server answers it: the uid, or an error."""

    def __init__(self, status: int | None = None) -> None:
        self.status, self.reads = status, 0

    def read_namespaced_deployment(self, name: str, namespace: str, **_: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        self.reads += 1
        if self.status is not None:
            raise ApiException(status=self.status, reason="nope")
        return SimpleNamespace(data=json.dumps({"metadata": {"name": name, "uid": "u-1"}}))


def api_store(apps: Apps, owner: str = "gpuroster") -> leasing.ApiLeaseStore:
    from kubernetes import client

    return leasing.ApiLeaseStore(SimpleNamespace(api=client.ApiClient(), apps=apps),  # type: ignore[arg-type]
                                 "ns", "gpuroster", owner=owner)


def lease_body(refs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "gpuroster", "namespace": "ns"}
    if refs is not None:
        meta["ownerReferences"] = refs
    return {"metadata": meta, "spec": {"holderIdentity": "a"}}


def test_a_new_lease_is_owned_by_the_deployment() -> None:
    apps = Apps()
    body = api_store(apps)._owned(lease_body(), creating=True)
    assert body["metadata"]["ownerReferences"] == [OWNER] and apps.reads == 1
    assert body["spec"] == {"holderIdentity": "a"}


def test_no_lease_is_created_once_its_owner_is_gone() -> None:
    with pytest.raises(kube.ApiError) as e:
        api_store(Apps(status=404))._owned(lease_body(), creating=True)
    assert e.value.status == 404 and "is gone" in str(e.value)


def test_a_renewal_never_waits_on_the_owner() -> None:
    # already owned: no read at all
    apps = Apps(status=500)
    owned = lease_body([OWNER])
    assert api_store(apps)._owned(owned, creating=False) is owned and apps.reads == 0
    # written before owners (an upgrade): the owner is added, or left out on an error
    assert api_store(Apps())._owned(lease_body(), creating=False)["metadata"][
        "ownerReferences"] == [OWNER]
    for status in (403, 404, 500):
        assert "ownerReferences" not in api_store(Apps(status=status))._owned(
            lease_body(), creating=False)["metadata"]
    # a create the authorizer does not let read the owner still elects (unowned)
    assert "ownerReferences" not in api_store(Apps(status=403))._owned(
        lease_body(), creating=True)["metadata"]


def test_without_an_owner_the_lease_is_written_as_it_is() -> None:
    apps = Apps()
    body = lease_body()
    assert api_store(apps, owner="")._owned(body, creating=True) is body and apps.reads == 0


def test_with_owner_keeps_other_owners_and_adds_once() -> None:
    other = {**OWNER, "name": "x", "uid": "u-9"}
    once = leasing.with_owner(lease_body([other]), OWNER)
    assert once["metadata"]["ownerReferences"] == [other, OWNER]
    assert leasing.with_owner(once, OWNER) is once
    assert leasing.owned_by(once, "gpuroster") and not leasing.owned_by(lease_body(), "x")


def test_an_unreadable_owner_is_warned_of_once_not_at_every_renewal(
        caplog: pytest.LogCaptureFixture) -> None:
    apps = Apps(status=403)
    store = api_store(apps)
    with caplog.at_level(logging.DEBUG, logger="extender.adapter.leasing"):
        for _ in range(3):
            store._owned(lease_body(), creating=False)
    said = [r.levelno for r in caplog.records if "owner Deployment" in r.getMessage()]
    assert said == [logging.WARNING, logging.DEBUG, logging.DEBUG] and apps.reads == 3

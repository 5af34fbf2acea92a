"""Informers on a fake API server: list, watch, 410 relist, reconnect, assumed bindings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from extender.adapter import kube, watching
from tests.kubefake import FakeKube, make_pod, node
from tests.waiting import wait_until


def started(fake: FakeKube, kind: str = "pods", **kw: Any) -> watching.Informer:
    inf = watching.Informer(fake, kind, None, **kw)
    inf.start()
    assert inf.synced.wait(10), f"{kind} informer not synced in 10 s"
    return inf


def test_list_then_watch_keeps_the_cache() -> None:
    fake = FakeKube()
    fake.add("pods", make_pod("a").build())
    changes: list[str] = []
    inf = started(fake, on_change=changes.append)
    try:
        assert [p["metadata"]["name"] for p in inf.items()] == ["a"]
        wait_until(lambda: fake.watchers["pods"], what="the pods watch")
        fake.add("pods", make_pod("b").build())
        wait_until(lambda: inf.get("ns/b") is not None, what="b's ADDED in the cache")
        fake.delete("pods", "ns/a")
        wait_until(lambda: inf.get("ns/a") is None, what="a's DELETED in the cache")
        # the list, the ADDED of b and the DELETED of a, each naming the informer's kind
        wait_until(lambda: len(changes) >= 3, what="three on_change calls")
        time.sleep(0.05)  # room for a stray extra call to show up
        assert changes == ["pods", "pods", "pods"]
    finally:
        inf.stop()


def test_410_gone_relists() -> None:
    fake = FakeKube()
    inf = started(fake)
    try:
        wait_until(lambda: fake.watchers["pods"], what="the pods watch")
        lists = fake.lists
        # An object added while the watch "expired": only a relist can find it.
        with fake.lock:
            fake.objects["pods"]["ns/hidden"] = make_pod("hidden").build()
            fake.objects["pods"]["ns/hidden"]["metadata"]["resourceVersion"] = "999"
        fake.gone("pods")
        wait_until(lambda: inf.get("ns/hidden") is not None, what="the relist after 410 Gone")
        assert fake.lists > lists
    finally:
        inf.stop()


class Flaky(FakeKube):
    """Watches fail a few times before working."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def watch(self, kind: str, namespace: str | None, resource_version: str,
              timeout_seconds: int) -> Iterator[dict[str, Any]]:
        if self.failures > 0:
            self.failures -= 1
            raise kube.ApiError(0, "connection refused")
        return super().watch(kind, namespace, resource_version, timeout_seconds)


def test_reconnects_after_failures() -> None:
    fake = Flaky(failures=2)
    inf = started(fake)
    try:
        wait_until(lambda: fake.watchers["pods"], what="the pods watch, after two failures")
        fake.add("pods", make_pod("late").build())
        wait_until(lambda: inf.get("ns/late") is not None, what="late's ADDED in the cache")
        assert inf.restarts >= 2
    finally:
        inf.stop()


def test_resync_relists_periodically() -> None:
    fake = FakeKube()
    inf = started(fake, resync_seconds=0.3)
    try:
        lists = fake.lists
        wait_until(lambda: fake.lists >= lists + 2, what="two resyncs (0.3 s apart)")
    finally:
        inf.stop()


def test_stale_events_do_not_overwrite_newer_objects() -> None:
    fake = FakeKube()
    inf = watching.Informer(fake, "pods")
    new = make_pod("a").build()
    new["metadata"]["resourceVersion"] = "10"
    old = make_pod("a").build()
    old["metadata"]["resourceVersion"] = "9"
    old["metadata"]["annotations"] = {"stale": "yes"}
    inf.put(new)
    assert inf.apply({"type": "MODIFIED", "object": old})
    assert "stale" not in (inf.get("ns/a") or {})["metadata"]["annotations"]


def test_cache_assumed_bindings_drop_once_visible() -> None:
    fake = FakeKube()
    fake.add("nodes", node(0))
    fake.add("pods", make_pod("a").gpus(1).build())
    cache = watching.Cache(fake)
    for i in cache.all():
        i.relist()
    cache.assume("ns/a", "gpu-node-0")
    assert cache.assumed() == {"ns/a": "gpu-node-0"}
    fake.bind("ns", "a", None, "gpu-node-0")
    for i in cache.all():
        i.relist()
    assert cache.assumed() == {}


def shape(cache: watching.Cache) -> dict[str, list[str | None]]:
    """Each kind's informers, by namespace (None: all namespaces); each watches its kind."""
    assert all(i.kind == k for k, group in cache.informers.items() for i in group)
    return {k: [i.namespace for i in group] for k, group in cache.informers.items()}


def test_namespaced_cache_has_one_informer_per_namespace() -> None:
    fake = FakeKube()
    fake.add("pods", make_pod("a", "x").build())
    fake.add("pods", make_pod("b", "y").build())
    cache = watching.Cache(fake, ["x"])
    for i in cache.all():
        i.relist()
    assert [p["metadata"]["name"] for p in cache.items("pods")] == ["a"]
    assert cache.namespaces == ("x",)
    assert shape(cache) == {"nodes": [None], "pods": ["x"], "deployments": ["x"],
                            "configmaps": ["x"]}
    both = watching.Cache(fake, ["x", "y"])
    for i in both.all():
        i.relist()
    assert both.namespaces == ("x", "y")
    assert shape(both) == {"nodes": [None], "pods": ["x", "y"], "deployments": ["x", "y"],
                           "configmaps": ["x", "y"]}
    assert [(i.namespace, [p["metadata"]["name"] for p in i.items()])
            for i in both.informers["pods"]] == [("x", ["a"]), ("y", ["b"])]
    assert shape(watching.Cache(fake)) == {"nodes": [None], "pods": [None],
                                           "deployments": [None], "configmaps": [None]}

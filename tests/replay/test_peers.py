"""The replay's peers: chosen by name, each one module."""

from __future__ import annotations

import pytest

from extender.replay import peers
from extender.replay.peers.extender import ExtenderPeer, job_pods
from tests.builders import scenario


def test_the_extender_peers_are_known_by_their_policy_names() -> None:
    assert {"fifo", "gpuroster"} <= set(peers.names())
    p = peers.create("fifo")
    assert isinstance(p, ExtenderPeer) and p.name == "fifo" and p.policy == "fifo"


def test_an_unknown_peer_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown peer 'kube-batch'.*fifo"):
        peers.create("kube-batch")


def test_a_registered_peer_is_created_by_name() -> None:
    class Nothing(peers.Peer):
        name = "nothing"

    peers.register("nothing-test", Nothing)
    try:
        assert isinstance(peers.create("nothing-test"), Nothing)
        assert "nothing-test" in peers.names()
    finally:
        del peers._registry["nothing-test"]


def test_gpuroster_gets_its_jobs_as_gated_annotated_gangs() -> None:
    s = scenario().nodes(2, 4).window(4).job("big", gpus=8, d=2, priority=4).build()
    pods = job_pods(s.jobs[0], 4, 60, "ns")
    assert [p["metadata"]["name"] for p in pods] == ["big-0", "big-1"]
    a = pods[0]["metadata"]["annotations"]
    assert a["gpuroster.io/gang"] == "big" and a["gpuroster.io/gang-size"] == "2"
    assert a["gpuroster.io/priority"] == "4"
    assert pods[1]["spec"]["schedulingGates"] == [{"name": "gpuroster.io/admission"}]
    assert pods[1]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}

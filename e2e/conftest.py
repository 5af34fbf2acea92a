"""Fixtures for tests against the local control plane (extender.localcluster).

- ``cluster`` (session): one running control plane with fake GPU nodes
  ``gpu-node-0..N-1`` (N = $GPUROSTER_E2E_NODES, default 4; 8 GPUs each).
  kube-scheduler calls the extender at ``cluster.extender_url`` (port
  ``cluster.extender_port``); a test starts its extender there and stops it
  when done. Skipped only when GPUROSTER_SKIP_E2E=1; otherwise a cluster that
  cannot start is an error.
- ``namespace`` (function): a fresh namespace, deleted (and waited for) after.
- ``api_client`` / ``core``: kubernetes-client ApiClient / CoreV1Api (admin).
- ``nodes`` (function): the node names; the initial node set is restored
  after the test (for tests that add, remove or break nodes).

Every test under e2e/ gets the ``e2e`` marker. A failing test that used the
cluster gets the tail of every component log in its report.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import clusters
from extender.localcluster import Cluster

E2E_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    nodes = int(os.environ.get("GPUROSTER_E2E_NODES", "4"))
    with clusters.running(request, "e2e", nodes=nodes) as c:
        yield c


@pytest.fixture(scope="session")
def api_client(cluster: Cluster) -> Any:
    return cluster.api()


@pytest.fixture(scope="session")
def core(cluster: Cluster) -> Any:
    return cluster.core()


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    from kubernetes.client.exceptions import ApiException

    base = request.node.name.lower().replace("_", "-")
    name = "".join(ch for ch in base if ch.isalnum() or ch == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:5]}"
    core: Any = cluster.core()
    cluster.create_namespace(name, {"gpuroster.io/e2e": "true"})
    try:
        yield name
    finally:
        # Pods first, at once (KWOK removes them), so the next test finds the
        # GPUs free; the namespace controller finishes the rest in the background.
        if cluster.running():
            _delete_workloads(cluster, name)
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
            deadline = time.monotonic() + 30
            while core.list_namespaced_pod(name).items and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)


def _delete_workloads(cluster: Cluster, namespace: str) -> None:
    """Controllers first, or they recreate the pods we delete."""
    from kubernetes import client

    apps: Any = client.AppsV1Api(cluster.api())
    batch: Any = client.BatchV1Api(cluster.api())
    for delete in (apps.delete_collection_namespaced_deployment,
                   apps.delete_collection_namespaced_stateful_set,
                   apps.delete_collection_namespaced_daemon_set,
                   apps.delete_collection_namespaced_replica_set,
                   batch.delete_collection_namespaced_job):
        delete(namespace, propagation_policy="Background")


@pytest.fixture
def nodes(cluster: Cluster) -> Iterator[list[str]]:
    yield cluster.node_names()
    cluster.reset_nodes()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    c = funcargs.get("cluster")
    if report.failed and isinstance(c, Cluster):
        report.sections.append(("local control plane logs", c.log_tails(lines=30)))

"""The chart's admission-record policy on the real API server.

The extender trusts a pod's `gpuroster.io/block`, `admitted-at` and `node`
annotations (they are the durable record of admission), so the chart ships a
ValidatingAdmissionPolicy: only gpuroster's ServiceAccount may add or change
them. Anyone else, cluster-admin included, is refused; other annotations and
other pods are untouched.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from e2e import accounts
from e2e.test_helm import CHART, helm_binary, wait_record_unguarded
from extender.localcluster import Cluster, objects

RELEASE = "vap"


def _pod(name: str, notes: dict[str, str] | None = None) -> dict[str, Any]:
    return objects.pod(name, gpus=1, annotations=notes or {})


def _denied(call: Any) -> str:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status in (403, 422), err.value
    return str(err.value.body)


@pytest.fixture
def policy(cluster: Cluster, namespace: str, tmp_path: Path) -> Any:
    rendered = subprocess.run(
        [helm_binary(cluster), "template", RELEASE, str(CHART), "-n", namespace,
         "--kube-version", "v1.36.3", "-s", "templates/admission-policy.yaml"],
        capture_output=True, text=True, check=True).stdout
    path = tmp_path / "policy.yaml"
    path.write_text(rendered)
    cluster.kubectl("apply", "-f", str(path))
    try:
        yield f"{RELEASE}-gpuroster"
    finally:  # cluster-scoped: it would refuse other tests' extenders (they run as admin)
        cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", check=False)
        wait_record_unguarded(cluster.kubeconfig, namespace)


def test_only_gpurosters_account_writes_the_admission_record(
        cluster: Cluster, namespace: str, policy: str, tmp_path: Path) -> None:
    core = cluster.core()
    # The policy is enforced once the API server has compiled it: retry briefly.
    deadline = time.time() + 30
    while True:
        try:
            core.create_namespaced_pod(namespace, _pod("forged", {"gpuroster.io/block":
                                                                  "gpu-node-0:0-7"}))
        except ApiException as e:
            assert e.status in (403, 422)
            assert "written by gpuroster only" in str(e.body)
            break
        core.delete_namespaced_pod("forged", namespace, grace_period_seconds=0)
        assert time.time() < deadline, "the policy never took effect"
        time.sleep(1)
    print("cluster-admin creating a pod with gpuroster.io/block: refused")

    core.create_namespaced_pod(namespace, _pod("honest", {"gpuroster.io/priority": "high"}))
    body = _denied(lambda: core.patch_namespaced_pod(
        "honest", namespace, {"metadata": {"annotations": {"gpuroster.io/node": "gpu-node-1"}}}))
    assert "written by gpuroster only" in body
    core.patch_namespaced_pod("honest", namespace,
                              {"metadata": {"annotations": {"team": "vision"}}})
    print("cluster-admin adding gpuroster.io/node: refused; adding another annotation: allowed")

    # gpuroster's own ServiceAccount (with the pod verbs the chart grants it) may write it.
    core.create_namespaced_service_account(namespace, {"metadata": {"name": policy}})
    rbac = cluster.api()
    from kubernetes import client as k8s

    k8s.RbacAuthorizationV1Api(rbac).create_namespaced_role(namespace, k8s.V1Role(
        metadata=k8s.V1ObjectMeta(name="pods"),
        rules=[k8s.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "patch"])]))
    k8s.RbacAuthorizationV1Api(rbac).create_namespaced_role_binding(namespace, k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name="pods"),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pods"),
        subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=policy, namespace=namespace)]))
    kubeconfig = accounts.service_account_kubeconfig(cluster, namespace, policy,
                                                     tmp_path / "sa.kubeconfig")
    as_gpuroster = k8s.CoreV1Api(accounts.client(kubeconfig))
    as_gpuroster.patch_namespaced_pod("honest", namespace, {"metadata": {"annotations": {
        "gpuroster.io/block": "gpu-node-0:0-0", "gpuroster.io/node": "gpu-node-0"}}})
    notes = core.read_namespaced_pod("honest", namespace).metadata.annotations
    assert notes["gpuroster.io/block"] == "gpu-node-0:0-0"
    print("gpuroster's ServiceAccount writing the record: allowed")

    # Leaving the record as it is stays allowed for everyone (controllers touch pods too).
    core.patch_namespaced_pod("honest", namespace,
                              {"metadata": {"labels": {"checked": "yes"}}})

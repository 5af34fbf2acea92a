"""The Helm chart against the real API server of the local control plane.

- every rendered object passes server-side validation (strict field checks);
- `helm install`, `helm upgrade` with changed values and `helm uninstall`
  (which leaves nothing labelled with the release behind);
- the chart's RBAC, exercised with real ServiceAccount tokens: every verb the
  code uses is allowed (and really works), verbs it does not use are refused;
- the chart's ServiceMonitor against the real prometheus-operator CRD (fetched
  from the Go module proxy by the build script): validated strictly, installed
  unpruned, removed on uninstall;
- the chart's KubeSchedulerConfiguration runs in the real kube-scheduler, as
  the chart's scheduler ServiceAccount: it takes its own Lease and routes a
  GPU pod through the extender (a stub here) to a binding.

Pods are simulated by KWOK: the chart's containers never really run, so the
gpuroster process itself is exercised with these tokens elsewhere
(`e2e.accounts.service_account_kubeconfig`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from e2e import accounts
from e2e.accounts import Access
from extender.localcluster import Cluster, free_port, objects, processes
from extender.localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "gpuroster"
INSTANCE = "app.kubernetes.io/instance"
TOLERATE_FAKE_NODES = [{"key": objects.KWOK_TAINT_KEY, "operator": "Exists",
                        "effect": "NoSchedule"}]
# Pods of the chart may run on the fake nodes (KWOK marks them Running and Ready).
# A short grace period keeps namespace teardown quick (KWOK honours it).
BASE_VALUES: dict[str, Any] = {
    "tolerations": TOLERATE_FAKE_NODES,
    "terminationGracePeriodSeconds": 1,
    "scheduler": {"tolerations": TOLERATE_FAKE_NODES, "terminationGracePeriodSeconds": 1},
}
# Everything the chart labels, namespaced and cluster-scoped.
LABELLED_KINDS = ("deployments.apps,replicasets.apps,pods,services,serviceaccounts,configmaps,"
                  "roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io,"
                  "poddisruptionbudgets.policy,clusterroles.rbac.authorization.k8s.io,"
                  "clusterrolebindings.rbac.authorization.k8s.io,"
                  "validatingadmissionpolicies.admissionregistration.k8s.io,"
                  "validatingadmissionpolicybindings.admissionregistration.k8s.io")


# --- helm and kubectl ------------------------------------------------------------------


def helm_binary(cluster: Cluster) -> str:
    path = Path(os.environ.get("GPUROSTER_HELM") or cluster.bin_dir / "helm")
    if not path.is_file():
        pytest.fail(f"helm not found at {path}: run `gpuroster cluster build` "
                    "or set GPUROSTER_HELM")
    return str(path)


@dataclass
class Helm:
    binary: str
    kubeconfig: Path
    home: Path
    installed: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, *args: str, check: bool = True,
                 timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "HELM_CACHE_HOME": str(self.home / "cache"),
               "HELM_CONFIG_HOME": str(self.home / "config"),
               "HELM_DATA_HOME": str(self.home / "data")}
        result = subprocess.run([self.binary, *args], capture_output=True, text=True, env=env,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        if args[0] == "install" and not any(a.startswith("--dry-run") for a in args):
            self.installed.append((args[1], args[args.index("-n") + 1]))
        if args[0] == "uninstall" and result.returncode == 0:
            wait_record_unguarded(self.kubeconfig, args[args.index("-n") + 1])
        return result


def wait_record_unguarded(kubeconfig: Path, namespace: str) -> None:
    """Until the API server admits a pod in `namespace` that writes the admission record.
    It enforces a deleted admission policy until its policy cache refreshes (about a
    second after the object is gone): a test after one that uninstalled the chart, patching
    the record as an admin, was refused by the policy it left."""
    from kubernetes import client as k8s

    api = accounts.client(kubeconfig)
    core: Any = k8s.CoreV1Api(api)
    probe = {"metadata": {"name": "record-probe",
                          "annotations": {"gpuroster.io/block": "gpu-node-0:0-1"}},
             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}

    def admitted() -> bool:
        try:
            core.create_namespaced_pod(namespace, probe, dry_run="All")
        except ApiException as e:  # refused by the policy, or for another reason
            return not (e.status == 403 and "written by gpuroster only" in str(e.body))
        return True

    try:
        wait_for(admitted, 30, "the deleted admission policy to let go")
    finally:
        api.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def helm(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Helm]:
    # Depends on `namespace` so that it is torn down (uninstalling) before the namespace.
    h = Helm(helm_binary(cluster), cluster.kubeconfig, tmp_path / "helm-home")
    yield h
    # Uninstall first: the namespace controller is slow to empty a namespace of
    # running Deployments, and cluster-scoped objects would outlive the namespace.
    for release, namespace in h.installed:
        h("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", "--ignore-not-found",
          check=False)


def values_file(tmp_path: Path, *layers: dict[str, Any]) -> str:
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = _merge(merged, layer)
    path = tmp_path / f"values-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(merged))
    return str(path)


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def kubectl_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def servicemonitor_crd(cluster: Cluster) -> None:
    """The prometheus-operator ServiceMonitor CRD, installed (once) and Established."""
    found = sorted((cluster.bin_dir / "crds").glob("monitoring.coreos.com_servicemonitors-*.yaml"))
    if not found:
        pytest.fail(f"no ServiceMonitor CRD in {cluster.bin_dir / 'crds'}: "
                    "run `gpuroster cluster build`")
    # Server-side: the CRD is larger than client-side apply's annotation allows.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(found[-1]))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/servicemonitors.monitoring.coreos.com")


def cluster_version(cluster: Cluster) -> str:
    return str(kubectl_json(cluster, "version")["serverVersion"]["gitVersion"])


def labelled(cluster: Cluster, release: str) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every object carrying the release's label."""
    items = kubectl_json(cluster, "get", LABELLED_KINDS, "--all-namespaces", "-l",
                         f"{INSTANCE}={release}")["items"]
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items}


def manifest_objects(helm: Helm, release: str, namespace: str) -> set[tuple[str, str, str]]:
    """What helm says the release consists of."""
    text = helm("get", "manifest", release, "-n", namespace).stdout
    out = set()
    for doc in yaml.safe_load_all(text):
        if doc:
            cluster_scoped = doc["kind"] in ("ClusterRole", "ClusterRoleBinding",
                                             "ValidatingAdmissionPolicy",
                                             "ValidatingAdmissionPolicyBinding")
            ns = "" if cluster_scoped else doc["metadata"].get("namespace", namespace)
            out.add((doc["kind"], ns, doc["metadata"]["name"]))
    return out


def release_name(namespace: str) -> str:
    # Unique per test: cluster-scoped names embed it.
    return f"gr-{namespace[-5:]}"


def env_of(deploy: dict[str, Any]) -> dict[str, str]:
    (c,) = [c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "gpuroster"]
    return {e["name"]: e.get("value", "") for e in c["env"]}


@pytest.fixture
def other_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"team-{uuid.uuid4().hex[:6]}"
    core: Any = cluster.core()
    cluster.create_namespace(name, {"gpuroster.io/e2e": "true"})
    try:
        yield name
    finally:
        core.delete_namespace(name)


# --- server-side validation ----------------------------------------------------------------


@pytest.mark.parametrize("variant", [
    {},
    {"replicaCount": 2, "config": {"namespaces": ["default", "kube-public"]},
     "tls": {"enabled": True, "secretName": "gpuroster-tls"},
     "metrics": {"dashboard": {"enabled": True},
                 "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
     "podDisruptionBudget": {"minAvailable": 1}},
    {"scheduler": {"mode": "snippet"}},
], ids=["defaults", "everything-on", "snippet"])
def test_every_object_passes_server_side_validation(
    cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path, variant: dict[str, Any]
) -> None:
    release = release_name(namespace)
    if variant.get("metrics", {}).get("serviceMonitor"):
        servicemonitor_crd(cluster)
    values = values_file(tmp_path, BASE_VALUES, variant)
    rendered = helm("template", release, str(CHART), "-n", namespace, "-f", values,
                    "--kube-version", cluster_version(cluster)).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(rendered)
    # Strict: an unknown or misspelt field is an error, not silently dropped.
    # Every namespaced object names its namespace (one RoleBinding is in kube-system).
    applied = cluster.kubectl("apply", "--dry-run=server", "--validate=strict",
                              "-f", str(manifest), check=False)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == len(docs), applied.stdout
    # helm's own server dry run: the release installs (names free, capabilities met).
    dry = helm("install", release, str(CHART), "-n", namespace, "-f", values,
               "--dry-run=server")
    assert "NOTES:" in dry.stdout
    assert not labelled(cluster, release), "a dry run created objects"


# --- install, upgrade, uninstall -----------------------------------------------------------


def test_service_monitor_installs_as_rendered_and_goes_with_the_release(
    cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path
) -> None:
    servicemonitor_crd(cluster)
    release = release_name(namespace)
    values = values_file(tmp_path, BASE_VALUES, {"metrics": {"serviceMonitor": {
        "enabled": True, "interval": "15s", "labels": {"release": "kps"}}}})
    rendered = [d for d in yaml.safe_load_all(helm(
        "template", release, str(CHART), "-n", namespace, "-f", values,
        "--kube-version", cluster_version(cluster)).stdout) if d]
    (want,) = [d for d in rendered if d["kind"] == "ServiceMonitor"]
    helm("install", release, str(CHART), "-n", namespace, "-f", values)
    live = kubectl_json(cluster, "get", "servicemonitors.monitoring.coreos.com",
                        want["metadata"]["name"], "-n", namespace)
    # The CRD's structural schema prunes fields it does not know: equal means none was.
    assert live["spec"] == want["spec"], (live["spec"], want["spec"])
    assert live["metadata"]["labels"]["release"] == "kps"
    # It selects the chart's metrics Service.
    (svc,) = [d for d in rendered if d["kind"] == "Service"
              and d["metadata"]["name"] == f"{release}-gpuroster"]
    selector = live["spec"]["selector"]["matchLabels"]
    assert selector.items() <= svc["metadata"]["labels"].items()
    ports = {p.get("name") for p in svc["spec"]["ports"]}
    assert {e["port"] for e in live["spec"]["endpoints"]} <= ports
    helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
    gone = cluster.kubectl("get", "servicemonitors.monitoring.coreos.com", "-n", namespace,
                           "-o", "name", check=False)
    assert gone.returncode == 0 and gone.stdout.strip() == "", gone.stdout


def test_install_upgrade_uninstall_leaves_nothing(
    cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path
) -> None:
    release = release_name(namespace)
    full = f"{release}-gpuroster"
    sched = f"{full}-scheduler"
    installed = helm("install", release, str(CHART), "-n", namespace,
                     "-f", values_file(tmp_path, BASE_VALUES), "--wait", "--timeout", "180s")
    assert "/plan/view" in installed.stdout and "schedulerName: gpuroster" in installed.stdout

    live = labelled(cluster, release)
    declared = manifest_objects(helm, release, namespace)
    assert declared <= live, f"missing: {declared - live}"
    assert ("RoleBinding", "kube-system", f"{full}-{namespace}-scheduler-auth-reader") in live

    deploy = kubectl_json(cluster, "get", "deployment", full, "-n", namespace)
    assert deploy["status"].get("readyReplicas") == 1
    sdeploy = kubectl_json(cluster, "get", "deployment", sched, "-n", namespace)
    assert sdeploy["status"].get("readyReplicas") == 1
    (sc,) = sdeploy["spec"]["template"]["spec"]["containers"]
    assert sc["image"] == f"registry.k8s.io/kube-scheduler:{cluster_version(cluster)}"
    checksum_before = sdeploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert env_of(deploy)["GPUROSTER_LEADER_ELECT"] == "false"

    # Upgrade: two replicas (leader election), a shorter step, one watched namespace,
    # a longer extender timeout.
    helm("upgrade", release, str(CHART), "-n", namespace, "--wait", "--timeout", "180s",
         "-f", values_file(tmp_path, BASE_VALUES, {
             "replicaCount": 2, "config": {"stepSeconds": 900, "namespaces": [namespace]},
             "scheduler": {"extender": {"httpTimeout": "20s"}}}))
    deploy = kubectl_json(cluster, "get", "deployment", full, "-n", namespace)
    assert deploy["status"].get("readyReplicas") == 2
    env = env_of(deploy)
    assert (env["GPUROSTER_STEP_SECONDS"], env["GPUROSTER_LEADER_ELECT"],
            env["GPUROSTER_NAMESPACES"]) == ("900", "true", namespace)
    live = labelled(cluster, release)
    assert ("Role", namespace, f"{full}-leader-election") in live
    assert ("Role", namespace, full) in live
    # Objects the new values no longer render are gone.
    assert ("ClusterRole", "", f"{full}-{namespace}-workloads") not in live
    assert ("ClusterRoleBinding", "", f"{full}-{namespace}-workloads") not in live
    cm = kubectl_json(cluster, "get", "configmap", f"{sched}-config", "-n", namespace)
    cfg = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    assert cfg["extenders"][0]["httpTimeout"] == "20s"
    sdeploy = kubectl_json(cluster, "get", "deployment", sched, "-n", namespace)
    assert sdeploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != (
        checksum_before), "a scheduler configuration change must restart the scheduler"
    history = json.loads(helm("history", release, "-n", namespace, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2]

    helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")
    wait_for(lambda: not labelled(cluster, release), 90,
             f"objects labelled {INSTANCE}={release} to disappear")
    secrets = kubectl_json(cluster, "get", "secrets", "-n", namespace, "-l",
                           f"owner=helm,name={release}")["items"]
    assert secrets == [], "helm's release records remain"


# --- RBAC, with real ServiceAccount tokens -----------------------------------------------------


def workload_access(namespace: str | None) -> list[Access]:
    """Every namespaced verb the controller and extender use."""
    return [
        *(Access(v, "pods", namespace=namespace) for v in ("get", "list", "watch", "patch")),
        Access("create", "pods", subresource="binding", namespace=namespace),
        Access("patch", "pods", subresource="status", namespace=namespace),
        Access("create", "pods", subresource="eviction", namespace=namespace),
        Access("create", "events", namespace=namespace),
        Access("create", "events", group="events.k8s.io", namespace=namespace),
        *(Access(v, "deployments", group="apps", namespace=namespace)
          for v in ("get", "list", "watch")),
        Access("get", "deployments", group="apps", subresource="scale", namespace=namespace),
        Access("patch", "deployments", group="apps", subresource="scale", namespace=namespace),
        *(Access(v, "configmaps", namespace=namespace) for v in ("get", "list", "watch")),
    ]


NODE_ACCESS = [Access(v, "nodes") for v in ("get", "list", "watch")]
# Only with config.priorityClassValues: a Deployment's template class's value.
PRIORITY_CLASS_ACCESS = [Access(v, "priorityclasses", group="scheduling.k8s.io")
                         for v in ("get", "list", "watch")]


def refused_access(namespace: str) -> list[Access]:
    """Verbs the code never uses."""
    return [
        Access("delete", "pods", namespace=namespace),
        Access("deletecollection", "pods", namespace=namespace),
        Access("create", "pods", namespace=namespace),
        Access("update", "pods", namespace=namespace),
        # The legacy top-level resource; the code binds through pods/binding.
        Access("create", "bindings", namespace=namespace),
        Access("create", "pods", subresource="exec", namespace=namespace),
        Access("update", "pods", subresource="status", namespace=namespace),
        Access("get", "secrets", namespace=namespace),
        Access("list", "secrets", namespace=namespace),
        Access("update", "nodes"), Access("patch", "nodes"), Access("delete", "nodes"),
        Access("patch", "nodes", subresource="status"),
        Access("create", "deployments", group="apps", namespace=namespace),
        Access("update", "deployments", group="apps", namespace=namespace),
        Access("patch", "deployments", group="apps", namespace=namespace),
        Access("delete", "deployments", group="apps", namespace=namespace),
        Access("update", "deployments", group="apps", subresource="scale", namespace=namespace),
        Access("create", "configmaps", namespace=namespace),
        Access("update", "configmaps", namespace=namespace),
        Access("delete", "events", namespace=namespace),
        Access("list", "services", namespace=namespace),
        Access("create", "serviceaccounts", subresource="token", namespace=namespace),
        Access("create", "clusterroles", group="rbac.authorization.k8s.io"),
        Access("create", "rolebindings", group="rbac.authorization.k8s.io", namespace=namespace),
        Access("list", "jobs", group="batch", namespace=namespace),
    ]


def assert_access(kubeconfig: Path, allowed: list[Access], refused: list[Access]) -> None:
    api = accounts.client(kubeconfig)
    try:
        wrong_refusals = [str(a) for a in allowed if not accounts.can_i(kubeconfig, a, api)]
        wrong_grants = [str(a) for a in refused if accounts.can_i(kubeconfig, a, api)]
    finally:
        api.close()  # type: ignore[no-untyped-call]
    assert not wrong_refusals, f"needed but refused: {wrong_refusals}"
    assert not wrong_grants, f"not needed but allowed: {wrong_grants}"


def test_extender_rbac_allows_exactly_what_the_code_uses(
    cluster: Cluster, helm: Helm, namespace: str, other_namespace: str, tmp_path: Path
) -> None:
    release = release_name(namespace)
    full = f"{release}-gpuroster"
    helm("install", release, str(CHART), "-n", namespace, "-f", values_file(tmp_path, BASE_VALUES))
    kc = accounts.service_account_kubeconfig(cluster, namespace, full, tmp_path / "sa.kubeconfig")

    # Cluster-wide (no namespaces set): the workload verbs hold in any namespace.
    assert_access(
        kc,
        allowed=[*workload_access(namespace), *workload_access(other_namespace),
                 *workload_access(None), *NODE_ACCESS],
        refused=[*refused_access(namespace), *refused_access(other_namespace),
                 *PRIORITY_CLASS_ACCESS,  # no priorityClassValues
                 # one replica: no leader election, no lease rights
                 Access("create", "leases", group="coordination.k8s.io", namespace=namespace),
                 Access("get", "leases", group="coordination.k8s.io", namespace=namespace,
                        name=full)],
    )

    # The same verbs, really used with the token (what the controller does at commit).
    from kubernetes import client as k8s

    admin: Any = cluster.core()
    admin_apps: Any = k8s.AppsV1Api(cluster.api())
    admin.create_namespaced_pod(other_namespace, objects.pod(
        "job-0", gpus=2, scheduler_name="nobody-schedules-this"))
    admin_apps.create_namespaced_deployment(
        other_namespace, objects.inference_deployment("svc", {}, replicas=1, gpus=0))
    admin.create_namespaced_config_map(other_namespace, {
        "metadata": {"name": "svc-demand"}, "data": {"curve": "[1, 2, 2]"}})

    api = accounts.client(kc)
    try:
        core: Any = k8s.CoreV1Api(api)
        apps: Any = k8s.AppsV1Api(api)
        events: Any = k8s.EventsV1Api(api)
        assert any(n.metadata.name == "gpu-node-0" for n in core.list_node().items)
        assert "job-0" in [p.metadata.name for p in core.list_pod_for_all_namespaces().items]
        core.patch_namespaced_pod("job-0", other_namespace, {"metadata": {"annotations": {
            "gpuroster.io/block": "gpu-node-0:0-1"}}})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        core.patch_namespaced_pod_status("job-0", other_namespace, {"status": {"conditions": [{
            "type": "gpuroster.io/Planned", "status": "True", "reason": "Planned",
            "message": "planned start now on gpu-node-0", "lastTransitionTime": now}]}})
        # pods/binding (what kube-scheduler uses): create_namespaced_pod_binding. The
        # client's create_namespaced_binding posts to the legacy `bindings` resource,
        # which the chart does not grant (see refused_access).
        core.create_namespaced_pod_binding("job-0", other_namespace, {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "job-0"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-0"}},
            _preload_content=False)
        core.create_namespaced_event(other_namespace, {
            "metadata": {"name": f"job-0.{uuid.uuid4().hex[:10]}"},
            "involvedObject": {"kind": "Pod", "name": "job-0", "namespace": other_namespace},
            "reason": "Admitted", "message": "gang admitted", "type": "Normal"})
        events.create_namespaced_event(other_namespace, {
            # MicroTime must carry microseconds: this client drops them when they are 0.
            "metadata": {"name": f"job-0.{uuid.uuid4().hex[:10]}"},
            "eventTime": datetime.now(UTC).replace(microsecond=1),
            "reportingController": "gpuroster.io/controller", "reportingInstance": "e2e",
            "action": "Plan", "reason": "Waiting", "type": "Normal", "note": "planned start",
            "regarding": {"kind": "Pod", "name": "job-0", "namespace": other_namespace}})
        assert apps.read_namespaced_deployment_scale("svc", other_namespace).spec.replicas == 1
        apps.patch_namespaced_deployment_scale("svc", other_namespace, {"spec": {"replicas": 3}})
        assert [c.metadata.name for c in core.list_namespaced_config_map(
            other_namespace, field_selector="metadata.name=svc-demand").items] == ["svc-demand"]
        refused: list[Callable[[], Any]] = [
            lambda: core.delete_namespaced_pod("job-0", other_namespace),
            lambda: core.list_namespaced_secret(other_namespace),
            lambda: apps.patch_namespaced_deployment("svc", other_namespace,
                                                     {"spec": {"replicas": 0}}),
        ]
        for forbidden in refused:
            with pytest.raises(ApiException) as err:
                forbidden()
            assert err.value.status == 403
    finally:
        api.close()  # type: ignore[no-untyped-call]
    pod = admin.read_namespaced_pod("job-0", other_namespace)
    assert pod.spec.node_name == "gpu-node-0"
    assert pod.metadata.annotations["gpuroster.io/block"] == "gpu-node-0:0-1"
    assert admin_apps.read_namespaced_deployment("svc", other_namespace).spec.replicas == 3


def test_watched_namespaces_and_leader_election_rbac(
    cluster: Cluster, helm: Helm, namespace: str, other_namespace: str, tmp_path: Path
) -> None:
    release = release_name(namespace)
    full = f"{release}-gpuroster"
    helm("install", release, str(CHART), "-n", namespace, "-f", values_file(
        tmp_path, BASE_VALUES, {"replicaCount": 2, "config": {
            "namespaces": [other_namespace], "priorityClassValues": {"high": 1000}}}))
    kc = accounts.service_account_kubeconfig(cluster, namespace, full, tmp_path / "sa.kubeconfig")
    lease = {"group": "coordination.k8s.io", "resource": "leases"}
    assert_access(
        kc,
        allowed=[*workload_access(other_namespace), *NODE_ACCESS, *PRIORITY_CLASS_ACCESS,
                 Access("create", namespace=namespace, **lease),
                 Access("get", namespace=namespace, name=full, **lease),
                 Access("update", namespace=namespace, name=full, **lease),
                 # the Lease's owner, its own Deployment, for the uid
                 Access("get", "deployments", group="apps", namespace=namespace, name=full)],
        refused=[*refused_access(other_namespace),
                 # Only the watched namespace: not the release's, not cluster-wide.
                 *workload_access(namespace), *workload_access(None),
                 Access("get", namespace=namespace, name="someone-elses-lease", **lease),
                 Access("update", namespace=namespace, name="kube-scheduler", **lease),
                 Access("delete", namespace=namespace, name=full, **lease),
                 Access("create", namespace="kube-system", **lease),
                 Access("get", "deployments", group="apps", namespace=namespace,
                        name=f"{full}-scheduler")],
    )


# --- the chart's scheduler configuration in the real kube-scheduler ------------------------------


@dataclass
class StubExtender:
    """Filter keeps every node, bind creates the Binding (as the admin)."""

    core: Any
    calls: list[str] = field(default_factory=list)

    def handle(self, verb: str, body: dict[str, Any]) -> Any:
        self.calls.append(verb)
        if verb == "filter":
            return {"NodeNames": body.get("NodeNames") or [], "FailedNodes": {}, "Error": ""}
        if verb == "prioritize":
            return [{"Host": n, "Score": 5} for n in body.get("NodeNames") or []]
        if verb == "bind":
            self.core.create_namespaced_pod_binding(body["PodName"], body["PodNamespace"], {
                "apiVersion": "v1", "kind": "Binding", "metadata": {
                    "name": body["PodName"], "uid": body["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": body["Node"]}},
                _preload_content=False)
            return {"Error": ""}
        raise ValueError(verb)


@contextlib.contextmanager
def serve(stub: StubExtender, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """Serve the stub on 127.0.0.1, over HTTPS with (cert, key) when given."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            out = json.dumps(stub.handle(self.path.rstrip("/").rsplit("/", 1)[-1], body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        scheme = "https" if tls is not None else "http"
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_chart_scheduler_config_runs_as_its_service_account(
    cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path, tls: bool
) -> None:
    release = release_name(namespace)
    sched = f"{release}-gpuroster-scheduler"
    stub = StubExtender(cluster.core())
    assert cluster.pki is not None
    serving = (cluster.pki.extender.cert, cluster.pki.extender.key) if tls else None
    values: dict[str, Any] = {"scheduler": {"replicas": 1}}
    if serving is not None:
        # The Secret shape the chart documents (cert-manager's): tls.crt, tls.key, ca.crt.
        cluster.kubectl("create", "secret", "generic", "gpuroster-tls", "-n", namespace,
                        f"--from-file=tls.crt={serving[0]}", f"--from-file=tls.key={serving[1]}",
                        f"--from-file=ca.crt={cluster.pki.ca.cert}")
        values["tls"] = {"enabled": True, "secretName": "gpuroster-tls"}
    with serve(stub, serving) as url:
        # The in-cluster scheduler cannot reach a stub on the host: point the chart at it,
        # then run the chart's configuration in a kube-scheduler here, as the chart's account.
        values["scheduler"]["extender"] = {"urlPrefix": url}
        helm("install", release, str(CHART), "-n", namespace, "-f", values_file(
            tmp_path, BASE_VALUES, values))
        cm = kubectl_json(cluster, "get", "configmap", f"{sched}-config", "-n", namespace)
        cfg = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
        if tls:
            (ext,) = cfg["extenders"]
            assert ext["enableHTTPS"] is True
            # The pod mounts the Secret's CA where the configuration looks for it ...
            pod = kubectl_json(cluster, "get", "deployment", sched, "-n", namespace)[
                "spec"]["template"]["spec"]
            (mount,) = [m for m in pod["containers"][0]["volumeMounts"]
                        if m["name"] == "extender-ca"]
            (vol,) = [v for v in pod["volumes"] if v["name"] == "extender-ca"]
            (item,) = vol["secret"]["items"]
            assert ext["tlsConfig"]["caFile"] == f"{mount['mountPath']}/{item['path']}"
            # ... here the same file comes from the Secret, at a local path.
            secret = kubectl_json(cluster, "get", "secret", "gpuroster-tls", "-n", namespace)
            ca = tmp_path / "ca.crt"
            ca.write_bytes(base64.b64decode(secret["data"][item["key"]]))
            ext["tlsConfig"]["caFile"] = str(ca)
        kc = accounts.service_account_kubeconfig(cluster, namespace, sched,
                                                 tmp_path / "scheduler.kubeconfig")
        cfg["clientConnection"] = {"kubeconfig": str(kc)}
        config_path = tmp_path / "scheduler-config.yaml"
        config_path.write_text(yaml.safe_dump(cfg))
        port = free_port()
        log = tmp_path / "kube-scheduler.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [str(cluster.bin_dir / "kube-scheduler"), f"--config={config_path}",
                 "--bind-address=127.0.0.1", f"--secure-port={port}",
                 f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                 "--v=2"],
                stdout=out, stderr=subprocess.STDOUT)
        try:
            from kubernetes import client as k8s

            coord: Any = k8s.CoordinationV1Api(cluster.api())

            def holds_lease() -> bool:
                assert proc.poll() is None, log.read_text()[-4000:]
                try:
                    held = coord.read_namespaced_lease(sched, namespace)
                except Exception:  # noqa: BLE001 - 404 until it takes the lease
                    return False
                return bool(held.spec.holder_identity)

            wait_for(holds_lease, 60, f"kube-scheduler to take Lease {namespace}/{sched}")
            wait_for(lambda: _https_ok(f"https://127.0.0.1:{port}/readyz"), 30,
                     "kube-scheduler /readyz")

            core: Any = cluster.core()
            pod = objects.pod("gpu-job", gpus=4, scheduler_name="gpuroster")
            core.create_namespaced_pod(namespace, pod)
            wait_for(lambda: bool(core.read_namespaced_pod("gpu-job", namespace).spec.node_name),
                     60, "the chart's scheduler to bind the GPU pod through the extender")
            assert "filter" in stub.calls and "bind" in stub.calls
        finally:
            processes.stop_process(proc, timeout=15)
    text = log.read_text()
    assert "forbidden" not in text.lower(), [ln for ln in text.splitlines()
                                             if "forbidden" in ln.lower()][:10]


def _https_ok(url: str) -> bool:
    ctx = ssl._create_unverified_context()  # kube-scheduler's self-signed serving cert
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return bool(r.status == 200)
    except OSError:
        return False


# --- the raw manifests (no Helm) -----------------------------------------------------------


def test_raw_manifests_apply_and_delete_cleanly(cluster: Cluster) -> None:
    """deploy/manifests/gpuroster.yaml (the chart's default render) on the real API server:
    every object is accepted with strict field validation, and `kubectl delete -f` leaves
    nothing of it behind."""
    manifest = REPO / "deploy" / "manifests" / "gpuroster.yaml"
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    applied = cluster.kubectl("apply", "--server-side", "--validate=strict", "-f",
                              str(manifest), check=False)
    try:
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.count("serverside-applied") == len(docs), applied.stdout
        live = labelled(cluster, "gpuroster")
        want = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
                for d in docs if d["kind"] != "Namespace"}
        assert want <= live, f"missing: {want - live}"
    finally:
        deleted = cluster.kubectl("delete", "--wait", "--timeout=120s", "--ignore-not-found",
                                  "-f", str(manifest), check=False)
    assert deleted.returncode == 0, deleted.stderr
    assert not labelled(cluster, "gpuroster"), "objects left after kubectl delete -f"

"""The Helm chart, rendered by the real helm and read back as objects.

Assertions are on the parsed objects (what the API server will receive), for
the defaults and for each non-default knob a user turns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.helm import rendering
from tests.helm.rendering import env_of, rules_of

NS = "gpu-system"
FULL = "gr-gpuroster"
SCHED = "gr-gpuroster-scheduler"
CLUSTER = f"{FULL}-{NS}"

# Exactly what the controller and extender do to namespaced objects.
WORKLOAD_GRANTS = {
    ("", "pods", "get", "*"),
    ("", "pods", "list", "*"),
    ("", "pods", "watch", "*"),
    ("", "pods", "patch", "*"),
    ("", "pods/binding", "create", "*"),
    ("", "pods/status", "patch", "*"),
    ("", "pods/eviction", "create", "*"),
    ("", "events", "create", "*"),
    ("events.k8s.io", "events", "create", "*"),
    ("apps", "deployments", "get", "*"),
    ("apps", "deployments", "list", "*"),
    ("apps", "deployments", "watch", "*"),
    ("apps", "deployments/scale", "get", "*"),
    ("apps", "deployments/scale", "patch", "*"),
    ("", "configmaps", "get", "*"),
    ("", "configmaps", "list", "*"),
    ("", "configmaps", "watch", "*"),
}
NODE_GRANTS = {("", "nodes", "get", "*"), ("", "nodes", "list", "*"), ("", "nodes", "watch", "*")}


@pytest.fixture(scope="module")
def default() -> rendering.Rendered:
    return rendering.template(namespace=NS)


def container(deploy: dict[str, Any], name: str) -> dict[str, Any]:
    (c,) = [c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return dict(c)


def scheduler_config(r: rendering.Rendered) -> dict[str, Any]:
    cm = r.one("ConfigMap", f"{SCHED}-config")
    return dict(yaml.safe_load(cm["data"]["scheduler-config.yaml"]))


# --- lint -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        None,
        {
            "replicaCount": 3,
            "config": {"namespaces": ["a", "b"]},
            "tls": {"enabled": True, "secretName": "gpuroster-tls"},
            "metrics": {"serviceMonitor": {"enabled": True}, "dashboard": {"enabled": True},
                        "prometheusRule": {"enabled": True}},
        },
        {"scheduler": {"mode": "snippet"}},
    ],
    ids=["defaults", "everything-on", "snippet"],
)
def test_lint_strict(values: dict[str, Any] | None, tmp_path: Any) -> None:
    result = rendering.run_helm(
        [
            "lint",
            "--strict",
            str(rendering.CHART),
            "--kube-version",
            rendering.KUBE_VERSION,
            *rendering.values_args(values, tmp_path),
        ]
    )
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


# --- defaults ---------------------------------------------------------------------


def test_default_objects(default: rendering.Rendered) -> None:
    assert default.kinds() == sorted(
        [
            ("ServiceAccount", FULL),
            ("ServiceAccount", SCHED),
            ("ClusterRole", f"{CLUSTER}-nodes"),
            ("ClusterRoleBinding", f"{CLUSTER}-nodes"),
            ("ClusterRole", f"{CLUSTER}-workloads"),
            ("ClusterRoleBinding", f"{CLUSTER}-workloads"),
            ("ClusterRoleBinding", f"{CLUSTER}-scheduler-as-kube-scheduler"),
            ("ClusterRoleBinding", f"{CLUSTER}-scheduler-as-volume-scheduler"),
            ("RoleBinding", f"{CLUSTER}-scheduler-auth-reader"),
            ("Role", f"{SCHED}-leader-election"),
            ("RoleBinding", f"{SCHED}-leader-election"),
            ("ConfigMap", f"{SCHED}-config"),
            ("Service", FULL),
            ("Deployment", FULL),
            ("Deployment", SCHED),
            ("PodDisruptionBudget", FULL),
            ("PodDisruptionBudget", SCHED),
            ("ValidatingAdmissionPolicy", f"{CLUSTER}-admission-record"),
            ("ValidatingAdmissionPolicyBinding", f"{CLUSTER}-admission-record"),
        ]
    )


def test_admission_record_policy_exempts_only_gpurosters_account(
    default: rendering.Rendered,
) -> None:
    vap = default.one("ValidatingAdmissionPolicy", f"{CLUSTER}-admission-record")
    (cond,) = vap["spec"]["matchConditions"]
    assert cond["expression"] == f'request.userInfo.username != "system:serviceaccount:{NS}:{FULL}"'
    assert vap["spec"]["failurePolicy"] == "Fail"
    keys = vap["spec"]["variables"][0]["expression"]
    for k in ("gpuroster.io/block", "gpuroster.io/admitted-at", "gpuroster.io/node"):
        assert k in keys
    binding = default.one("ValidatingAdmissionPolicyBinding", f"{CLUSTER}-admission-record")
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_every_object_carries_the_release_labels(default: rendering.Rendered) -> None:
    # `helm uninstall` is checked by listing these labels: every object needs them.
    for obj in default.objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "gr", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/name"] == "gpuroster"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/component"] in {"extender", "scheduler", "dashboard"}


def test_namespaced_objects_land_in_the_release_namespace(default: rendering.Rendered) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding"}
    for obj in default.objects:
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert ns is None
        elif obj["metadata"]["name"] == f"{CLUSTER}-scheduler-auth-reader":
            assert ns == "kube-system"  # the Role it binds lives there
        else:
            assert ns == NS, obj["metadata"]["name"]


def test_extender_deployment_hardening(default: rendering.Rendered) -> None:
    deploy = default.one("Deployment", FULL)
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == FULL
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    c = container(deploy, "gpuroster")
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["privileged"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["image"] == "ghcr.io/gpuroster/gpuroster:0.1.0"
    # Read-only root: /tmp is the one writable place and HOME points there.
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert env_of(c)["HOME"] == "/tmp"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


def test_extender_probes_and_service(default: rendering.Rendered) -> None:
    c = container(default.one("Deployment", FULL), "gpuroster")
    assert c["ports"] == [{"name": "http", "containerPort": 8888, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTP"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTP"}
    svc = default.one("Service", FULL)
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 8888, "targetPort": "http", "protocol": "TCP"}
    ]
    pod_labels = default.one("Deployment", FULL)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    # The Service must not select the scheduler's pods.
    sched_labels = default.one("Deployment", SCHED)["spec"]["template"]["metadata"]["labels"]
    assert not svc["spec"]["selector"].items() <= sched_labels.items()


def test_extender_environment(default: rendering.Rendered) -> None:
    env = env_of(container(default.one("Deployment", FULL), "gpuroster"))
    assert {k: v for k, v in env.items() if k.startswith("GPUROSTER_")} == {
        "GPUROSTER_POLICY": "gpuroster",
        "GPUROSTER_STEP_SECONDS": "3600",
        "GPUROSTER_HORIZON_STEPS": "24",
        "GPUROSTER_REALTIME_PENALTY": "8",
        "GPUROSTER_MAX_WAIT_HOURS": "48",
        "GPUROSTER_MAX_WAIT_STEPS": "0",
        "GPUROSTER_SERVICE_LEVEL": "0.995",
        "GPUROSTER_PEAK_SHIFT_HOURS": "3",
        "GPUROSTER_STAND_IN_HOURS": "3",
        "GPUROSTER_SPARE_REPLICAS": "true",
        "GPUROSTER_RESERVATION_LEAD": "0.01",
        "GPUROSTER_PRIORITY_CLASSES": '{"critical":8,"high":4,"low":1,"normal":2}',
        "GPUROSTER_PRIORITY_CLASS_VALUES": "{}",
        "GPUROSTER_DEFAULT_PRIORITY": "normal",
        "GPUROSTER_DEFAULT_DURATIONS": (
            '{"batch-inference":"2h","quantization":"1h","training":"6h"}'
        ),
        "GPUROSTER_GPUS_PER_NODE": "0",
        "GPUROSTER_NAMESPACES": "",
        "GPUROSTER_PROMETHEUS_URL": "",
        "GPUROSTER_LOG_LEVEL": "info",
        "GPUROSTER_SHADOW": "false",
        "GPUROSTER_GPUS": "device-plugin",
        "GPUROSTER_PORT": "8888",
        "GPUROSTER_BIND_ADDRESS": "0.0.0.0",
        "GPUROSTER_LEADER_ELECT": "false",
        "GPUROSTER_LEASE_NAMESPACE": NS,
        "GPUROSTER_LEASE_NAME": FULL,
    }
    assert json.loads(env["GPUROSTER_PRIORITY_CLASSES"])["critical"] == 8


def test_scheduler_configuration(default: rendering.Rendered) -> None:
    cfg = scheduler_config(default)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert cfg["percentageOfNodesToScore"] == 100
    assert cfg["podInitialBackoffSeconds"] == 1 and cfg["podMaxBackoffSeconds"] == 1
    assert cfg["profiles"] == [{"schedulerName": "gpuroster"}]
    assert cfg["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": SCHED,
        "resourceNamespace": NS,
    }
    assert cfg["extenders"] == [
        {
            "urlPrefix": f"http://{FULL}.{NS}.svc:8888",
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "bindVerb": "bind",
            "weight": 1,
            "httpTimeout": "10s",
            "nodeCacheCapable": True,
            "ignorable": False,
            "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
        }
    ]


def test_scheduler_deployment(default: rendering.Rendered) -> None:
    deploy = default.one("Deployment", SCHED)
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SCHED
    c = container(deploy, "kube-scheduler")
    assert c["image"] == "registry.k8s.io/kube-scheduler:v1.36.3"
    assert c["command"][:2] == [
        "kube-scheduler",
        "--config=/etc/kubernetes/gpuroster/scheduler-config.yaml",
    ]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == "/etc/kubernetes/gpuroster"
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    assert vol["configMap"]["name"] == f"{SCHED}-config"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    # A configuration change restarts the scheduler (it reads it once).
    assert deploy["spec"]["template"]["metadata"]["annotations"]["checksum/config"]


@pytest.mark.parametrize(
    ("cluster_version", "tag"),
    [
        ("v1.36.3", "v1.36.3"),
        ("v1.31.2+k3s1", "v1.31.2"),
        ("v1.30.14-eks-931bdca", "v1.30.14"),
    ],
    ids=["plain", "k3s-build-metadata", "eks-prerelease"],
)
def test_scheduler_image_follows_the_cluster_version(cluster_version: str, tag: str) -> None:
    r = rendering.template(kube_version=cluster_version)
    c = container(r.one("Deployment", "gr-gpuroster-scheduler"), "kube-scheduler")
    assert c["image"] == f"registry.k8s.io/kube-scheduler:{tag}"


def test_scheduler_image_override() -> None:
    r = rendering.template({"scheduler": {"image": {"registry": "mirror.local", "tag": "v1.35.0"}}})
    c = container(r.one("Deployment", "gr-gpuroster-scheduler"), "kube-scheduler")
    assert c["image"] == "mirror.local/kube-scheduler:v1.35.0"


# --- RBAC ---------------------------------------------------------------------------


def test_default_rbac_is_exactly_what_the_code_uses(default: rendering.Rendered) -> None:
    assert rules_of(default.one("ClusterRole", f"{CLUSTER}-workloads")) == WORKLOAD_GRANTS
    assert rules_of(default.one("ClusterRole", f"{CLUSTER}-nodes")) == NODE_GRANTS
    for binding in (f"{CLUSTER}-workloads", f"{CLUSTER}-nodes"):
        crb = default.one("ClusterRoleBinding", binding)
        assert crb["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": binding,
        }
        assert crb["subjects"] == [{"kind": "ServiceAccount", "name": FULL, "namespace": NS}]
    # One replica: no leader election, no lease rights.
    assert default.maybe("Role", f"{FULL}-leader-election") is None


def test_priority_class_values_add_read_access_to_priority_classes() -> None:
    """Only with config.priorityClassValues does gpuroster read PriorityClasses (the
    value a Deployment's pod template will get)."""
    r = rendering.template({"config": {"priorityClassValues": {"high": 1000}}}, namespace=NS)
    assert rules_of(r.one("ClusterRole", f"{CLUSTER}-nodes")) == NODE_GRANTS | {
        ("scheduling.k8s.io", "priorityclasses", verb, "*") for verb in ("get", "list", "watch")}


def test_no_role_grants_wildcards_secrets_or_deletes(default: rendering.Rendered) -> None:
    for role in default.all("ClusterRole") + default.all("Role"):
        for group, resource, verb, _ in rules_of(role):
            assert "*" not in (group, resource, verb), role["metadata"]["name"]
            assert resource != "secrets"
            assert verb not in {"delete", "deletecollection", "escalate", "bind", "impersonate"}


def test_scheduler_rbac(default: rendering.Rendered) -> None:
    subject = [{"kind": "ServiceAccount", "name": SCHED, "namespace": NS}]
    refs: dict[tuple[str, str | None], list[str]] = {}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for b in default.all(kind):
            if b["subjects"] == subject:
                key = (kind, b["metadata"].get("namespace"))
                refs.setdefault(key, []).append(b["roleRef"]["name"])
    assert sorted(refs[("ClusterRoleBinding", None)]) == [
        "system:kube-scheduler",
        "system:volume-scheduler",
    ]
    assert refs[("RoleBinding", "kube-system")] == ["extension-apiserver-authentication-reader"]
    assert refs[("RoleBinding", NS)] == [f"{SCHED}-leader-election"]
    assert rules_of(default.one("Role", f"{SCHED}-leader-election")) == {
        ("coordination.k8s.io", "leases", "create", "*"),
        ("coordination.k8s.io", "leases", "get", SCHED),
        ("coordination.k8s.io", "leases", "update", SCHED),
    }


def test_watched_namespaces_get_roles_and_nothing_cluster_wide_but_nodes() -> None:
    r = rendering.template({"config": {"namespaces": ["team-a", "team-b"]}}, namespace=NS)
    assert r.maybe("ClusterRole", f"{CLUSTER}-workloads") is None
    assert r.maybe("ClusterRoleBinding", f"{CLUSTER}-workloads") is None
    assert rules_of(r.one("ClusterRole", f"{CLUSTER}-nodes")) == NODE_GRANTS
    roles = r.all("Role")
    per_ns = {o["metadata"]["namespace"]: o for o in roles if o["metadata"]["name"] == FULL}
    assert set(per_ns) == {"team-a", "team-b"}
    for ns, role in per_ns.items():
        assert rules_of(role) == WORKLOAD_GRANTS
        (rb,) = [
            b
            for b in r.all("RoleBinding")
            if b["metadata"]["name"] == FULL and b["metadata"]["namespace"] == ns
        ]
        assert rb["roleRef"]["name"] == FULL and rb["roleRef"]["kind"] == "Role"
        assert rb["subjects"] == [{"kind": "ServiceAccount", "name": FULL, "namespace": NS}]
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    assert env["GPUROSTER_NAMESPACES"] == "team-a,team-b"


@pytest.mark.parametrize(
    ("values", "elect"),
    [
        ({}, False),
        ({"replicaCount": 2}, True),
        ({"replicaCount": 2, "leaderElection": {"enabled": False}}, False),
        ({"leaderElection": {"enabled": True, "leaseName": "my-lease"}}, True),
    ],
    ids=["one-replica", "two-replicas", "forced-off", "forced-on-named"],
)
def test_leader_election(values: dict[str, Any], elect: bool) -> None:
    r = rendering.template(values, namespace=NS)
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    assert env["GPUROSTER_LEADER_ELECT"] == str(elect).lower()
    lease = values.get("leaderElection", {}).get("leaseName", FULL)
    assert env["GPUROSTER_LEASE_NAME"] == lease
    assert env["GPUROSTER_LEASE_NAMESPACE"] == NS
    role = r.maybe("Role", f"{FULL}-leader-election")
    if not elect:
        assert role is None
        assert "GPUROSTER_LEASE_OWNER" not in env
        return
    # the Lease is owned by the chart's Deployment, which `helm uninstall` deletes
    assert env["GPUROSTER_LEASE_OWNER"] == FULL
    assert role is not None and role["metadata"]["namespace"] == NS
    assert rules_of(role) == {
        ("coordination.k8s.io", "leases", "create", "*"),
        ("coordination.k8s.io", "leases", "get", lease),
        ("coordination.k8s.io", "leases", "update", lease),
        ("apps", "deployments", "get", FULL),
    }
    rb = r.one("RoleBinding", f"{FULL}-leader-election")
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": FULL, "namespace": NS}]


# --- non-default values -------------------------------------------------------------


def test_tuning_values_reach_the_environment() -> None:
    r = rendering.template(
        {
            "config": {
                "policy": "fifo",
                "stepSeconds": 900,
                "horizonSteps": 96,
                "realtimePenalty": 6.5,
                # Helm merges maps: null removes a default class.
                "priorityClasses": {
                    "gold": 20,
                    "bronze": 1,
                    "critical": None,
                    "high": None,
                    "normal": None,
                    "low": None,
                },
                "defaultPriority": "bronze",
                "defaultDurations": {
                    "training": "2d",
                    "batch-inference": "90m",
                    "quantization": "1h30m",
                },
                "gpusPerNode": 4,
                "prometheusUrl": "http://prometheus.monitoring.svc:9090",
                "logLevel": "debug",
                "extraEnv": [{"name": "EXTRA", "value": "1"}],
            }
        }
    )
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    assert env["GPUROSTER_POLICY"] == "fifo"
    assert env["GPUROSTER_STEP_SECONDS"] == "900"
    assert env["GPUROSTER_HORIZON_STEPS"] == "96"
    assert env["GPUROSTER_REALTIME_PENALTY"] == "6.5"
    assert json.loads(env["GPUROSTER_PRIORITY_CLASSES"]) == {"gold": 20, "bronze": 1}
    assert env["GPUROSTER_DEFAULT_PRIORITY"] == "bronze"
    assert json.loads(env["GPUROSTER_DEFAULT_DURATIONS"]) == {
        "training": "2d",
        "batch-inference": "90m",
        "quantization": "1h30m",
    }
    assert env["GPUROSTER_GPUS_PER_NODE"] == "4"
    assert env["GPUROSTER_PROMETHEUS_URL"] == "http://prometheus.monitoring.svc:9090"
    assert env["GPUROSTER_LOG_LEVEL"] == "debug"
    assert env["EXTRA"] == "1"


@pytest.mark.parametrize(
    "values",
    [
        None,
        {
            "replicaCount": 2,
            "tls": {"enabled": True, "secretName": "t"},
            "config": {
                "policy": "priority-easy",
                "stepSeconds": 900,
                "realtimePenalty": 0,
                "gpusPerNode": 4,
                "namespaces": ["a", "b"],
                "priorityClasses": {"gold": 9.5},
                "priorityClassValues": {"gold": 1000000, "low": -10},
                "defaultPriority": "gold",
                "defaultDurations": {"training": "1d", "batch-inference": "1h30m"},
                "prometheusUrl": "http://prom:9090",
                "logLevel": "warning",
            },
        },
    ],
    ids=["defaults", "tuned"],
)
def test_rendered_environment_is_accepted_by_the_service(values: dict[str, Any] | None) -> None:
    """The chart's env is parsed by the service's own settings loader, unchanged."""
    from extender import config

    r = rendering.template(values, namespace=NS)
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    settings = config.load([], env=env)
    assert settings.port == 8888 and settings.bind_address == "0.0.0.0"
    assert settings.lease_namespace == NS and settings.lease_name == FULL
    assert settings.kubeconfig == ""  # in-cluster
    if values is None:
        assert settings.policy == "gpuroster" and settings.step_seconds == 3600
        assert settings.namespaces == () and settings.leader_elect is False
        assert dict(settings.priority_classes) == dict(config.DEFAULT_PRIORITY_CLASSES)
        assert dict(settings.priority_class_values) == {}
        assert dict(settings.default_durations) == dict(config.DEFAULT_DURATIONS)
    else:
        assert settings.policy == "priority-easy" and settings.step_seconds == 900
        assert settings.namespaces == ("a", "b") and settings.leader_elect is True
        # Helm merges maps: the default classes stay unless set to null.
        assert settings.priority_classes["gold"] == 9.5
        assert dict(settings.priority_class_values) == {"gold": 1000000, "low": -10}
        assert settings.default_priority == "gold" and settings.gpus_per_node == 4
        assert settings.default_durations["training"] == "1d"
        assert settings.log_level == "WARNING"
        assert settings.tls_cert_file.endswith("/tls.crt")


def test_placement_resources_and_image() -> None:
    tolerations = [
        {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "role", "operator": "In", "values": ["ops"]}]}
                ]
            }
        }
    }
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    r = rendering.template(
        {
            "tolerations": tolerations,
            "nodeSelector": {"role": "ops"},
            "affinity": affinity,
            "resources": resources,
            "priorityClassName": "system-cluster-critical",
            "image": {
                "repository": "registry.local/gpuroster",
                "digest": "sha256:" + "a" * 64,
                "pullPolicy": "Always",
            },
            "imagePullSecrets": [{"name": "pull"}],
            "scheduler": {"tolerations": tolerations, "nodeSelector": {"role": "sched"}},
        }
    )
    pod = r.one("Deployment", FULL)["spec"]["template"]["spec"]
    assert pod["tolerations"] == tolerations
    assert pod["nodeSelector"] == {"role": "ops"}
    assert pod["affinity"] == affinity
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    c = container(r.one("Deployment", FULL), "gpuroster")
    assert c["resources"] == resources
    assert c["image"] == "registry.local/gpuroster@sha256:" + "a" * 64
    assert c["imagePullPolicy"] == "Always"
    spod = r.one("Deployment", SCHED)["spec"]["template"]["spec"]
    assert spod["tolerations"] == tolerations
    assert spod["nodeSelector"] == {"role": "sched"}


def test_pod_disruption_budgets() -> None:
    default = rendering.template()
    assert default.one("PodDisruptionBudget", FULL)["spec"]["maxUnavailable"] == 1
    r = rendering.template(
        {
            "replicaCount": 3,
            "podDisruptionBudget": {"minAvailable": 2},
            "scheduler": {"podDisruptionBudget": {"enabled": False}},
        }
    )
    spec = r.one("PodDisruptionBudget", FULL)["spec"]
    assert spec["minAvailable"] == 2 and "maxUnavailable" not in spec
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "extender"
    assert r.maybe("PodDisruptionBudget", SCHED) is None
    pct = rendering.template({"podDisruptionBudget": {"maxUnavailable": "50%"}})
    assert pct.one("PodDisruptionBudget", FULL)["spec"]["maxUnavailable"] == "50%"


def test_tls() -> None:
    r = rendering.template(
        {
            "tls": {"enabled": True, "secretName": "gpuroster-tls"},
            "metrics": {"serviceMonitor": {"enabled": True}},
        },
        namespace=NS,
    )
    deploy = r.one("Deployment", FULL)
    c = container(deploy, "gpuroster")
    env = env_of(c)
    assert env["GPUROSTER_TLS_CERT_FILE"] == "/etc/gpuroster/tls/tls.crt"
    assert env["GPUROSTER_TLS_KEY_FILE"] == "/etc/gpuroster/tls/tls.key"
    assert {"name": "tls", "mountPath": "/etc/gpuroster/tls", "readOnly": True} in c["volumeMounts"]
    (tls_vol,) = [v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    assert tls_vol["secret"]["secretName"] == "gpuroster-tls"
    assert {i["path"] for i in tls_vol["secret"]["items"]} == {"tls.crt", "tls.key"}
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["ports"][0]["name"] == "https"
    assert r.one("Service", FULL)["spec"]["ports"][0]["targetPort"] == "https"

    (ext,) = scheduler_config(r)["extenders"]
    assert ext["urlPrefix"] == f"https://{FULL}.{NS}.svc:8888"
    assert ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {"insecure": False, "caFile": "/etc/gpuroster/tls/ca.crt"}
    # The scheduler gets the CA only, at the path its configuration names.
    sdeploy = r.one("Deployment", SCHED)
    sc = container(sdeploy, "kube-scheduler")
    mount = next(m for m in sc["volumeMounts"] if m["name"] == "extender-ca")
    assert mount["mountPath"] == "/etc/gpuroster/tls"
    (ca_vol,) = [
        v for v in sdeploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "extender-ca"
    ]
    assert ca_vol["secret"] == {
        "secretName": "gpuroster-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    sm = r.one("ServiceMonitor", FULL)
    assert sm["spec"]["endpoints"][0]["scheme"] == "https"
    assert sm["spec"]["endpoints"][0]["tlsConfig"]["serverName"] == f"{FULL}.{NS}.svc"


def test_snippet_mode_deploys_no_scheduler() -> None:
    r = rendering.template(
        {"scheduler": {"mode": "snippet", "extender": {"urlPrefix": "http://10.0.0.5:30888"}}}
    )
    names = {n for _, n in r.kinds()}
    assert not any(n.startswith(SCHED) and n != f"{SCHED}-snippet" for n in names)
    assert not any("scheduler-as" in n or "auth-reader" in n for n in names)
    assert r.maybe("Deployment", FULL) is not None
    snippet = yaml.safe_load(r.one("ConfigMap", f"{SCHED}-snippet")["data"]["extenders.yaml"])
    (ext,) = snippet["extenders"]
    assert ext["urlPrefix"] == "http://10.0.0.5:30888"
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert ext["ignorable"] is False and ext["nodeCacheCapable"] is True


def test_service_monitor_and_dashboard() -> None:
    r = rendering.template(
        {
            "metrics": {
                "serviceMonitor": {
                    "enabled": True,
                    "interval": "15s",
                    "labels": {"release": "prom"},
                },
                "dashboard": {"enabled": True, "namespace": "monitoring"},
            }
        },
        namespace=NS,
    )
    sm = r.one("ServiceMonitor", FULL)
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    (ep,) = sm["spec"]["endpoints"]
    assert (ep["port"], ep["path"], ep["interval"]) == ("http", "/metrics", "15s")
    assert sm["spec"]["selector"]["matchLabels"] == r.one("Service", FULL)["spec"]["selector"]

    cm = r.one("ConfigMap", f"{FULL}-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["gpuroster.json"])
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for metric in (
        "gpuroster_utilization{",
        "gpuroster_value_rate",
        "gpuroster_realtime_demand_gpus",
        "gpuroster_realtime_allocated_gpus",
        "gpuroster_queue_wait_seconds_bucket",
        "gpuroster_plan_duration_seconds",
        "gpuroster_extender_request_duration_seconds",
    ):
        assert metric in exprs, metric
    titles = {p["title"] for p in dash["panels"]}
    assert {
        "GPU utilization",
        "Value rate",
        "Real-time demand vs allocation",
        "Queue wait by priority (p95)",
        "Plan duration",
        "Extender latency by verb (p99)",
    } == titles


def test_prometheus_rule_fires_when_a_service_is_below_its_objective() -> None:
    r = rendering.template(
        {"metrics": {"prometheusRule": {"enabled": True, "for": "1h", "labels": {"team": "ml"}}}},
        namespace=NS)
    rule = r.one("PrometheusRule", FULL)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["team"] == "ml"
    (group,) = rule["spec"]["groups"]
    (alert,) = group["rules"]
    assert alert["alert"] == "GpurosterServiceBelowObjective"
    assert alert["for"] == "1h" and alert["labels"]["severity"] == "warning"
    # One-to-one on every label: a ServiceMonitor renames the metrics' `service` label
    # to `exported_service`, and an on(..., service) list would then match many to many.
    expr = " ".join(alert["expr"].split())
    assert expr == ("gpuroster_realtime_service_level"
                    " < gpuroster_realtime_service_level_objective")
    assert "{{ or $labels.exported_service $labels.service }}" in alert["annotations"]["summary"]


def test_service_level_reaches_the_extender() -> None:
    r = rendering.template({"config": {"serviceLevel": 0.999}})
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    assert env["GPUROSTER_SERVICE_LEVEL"] == "0.999"


def test_optional_objects_are_off_by_default(default: rendering.Rendered) -> None:
    assert not default.all("ServiceMonitor")
    assert not default.all("PrometheusRule")
    assert default.maybe("ConfigMap", f"{FULL}-dashboard") is None


def test_notes_tell_how_to_submit_and_where_the_plan_is() -> None:
    text = rendering.notes(namespace=NS)
    assert "schedulerName: gpuroster" in text
    for needle in (
        "gpuroster.io/workload",
        "gpuroster.io/priority",
        "gpuroster.io/gang",
        "gpuroster.io/gang-size",
        "gpuroster.io/expected-duration",
        "nvidia.com/gpu",
        "/plan",
        "/plan/view",
        "/metrics",
        f"port-forward service/{FULL} 8888:8888",
        "critical, high, low, normal",
    ):
        assert needle in text, needle
    snippet = rendering.notes({"scheduler": {"mode": "snippet"}}, namespace=NS)
    assert "snippet mode" in snippet and "schedulerName:" not in snippet


# --- the schema rejects bad values with a message naming them ----------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"config": {"stepSeconds": 0}}, "/config/stepSeconds"),
        ({"config": {"stepSeconds": "1h"}}, "/config/stepSeconds"),
        ({"config": {"horizonSteps": 0}}, "/config/horizonSteps"),
        ({"config": {"gpusPerNode": 3}}, "/config/gpusPerNode"),
        ({"config": {"realtimePenalty": -1}}, "/config/realtimePenalty"),
        ({"config": {"policy": "random"}}, "/config/policy"),
        ({"config": {"defaultPriority": 3}}, "/config/defaultPriority"),
        # helm's validator names the wrong parent for propertyNames errors; the name is right.
        ({"config": {"priorityClasses": {"High": 5}}}, "'High' does not match pattern"),
        ({"config": {"priorityClasses": {"high": -1}}}, "/config/priorityClasses/high"),
        ({"config": {"priorityClassValues": {"high": 1.5}}}, "/config/priorityClassValues/high"),
        ({"config": {"priorityClassValues": {"high": 2**31}}},
         "/config/priorityClassValues/high"),
        (
            {"config": {"defaultDurations": {"training": "six hours"}}},
            "/config/defaultDurations/training",
        ),
        ({"config": {"defaultDurations": {"inference": "1h"}}}, "inference"),
        ({"config": {"namespaces": ["Team_A"]}}, "/config/namespaces/0"),
        ({"config": {"namespaces": "team-a"}}, "/config/namespaces"),
        ({"config": {"prometheusUrl": "prometheus:9090"}}, "/config/prometheusUrl"),
        ({"config": {"logLevel": "verbose"}}, "/config/logLevel"),
        ({"config": {"serviceLevel": 1}}, "/config/serviceLevel"),
        ({"config": {"serviceLevel": "99%"}}, "/config/serviceLevel"),
        ({"metrics": {"prometheusRule": {"for": "half an hour"}}}, "/metrics/prometheusRule/for"),
        ({"replicaCount": 0}, "/replicaCount"),
        ({"leaderElection": {"enabled": "yes"}}, "/leaderElection/enabled"),
        ({"scheduler": {"mode": "plugin"}}, "/scheduler/mode"),
        ({"scheduler": {"image": {"tag": "latest"}}}, "/scheduler/image/tag"),
        ({"scheduler": {"extender": {"weight": 0}}}, "/scheduler/extender/weight"),
        ({"scheduler": {"extender": {"httpTimeout": "10"}}}, "/scheduler/extender/httpTimeout"),
        ({"tls": {"enabled": True}}, "/tls/secretName"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"service": {"type": "ExternalName"}}, "/service/type"),
        ({"containerPort": 80}, "/containerPort"),
        (
            {"podDisruptionBudget": {"maxUnavailable": "half"}},
            "/podDisruptionBudget/maxUnavailable",
        ),
        ({"replicas": 2}, "'replicas' not allowed"),
        ({"config": {"stepMinutes": 15}}, "'stepMinutes' not allowed"),
    ],
    ids=lambda v: json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else "msg",
)
def test_schema_rejects(values: dict[str, Any], message: str) -> None:
    error = rendering.template_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert message in error, error


def test_unknown_default_priority_is_rejected_with_the_known_classes() -> None:
    error = rendering.template_error({"config": {"defaultPriority": "urgent"}})
    assert 'config.defaultPriority "urgent" is not a class in config.priorityClasses' in error
    assert "critical, high, low, normal" in error


def test_priority_class_values_must_name_a_class() -> None:
    error = rendering.template_error({"config": {"priorityClassValues": {"urgent": 1000}}})
    assert 'config.priorityClassValues: "urgent" is not a class in config.priorityClasses' in error
    assert "critical, high, low, normal" in error


def test_the_values_example_in_docs_deploy_renders() -> None:
    """docs/deploy.md's values file is accepted as written."""
    text = (rendering.REPO / "docs" / "deploy.md").read_text()
    block = text.split("### Values you will want to tune", 1)[1].split("```yaml", 1)[1]
    values = yaml.safe_load(block.split("```", 1)[0])
    r = rendering.template(values, namespace=NS)
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    assert env["GPUROSTER_STEP_SECONDS"] == "900"
    assert env["GPUROSTER_NAMESPACES"] == "ml-team-a,ml-team-b"
    assert env["GPUROSTER_LEADER_ELECT"] == "true"


def test_shadow_mode_reads_only_binds_nothing_and_never_blocks_the_scheduler() -> None:
    """shadow: true: the service gets GPUROSTER_SHADOW, read-only rights and no Lease;
    the scheduler calls filter and prioritize but binds itself, and goes on without
    gpuroster when it does not answer."""
    from extender import config

    r = rendering.template({"shadow": True, "replicaCount": 2}, namespace=NS)
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    settings = config.load([], env=env)
    assert settings.shadow is True and settings.leader_elect is False
    assert r.maybe("Role", f"{FULL}-leader-election") is None
    grants = rules_of(r.one("ClusterRole", f"{CLUSTER}-workloads"))
    assert grants == {g for g in WORKLOAD_GRANTS if g[2] in ("get", "list", "watch")
                      and g[1] != "deployments/scale"}
    for role in r.all("ClusterRole") + r.all("Role"):
        if role["metadata"]["name"].startswith(f"{CLUSTER}-scheduler") or "scheduler" in \
                role["metadata"]["name"]:
            continue
        assert {v for _, _, v, _ in rules_of(role)} <= {"get", "list", "watch"}, role
    (ext,) = scheduler_config(r)["extenders"]
    assert ext["filterVerb"] == "filter" and ext["prioritizeVerb"] == "prioritize"
    assert "bindVerb" not in ext and ext["ignorable"] is True
    assert "SHADOW MODE" in rendering.notes({"shadow": True}, namespace=NS)
    # and off by default
    d = rendering.template(namespace=NS)
    assert env_of(container(d.one("Deployment", FULL), "gpuroster"))["GPUROSTER_SHADOW"] == \
        "false"
    (ext,) = scheduler_config(d)["extenders"]
    assert ext["bindVerb"] == "bind" and ext["ignorable"] is False


def test_the_local_clusters_shadow_stanza_is_the_charts(tmp_path: Any) -> None:
    """The shadow e2e test runs the real kube-scheduler with the local cluster's shadow
    stanza: the same verbs and settings as the chart's for `shadow: true`."""
    from pathlib import Path

    from extender.localcluster import rendering as local

    doc = local.scheduler_config(Path(tmp_path) / "s.yaml", kubeconfig=Path("/k"),
                                 extender_port=1, shadow=True)
    (mine,) = doc["extenders"]
    (charts,) = scheduler_config(rendering.template({"shadow": True}, namespace=NS))["extenders"]
    keys = ("filterVerb", "prioritizeVerb", "bindVerb", "ignorable", "nodeCacheCapable",
            "managedResources")
    assert {k: mine.get(k) for k in keys} == {k: charts.get(k) for k in keys}
    assert mine.get("bindVerb") is None and mine["ignorable"] is True


def test_dra_mode_adds_only_the_claims_and_slices_it_reads_and_the_claim_status_it_writes(
) -> None:
    """gpus: dra: GPUROSTER_GPUS=dra; read ResourceSlices and ResourceClaims cluster-wide
    (the devices every namespace's claims hold), patch the claims and their status where
    it manages pods, and the synthetic resourceclaims/binding the API server checks
    cluster-wide; in shadow mode only the reads. The default grants nothing of
    resource.k8s.io."""
    from extender import config

    def dra_grants(role: dict[str, Any]) -> set[tuple[str, str, str, str]]:
        return {g for g in rules_of(role) if g[0] == "resource.k8s.io"}

    reads = {("resource.k8s.io", r, v, "*") for r in ("resourceslices", "resourceclaims")
             for v in ("get", "list", "watch")}
    binding = {("resource.k8s.io", "resourceclaims/binding", "patch", "*")}
    writes = {("resource.k8s.io", "resourceclaims", "patch", "*"),
              ("resource.k8s.io", "resourceclaims/status", "patch", "*")}
    r = rendering.template({"gpus": "dra"}, namespace=NS)
    env = env_of(container(r.one("Deployment", FULL), "gpuroster"))
    assert config.load([], env=env).dra
    assert dra_grants(r.one("ClusterRole", f"{CLUSTER}-nodes")) == reads | binding
    assert rules_of(r.one("ClusterRole", f"{CLUSTER}-workloads")) == WORKLOAD_GRANTS | writes
    scoped = rendering.template({"gpus": "dra", "config": {"namespaces": ["team-a"]}},
                                namespace=NS)
    assert dra_grants(scoped.one("ClusterRole", f"{CLUSTER}-nodes")) == reads | binding
    assert dra_grants(scoped.one("Role", FULL)) == writes
    shadow = rendering.template({"gpus": "dra", "shadow": True}, namespace=NS)
    assert dra_grants(shadow.one("ClusterRole", f"{CLUSTER}-nodes")) == reads
    assert not dra_grants(shadow.one("ClusterRole", f"{CLUSTER}-workloads"))
    d = rendering.template(namespace=NS)
    assert env_of(container(d.one("Deployment", FULL), "gpuroster"))["GPUROSTER_GPUS"] == \
        "device-plugin"
    for role in d.all("ClusterRole") + d.all("Role"):
        assert not dra_grants(role), role
    assert "dra" in rendering.template_error({"gpus": "mig"})

"""Act as a ServiceAccount of the local control plane, with a real token.

    from e2e import accounts
    kc = accounts.service_account_kubeconfig(cluster, "gpu-system", "gr-gpuroster",
                                             tmp_path / "sa.kubeconfig")
    # run anything as that ServiceAccount, e.g. the extender outside the cluster:
    subprocess.Popen(["gpuroster", "serve"], env={**os.environ, "KUBECONFIG": str(kc)})
    accounts.can_i(kc, "patch", "pods", namespace="team-a")     # SelfSubjectAccessReview

Tokens come from the TokenRequest API (what `kubectl create token` calls), so
the API server authenticates the account exactly as it would a pod's token,
and RBAC decides as it would in the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from extender.localcluster import Cluster


def service_account_token(cluster: Cluster, namespace: str, name: str,
                          seconds: int = 3600) -> str:
    """A bound token for ServiceAccount ``namespace/name`` (TokenRequest API)."""
    body: Any = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}}
    result: Any = cluster.core().create_namespaced_service_account_token(name, namespace, body)
    return str(result.status.token)


def service_account_kubeconfig(cluster: Cluster, namespace: str, name: str, path: Path,
                               seconds: int = 3600) -> Path:
    """Write a kubeconfig that authenticates as the ServiceAccount; return its path.

    Its default namespace is the account's own, as in a pod.
    """
    assert cluster.pki is not None, "cluster is not up"
    user = f"system:serviceaccount:{namespace}:{name}"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": cluster.server, "certificate-authority": str(cluster.pki.ca.cert)}}],
        "users": [{"name": user, "user": {
            "token": service_account_token(cluster, namespace, name, seconds)}}],
        "contexts": [{"name": user, "context": {
            "cluster": "local", "user": user, "namespace": namespace}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def client(kubeconfig: Path) -> ApiClient:
    from kubernetes import config

    api: ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    return api


@dataclass(frozen=True)
class Access:
    """One question to the authorizer: may I VERB RESOURCE[/SUBRESOURCE] [NAME]?"""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    namespace: str | None = None
    name: str = ""

    def __str__(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        group = f".{self.group}" if self.group else ""
        where = f" in {self.namespace}" if self.namespace else " (cluster)"
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {what}{group}{named}{where}"


def can_i(kubeconfig: Path, access: Access, api: ApiClient | None = None) -> bool:
    """Ask the API server (SelfSubjectAccessReview) as the kubeconfig's user."""
    from kubernetes import client as k8s

    attrs: dict[str, str] = {"verb": access.verb, "resource": access.resource,
                             "group": access.group}
    if access.subresource:
        attrs["subresource"] = access.subresource
    if access.namespace:
        attrs["namespace"] = access.namespace
    if access.name:
        attrs["name"] = access.name
    body: Any = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}
    own = api is None
    api = api or client(kubeconfig)
    try:
        result: Any = k8s.AuthorizationV1Api(api).create_self_subject_access_review(body)
    finally:
        if own:
            api.close()  # type: ignore[no-untyped-call]
    return bool(result.status.allowed)

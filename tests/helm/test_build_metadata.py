"""The pinned binaries carry the build metadata of their releases.

A helm built from its module without helm's ldflags assumes Kubernetes v1.20
when it has no cluster to ask, and the chart's `kubeVersion: >=1.30.0-0` then
refuses a plain `helm template`. The build script sets what helm's Makefile
and Kubernetes' hack/lib/version.sh set.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from extender.localcluster import binaries_dir
from tests.helm.rendering import CHART, run_helm

HELM_VERSION = "v3.22.0"
K8S_VERSION = "v1.36.3"


def test_helm_template_without_a_kube_version_passes_the_charts_check() -> None:
    out = run_helm(["template", "gr", str(CHART), "--namespace", "gpu-system"])
    kinds = {d["kind"] for d in yaml.safe_load_all(out.stdout) if d}
    assert {"Deployment", "Service"} <= kinds


def test_helm_says_its_release_version_and_the_kubernetes_it_assumes(tmp_path: Path) -> None:
    version = run_helm(["version", "--template", "{{.Version}} {{.GitTreeState}}"]).stdout
    assert version.strip() == f"{HELM_VERSION} clean"
    # helm's Makefile: client-go v0.X.Y -> Kubernetes v1.X (helm v3.22.0: client-go v0.37.0)
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
        "data: {kube: '{{ .Capabilities.KubeVersion.Version }}'}\n")
    (doc,) = yaml.safe_load_all(run_helm(["template", "p", str(chart)]).stdout)
    assert doc["data"]["kube"] == "v1.37.0"


def test_kubectl_says_the_pinned_kubernetes_version() -> None:
    kubectl = binaries_dir() / "kubectl"
    if not kubectl.is_file():
        if os.environ.get("GPUROSTER_SKIP_E2E") == "1":
            pytest.skip("no pinned kubectl")
        pytest.fail(f"no kubectl at {kubectl}: run `gpuroster cluster build`")
    out = subprocess.run([str(kubectl), "version", "--client", "-o", "yaml"], check=True,
                         capture_output=True, text=True).stdout
    client = yaml.safe_load(out)["clientVersion"]
    assert client["gitVersion"] == K8S_VERSION
    assert (client["major"], client["minor"]) == ("1", re.sub(r"^v1\.(\d+)\..*", r"\1",
                                                                K8S_VERSION))
    assert client["gitTreeState"] == "clean"

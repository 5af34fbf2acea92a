"""Run the real `helm` on the chart and hand back the rendered objects.

Helm comes from the pinned build (`gpuroster cluster bin-dir`)
or `GPUROSTER_HELM`. Without it the tests fail with how to get it; they skip
only when `GPUROSTER_SKIP_E2E=1`, as the cluster tests do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.localcluster import binaries_dir

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "gpuroster"
KUBE_VERSION = "v1.36.3"

Obj = dict[str, Any]


def helm_binary() -> str:
    """Path of helm, or fail (skip under GPUROSTER_SKIP_E2E=1) saying how to get it."""
    candidates: list[Path] = []
    if env := os.environ.get("GPUROSTER_HELM"):
        candidates.append(Path(env))
    else:
        if bin_dir := os.environ.get("GPUROSTER_BIN_DIR"):
            candidates.append(Path(bin_dir) / "helm")
        candidates.append(binaries_dir() / "helm")
        if found := shutil.which("helm"):
            candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    message = (
        f"helm not found (looked at {[str(p) for p in candidates]}); build it with "
        "`gpuroster cluster build` or set GPUROSTER_HELM"
    )
    if os.environ.get("GPUROSTER_SKIP_E2E") == "1":
        pytest.skip(message)
    pytest.fail(message)


def run_helm(args: Iterable[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [helm_binary(), *args]
    # No kubeconfig and a private Helm home: rendering must never touch a cluster.
    env = {**os.environ, "KUBECONFIG": os.devnull}
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env.update(
            HELM_CACHE_HOME=f"{home}/cache",
            HELM_CONFIG_HOME=f"{home}/config",
            HELM_DATA_HOME=f"{home}/data",
        )
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr}")
    return result


def values_args(values: Mapping[str, Any] | None, tmp: Path) -> list[str]:
    if not values:
        return []
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return ["--values", str(path)]


@dataclass(frozen=True)
class Rendered:
    objects: list[Obj]

    def kinds(self) -> list[tuple[str, str]]:
        return sorted((o["kind"], o["metadata"]["name"]) for o in self.objects)

    def all(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str) -> Obj:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind}/{name}, got {len(found)}: {self.kinds()}"
        return found[0]

    def maybe(self, kind: str, name: str) -> Obj | None:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        return found[0] if found else None


def template(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "gr",
    namespace: str = "gpu-system",
    kube_version: str = KUBE_VERSION,
    extra: Iterable[str] = (),
) -> Rendered:
    with tempfile.TemporaryDirectory(prefix="helm-values-") as tmp:
        result = run_helm(
            [
                "template",
                release,
                str(CHART),
                "--namespace",
                namespace,
                "--kube-version",
                kube_version,
                *values_args(values, Path(tmp)),
                *extra,
            ]
        )
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return Rendered(docs)


def template_error(values: Mapping[str, Any] | None = None, *, extra: Iterable[str] = ()) -> str:
    """Render values that must be rejected; return helm's error text."""
    with tempfile.TemporaryDirectory(prefix="helm-values-") as tmp:
        result = run_helm(
            [
                "template",
                "gr",
                str(CHART),
                "--kube-version",
                KUBE_VERSION,
                *values_args(values, Path(tmp)),
                *extra,
            ],
            check=False,
        )
    assert result.returncode != 0, f"helm accepted bad values {values}:\n{result.stdout[:2000]}"
    return result.stderr


def notes(
    values: Mapping[str, Any] | None = None, *, release: str = "gr", namespace: str = "gpu-system"
) -> str:
    """NOTES.txt as `helm install` prints it.

    `helm template` never renders NOTES.txt, and a client-side install dry run
    has no cluster version; so render a copy of the chart in which the notes
    are the data of a ConfigMap.
    """
    with tempfile.TemporaryDirectory(prefix="helm-notes-") as tmp:
        chart = Path(tmp) / "gpuroster"
        shutil.copytree(CHART, chart)
        (chart / "notes").mkdir()
        (chart / "templates" / "NOTES.txt").rename(chart / "notes" / "NOTES.txt")
        (chart / "templates" / "zz-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
            'data:\n  notes: {{ tpl (.Files.Get "notes/NOTES.txt") . | quote }}\n'
        )
        result = run_helm(
            [
                "template",
                release,
                str(chart),
                "--namespace",
                namespace,
                "--kube-version",
                KUBE_VERSION,
                "--show-only",
                "templates/zz-notes.yaml",
                *values_args(values, Path(tmp)),
            ]
        )
    doc = yaml.safe_load(result.stdout)
    return str(doc["data"]["notes"])


def env_of(container: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", []) if "value" in e}


def rules_of(role: Obj) -> set[tuple[str, str, str, str]]:
    """(apiGroup, resource, verb, resourceName or '*') for every grant of a role."""
    grants = set()
    for rule in role.get("rules", []):
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    for name in rule.get("resourceNames") or ["*"]:
                        grants.add((group, resource, verb, name))
    return grants

"""deploy/manifests/gpuroster.yaml is the chart's default render, not a copy that drifts."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
import yaml

from tests.helm import rendering


def render_module() -> ModuleType:
    path = rendering.REPO / "deploy" / "manifests" / "render.py"
    spec = importlib.util.spec_from_file_location("render_manifests", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_raw_manifests_match_the_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = render_module()
    # The helm the chart tests use (setattr: a module loaded from a path has no static
    # attributes; it fails if render.py has no `helm` to replace).
    monkeypatch.setattr(mod, "helm", rendering.helm_binary)
    want = mod.render()
    have = mod.OUT.read_text(encoding="utf-8")
    assert have == want, ("deploy/manifests/gpuroster.yaml is out of date; regenerate with "
                          "`.venv/bin/python deploy/manifests/render.py --write`")


def test_raw_manifests_hold_the_whole_install() -> None:
    docs = [d for d in yaml.safe_load_all(rendering.REPO.joinpath(
        "deploy", "manifests", "gpuroster.yaml").read_text(encoding="utf-8")) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "Deployment", "Service", "ServiceAccount", "ClusterRole", "Role",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "gpuroster") in names and ("Deployment", "gpuroster-scheduler") in names
    for d in docs:
        if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding",
                             "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            assert d["metadata"].get("namespace") in ("gpuroster-system", "kube-system"), d

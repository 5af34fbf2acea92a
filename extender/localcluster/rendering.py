"""Files a cluster's processes read: kubeconfigs and the kube-scheduler
configuration rendered from the packaged ``scheduler-config.yaml`` (a copy of
the reference ``deploy/scheduler/scheduler-config.yaml``; a unit test keeps
them equal), and the KWOK stages in ``stages/``. Both are package data, found
with importlib.resources, so an installed gpuroster needs no checkout."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

import yaml


def data(name: str) -> Path:
    """A file or folder shipped in this package, as a path on disk."""
    found = importlib.resources.files("extender.localcluster") / name
    if not isinstance(found, Path):  # a zipped install: the processes need real files
        raise RuntimeError(f"extender.localcluster is not installed as files ({found})")
    return found


SCHEDULER_TEMPLATE = data("scheduler-config.yaml")
STAGES_DIR = data("stages")


def kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gpuroster-local",
                      "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user,
                   "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "gpuroster-local",
                      "context": {"cluster": "gpuroster-local", "user": user}}],
        "current-context": "gpuroster-local",
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def scheduler_config(
    path: Path,
    *,
    kubeconfig: Path,
    extender_port: int,
    node_cache_capable: bool = True,
    extender_ca_file: Path | None = None,
    template: Path = SCHEDULER_TEMPLATE,
    shadow: bool = False,
) -> dict[str, Any]:
    """Render the template for a local cluster; returns what was written.

    With ``extender_ca_file`` the extender is called over HTTPS and its
    serving certificate is checked against that CA. With ``shadow``, the extender
    stanza the chart renders for shadow mode: no bindVerb (kube-scheduler binds)
    and ignorable (a GPU pod never waits on gpuroster).
    """
    doc: dict[str, Any] = yaml.safe_load(template.read_text())
    doc["clientConnection"] = {
        **doc.get("clientConnection", {}),
        "kubeconfig": str(kubeconfig),
        # Benchmarks create pods in bursts; the default 50 QPS would throttle.
        "qps": 500,
        "burst": 1000,
    }
    (extender,) = doc["extenders"]
    scheme = "https" if extender_ca_file else "http"
    extender["urlPrefix"] = f"{scheme}://127.0.0.1:{extender_port}"
    extender["nodeCacheCapable"] = node_cache_capable
    extender["enableHTTPS"] = extender_ca_file is not None
    if extender_ca_file is not None:
        extender["tlsConfig"] = {"caFile": str(extender_ca_file)}
    if shadow:
        extender.pop("bindVerb", None)
        extender["ignorable"] = True
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc


def stage_files() -> list[Path]:
    return sorted(STAGES_DIR.glob("*.yaml"))

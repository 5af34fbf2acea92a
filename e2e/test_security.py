"""The real extender under the chart's least-privilege RBAC, and what it lets out.

- `gpuroster serve` runs as the chart's ServiceAccount (a real token from the
  TokenRequest API, `e2e.accounts`), schedules a gang through the real
  kube-scheduler (list/watch, admission patches, Events, pods/binding all
  allowed), while a verb it was not granted is refused with 403.
- `/plan`, `/plan/view`, `/metrics` and the service's log (DEBUG) carry no
  secret: not the ServiceAccount token, not a bearer token a caller sent, no
  key material.

TLS for the extender endpoint with kube-scheduler's `enableHTTPS` and a CA is
covered by `e2e/test_extender.py::test_full_node_objects_over_https_with_a_second_cluster`
(the real service) and `e2e/test_helm.py::test_chart_scheduler_config_runs_as_its_service_account`
(the chart's Secret and scheduler config).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import accounts
from e2e.test_helm import BASE_VALUES, CHART, Helm, helm, release_name, values_file  # noqa: F401
from extender.localcluster import Cluster, objects, processes

REPO = Path(__file__).resolve().parents[1]
CALLER_TOKEN = "eyJhbGciOiJSUzI1NiJ9.caller-secret-token-do-not-log.c2lnbmF0dXJl"


def test_extender_as_the_charts_service_account_schedules_and_is_refused_the_rest(
        cluster: Cluster, helm: Helm, namespace: str, tmp_path: Path) -> None:  # noqa: F811
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    release = release_name(namespace)
    account = f"{release}-gpuroster"
    helm("install", release, str(CHART), "-n", namespace, "-f",
         values_file(tmp_path, BASE_VALUES, {"config": {"namespaces": [namespace]}}))
    kc = accounts.service_account_kubeconfig(cluster, namespace, account,
                                             tmp_path / "sa.kubeconfig")
    token = str(yaml.safe_load(Path(kc).read_text())["users"][0]["user"]["token"])
    assert len(token) > 100
    log_path = tmp_path / "serve.log"
    env = {**os.environ, "GPUROSTER_KUBECONFIG": str(kc),
           "GPUROSTER_PORT": str(cluster.extender_port), "GPUROSTER_BIND_ADDRESS": "127.0.0.1",
           "GPUROSTER_STEP_SECONDS": "2", "GPUROSTER_NAMESPACES": namespace,
           "GPUROSTER_LOG_LEVEL": "DEBUG"}
    url = f"http://127.0.0.1:{cluster.extender_port}"
    with log_path.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "extender.cli", "serve"], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _ok(url + "/readyz"):
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
        core: Any = cluster.core()
        names = []
        for i in range(2):
            notes = {"gpuroster.io/gang": "g", "gpuroster.io/gang-size": "2",
                     "gpuroster.io/expected-duration": "30s", "gpuroster.io/workload": "training"}
            core.create_namespaced_pod(namespace, objects.pod(f"g-{i}", gpus=4, runtime="30s",
                                                              annotations=notes))
            names.append(f"g-{i}")
        deadline = time.monotonic() + 40
        while not all(core.read_namespaced_pod(n, namespace).spec.node_name for n in names):
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.3)
        pods = [core.read_namespaced_pod(n, namespace) for n in names]
        assert all("gpuroster.io/block" in (p.metadata.annotations or {}) for p in pods)
        print(f"[security] gpuroster serve as {account}: gang admitted and bound through "
              f"pods/binding on {sorted({p.spec.node_name for p in pods})}")

        # the same token, verbs the chart does not grant
        api = accounts.client(kc)
        refused = []
        try:
            sa_core: Any = k8s.CoreV1Api(api)
            calls: list[tuple[str, Callable[[], Any]]] = [
                ("delete pods", lambda: sa_core.delete_namespaced_pod("g-0", namespace)),
                ("list secrets", lambda: sa_core.list_namespaced_secret(namespace)),
                ("create bindings (the top-level resource)",
                 lambda: sa_core.create_namespaced_binding(namespace, {
                     "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "g-1"},
                     "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-0"}},
                     _preload_content=False)),
                ("patch nodes", lambda: sa_core.patch_node("gpu-node-0", {
                    "metadata": {"labels": {"x": "y"}}})),
            ]
            for what, call in calls:
                with pytest.raises(ApiException) as err:
                    call()
                refused.append(f"{what}: {err.value.status}")
                assert err.value.status == 403, what
        finally:
            api.close()  # type: ignore[no-untyped-call]
        print(f"[security]   refused to the same token: {refused}")

        # secrets: nothing the service serves or logs carries a token or key material
        headers = {"Authorization": f"Bearer {CALLER_TOKEN}", "Content-Type": "application/json"}
        body = json.dumps({"Pod": {"metadata": {"name": "g-0", "namespace": namespace}},
                           "NodeNames": ["gpu-node-0"]}).encode()
        for verb in ("filter", "prioritize"):
            req = urllib.request.Request(f"{url}/{verb}", data=body, headers=headers)
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.status == 200
        bad = urllib.request.Request(f"{url}/filter", data=b"{nope", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused_body:
            urllib.request.urlopen(bad, timeout=5)
        assert refused_body.value.code == 400
        served = {}
        for path in ("/plan", "/plan/view", "/metrics", "/healthz", "/readyz"):
            req = urllib.request.Request(url + path, headers=headers)
            with urllib.request.urlopen(req, timeout=5) as r:
                served[path] = str(r.read().decode())
        time.sleep(1)  # a negative check: the requests' log lines are written, then searched
        log = log_path.read_text(errors="replace")
        needles = {"ServiceAccount token": token, "caller's bearer token": CALLER_TOKEN,
                   "Authorization header": "Authorization", "Bearer": "Bearer ",
                   "key material": "PRIVATE KEY", "kubeconfig path": str(kc)}
        leaks = [f"{what} in {where}" for where, text in [*served.items(), ("log", log)]
                 for what, needle in needles.items() if needle in text]
        print(f"[security]   searched /plan, /plan/view, /metrics, /healthz, /readyz "
              f"({sum(len(t) for t in served.values())} bytes) and the DEBUG log "
              f"({len(log)} bytes, {len(log.splitlines())} lines) for "
              f"{sorted(needles)}: {leaks or 'nothing found'}")
        assert not leaks, leaks
    finally:
        processes.stop_process(proc)


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False

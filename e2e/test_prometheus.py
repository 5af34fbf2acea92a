"""The PromQL demand source (`gpuroster.io/demand-query`) against a real Prometheus.

Prometheus is built from its Go module by `gpuroster cluster build` (HTTP API only:
no service-discovery plugins, no web UI assets). It scrapes a one-gauge exporter
served by the test every second; gpuroster serve reads the gauge's history with
/api/v1/query_range, forecasts from it and scales the Deployment. A query
Prometheus refuses reaches the pod as an InvalidDemand Event with Prometheus's
own reason.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from e2e.test_extender import Extender
from extender.localcluster import Cluster, free_port, objects, processes
from extender.localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e


class Gauge:
    """An exporter of one gauge, `demand_gpus`, on 127.0.0.1."""

    def __init__(self, value: float) -> None:
        self.value = value
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = f"# TYPE demand_gpus gauge\ndemand_gpus {owner.value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def prometheus(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[str, Gauge]]:
    found = sorted(cluster.bin_dir.glob("prometheus-*"))
    if not found:
        pytest.fail(f"no prometheus in {cluster.bin_dir}: run `gpuroster cluster build`")
    gauge = Gauge(3)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "demand",
                            "static_configs": [{"targets": [f"127.0.0.1:{gauge.port}"]}]}],
    }))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [str(found[-1]), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def scraped() -> bool:
            q = urllib.parse.urlencode({"query": 'demand_gpus{job="demand"}'})
            try:
                with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=2) as r:
                    return bool(json.loads(r.read())["data"]["result"])
            except OSError:
                return False

        wait_for(scraped, 30, "Prometheus to scrape the gauge")
        yield url, gauge
    finally:
        processes.stop_process(proc)
        log.close()
        gauge.httpd.shutdown()


def service(apps: Any, namespace: str, name: str, query: str, replicas: int) -> None:
    apps.create_namespaced_deployment(namespace, objects.inference_deployment(name, {
        "gpuroster.io/demand-query": query, "gpuroster.io/max-swap": "4"}, replicas=replicas))


def test_a_deployment_follows_demand_read_from_a_real_prometheus(
        cluster: Cluster, core: Any, api_client: Any, namespace: str, tmp_path: Path,
        prometheus: tuple[str, Gauge]) -> None:
    from kubernetes import client

    url, gauge = prometheus
    apps = client.AppsV1Api(api_client)
    # 2 s steps standing for hours, so a day of history is 48 s of Prometheus samples.
    ext = Extender(cluster, namespace, tmp_path, GPUROSTER_PROMETHEUS_URL=url,
                   GPUROSTER_STEP_MINUTES="60")
    ext.start()
    try:
        service(apps, namespace, "chat", 'max(demand_gpus{job="demand"})', 0)
        service(apps, namespace, "broken", "sum(demand_gpus", 1)  # Prometheus refuses it

        def replicas(name: str) -> int:
            return int(apps.read_namespaced_deployment(name, namespace).spec.replicas or 0)

        wait_for(lambda: replicas("chat") == 3, 30, "chat scaled to the gauge's 3 GPUs")
        view = ext.get("/plan")["services"][f"{namespace}/chat"]
        assert view["forecast"][0] == 3, view
        print(f"[e2e] chat scaled to 3 replicas from Prometheus; forecast {view['forecast'][:6]}")

        def told() -> list[str]:
            return [e.message for e in core.list_namespaced_event(namespace).items
                    if e.reason == "InvalidDemand"]

        said = wait_for(told, 30, "an InvalidDemand Event for the broken query")
        print(f"[e2e] broken query: {said[0]}")
        assert any("gpuroster.io/demand-query" in m and "parse error" in m for m in said), said
        assert replicas("broken") == 1  # its replicas are left as they are
    finally:
        ext.stop()

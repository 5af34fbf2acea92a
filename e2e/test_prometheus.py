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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from e2e import exposition
from e2e.test_extender import Extender
from extender.localcluster import Cluster, free_port, objects, processes
from extender.localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e


class Gauge:
    """An exporter of one gauge, `demand_gpus`, on 127.0.0.1."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.httpd = exposition.text_server(
            lambda: f"# TYPE demand_gpus gauge\ndemand_gpus {self.value}\n")
        self.port = int(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@contextmanager
def running_prometheus(cluster: Cluster, tmp_path: Path, targets: dict[str, str],
                       rules: dict[str, Any] | None = None) -> Iterator[str]:
    """A Prometheus scraping `targets` (job -> host:port) every second, with `rules`
    (a rule file's content) evaluated every second; yields its URL."""
    found = sorted(cluster.bin_dir.glob("prometheus-*"))
    if not found:
        pytest.fail(f"no prometheus in {cluster.bin_dir}: run `gpuroster cluster build`")
    port = free_port()
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                           for job, target in targets.items()],
    }
    if rules is not None:
        (tmp_path / "rules.yml").write_text(json.dumps(rules))
        config["rule_files"] = [str(tmp_path / "rules.yml")]
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [str(found[-1]), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        processes.stop_process(proc)
        log.close()


def instant(url: str, query: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=2) as r:
            return list(json.loads(r.read())["data"]["result"])
    except OSError:
        return []


@pytest.fixture
def prometheus(cluster: Cluster, tmp_path: Path) -> Iterator[tuple[str, Gauge]]:
    gauge = Gauge(3)
    try:
        with running_prometheus(cluster, tmp_path,
                                {"demand": f"127.0.0.1:{gauge.port}"}) as url:
            wait_for(lambda: instant(url, 'demand_gpus{job="demand"}'), 30,
                     "Prometheus to scrape the gauge")
            yield url, gauge
    finally:
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


def test_the_charts_alert_fires_when_a_service_falls_below_its_objective(
        cluster: Cluster, api_client: Any, core: Any, namespace: str, tmp_path: Path) -> None:
    """The chart's PrometheusRule, rendered and loaded into a real Prometheus scraping
    gpuroster serve: a service whose demand runs above its curve falls below its
    objective, and GpurosterServiceBelowObjective fires for it."""
    from kubernetes import client

    from tests.helm import rendering

    rule = rendering.template({"metrics": {"prometheusRule": {"enabled": True, "for": "2s"}}},
                              namespace="gpu-system").all("PrometheusRule")[0]
    apps = client.AppsV1Api(api_client)
    ext = Extender(cluster, namespace, tmp_path)
    ext.start()
    try:
        core.create_namespaced_config_map(namespace, {
            "metadata": {"name": "chat-demand"}, "data": {"curve": "[2]"}})
        apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(
            objects.inference_deployment("chat", {
                "gpuroster.io/demand-configmap": "chat-demand", "gpuroster.io/max-swap": "4",
                "gpuroster.io/service-level": "0.99"})))
        with running_prometheus(cluster, tmp_path,
                                {"gpuroster": f"127.0.0.1:{cluster.extender_port}"},
                                {"groups": rule["spec"]["groups"]}) as url:
            svc = f"{namespace}/chat"
            wait_for(lambda: instant(url, f'gpuroster_realtime_service_level_objective'
                                          f'{{service="{svc}"}}'), 30,
                     "Prometheus to scrape the objective")
            assert not instant(url, 'ALERTS{alertname="GpurosterServiceBelowObjective"}')
            since = int(ext.get("/plan")["step"])
            core.patch_namespaced_config_map("chat-demand", namespace, {"data": {
                "observed": json.dumps([2] * since + [5] * 1000)}})
            firing = wait_for(
                lambda: instant(url, 'ALERTS{alertname="GpurosterServiceBelowObjective",'
                                     'alertstate="firing"}'),
                40, "the alert to fire")
            assert firing[0]["metric"]["service"] == svc, firing
            print(f"[e2e] GpurosterServiceBelowObjective firing for {svc}")
    finally:
        ext.stop()

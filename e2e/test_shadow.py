"""`gpuroster serve --shadow` on a real control plane: it plans and shows, and writes nothing.

A control plane of this module's own, whose kube-scheduler has the extender stanza
the chart renders in shadow mode (filter and prioritize, no bindVerb, ignorable).
GPU work arrives (two gangs, a single pod, a real-time service); kube-scheduler
alone places it. Meanwhile gpuroster's plan page and metrics show its plan, and
the cluster shows no trace of gpuroster: no Event from it, no admission
annotation, condition or Lease, no scale, no eviction; the objects nobody else
touches keep their resourceVersions (or spec), and the read-only client it
plans through saw no write to refuse. Headless Chromium
(Debian's) then loads the plan page and takes its screenshot; with
GPUROSTER_WRITE_SCREENSHOT=1 it replaces docs/images/plan-page-shadow.png.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import accounts, clusters
from e2e.test_extender import Extender, gang_pods
from extender.localcluster import Cluster, objects
from extender.localcluster.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO / "docs" / "images" / "plan-page-shadow.png"
STEP = 2.0
OURS = ("gpuroster.io/block", "gpuroster.io/admitted-at", "gpuroster.io/node",
        "gpuroster.io/planned-step", "controller.kubernetes.io/pod-deletion-cost")


@pytest.fixture(scope="module")
def shadowed(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with clusters.running(request, "shadow", nodes=3, extender_shadow=True) as c:
        yield c


def shadow_account(cluster: Cluster, ns: str, tmp_path: Path) -> Path:
    """The chart's ServiceAccount and RBAC for `shadow: true` (rendered by helm, applied
    as they are); a kubeconfig that authenticates as that account."""
    import yaml

    from tests.helm import rendering

    r = rendering.template({"shadow": True, "config": {"namespaces": [ns]}}, namespace=ns)
    wanted = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    docs = [d for d in r.objects if d["kind"] in wanted
            and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "scheduler"]
    rbac = tmp_path / "shadow-rbac.yaml"
    rbac.write_text(yaml.safe_dump_all(docs))
    cluster.kubectl("apply", "-f", str(rbac))
    return accounts.service_account_kubeconfig(cluster, ns, "gr-gpuroster",
                                               tmp_path / "shadow.kubeconfig")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("chromium is not installed (apt-get install -y chromium; .ci/run does)")
    return found


def headless(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Debian's Chromium, headless, with nothing reaching past loopback."""
    with tempfile.TemporaryDirectory(prefix="gpuroster-chromium-") as profile:
        return subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args, url],
            capture_output=True, text=True, timeout=120, check=False)


def test_shadow_mode_plans_and_shows_and_leaves_no_trace(shadowed: Cluster,
                                                         tmp_path: Path) -> None:
    from kubernetes import client

    api = shadowed.api()
    core: Any = shadowed.core()
    apps: Any = client.AppsV1Api(api)
    coord: Any = client.CoordinationV1Api(api)
    ns = "shadow"
    shadowed.create_namespace(ns)

    core.create_namespaced_config_map(ns, {"metadata": {"name": "chat-demand"},
                                           "data": {"curve": json.dumps([3])}})
    apps.create_namespaced_deployment(ns, objects.inference_deployment(
        "chat", {"gpuroster.io/demand-configmap": "chat-demand",
                 "gpuroster.io/max-swap": "2"}, replicas=1))
    # gpuroster runs as the chart's shadow-mode account: read-only, so the API server
    # itself would refuse any write it tried.
    kc = shadow_account(shadowed, ns, tmp_path)
    for verb, resource, sub in (("patch", "pods", ""), ("create", "pods", "binding"),
                                ("create", "events", ""), ("patch", "pods", "status")):
        assert not accounts.can_i(kc, accounts.Access(verb, resource, subresource=sub,
                                                      namespace=ns)), (verb, resource, sub)
    assert accounts.can_i(kc, accounts.Access("watch", "pods", namespace=ns))
    ext = Extender(shadowed, ns, tmp_path, GPUROSTER_SHADOW="true",
                   GPUROSTER_KUBECONFIG=str(kc))
    started = time.monotonic()
    ext.start()
    try:
        rv_cm = core.read_namespaced_config_map("chat-demand", ns).metadata.resource_version
        nodes_before = {n.metadata.name: (n.spec.to_dict(), n.metadata.labels)
                        for n in core.list_node().items}
        # 24 GPUs; 2x4 + 1x2 + 2x8 + 1x8 + the service's 1: not all of it fits.
        # Expected durations of 8 to 14 steps: the grid shows ends and planned starts.
        # train and solo end after their 20 s; then kube-scheduler starts waiting work.
        names = gang_pods(core, ns, "train", 2, 4, runtime="20s", duration="20s",
                          priority="high")
        names += gang_pods(core, ns, "solo", 1, 2, runtime="20s", duration="16s")
        names += gang_pods(core, ns, "wide", 2, 8, runtime="60s", duration="28s")
        names += gang_pods(core, ns, "later", 1, 8, runtime="60s", duration="24s",
                           priority="low")
        # kube-scheduler places what fits, by itself (the extender filters nothing out),
        # one pod at a time: wait for the three asserted below, not the first.
        def bound_now() -> list[str] | None:
            b = [n for n in names if core.read_namespaced_pod(n, ns).spec.node_name]
            return b if len(b) >= 3 else None

        bound = wait_for(bound_now, 10 * STEP, "kube-scheduler to bind 3 GPU pods")

        # Planning beside it: wait for the rounds to show what is asserted below.
        def shown() -> tuple[dict[str, Any], str] | None:
            v, text = ext.get("/plan"), ext.get("/metrics")
            seen = all(f"{ns}/{g}" in v["jobs"] for g in ("train", "solo", "wide", "later"))
            running = any(j["state"] == "running" for j in v["jobs"].values())
            chat = 'gpuroster_shadow_service_replicas_actual{service="shadow/chat"} 1.0'
            return (v, text) if (seen and running and f"{ns}/chat" in v["services"]
                                 and chat in text) else None

        view, metrics_text = wait_for(shown, 10 * STEP,
                                      "the shadow plan to show the four gangs, one running, "
                                      "and chat with its 1 replica")
        html = ext.get("/plan/view")

        # --- the plan is shown ---------------------------------------------------------
        assert view["shadow"] is True
        jobs = view["jobs"]
        for gang in ("train", "solo", "wide", "later"):
            assert f"{ns}/{gang}" in jobs, (gang, sorted(jobs))
        running = [n for n, j in jobs.items() if j["state"] == "running"]
        assert running and all(jobs[n]["placed_by"] == "scheduler" for n in running), jobs
        assert any(j["state"] in ("queued", "admitted", "held") for j in jobs.values()), jobs
        assert f"{ns}/chat" in view["services"]
        assert "gpuroster_shadow_mode 1.0" in metrics_text
        assert 'gpuroster_shadow_service_replicas_actual{service="shadow/chat"} 1.0' in \
            metrics_text
        assert "gpuroster_shadow_waiting_gangs" in metrics_text
        assert "gpuroster_shadow_writes_blocked_total{" not in metrics_text  # no sample
        assert "Shadow mode." in html and "<svg" in html

        # --- the page in a real browser ---------------------------------------------------
        url = ext.url + "/plan/view"
        dom = headless(url, "--dump-dom", "--virtual-time-budget=3000")
        assert dom.returncode == 0, dom.stderr[-2000:]
        for needle in ("Shadow mode.", "<svg", "Waiting: what each job waits for",
                       f"{ns}/train", f"{ns}/wide", f"{ns}/later", f"{ns}/chat"):
            assert needle in dom.stdout, needle
        shot = tmp_path / "plan.png"
        r = headless(url, f"--screenshot={shot}", "--window-size=1400,1100")
        assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        if os.environ.get("GPUROSTER_WRITE_SCREENSHOT") == "1":
            SCREENSHOT.write_bytes(data)
        # --- a waiting gang started by kube-scheduler, measured against the plan ---------
        waiting = {n for n, j in jobs.items() if j["state"] != "running"}
        wait_for(lambda: "started by the cluster's scheduler" in ext.log() or None, 40.0,
                 f"kube-scheduler starts one of {sorted(waiting)} once train and solo end")

        def samples(text: str, name: str) -> dict[str, float]:
            return {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines() if line.startswith(name + "{")}

        def counted() -> tuple[dict[str, float], dict[str, float], str] | None:
            text = ext.get("/metrics")
            starts = samples(text, "gpuroster_shadow_gang_starts_total")
            placed = samples(text, "gpuroster_shadow_pod_placements_total")
            return (starts, placed, text) if sum(starts.values()) >= 1 and sum(
                placed.values()) >= 1 else None

        starts, placed, metrics_text = wait_for(counted, 10 * STEP,
                                                "the shadow gang start and pod placement "
                                                "counters to count that start")
        assert "gpuroster_shadow_start_delay_seconds_count" in metrics_text or \
            'versus="unplanned"' in str(starts), metrics_text
        assert "gpuroster_shadow_writes_blocked_total{" not in metrics_text
        started_lines = [ln for ln in ext.log().splitlines()
                         if "started by the cluster's scheduler" in ln]
        print(f"[shadow] {len(bound)} of {len(names)} pods bound by kube-scheduler at first; "
              f"later: {started_lines[0].split('shadow: ', 1)[1]}; starts {starts}, "
              f"pods {placed}")

        # --- and nothing of gpuroster is in the cluster ----------------------------------
        pods = core.list_namespaced_pod(ns).items
        assert {p.metadata.name for p in pods} >= set(names)  # nothing evicted
        for p in pods:
            notes = p.metadata.annotations or {}
            assert not [a for a in OURS if a in notes], (p.metadata.name, notes)
            conds = {c.type for c in (p.status.conditions or [])}
            assert "gpuroster.io/Planned" not in conds, p.metadata.name
            assert p.metadata.deletion_timestamp is None
        assert len(bound) >= 3, bound
        dep = apps.read_namespaced_deployment("chat", ns)
        assert dep.spec.replicas == 1 and dep.metadata.generation == 1
        events = core.list_event_for_all_namespaces().items
        ours = [e for e in events if "gpuroster" in ((e.source.component if e.source else "")
                                                    or "") + (e.reporting_component or "")]
        assert ours == [], [(e.reason, e.message) for e in ours]
        leases = coord.list_lease_for_all_namespaces().items
        assert not [lz.metadata.name for lz in leases if "gpuroster" in lz.metadata.name]
        assert core.read_namespaced_config_map(
            "chat-demand", ns).metadata.resource_version == rv_cm
        for n in core.list_node().items:
            assert (n.spec.to_dict(), n.metadata.labels) == nodes_before[n.metadata.name]

        assert "Forbidden" not in ext.log() and "refused to" not in ext.log()
        print(f"[shadow] no trace of gpuroster in the cluster after "
              f"{time.monotonic() - started:.1f}s")
    finally:
        ext.stop()
        print(ext.log()[-3000:])

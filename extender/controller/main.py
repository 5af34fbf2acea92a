"""`gpuroster serve` (extender + controller) and `gpuroster plan` (print a running plan)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from extender import config


def build(settings: config.Settings, client: Any = None, clock: Any = None) -> tuple[Any, Any]:
    """The controller and the app for `settings` (client: a `kube.Kube`; default the real one)."""
    from extender import metrics
    from extender.adapter import kube, watching
    from extender.api import app as app_mod
    from extender.controller import stepping

    client = client or kube.Client(settings.kubeconfig)
    if settings.shadow:  # nothing it does may reach the cluster: the client refuses writes
        client = kube.ReadOnly(client, on_write=lambda verb: metrics.SHADOW_WRITES_BLOCKED.labels(
            verb=verb).inc())
    holder: list[stepping.Controller] = []
    cache = watching.Cache(client, settings.namespaces, resync_seconds=settings.resync_seconds,
                           on_change=lambda kind: holder[0].mark_dirty(kind) if holder else None,
                           # a Deployment's pod template has no resolved priority value
                           priority_classes=bool(settings.priority_class_values),
                           dra=settings.dra)
    elector = None
    # A Lease is a write: in shadow mode every replica plans alone, none elected.
    if settings.leader_elect and isinstance(client, kube.Client) and not settings.shadow:
        import socket

        from extender.adapter import leasing

        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        elector = leasing.Elector(
            leasing.ApiLeaseStore(client, settings.lease_namespace, settings.lease_name,
                                  owner=settings.lease_owner),
            identity, name=settings.lease_name, namespace=settings.lease_namespace,
            # client-go's ratios (15/10/2 s): renew well inside the Lease, retry often
            lease_seconds=settings.lease_seconds, renew_deadline=settings.lease_seconds * 2 / 3,
            retry_seconds=min(2.0, settings.lease_seconds / 5))
    controller = stepping.Controller(settings, client, cache, clock=clock,
                                     leader=elector.is_leader if elector else None)
    holder.append(controller)
    metrics.set_state_source(lambda: controller.state)

    def start() -> None:
        if elector is not None:
            elector.start()
        cache.start()
        controller.start()

    def stop() -> None:
        shutdown(controller, cache, elector)

    app = app_mod.create_app(
        controller.verbs, view=lambda: plan_view(controller),
        ready=lambda: cache.synced() and controller.rounds > 0,
        healthy=lambda: controller.alive() or controller.rounds == 0,
        on_start=start, on_stop=stop, max_body_bytes=settings.max_body_bytes)
    return controller, app


def plan_view(controller: Any) -> dict[str, Any]:
    """The last published plan; the plan time of the rounds kept (`plan_ms`: p50, p99 and
    max in ms, as MODEL.md's result files give them, and `rounds`, how many); while
    rounds fail, the last error (`last_error`): a failed round publishes nothing, so the
    plan shown is older than the step, and an operator looking at it must see why."""
    from extender.planner.metrics import percentiles_ms

    view: dict[str, Any] = controller.view
    if not view:
        return view
    times = controller.plan_times()
    out = {**view, "plan_ms": {**percentiles_ms(times), "rounds": len(times)}}
    error = controller.last_error
    return {**out, "last_error": error} if error else out


def shutdown(controller: Any, cache: Any, elector: Any, wait: float = 10.0) -> None:
    """Stop the step loop, the cache, then the Lease. The Lease is released (a follower
    takes over at once) only once the loop has ended: a round still running may still
    write, and a released Lease would let a follower write beside it. If the loop has not
    ended within `wait`, the Lease is only no longer renewed: the round's writes stop at
    the renew deadline (the writer asks before each) and the Lease runs out, as after a
    crash."""
    controller.stop(wait=wait)  # a round in flight ends before the Lease goes
    cache.stop()
    if elector is None:
        return
    if controller.alive():
        logging.getLogger(__name__).warning(
            "the step loop did not end within %gs; the Lease is left to expire", wait)
        elector.stop()
    else:
        elector.release()


def serve(argv: Sequence[str]) -> int:
    try:
        settings = config.load(argv)
    except config.ConfigError as e:
        print(f"gpuroster serve: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("gpuroster")
    import uvicorn

    try:
        _, app = build(settings)
    except Exception as e:  # noqa: BLE001 - no kubeconfig, bad cluster address
        print(f"gpuroster serve: cannot reach the cluster: {e}", file=sys.stderr)
        return 1
    log.info("gpuroster serving on %s:%d (policy %s, step %gs, horizon %d)%s",
             settings.bind_address, settings.port, settings.policy, settings.step_seconds,
             settings.horizon_steps,
             " in SHADOW MODE: plans and publishes, writes nothing to the cluster"
             if settings.shadow else "")
    uvicorn.run(app, host=settings.bind_address, port=settings.port,
                ssl_certfile=settings.tls_cert_file or None,
                ssl_keyfile=settings.tls_key_file or None,
                log_level=settings.log_level.lower() if settings.log_level != "INFO" else "warning",
                access_log=False)
    return 0


def render_text(view: dict[str, Any]) -> str:
    if "grid" not in view:
        return "no plan yet (the first step has not run)"
    names: dict[str, str] = {}
    symbols = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    g = int(view["gpus_per_node"]) or 1
    nodes = view["nodes"]
    lines = [f"step {view['step']} at {view.get('step_start_utc', '')}, "
             f"{view['horizon']} steps of {view['step_seconds']:g}s; '|' marks the committed step"]
    width = max((len(n) for n in nodes), default=4) + 4
    for gpu, cells in enumerate(view["grid"]):
        row = []
        for name in cells:
            if name is None:
                row.append(".")
            elif name == "(unavailable)":
                row.append("#")
            else:
                if name not in names:
                    names[name] = symbols[len(names) % len(symbols)]
                row.append(names[name])
        node = nodes[gpu // g] if gpu // g < len(nodes) else "?"
        label = f"{node}:{gpu % g}".ljust(width)
        lines.append(f"{label}|{row[0] if row else ''}|{''.join(row[1:])}")
    lines.append("")
    for name, sym in names.items():
        job = view.get("jobs", {}).get(name) or view.get("services", {}).get(name) or {}
        state = job.get("state", "service")
        lines.append(f"  {sym} {name} ({state})")
    if view.get("queue"):
        lines.append("queue: " + ", ".join(view["queue"]))
    return "\n".join(lines)


def plan(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="gpuroster plan",
                                description="Print the current plan of a running service.")
    port = os.environ.get("GPUROSTER_PORT", "8888")
    p.add_argument("--url", default=f"http://127.0.0.1:{port}",
                   help="base URL of the service [http://127.0.0.1:$GPUROSTER_PORT]")
    p.add_argument("--json", action="store_true", help="print the raw JSON")
    args = p.parse_args(list(argv))
    try:
        with urllib.request.urlopen(args.url.rstrip("/") + "/plan", timeout=10) as r:
            view = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"gpuroster plan: cannot read {args.url}/plan: {e}", file=sys.stderr)
        return 1
    print(json.dumps(view, indent=2) if args.json else render_text(view))
    return 0

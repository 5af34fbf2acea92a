"""Prometheus text served by a test: the exporters the e2e tests scrape (a one-gauge
exporter, the kube-state-metrics stand-in) answer on 127.0.0.1 with this server."""

from __future__ import annotations

from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def text_server(body: Callable[[], str], port: int = 0) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:`port` (0: any free port) that answers every GET with
    `body()` in Prometheus's text format; serve it with `serve_forever` (in a thread)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            data = body().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)

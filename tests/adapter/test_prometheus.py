"""Demand history from a PromQL range query, over real HTTP (a local server answering as
Prometheus's /api/v1/query_range does); the real Prometheus is in e2e/test_prometheus.py."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from extender.adapter import annotations as ann
from extender.adapter import prometheus


class Server:
    def __init__(self) -> None:
        self.answer: Any = {}
        self.status = 200
        self.asked: list[dict[str, list[str]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                url = urllib.parse.urlparse(self.path)
                assert url.path == "/api/v1/query_range", url.path
                owner.asked.append(urllib.parse.parse_qs(url.query))
                body = (owner.answer if isinstance(owner.answer, bytes)
                        else json.dumps(owner.answer).encode())
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def prom() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()


def matrix(*points: tuple[float, str]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {}, "values": [[t, v] for t, v in points]}]}}


def test_asks_a_range_and_lays_the_points_on_the_steps(prom: Server) -> None:
    prom.answer = matrix((1000.0, "2"), (1010.0, "3.5"), (1030.0, "1"))
    out = prometheus.query_range(prom.url, "sum(demand)", 1000.0, 1040.0, 10.0)
    assert out == [2.0, 3.5, 0.0, 1.0, 0.0]  # a gap after the first sample is no demand
    (q,) = prom.asked
    assert q["query"] == ["sum(demand)"]
    assert (q["start"], q["end"], q["step"]) == (["1000.000"], ["1040.000"], ["10.000"])


def test_before_its_first_sample_the_series_did_not_exist(prom: Server) -> None:
    prom.answer = matrix((1020.0, "3"), (1030.0, "3"), (1040.0, "4"))
    assert prometheus.query_range(prom.url, "x", 1000.0, 1040.0, 10.0) == [3.0, 3.0, 4.0]


def test_negative_and_nan_values_count_as_no_demand(prom: Server) -> None:
    prom.answer = matrix((1000.0, "-1"), (1010.0, "NaN"), (1020.0, "+Inf"), (1030.0, "2"))
    assert prometheus.query_range(prom.url, "x", 1000.0, 1030.0, 10.0) == [0.0, 0.0, 0.0, 2.0]


@pytest.mark.parametrize(("answer", "status", "needle"), [
    ({"status": "error", "error": "parse error at char 3"}, 400, "parse error at char 3"),
    ({"status": "success", "data": {"result": []}}, 200, "returned no series"),
    (matrix((5000.0, "1")), 200, "returned no samples"),  # all outside the range
    (matrix((1000.0, "many")), 200, "malformed Prometheus answer"),
    ({"status": "success", "data": {"result": [{"values": [[1000.0]]}]}}, 200,
     "malformed Prometheus answer"),
    (b"<html>not prometheus</html>", 200, "Prometheus query failed"),
    (b"[1, 2]", 200, "malformed Prometheus answer"),
    ({"status": "success", "data": {"result": {"a": 1}}}, 200, "malformed Prometheus answer"),
    ({"status": "success", "data": {"result": [7]}}, 200, "malformed Prometheus answer"),
    (b"{}", 502, "Prometheus query failed: HTTP Error 502"),
], ids=["promql-error", "no-series", "no-samples", "bad-value", "short-pair", "html", "list",
        "result-map", "result-number", "bad-gateway"])
def test_a_bad_answer_is_a_clear_error(prom: Server, answer: Any, status: int,
                                       needle: str) -> None:
    prom.answer, prom.status = answer, status
    with pytest.raises(ann.AnnotationError) as e:
        prometheus.query_range(prom.url, "x", 1000.0, 1030.0, 10.0)
    assert needle in str(e.value) and ann.DEMAND_QUERY in str(e.value)


def test_an_unreachable_prometheus_is_a_clear_error() -> None:
    with pytest.raises(ann.AnnotationError, match="Prometheus query failed"):
        prometheus.query_range("http://127.0.0.1:9/", "x", 1000.0, 1030.0, 10.0, timeout=2)


def test_an_answer_cut_short_is_a_clear_error() -> None:
    """Prometheus (or a proxy) drops the connection mid-body: http.client raises
    IncompleteRead, which is neither OSError nor ValueError."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "4000")
            self.end_headers()
            self.wfile.write(b'{"status":"succ')
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ann.AnnotationError, match="Prometheus query failed"):
            prometheus.query_range(f"http://127.0.0.1:{httpd.server_address[1]}/", "x",
                                   1000.0, 1030.0, 10.0, timeout=5)
    finally:
        httpd.shutdown()

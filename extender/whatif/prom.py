"""The Prometheus HTTP API, as `gpuroster whatif` uses it: instant and range queries.

Every failure is a `PrometheusError` whose message is one line that says what
failed: Prometheus unreachable, a query it refused (its own reason), or an answer
that is not Prometheus's.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


class PrometheusError(RuntimeError):
    pass


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    value: float  # instant queries
    values: tuple[tuple[float, float], ...] = ()  # range queries: (unix time, value)


class Client:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.queries: list[str] = []  # every expression sent, for the report

    def _get(self, path: str, params: dict[str, str]) -> Any:
        query = params["query"]
        self.queries.append(query)
        # POST (form-encoded, as the HTTP API takes it): a query naming a few hundred pod
        # uids is longer than a URL should be
        req = urllib.request.Request(
            f"{self.url}{path}", data=urllib.parse.urlencode(params).encode(), method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            try:
                doc = json.loads(e.read())
            except (OSError, ValueError):
                doc = None
            if isinstance(doc, dict) and doc.get("error"):
                raise PrometheusError(
                    f"Prometheus refused {_short(query)}: {doc.get('errorType', e.code)}: "
                    f"{doc['error']}") from None
            raise PrometheusError(f"Prometheus at {self.url} answered HTTP {e.code} "
                                  f"to {_short(query)}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise PrometheusError(f"Prometheus at {self.url} is unreachable: {reason}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.url} did not answer as Prometheus does (not JSON)") \
                from None
        if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(
                doc.get("data"), dict):
            err = doc.get("error") if isinstance(doc, dict) else None
            raise PrometheusError(f"Prometheus failed {_short(query)}: {err or 'bad answer'}")
        return doc["data"]

    def instant(self, query: str, at: float) -> list[Series]:
        data = self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        out = []
        for r in _result(data, "vector", query):
            try:
                out.append(Series(dict(r["metric"]), float(r["value"][1])))
            except (KeyError, TypeError, ValueError, IndexError):
                raise PrometheusError(f"malformed answer to {_short(query)}") from None
        return out

    def range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        data = self._get("/api/v1/query_range", {
            "query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
            "step": f"{step:.3f}"})
        out = []
        for r in _result(data, "matrix", query):
            try:
                values = tuple((float(t), float(v)) for t, v in r["values"])
                out.append(Series(dict(r["metric"]), values[-1][1] if values else 0.0, values))
            except (KeyError, TypeError, ValueError, IndexError):
                raise PrometheusError(f"malformed answer to {_short(query)}") from None
        return out


def _result(data: dict[str, Any], kind: str, query: str) -> list[dict[str, Any]]:
    if data.get("resultType") != kind or not isinstance(data.get("result"), list):
        raise PrometheusError(f"{_short(query)} gave a {data.get('resultType')}, not a {kind}")
    return list(data["result"])


def _short(query: str, limit: int = 90) -> str:
    q = " ".join(query.split())
    return repr(q if len(q) <= limit else q[: limit - 3] + "...")

"""Demand history from a PromQL expression (`gpuroster.io/demand-query`)."""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.parse
import urllib.request

from extender.adapter import annotations as ann


def query_range(base_url: str, expr: str, start: float, end: float, step: float,
                timeout: float = 10.0) -> list[float]:
    """Values of a single-series expression at `step` intervals, from its first sample in
    [start, end] to end. Points missing after the first sample count as 0; before it the
    series did not exist yet, so they are left out rather than read as days of no demand
    (a forecast would take them for a quiet past)."""
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                "step": f"{max(step, 1.0):.3f}"})
    url = base_url.rstrip("/") + "/api/v1/query_range?" + q
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            doc = json.loads(r.read())
    except urllib.error.HTTPError as e:
        # Prometheus answers a bad query with 400 and its reason in a JSON body.
        try:
            doc = json.loads(e.read())
        except (OSError, ValueError, http.client.HTTPException):
            doc = None
        if not (isinstance(doc, dict) and doc.get("error")):
            raise ann.AnnotationError(
                f"{ann.DEMAND_QUERY}: Prometheus query failed: {e}") from None
    except (OSError, ValueError, http.client.HTTPException) as e:
        # HTTPException: a response cut short (IncompleteRead), a bad status line.
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: Prometheus query failed: {e}") from None
    if not isinstance(doc, dict):
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: malformed Prometheus answer")
    if doc.get("status") != "success":
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: {doc.get('error', 'query failed')}")
    data = doc.get("data")
    result = (data.get("result") if isinstance(data, dict) else None) or []
    if not isinstance(result, list):
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: malformed Prometheus answer")
    if not result:
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: the query returned no series")
    n = int(round((end - start) / max(step, 1.0))) + 1
    out = [0.0] * n
    first = n
    try:
        for ts, v in result[0].get("values") or []:
            i = int(round((float(ts) - start) / max(step, 1.0)))
            if 0 <= i < n:
                f = float(v)
                out[i] = f if math.isfinite(f) and f > 0 else 0.0
                first = min(first, i)
    except (AttributeError, TypeError, ValueError) as e:
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: malformed Prometheus answer: {e}") from None
    if first == n:
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: the query returned no samples")
    return out[first:]

"""Demand history from a PromQL expression (`gpuroster.io/demand-query`)."""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request

from extender.adapter import annotations as ann


def query_range(base_url: str, expr: str, start: float, end: float, step: float,
                timeout: float = 10.0) -> list[float]:
    """Values of a single-series expression at `step` intervals (missing points: 0)."""
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                "step": f"{max(step, 1.0):.3f}"})
    url = base_url.rstrip("/") + "/api/v1/query_range?" + q
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError) as e:
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: Prometheus query failed: {e}") from None
    if doc.get("status") != "success":
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: {doc.get('error', 'query failed')}")
    result = (doc.get("data") or {}).get("result") or []
    if not result:
        raise ann.AnnotationError(f"{ann.DEMAND_QUERY}: the query returned no series")
    n = int(round((end - start) / max(step, 1.0))) + 1
    out = [0.0] * n
    for ts, v in result[0].get("values") or []:
        i = int(round((float(ts) - start) / max(step, 1.0)))
        if 0 <= i < n:
            f = float(v)
            out[i] = f if math.isfinite(f) and f > 0 else 0.0
    return out

"""Each real-time service's demand as the round hands it to the planner.

Owns: reading a service's demand source every step (an explicit curve or a
history in a ConfigMap, or a PromQL query against Prometheus), the forecast
made from it (`extender.planner.forecasting`, or the curve itself), and what
the controller remembers of it between rounds: the step's forecasts (a query
is asked once a step), each service's reservation (the peak of its explicit
curve) and the forecasts made for past steps (the curve's, or the forecaster's
replayed over the history).

May not touch: GPU sets, the plan or the cluster. A source that cannot be read
raises `annotations.AnnotationError`; the round decides what that means.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from extender import config
from extender.adapter import annotations as ann
from extender.adapter import prometheus, snapshot
from extender.planner import forecasting, servicing

HISTORY_KEEP = 7 * 24 * 4  # steps of past demand handed to the planner, at most

Forecast = tuple[tuple[int, ...], tuple[float, ...]]  # (forecast in GPUs, past demand)


class Reader:
    """Reads the services' demand sources and forecasts them, once a step each."""

    def __init__(self, settings: config.Settings,
                 query: Callable[..., list[float]] | None = None) -> None:
        self.settings = settings
        self.query = query or prometheus.query_range
        self._forecasts: dict[tuple[str, int], Forecast] = {}
        self._reservations: dict[str, int] = {}  # service -> peak of its explicit curve
        self._past_forecasts: dict[str, tuple[float, ...]] = {}  # what the curve said before
        self._replayed: dict[str, int] = {}  # service -> step its history was last replayed

    def reservation(self, service: str, default: int) -> int:
        """The GPUs fifo reserves for `service`: its curve's peak, else `default`."""
        return self._reservations.get(service, default)

    def past_forecast(self, service: str,
                      default: tuple[float, ...]) -> tuple[float, ...]:
        """What the curve forecast for the past steps, else `default`."""
        return self._past_forecasts.get(service, default)

    def forecast(self, snap: snapshot.Snapshot, sv: snapshot.ServiceInfo,
                 step: int) -> Forecast:
        """(forecast from `step` on, in whole replicas' GPUs; past demand up to `step`).

        Raises `annotations.AnnotationError` when the source cannot be read."""
        s = self.settings
        H = s.horizon_steps
        per = sv.spec.gpus_per_replica
        ns = sv.spec.name.split("/", 1)[0]

        def whole(x: float) -> int:
            return int(math.ceil(max(0.0, x) / per - 1e-9) * per)

        cached = self._forecasts.get((sv.spec.name, step))
        if cached is not None and not sv.spec.demand_configmap:
            return cached
        if sv.spec.demand_configmap:
            cm = snap.configmaps.get(f"{ns}/{sv.spec.demand_configmap}")
            if cm is None:
                raise ann.AnnotationError(
                    f"{ann.DEMAND_CONFIGMAP}: ConfigMap {ns}/{sv.spec.demand_configmap} not found")
            d = ann.demand(cm)
            if d.curve:
                # An explicit curve is the forecast: two horizons of it, so the plan
                # sees the peak just past its horizon; fifo reserves its peak.
                L = len(d.curve)
                fc = tuple(whole(d.curve[(step + k) % L]) for k in range(2 * H))
                self._reservations[sv.spec.name] = whole(max(d.curve))
                lo = max(0, step - HISTORY_KEEP)
                told = tuple(float(d.curve[k % L]) for k in range(lo, max(lo, step)))
                self._past_forecasts[sv.spec.name] = told
                # What monitoring saw; where it has not reported a step yet, assume the
                # curve came true, so past demand and past forecast stay step-aligned.
                seen = d.observed
                past = tuple(float(seen[k]) if k < len(seen) else told[k - lo]
                             for k in range(lo, max(lo, step)))
                return fc, past
            history: Sequence[float] = d.history
            spd = d.steps_per_day or s.steps_per_day()
        else:
            assert sv.spec.demand_query is not None
            if not s.prometheus_url:
                raise ann.AnnotationError(
                    f"{ann.DEMAND_QUERY} needs GPUROSTER_PROMETHEUS_URL to be set")
            n = min(HISTORY_KEEP, 4 * 7 * s.steps_per_day())
            end = s.step_start(step)
            history = self.query(s.prometheus_url, sv.spec.demand_query,
                                 end - n * s.step_seconds, end, s.step_seconds)
            spd = s.steps_per_day()
        try:
            f = forecasting.forecast(history, H, spd)
        except ValueError as e:
            raise ann.AnnotationError(f"demand history: {e}") from None
        out = tuple(whole(v) for v in f.values), tuple(history[-HISTORY_KEEP:])
        # What the forecaster said for the last days, one step ahead: beside the history,
        # the error the planner sizes the service's headroom on (as many days as a copied
        # forecast's, `servicing.COPY_WINDOWS`). Once a step (20 ms for two days at
        # 15-minute steps, 41 for four: the round may run several times a step).
        if self._replayed.get(sv.spec.name) != step:
            self._past_forecasts[sv.spec.name] = tuple(
                float(whole(v)) for v in forecasting.replay(
                    history, servicing.COPY_WINDOWS * spd, spd))
            self._replayed[sv.spec.name] = step
        self._forecasts = {k: v for k, v in self._forecasts.items() if k[1] >= step - 1}
        self._forecasts[(sv.spec.name, step)] = out
        return out

"""bench/slo.py: the bar's two counts (service level under fifo's, value at least fifo's)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from extender.planner import metrics, wrongforecasts

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "slo.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slo_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _m(level: float, value: float) -> metrics.Metrics:
    return metrics.Metrics(50.0, value, 0, level, 1, 1)


def test_violations_are_more_than_half_a_point_under_fifo_and_ties_in_value_count() -> None:
    slo = _bench()
    fifo = _m(0.95, 100.0)
    cases = [(0.9451, 100.0),  # 0.49 points under: fine; value equal: counts as >= fifo
             (0.9449, 101.0),  # 0.51 points under: a violation
             (0.99, 99.0)]     # above fifo's service level, value under it
    outcomes = [slo.Outcome(f"i{k}", "low", fifo, fifo,
                            {o: _m(level, value) for o in slo.OBJECTIVES}, fifo)
                for k, (level, value) in enumerate(cases)]
    row = next(line for line in slo.table(outcomes, "t").splitlines()
               if line.startswith("gpuroster @ 0.99 "))
    counts = re.search(r"(\d+)\s+(\d+) \(\s*([\d.]+)%\)$", row)
    assert counts is not None, row
    assert counts.groups() == ("1", "2", "66.7")


def test_a_tiny_run_measures_every_policy_legally() -> None:
    slo = _bench()
    s = wrongforecasts.instance(2510, "low")
    (o,) = slo.run([("low", s)])
    assert set(o.gpuroster) == set(slo.OBJECTIVES)
    assert o.gpuroster[0.99].realtime_service_level > o.bare.realtime_service_level

"""`gpuroster whatif`: a cluster's own past, replayed under fifo and gpuroster beside what happened.

gpuroster whatif --prometheus http://prometheus:9090 --since 7d --out out/whatif
gpuroster whatif --prometheus URL --since 2026-11-27T00:00:00Z --until 2026-12-04T00:00:00Z \\
    --step 1h --out out/whatif
gpuroster whatif --prometheus URL --since 40s --until 1764841234.5 --step 5s \\
    --step-minutes 60 --out out/w          # a compressed-time replay: 5 s stood for an hour

Reads the window's GPU pods and services from Prometheus (kube-state-metrics v2
series; docs/try-it-first.md lists the flags KSM needs and the PromQL run), writes
the scenario (version 1) and runs the bench on it: `actual` (the grid rebuilt from
the pods' real start and end, scored by the same metrics, every model rule it
breaks reported), then fifo and gpuroster, with the grids side by side and a short
verdict. Files go to a temporary directory renamed to --out only when all are
written: a failure leaves no half-written output.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import yaml

from extender import benchmarking, config, results
from extender.planner import legality, metrics, model, observed, simulating
from extender.planner import policies as sim_policies
from extender.planner import scenario as scenario_doc
from extender.whatif import building, prom, reading

MAX_STEPS = 11000  # Prometheus's limit on points per series of a range query


class WhatifError(RuntimeError):
    pass


def parse_time(text: str) -> float:
    """RFC 3339 (`2026-12-04T10:00:00Z`) or unix seconds -> unix seconds."""
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise WhatifError(f"unreadable time {text!r}: give RFC 3339 (2026-12-04T10:00:00Z) "
                          f"or unix seconds") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def window(since: str, until: str | None, step: str, now: float) -> reading.Window:
    try:
        step_s = config.parse_duration(step)
    except ValueError as e:
        raise WhatifError(f"--step: {e}") from None
    end = parse_time(until) if until else now
    try:
        span = config.parse_duration(since)
        origin = None
    except ValueError:
        origin = parse_time(since)
        span = end - origin
    steps = math.floor(span / step_s + 1e-9)
    if steps < 1:
        raise WhatifError(f"the window (--since {since}{' --until ' + until if until else ''}) "
                          f"is shorter than one step ({step})")
    if steps > MAX_STEPS:
        raise WhatifError(f"{steps} steps of {step} is more than Prometheus gives a range query "
                          f"({MAX_STEPS}): take a longer --step")
    return reading.Window(end - steps * step_s if origin is None else origin, step_s, steps)


def _settings(raw_classes: str | None) -> config.Settings:
    s = config.load((), prog="gpuroster whatif")
    if raw_classes:
        try:
            classes = json.loads(raw_classes)
            if not isinstance(classes, dict):
                raise ValueError("not a JSON object")
            default = s.default_priority if s.default_priority in classes else next(iter(classes))
            s = config.Settings(**{**s.__dict__, "priority_classes": classes,
                                   "default_priority": default})
        except (ValueError, StopIteration, config.ConfigError) as e:
            raise WhatifError(f"--priority-classes: {e}") from None
    return s


def _first_steps(s: model.Scenario, grid: np.ndarray) -> dict[str, int]:
    out = {}
    for i, j in enumerate(s.jobs):
        cols = np.flatnonzero((grid == i).any(axis=0))
        if cols.size:
            out[j.name] = int(cols[0])
    return out


def verdict_numbers(s: model.Scenario, row: results.Row) -> dict[str, float]:
    """GPU-hours idle, jobs that waited, GPU-hours reserved above demand (model hours)."""
    assert row.run is not None
    grid = row.run.grid
    hours = s.step_minutes / 60.0
    N, T = s.cluster.gpus, s.duration_steps
    idle = N * T * (1 - row.metrics.utilization / 100.0) * hours
    starts = _first_steps(s, grid)
    waited = sum(1 for j in s.jobs if j.name not in starts or starts[j.name] > j.arrival_step)
    wait_steps = [starts.get(j.name, T) - j.arrival_step for j in s.jobs]
    nj = len(s.jobs)
    reserved_idle = 0
    for k, v in enumerate(s.services):
        alloc = (grid == nj + k).sum(axis=0)
        reserved_idle += int(np.maximum(0, alloc - np.asarray(v.demand[:T])).sum())
    return {"gpu_hours_idle": idle, "jobs_waited": float(waited),
            "mean_wait_hours": (sum(wait_steps) / len(wait_steps) * hours) if wait_steps else 0,
            "reserved_idle_gpu_hours": reserved_idle * hours, "value": row.metrics.value}


def verdict(s: model.Scenario, rows: list[results.Row], replica_demand: bool) -> list[str]:
    by = {r.policy: verdict_numbers(s, r) for r in rows}
    lines = []
    for p, v in by.items():
        lines.append(f"  {p:10s} {v['gpu_hours_idle']:9.1f} GPU-hours idle, "
                     f"{v['jobs_waited']:.0f} of {len(s.jobs)} jobs waited "
                     f"(mean wait {v['mean_wait_hours']:.1f} h), "
                     f"{v['reserved_idle_gpu_hours']:.1f} GPU-hours reserved for services "
                     f"above their demand")
    a, g = by.get("actual"), by.get("gpuroster")
    if a and g:
        gain = f"{100 * (g['value'] / a['value'] - 1):+.1f}%" if a["value"] else "n/a"
        freed = a["gpu_hours_idle"] - g["gpu_hours_idle"]
        lines.append(
            f"  gpuroster instead of what happened: {freed:+.1f} GPU-hours put to use, "
            f"jobs that waited {a['jobs_waited']:.0f} -> {g['jobs_waited']:.0f}, value {gain}")
    f = by.get("fifo")
    if f:
        lines.append(f"  the static reservation (fifo: each service held at its peak) costs "
                     f"{f['reserved_idle_gpu_hours']:.1f} GPU-hours held above demand")
    if replica_demand:
        lines.append("  (services without gpuroster.io/demand-query: their demand is their "
                     "replica history, so what happened shows no reservation above it)")
    return lines


def run(args: argparse.Namespace, now: float | None = None) -> int:
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WhatifError(f"--out {out} exists and is not empty: give a new directory")
    w = window(args.since, args.until, args.step, time.time() if now is None else now)
    step_minutes = args.step_minutes or max(1, round(w.step / 60))
    settings = _settings(args.priority_classes)
    wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in wanted:
        try:
            sim_policies.create(p)
        except ValueError as e:
            raise WhatifError(f"--policies: {e}") from None
    client = prom.Client(args.prometheus, timeout=args.timeout)
    history = reading.read(client, w, tuple(args.namespace or ()))
    rebuilt = building.build(history, settings, args.name, step_minutes, args.horizon_steps)
    s = rebuilt.scenario
    notes = list(rebuilt.notes)
    grid, held = observed.draw(s, rebuilt.job_lives, rebuilt.service_lives, rebuilt.useful,
                               notes, rebuilt.node_names)
    churn = observed.service_churn(rebuilt.service_lives, [v.name for v in s.services],
                                   s.duration_steps)
    broken = legality.violations(s, grid, churn=churn)
    names = [j.name for j in s.jobs] + [v.name for v in s.services]
    actual = results.Row(s, "actual", metrics.compute(s, grid), metrics.percentiles_ms([]),
                         simulating.Run(s, "actual", grid, names))
    rows = [actual] + [benchmarking.run_one(s, p, False) for p in wanted]
    replica_demand = any("replica history" in n for n in notes)
    lines = verdict(s, rows, replica_demand)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "scenario.yaml").write_text(
            yaml.safe_dump(scenario_doc.to_document(s), sort_keys=False), encoding="utf-8")
        for r in rows:
            doc = results.result_document(r)
            if r is actual:
                doc.update({"source": "prometheus", "service_churn": churn,
                            "held": [[names[i] if i >= 0 else None for i in row]
                                     for row in held.tolist()],
                            "rules_broken": broken})
            (tmp / f"{s.name}.{r.policy}.json").write_text(json.dumps(doc) + "\n",
                                                           encoding="utf-8")
        from extender import reporting  # matplotlib only here

        reporting.write_side_by_side(rows, tmp / f"{s.name}.grids.png", {"actual": held})
        summary = {
            "window": {"origin": w.origin, "until": w.until, "step_seconds": w.step,
                       "steps": w.steps, "step_minutes": step_minutes},
            "nodes": rebuilt.node_names,
            "jobs": {n: src.__dict__ for n, src in rebuilt.sources.items()},
            "verdict": {r.policy: verdict_numbers(s, r) for r in rows},
            "actual_rules_broken": broken,
            "notes": notes,
            "queries": client.queries,
        }
        (tmp / "whatif.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        table = results.format_table(rows)
        (tmp / "report.md").write_text(_report(s, w, table, lines, notes, broken,
                                               client.queries), encoding="utf-8")
        if out.exists():
            out.rmdir()  # empty, checked above
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"{s.name}: {len(s.jobs)} jobs, {len(s.services)} services on {s.cluster.nodes} "
          f"nodes x {s.cluster.gpus_per_node} GPUs, {s.duration_steps} steps of "
          f"{w.step:g} s (each standing for {step_minutes} min)")
    print(table)
    print("\nverdict:")
    print("\n".join(lines))
    if broken:
        print(f"\nwhat happened breaks {len(broken)} rule(s) of the model (scored as it ran): "
              + "; ".join(broken[:5]))
    if notes:
        print("\nread from Prometheus, and what could not be:")
        for n in notes[:30]:
            print(f"  - {n}")
        if len(notes) > 30:
            print(f"  ... {len(notes) - 30} more in {out / 'whatif.json'}")
    print(f"\nwrote {out} (report.md, scenario.yaml, results, {s.name}.grids.png)")
    return 0


def _report(s: model.Scenario, w: reading.Window, table: str, lines: list[str],
            notes: list[str], broken: list[str], queries: list[str]) -> str:
    iso = datetime.fromtimestamp(w.origin, UTC).isoformat(timespec="seconds")
    md = [f"# What gpuroster would have done: {s.name}", "",
          f"{s.duration_steps} steps of {w.step:g} s from {iso}; {len(s.jobs)} jobs, "
          f"{len(s.services)} services, {s.cluster.nodes} nodes x {s.cluster.gpus_per_node} "
          f"GPUs. `actual` is what happened, rebuilt from the pods' start and end.", "",
          "```", table, "```", "", "## Verdict", "", "```", *lines, "```", "",
          f"![grids]({s.name}.grids.png)", "", "## What happened breaks", ""]
    md += [f"- {b}" for b in broken] or ["- no rule of the model"]
    md += ["", "## Read, and what could not be", ""] + [f"- {n}" for n in notes]
    md += ["", "## PromQL run", "", "```"] + queries + ["```", ""]
    return "\n".join(md)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpuroster whatif", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prometheus", required=True, help="Prometheus base URL")
    ap.add_argument("--since", required=True,
                    help="window start: a duration before --until (7d, 36h) or a time "
                         "(RFC 3339 or unix seconds)")
    ap.add_argument("--until", help="window end: RFC 3339 or unix seconds (default: now)")
    ap.add_argument("--step", default="1h", help="wall time of a step (default 1h; 3s works)")
    ap.add_argument("--step-minutes", type=int, default=0,
                    help="planning minutes a step stands for (default: the step itself; "
                         "set it for compressed-time replays)")
    ap.add_argument("--out", type=Path, required=True, help="a new directory for the output")
    ap.add_argument("--name", default="whatif", help="the scenario's name (default whatif)")
    ap.add_argument("--namespace", action="append", help="only these namespaces (repeatable)")
    ap.add_argument("--policies", default="fifo,gpuroster",
                    help="simulated beside what happened (default fifo,gpuroster)")
    ap.add_argument("--priority-classes",
                    help="JSON class name -> weight; pods' PriorityClass names are mapped "
                         "with it (default: GPUROSTER_PRIORITY_CLASSES, else the built-in "
                         "classes)")
    ap.add_argument("--horizon-steps", type=int, default=24,
                    help="the planner's look-ahead in the scenario (default 24)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per Prometheus query")
    args = ap.parse_args(list(argv))
    try:
        return run(args)
    except (WhatifError, prom.PrometheusError, reading.MissingSeries,
            building.NothingToReplay, scenario_doc.ScenarioError, config.ConfigError,
            OSError, ValueError) as e:
        text = " ".join(str(e).split())
        print(f"gpuroster whatif: {text}", file=sys.stderr)
        return 2

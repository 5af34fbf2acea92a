"""`gpuroster bench` and `gpuroster check` as a user runs them."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from extender import benchmarking, cli, replay


def test_bench_prints_the_table_and_writes_checkable_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert (
        cli.main(
            [
                "bench",
                "training-heavy",
                "--policies",
                "fifo,gpuroster",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "training-heavy" in table and "gpuroster" in table and "Δpts" in table
    doc = json.loads((out / "training-heavy.gpuroster.json").read_text())
    assert doc["version"] == 1 and doc["gpus"] == 8 and doc["steps"] == 48
    assert len(doc["grid"]) == 8 and len(doc["grid"][0]) == 48
    assert set(doc["plan_ms"]) == {"p50", "p99", "max"}
    assert (out / "training-heavy.grids.png").stat().st_size > 1000
    assert (out / "summary.png").exists() and (out / "report.md").exists()
    assert cli.main(["check", "training-heavy", str(out / "training-heavy.gpuroster.json")]) == 0

    # A result whose metrics do not match its grid is caught.
    doc["metrics"]["utilization"] += 1.0
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    assert cli.main(["check", "training-heavy", str(forged)]) == 1
    assert "metrics.utilization" in capsys.readouterr().out

    # And so is an illegal grid: a job moved to another GPU mid-run.
    doc = json.loads((out / "training-heavy.fifo.json").read_text())
    row0, row7 = doc["grid"][0], doc["grid"][7]
    row0[5], row7[5] = row7[5], row0[5]
    forged.write_text(json.dumps(doc))
    assert cli.main(["check", "training-heavy", str(forged)]) == 1


def test_optimality_table_shows_the_bound_over_fifo() -> None:
    # The bound column is what no policy can pass; "bound/fifo" is the most any policy
    # could gain over fifo on the scenario (against the published gains).
    from extender import benchmarking, scenarios

    s = scenarios.load(scenarios.resolve("training-heavy"))
    rows = [benchmarking.run_one(s, p, progress=False) for p in ("fifo", "gpuroster")]
    table = benchmarking.optimality_table(benchmarking.optimality(rows, [s], bound_seconds=20.0))
    head, line = table.splitlines()
    assert head.split()[-1] == "bound/fifo"
    cells = line.split()
    fast, bound = float(cells[1]), float(cells[3])
    fifo = rows[0].metrics.value
    assert fast == pytest.approx(rows[1].metrics.value, abs=0.5)
    assert fast <= bound + 0.5
    # the printed bound is rounded to a whole value: 0.5 in ~1,900 is 0.03 points
    assert float(cells[-1].rstrip("%")) == pytest.approx(100 * (bound / fifo - 1), abs=0.1)
    assert float(cells[-1].rstrip("%")) > 0


def test_check_judges_a_cluster_result_by_its_pod_churn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert cli.main(["bench", "forecast-error", "--policies", "gpuroster", "--out", str(out),
                     "--quiet"]) == 0
    doc = json.loads((out / "forecast-error.gpuroster.json").read_text())
    steps = doc["steps"]
    doc["source"] = "cluster"
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps(doc))
    assert cli.main(["check", "forecast-error", str(f)]) == 2  # no churn: cannot judge
    assert "service_churn" in capsys.readouterr().err
    doc["service_churn"] = {"chat": [0] * steps, "code-assist": [0] * steps}
    f.write_text(json.dumps(doc))
    assert cli.main(["check", "forecast-error", str(f)]) == 0
    doc["service_churn"]["chat"][7] = 3  # over max_swap 2
    f.write_text(json.dumps(doc))
    assert cli.main(["check", "forecast-error", str(f)]) == 1
    assert "chat: 3 pods in and out between steps 6 and 7" in capsys.readouterr().out
    doc["service_churn"]["chat"][7] = -1
    f.write_text(json.dumps(doc))
    assert cli.main(["check", "forecast-error", str(f)]) == 2


def test_bench_refuses_bad_scenarios_before_running_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\nname: bad\ncluster: {nodes: 1, gpus_per_node: 8}\n"
        "step_minutes: 60\nhorizon_steps: 24\nduration_steps: 4\n"
        "jobs: [{name: a, type: training, gpus: 3, duration_steps: 1, "
        "arrival_step: 0, priority: 1}]\n"
    )
    assert cli.main(["bench", "training-heavy", str(bad), "--quiet"]) == 2
    err = capsys.readouterr()
    assert "jobs[0] (a).gpus: must be a power of two" in err.err
    assert "training-heavy" not in err.out  # nothing half-ran


def test_unknown_policy_and_command() -> None:
    assert cli.main(["bench", "--policies", "lifo"]) == 2
    assert cli.main(["frobnicate"]) == 2


def test_deep_queue_row_times_every_re_plan_of_the_simulated_runs() -> None:
    case = benchmarking.DeepCase(gpus=16, jobs=80, days=1, seeds=(1, 2),
                                 target_ms=benchmarking.DEEP_TARGET_MS)
    times, cpu, deepest = benchmarking.deep_queue_times(case)
    assert len(times) == len(cpu) == 2 * 24 and all(t > 0 for t in times)  # a step, a seed
    arrived = max(sum(1 for j in s.jobs if j.arrival_step <= 23) for s in case.scenarios())
    assert 10 < deepest <= arrived  # the queue grows: 80 jobs in a day on 16 GPUs
    starved = benchmarking.DeepCase(gpus=8, jobs=40, days=3, seeds=(1,), service_share=0.9,
                                    estimate_error=0.5, label="starved")
    table = benchmarking.latency_table(repeats=2, cases=((8, 15),), queues=(case, starved))
    row = next(line for line in table.splitlines() if " deep " in line)
    assert row.split()[:4] == ["16", "80", "deep", f"<={deepest}"]
    assert row.split()[8] == "48" and row.endswith(("<= 10 ms: met", "<= 10 ms: MISSED"))
    eight = next(line for line in table.splitlines() if line.split()[:3] == ["8", "15", "cold"])
    assert "<= 1 ms:" in eight
    assert re.search(r"CPU time p50 [\d.]+ / p99 [\d.]+ ms", table)
    row = next(line for line in table.splitlines() if " starved " in line)
    assert row.split()[:3] == ["8", "40", "starved"] and row.split()[8] == "72"  # 3 days
    assert not row.endswith(("met", "MISSED"))  # no target is set for it
    assert "services' peaks 90% of the cluster, estimates off (sigma 0.5)" in table


def test_wrong_forecast_row_times_the_headroom_path_under_the_8_gpu_target() -> None:
    case = benchmarking.WrongCase(count=2, seed=600, days=1,
                                  target_ms=benchmarking.PLAN_TARGET_MS[8])
    assert [s.cluster.gpus for s in case.scenarios()] == [8, 8]
    assert all(v.forecast != v.demand for s in case.scenarios() for v in s.services)
    table = benchmarking.latency_table(repeats=2, cases=(), queues=(case,))
    row = next(line for line in table.splitlines() if " wrong " in line)
    assert row.split()[:3] == ["8", str(case.jobs), "wrong"]
    assert row.split()[8] == "48" and row.endswith(("<= 1 ms: met", "<= 1 ms: MISSED"))
    assert "day-earlier seeds 600-601" in table
    assert benchmarking.WRONG_CASE in inspect.signature(
        benchmarking.latency_table).parameters["queues"].default  # make bench prints it


def _small_result(tmp_path: Path, name: str) -> tuple[Path, dict[str, Any]]:
    """A scenario file `name` and fifo's result on it, as `bench --out` writes it."""
    from extender import results, scenarios
    from tests.builders import scenario

    s = (
        scenario(name).nodes(1, 4).window(4)
        .job("a", gpus=2, d=2).job("b", gpus=2, d=3, arrival=1)
        .service("svc", [1, 1, 2, 1])
        .build()
    )
    path = tmp_path / f"{name}.yaml"
    scenarios.dump(s, path)
    return path, results.result_document(benchmarking.run_one(s, "fifo", progress=False))


def _check(tmp_path: Path, scenario_file: Path, doc: Any) -> int:
    f = tmp_path / "result.json"
    f.write_text(json.dumps(doc))
    return cli.main(["check", str(scenario_file), str(f)])


def test_check_compares_the_header_with_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, doc = _small_result(tmp_path, "one")
    other, _ = _small_result(tmp_path, "other")  # the same shape and jobs, another name
    assert _check(tmp_path, path, doc) == 0
    capsys.readouterr()
    assert _check(tmp_path, other, doc) == 1
    assert "scenario: file says 'one'" in capsys.readouterr().out
    for key, value in (("version", True), ("version", 1.0), ("gpus", 8), ("steps", 5),
                       ("policy", None)):
        assert _check(tmp_path, path, {**doc, key: value}) == 1, key
        assert f"{key}: file says {value!r}" in capsys.readouterr().out


def test_check_reports_a_metric_that_is_not_a_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, doc = _small_result(tmp_path, "one")
    for bad in ("high", "53.6", True, float("nan")):
        forged = {**doc, "metrics": {**doc["metrics"], "value": bad}}
        assert _check(tmp_path, path, forged) == 1, bad
        assert f"metrics.value: file says {bad!r}, not a number" in capsys.readouterr().out
    assert _check(tmp_path, path, {**doc, "metrics": [1, 2]}) == 1
    assert "metrics: expected a mapping" in capsys.readouterr().out


def test_check_reads_plan_ms_for_sense_and_passes_a_file_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, doc = _small_result(tmp_path, "one")
    assert set(doc["plan_ms"]) == {"p50", "p99", "max"}
    assert _check(tmp_path, path, doc) == 0
    assert _check(tmp_path, path, {k: v for k, v in doc.items() if k != "plan_ms"}) == 0
    capsys.readouterr()
    for bad, says in (([1, 2, 3], "plan_ms: expected a mapping"),
                      ({"p50": 1.0, "p99": 2.0}, "plan_ms.max: file says None"),
                      ({"p50": "fast", "p99": 2.0, "max": 3.0}, "plan_ms.p50: file says 'fast'"),
                      ({"p50": 1.0, "p99": -2.0, "max": 3.0}, "plan_ms.p99: file says -2.0"),
                      ({"p50": 1.0, "p99": True, "max": 3.0}, "plan_ms.p99: file says True"),
                      ({"p50": 2.0, "p99": 1.0, "max": 3.0}, "cannot pass a higher one"),
                      ({"p50": 1.0, "p99": 4.0, "max": 3.0}, "cannot pass a higher one")):
        assert _check(tmp_path, path, {**doc, "plan_ms": bad}) == 1, bad
        assert says in capsys.readouterr().out, bad


def test_check_refuses_a_grid_that_is_not_rows_of_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, doc = _small_result(tmp_path, "one")
    grid = [list(row) for row in doc["grid"]]
    grid[1][2] = ["a"]
    assert _check(tmp_path, path, {**doc, "grid": grid}) == 2
    assert "grid[1][2]: expected a name or null, got ['a']" in capsys.readouterr().err
    assert _check(tmp_path, path, {**doc, "grid": ["a..."] * 4}) == 2
    assert "grid[0]: expected a list of cells" in capsys.readouterr().err
    assert _check(tmp_path, path, {k: v for k, v in doc.items() if k != "grid"}) == 2
    assert "grid: missing" in capsys.readouterr().err
    assert _check(tmp_path, path, [doc]) == 2
    assert "expected a JSON object" in capsys.readouterr().err


def test_bench_refuses_two_scenarios_of_one_name_before_running_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Their result files, `{name}.{policy}.json`, would overwrite each other.
    first, _ = _small_result(tmp_path, "same")
    second = tmp_path / "elsewhere" / "copy.yaml"
    second.parent.mkdir()
    second.write_text(first.read_text())
    out = tmp_path / "out"
    assert cli.main(["bench", str(first), str(second), "--policies", "fifo", "--out", str(out),
                     "--quiet"]) == 2
    err = capsys.readouterr()
    assert f"{second}: name: 'same' is also the name of {first}" in err.err
    assert "same" not in err.out and not out.exists()  # nothing ran


def test_a_cluster_bench_refuses_two_scenarios_of_one_name_before_starting_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cluster's result files, `{name}.{policy}.cluster.json`, would overwrite each
    # other too; refused before any control plane starts (none is running here).
    monkeypatch.setattr(replay, "exit_on_termination", lambda: None)
    first, _ = _small_result(tmp_path, "same")
    second = tmp_path / "elsewhere" / "copy.yaml"
    second.parent.mkdir()
    second.write_text(first.read_text())
    assert cli.main(["bench", "--cluster", "local", str(first), str(second)]) == 2
    assert f"{second}: name: 'same' is also the name of {first}" in capsys.readouterr().err

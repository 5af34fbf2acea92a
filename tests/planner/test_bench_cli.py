"""`gpuroster bench` and `gpuroster check` as a user runs them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from extender import benchmarking, cli


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
    table = benchmarking.optimality_table(rows, [s], bound_seconds=20.0)
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
    case = benchmarking.DeepCase(gpus=16, jobs=80, days=1, seeds=(1, 2))
    times, cpu, deepest = benchmarking.deep_queue_times(case)
    assert len(times) == len(cpu) == 2 * 24 and all(t > 0 for t in times)  # a step, a seed
    arrived = max(sum(1 for j in s.jobs if j.arrival_step <= 23) for s in case.scenarios())
    assert 10 < deepest <= arrived  # the queue grows: 80 jobs in a day on 16 GPUs
    table = benchmarking.latency_table(repeats=2, cases=((8, 15),), deep=case)
    row = next(line for line in table.splitlines() if " deep " in line)
    assert row.split()[:4] == ["16", "80", "deep", f"<={deepest}"]
    assert row.split()[8] == "48" and row.endswith(("<= 10 ms: met", "<= 10 ms: MISSED"))
    eight = next(line for line in table.splitlines() if line.split()[:3] == ["8", "15", "cold"])
    assert "<= 1 ms:" in eight
    assert re.search(r"CPU time p50 [\d.]+ / p99 [\d.]+ ms", table)

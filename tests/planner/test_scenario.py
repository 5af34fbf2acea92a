"""Scenario files: every bad field is named with its file and reason; nothing half-loads."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from extender import scenarios
from extender.planner import model
from tests.builders import scenario


def good() -> dict[str, Any]:
    return copy.deepcopy(
        scenario()
        .nodes(2, 4)
        .window(4)
        .job("a", gpus=4, d=2)
        .job("b", gpus=8, d=1, arrival=1, priority=2.5)
        .service("chat", [1, 2, 1, 1], forecast=[1, 1, 1, 2])
        .doc
    )


def test_good_document_builds_every_field() -> None:
    s = scenarios.parse(good(), "x.yaml")
    assert s.cluster == model.Cluster(2, 4)
    assert [j.name for j in s.jobs] == ["a", "b"]
    assert s.jobs[1].priority == 2.5 and s.jobs[1].arrival_step == 1
    assert s.jobs[0].estimate_steps == 2  # defaults to the true duration
    assert s.services[0].forecast == (1, 1, 1, 2) and s.services[0].demand == (1, 2, 1, 1)


def _break(path: str, value: Any) -> dict[str, Any]:
    d = good()
    node: Any = d
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return d


BAD = [
    ("version", 2, "version", "must be the integer 1"),
    ("version", True, "version", "must be the integer 1, got True"),
    ("version", 1.0, "version", "must be the integer 1, got 1.0"),
    ("version", "1", "version", "must be the integer 1"),
    ("version", KeyError, "version", "must be the integer 1, got None"),
    ("name", "Bad Name", "name", "[a-z0-9-]"),
    ("cluster.nodes", 0, "cluster.nodes", ">= 1"),
    ("cluster.gpus_per_node", "8", "cluster.gpus_per_node", "integer"),
    ("step_minutes", KeyError, "step_minutes", "required"),
    ("duration_steps", True, "duration_steps", "integer"),
    ("jobs.0.gpus", 3, "jobs[0] (a).gpus", "power of two"),
    ("jobs.0.gpus", 16, "jobs[0] (a).gpus", "larger than the cluster"),
    ("jobs.0.type", "rendering", "jobs[0] (a).type", "must be one of"),
    ("jobs.0.duration_steps", 0, "jobs[0] (a).duration_steps", ">= 1"),
    ("jobs.0.priority", -1, "jobs[0] (a).priority", "positive"),
    ("jobs.0.priority", float("nan"), "jobs[0] (a).priority", "positive finite"),
    ("jobs.0.arrival_step", -3, "jobs[0] (a).arrival_step", ">= 0"),
    ("jobs.1.name", "a", "jobs[1].name", "duplicate name"),
    ("services.0.demand", [1, 2], "services[0] (chat).demand", "shorter than the window"),
    ("services.0.demand", [1, -1, 1, 1], "services[0] (chat).demand", "non-negative"),
    ("services.0.max_swap", -1, "services[0] (chat).max_swap", ">= 0"),
    ("services.0.service_level", 1.0, "services[0] (chat).service_level", "must be in (0, 1)"),
    ("services.0.service_level", "high", "services[0] (chat).service_level", "a number"),
    ("services.0.name", "a", "services[0].name", "duplicate name"),
    ("services", {"chat": 1}, "services", "must be a list"),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "reason"), BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD]
)
def test_bad_field_is_named_with_file_and_reason(
    path: str, value: Any, field: str, reason: str
) -> None:
    with pytest.raises(scenarios.ScenarioError) as err:
        scenarios.parse(_break(path, value), "team/scn.yaml")
    problems = {p.field: p.reason for p in err.value.problems}
    assert field in problems, problems
    assert reason in problems[field]
    assert f"team/scn.yaml: {field}: " in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    d = _break("jobs.0.gpus", 3)
    d["version"] = 7
    d["services"][0]["demand"] = [1]
    with pytest.raises(scenarios.ScenarioError) as err:
        scenarios.parse(d, "x")
    assert len(err.value.problems) == 3


def test_multi_node_gang_must_be_whole_nodes() -> None:
    d = good()
    d["cluster"] = {"nodes": 4, "gpus_per_node": 6}
    d["jobs"][1]["gpus"] = 8
    with pytest.raises(scenarios.ScenarioError, match="not a whole number of nodes"):
        scenarios.parse(d, "x")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip_through_files(tmp_path: Path, suffix: str) -> None:
    s = scenarios.parse(good(), "x")
    p = tmp_path / f"s{suffix}"
    scenarios.dump(s, p)
    back = scenarios.load(p)
    assert back.jobs == s.jobs and back.services == s.services and back.cluster == s.cluster


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(scenarios.ScenarioError, match="cannot be read"):
        scenarios.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(scenarios.ScenarioError, match="not valid JSON"):
        scenarios.load(bad)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(scenarios.ScenarioError, match="mapping"):
        scenarios.load(tmp_path / "list.yaml")


def test_a_key_given_twice_is_refused_not_overwritten(tmp_path: Path) -> None:
    # Both decoders would keep the last `jobs:` list and drop the first without a word.
    p = tmp_path / "two-jobs.json"
    p.write_text(json.dumps(good()).replace("{", '{"jobs": [], ', 1))
    with pytest.raises(scenarios.ScenarioError) as err:
        scenarios.load(p)
    assert f"{p}: <document>: has the key 'jobs' twice in one mapping" in str(err.value)

    y = tmp_path / "two-jobs.yaml"
    y.write_text(
        "version: 1\nname: two\ncluster: {nodes: 1, gpus_per_node: 8}\nstep_minutes: 60\n"
        "horizon_steps: 24\nduration_steps: 4\n"
        "jobs: [{name: a, type: training, gpus: 2, duration_steps: 1, arrival_step: 0, "
        "priority: 1}]\n"
        "jobs: [{name: b, type: training, gpus: 2, duration_steps: 1, arrival_step: 0, "
        "priority: 1}]\n"
    )
    with pytest.raises(scenarios.ScenarioError) as err:
        scenarios.load(y)
    assert err.value.problems == (
        scenarios.Problem("<document>", "has the key 'jobs' twice in one mapping (lines 7 and 8)"),
    )
    assert str(y) in str(err.value)


def test_a_yaml_merge_may_still_override_a_key(tmp_path: Path) -> None:
    y = tmp_path / "merge.yaml"
    y.write_text(
        "version: 1\nname: merge\ncluster: {nodes: 1, gpus_per_node: 8}\nstep_minutes: 60\n"
        "horizon_steps: 24\nduration_steps: 4\nx-base: &base {type: training, gpus: 2, "
        "duration_steps: 1, arrival_step: 0, priority: 1}\n"
        "jobs: [{<<: *base, name: a, gpus: 4}]\n"
    )
    assert scenarios.load(y).jobs[0].gpus == 4


def test_load_all_refuses_two_scenarios_of_one_name(tmp_path: Path) -> None:
    s = scenarios.parse(good(), "x")
    scenarios.dump(s, tmp_path / "a.yaml")
    scenarios.dump(s, tmp_path / "b.json")
    assert [x.name for x in scenarios.load_all([tmp_path / "a.yaml"])] == ["t"]
    with pytest.raises(scenarios.ScenarioError) as err:
        scenarios.load_all([tmp_path / "a.yaml", tmp_path / "b.json"])
    assert err.value.source == str(tmp_path / "b.json")
    assert err.value.problems[0].field == "name"
    assert f"'t' is also the name of {tmp_path / 'a.yaml'}" in str(err.value)


def test_unknown_keys_are_ignored_for_compatible_extensions() -> None:
    d = good()
    d["x-team"] = {"owner": "ml-infra"}
    d["jobs"][0]["queue"] = "research"
    assert scenarios.parse(d, "x").jobs[0].name == "a"


def test_seven_shipped_scenarios_load_and_are_remade_identically() -> None:
    from extender.scenarios import making

    names = scenarios.builtin_names()
    assert len(names) == 7
    shipped = {n: scenarios.load(scenarios.resolve(n)) for n in names}
    for s in making.build():
        assert shipped[s.name].jobs == s.jobs, f"{s.name}: file differs from its generator"
        assert shipped[s.name].services == s.services
        assert s.description


@pytest.mark.parametrize("name", ["training-heavy", "mixed-control", "priority-inversion",
                                  "uniform-priority", "scale-test"])
def test_shipped_files_measure_the_published_fifo(name: str) -> None:
    # The analogues reproduce what PUBLISHED.md says fifo measured (uniform-priority is
    # priority-inversion with equal priorities, and fifo ignores priority).
    from extender.scenarios import making

    want = making.PUBLISHED_FIFO["priority-inversion" if name == "uniform-priority" else name]
    shipped = scenarios.to_document(scenarios.load(scenarios.resolve(name)))
    ok, measured = making.fifo_matches(shipped, want)
    assert ok, f"{name}: {measured}, published {want}"


def test_shipped_seeds_are_the_first_that_fifo_alone_matches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Picked by fifo alone, the first seed from the base: what ships was not chosen by
    # how well gpuroster does on it. A generator change that moves a seed fails here.
    from extender.scenarios import making

    assert making.main(["--calibrate"]) == 0, capsys.readouterr().out


def test_scale_test_is_64_gpus_and_30_jobs() -> None:
    s = scenarios.load(scenarios.resolve("scale-test"))
    assert s.cluster.gpus == 64 and len(s.jobs) == 30


def test_json_file_written_by_someone_else_loads(tmp_path: Path) -> None:
    doc = {
        "version": 1,
        "name": "theirs",
        "cluster": {"nodes": 1, "gpus_per_node": 8},
        "step_minutes": 60,
        "horizon_steps": 24,
        "duration_steps": 3,
        "jobs": [
            {
                "name": "train-a",
                "type": "training",
                "gpus": 4,
                "duration_steps": 6,
                "estimate_steps": 6,
                "arrival_step": 0,
                "priority": 3,
            }
        ],
        "services": [
            {
                "name": "chat",
                "priority": 5,
                "max_swap": 2,
                "demand": [2, 2, 1, 1, 3],
                "forecast": [2, 2, 1, 1, 3],
            }
        ],
    }
    p = tmp_path / "theirs.json"
    p.write_text(json.dumps(doc))
    assert scenarios.load(p).services[0].demand == (2, 2, 1, 1, 3)


def test_optional_fields_given_as_null_are_absent() -> None:
    # `estimate_steps:` with nothing after it is null in YAML: the same as not written,
    # as `service_level: null` already was.
    d = good()
    d["description"] = None
    d["jobs"][0]["estimate_steps"] = None
    d["services"][0]["forecast"] = None
    d["services"][0]["service_level"] = None
    s = scenarios.parse(d)
    assert s.description == ""
    assert s.jobs[0].estimate_steps == s.jobs[0].duration_steps
    assert s.services[0].forecast == s.services[0].demand
    assert s.services[0].service_level is None
    # a required field given as null is still an error
    d["services"][0]["demand"] = None
    with pytest.raises(scenarios.ScenarioError, match="demand: must be a list"):
        scenarios.parse(d)


def test_a_forecast_shorter_than_the_window_is_refused() -> None:
    # MODEL.md's fifo reserves the forecast's peak over the window: it must cover it.
    d = good()
    d["services"][0]["forecast"] = [1, 1]
    with pytest.raises(scenarios.ScenarioError, match="forecast: has 2 entries, shorter"):
        scenarios.parse(d)


def test_service_level_is_optional_and_round_trips(tmp_path: Path) -> None:
    assert scenarios.parse(good()).services[0].service_level is None
    d = good()
    d["services"][0]["service_level"] = 0.99
    s = scenarios.parse(d)
    assert s.services[0].service_level == 0.99
    scenarios.dump(s, tmp_path / "s.yaml")
    assert scenarios.load(tmp_path / "s.yaml").services == s.services

"""`gpuroster serve` settings: flags over env over defaults, validated with the name."""

from __future__ import annotations

from typing import Any

import pytest

from extender import config


def test_defaults() -> None:
    s = config.load([], env={})
    assert (s.policy, s.step_seconds, s.horizon_steps, s.port) == ("gpuroster", 3600.0, 24, 8888)
    assert s.priority_classes == {"critical": 8, "high": 4, "normal": 2, "low": 1}
    assert s.namespaces == ()
    assert (s.max_wait_hours, s.max_wait_steps) == (48.0, 0)  # two days, at any step length
    assert s.service_level == 0.995
    assert s.peak_shift_hours == 3.0  # a peak may come 3 hours early or late
    assert s.stand_in_hours == 3.0
    assert s.spare_replicas is True


def test_env_and_flags() -> None:
    env = {"GPUROSTER_POLICY": "fifo", "GPUROSTER_STEP_SECONDS": "2",
           "GPUROSTER_NAMESPACES": "a, b", "GPUROSTER_PRIORITY_CLASSES": '{"x": 3}',
           "GPUROSTER_DEFAULT_PRIORITY": "x", "GPUROSTER_LEADER_ELECT": "true",
           "GPUROSTER_DEFAULT_DURATIONS": '{"training": "2h"}', "GPUROSTER_PORT": "9000",
           "GPUROSTER_MAX_WAIT_STEPS": "6", "GPUROSTER_SERVICE_LEVEL": "0.95",
           "GPUROSTER_PEAK_SHIFT_HOURS": "1.5", "GPUROSTER_SPARE_REPLICAS": "false",
           "GPUROSTER_STAND_IN_HOURS": "1"}
    s = config.load(["--port", "9100", "--service-level", "0.999", "--stand-in-hours", "0"],
                    env=env)
    assert s.policy == "fifo" and s.step_seconds == 2.0 and s.namespaces == ("a", "b")
    assert s.priority_classes == {"x": 3} and s.leader_elect and s.port == 9100
    assert s.duration_steps(3.0) == 2 and s.steps_per_day() == 43200
    assert s.max_wait_steps == 6
    assert s.service_level == 0.999  # the flag over the environment
    assert s.peak_shift_hours == 1.5
    assert s.stand_in_hours == 0.0  # the flag over the environment: off
    assert s.spare_replicas is False


@pytest.mark.parametrize(("env", "needle"), [
    ({"GPUROSTER_POLICY": "magic"}, "GPUROSTER_POLICY"),
    ({"GPUROSTER_STEP_SECONDS": "soon"}, "GPUROSTER_STEP_SECONDS"),
    ({"GPUROSTER_STEP_SECONDS": "-1"}, "GPUROSTER_STEP_SECONDS"),
    ({"GPUROSTER_PRIORITY_CLASSES": "[1]"}, "GPUROSTER_PRIORITY_CLASSES"),
    ({"GPUROSTER_PRIORITY_CLASSES": '{"a": -1}', "GPUROSTER_DEFAULT_PRIORITY": "a"},
     "GPUROSTER_PRIORITY_CLASSES"),
    ({"GPUROSTER_DEFAULT_PRIORITY": "nope"}, "GPUROSTER_DEFAULT_PRIORITY"),
    ({"GPUROSTER_DEFAULT_DURATIONS": '{"training": "later"}'}, "GPUROSTER_DEFAULT_DURATIONS"),
    ({"GPUROSTER_TLS_CERT_FILE": "/c"}, "GPUROSTER_TLS_CERT_FILE"),
    ({"GPUROSTER_LEADER_ELECT": "maybe"}, "GPUROSTER_LEADER_ELECT"),
    ({"GPUROSTER_MAX_WAIT_STEPS": "-1"}, "GPUROSTER_MAX_WAIT_STEPS"),
    ({"GPUROSTER_MAX_WAIT_STEPS": "2.5"}, "GPUROSTER_MAX_WAIT_STEPS"),
    ({"GPUROSTER_MAX_WAIT_HOURS": "0"}, "GPUROSTER_MAX_WAIT_HOURS"),
    ({"GPUROSTER_MAX_WAIT_HOURS": "nan"}, "GPUROSTER_MAX_WAIT_HOURS"),
    ({"GPUROSTER_SERVICE_LEVEL": "1"}, "GPUROSTER_SERVICE_LEVEL: must be a share"),
    ({"GPUROSTER_SERVICE_LEVEL": "0"}, "GPUROSTER_SERVICE_LEVEL"),
    ({"GPUROSTER_SERVICE_LEVEL": "99%"}, "GPUROSTER_SERVICE_LEVEL"),
    ({"GPUROSTER_SERVICE_LEVEL": "nan"}, "GPUROSTER_SERVICE_LEVEL"),
    ({"GPUROSTER_PEAK_SHIFT_HOURS": "-1"}, "GPUROSTER_PEAK_SHIFT_HOURS"),
    ({"GPUROSTER_PEAK_SHIFT_HOURS": "inf"}, "GPUROSTER_PEAK_SHIFT_HOURS"),
    ({"GPUROSTER_STAND_IN_HOURS": "-0.5"}, "GPUROSTER_STAND_IN_HOURS"),
    ({"GPUROSTER_STAND_IN_HOURS": "nan"}, "GPUROSTER_STAND_IN_HOURS"),
    ({"GPUROSTER_SPARE_REPLICAS": "some"}, "GPUROSTER_SPARE_REPLICAS"),
])
def test_bad_settings_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(config.ConfigError, match=needle):
        config.load([], env=env)


def test_serve_exits_2_on_bad_settings(capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from extender.controller import main

    monkeypatch.setenv("GPUROSTER_POLICY", "magic")
    assert main.serve([]) == 2
    assert "GPUROSTER_POLICY" in capsys.readouterr().err


def test_plan_command_reports_an_unreachable_service(capsys: pytest.CaptureFixture[str]) -> None:
    from extender.controller import main

    assert main.plan(["--url", "http://127.0.0.1:9"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_plan_text_rendering() -> None:
    from extender.controller import main

    view = {"step": 1, "step_seconds": 60.0, "horizon": 3, "nodes": ["n0"], "gpus_per_node": 2,
            "grid": [["ns/a", "ns/a", None], [None, "ns/b", "ns/b"]], "jobs": {},
            "services": {}, "queue": ["ns/b"]}
    text = main.render_text(view)
    assert "n0:0" in text and "|A|A." in text and "queue: ns/b" in text


def test_priority_class_values_parse_and_are_checked() -> None:
    s = config.load([], env={"GPUROSTER_PRIORITY_CLASS_VALUES": '{"critical": 1000000}'})
    assert dict(s.priority_class_values) == {"critical": 1000000}
    for raw, needle in [
        ('{"urgent": 1}', "'urgent' is not one of the priority classes"),
        ('{"high": 1.5}', "needs a whole PriorityClass value"),
        ('{"high": true}', "needs a whole PriorityClass value"),
        ('{"high": 4294967296}', "needs a whole PriorityClass value"),
        ('[1000]', "needs a JSON object"),
    ]:
        with pytest.raises(config.ConfigError) as e:
            config.load([], env={"GPUROSTER_PRIORITY_CLASS_VALUES": raw})
        assert "GPUROSTER_PRIORITY_CLASS_VALUES" in str(e.value) and needle in str(e.value)


def _planner_options(s: config.Settings) -> Any:
    """The options of the policy the controller plans with under settings `s`."""
    from extender.adapter import watching
    from extender.controller import stepping
    from tests.kubefake import FakeKube

    fake = FakeKube()
    ctl = stepping.Controller(s, fake, watching.Cache(fake))
    return ctl._make_policy().options  # type: ignore[attr-defined]


def test_the_controller_plans_with_the_configured_starvation_bound() -> None:
    s = config.load([], env={"GPUROSTER_MAX_WAIT_STEPS": "6", "GPUROSTER_REALTIME_PENALTY": "5"})
    options = _planner_options(s)
    assert (options.max_wait_steps, options.realtime_penalty) == (6, 5.0)


@pytest.mark.parametrize(("env", "steps"), [
    ({}, 48),  # hourly steps: two days are 48 of them
    ({"GPUROSTER_STEP_SECONDS": "900"}, 192),  # 15-minute steps: 192
    ({"GPUROSTER_STEP_SECONDS": "2", "GPUROSTER_STEP_MINUTES": "15"}, 192),  # compressed
    ({"GPUROSTER_STEP_SECONDS": "900", "GPUROSTER_MAX_WAIT_HOURS": "6"}, 24),
    ({"GPUROSTER_STEP_SECONDS": "900", "GPUROSTER_MAX_WAIT_STEPS": "10"}, 10),  # steps win
])
def test_the_starvation_bound_is_hours_of_planning_time(env: dict[str, str], steps: int) -> None:
    s = config.load([], env=env)
    assert _planner_options(s).wait_steps(s.steps_per_day()) == steps


@pytest.mark.parametrize(("argv", "env", "shadow"), [
    ([], {}, False),
    (["--shadow"], {}, True),
    (["--shadow", "false"], {"GPUROSTER_SHADOW": "true"}, False),
    ([], {"GPUROSTER_SHADOW": "yes"}, True),
], ids=["default-off", "bare-flag", "flag-over-env", "env"])
def test_shadow_mode_setting(argv: list[str], env: dict[str, str], shadow: bool) -> None:
    assert config.load(argv, env=env).shadow is shadow


def test_shadow_mode_refuses_a_non_boolean() -> None:
    with pytest.raises(config.ConfigError, match="GPUROSTER_SHADOW"):
        config.load([], env={"GPUROSTER_SHADOW": "maybe"})

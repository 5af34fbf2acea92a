"""The local cluster as a package: its data ships with it, its commands answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from extender.localcluster import cluster, commands, rendering

REPO = Path(__file__).resolve().parents[2]


def test_the_packaged_scheduler_config_is_the_reference_one() -> None:
    # The package renders its own copy; users read deploy/scheduler's. One text.
    reference = REPO / "deploy" / "scheduler" / "scheduler-config.yaml"
    assert rendering.SCHEDULER_TEMPLATE.read_text() == reference.read_text()


def test_the_kwok_stages_and_the_build_script_are_package_data() -> None:
    names = {p.name for p in rendering.stage_files()}
    assert {"pod-complete.yaml", "node-initialize.yaml", "pod-delete.yaml"} <= names
    with cluster.build_script() as script:
        assert script.is_file() and script.parent == Path(cluster.__file__).parent
        out = subprocess.run(["bash", str(script), "--print-bin"], check=True,
                             capture_output=True, text=True).stdout
    assert "/bin/k8s-" in out


def test_bin_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPUROSTER_BIN_DIR", "/opt/somewhere")
    assert commands.main(["bin-dir"]) == 0
    assert capsys.readouterr().out.strip() == "/opt/somewhere"


def test_without_a_cluster_up_the_show_commands_say_so(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(commands, "RUN_ROOT", tmp_path / "run")
    assert commands.main(["kubeconfig"]) == 1
    assert "no cluster is up" in capsys.readouterr().err
    assert commands.main(["down"]) == 0


def test_gpuroster_cluster_is_a_command() -> None:
    out = subprocess.run([sys.executable, "-m", "extender.cli", "cluster", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for verb in ("up", "down", "status", "kubeconfig", "extender-port", "leftovers", "build"):
        assert verb in out

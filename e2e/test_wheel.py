"""The built wheel, installed outside the checkout, runs `gpuroster demo` to its table.

The product must not reach into this repository at run time (it once imported
e2e/cluster.py from the checkout): the wheel is built from the checkout's files,
installed into a fresh venv under a temporary directory, and the demo runs
there with the temporary directory as its working directory. To stay within
CI's budget the venv borrows the test venv's installed dependencies (a `.pth`
line; never the checkout, which the editable install's own hook would add) and
the demo replays a 10-step scenario at 2 s a step; the control-plane binaries
are the pinned ones (`GPUROSTER_BIN_DIR`), found by the installed package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

from extender.localcluster import binaries_dir

REPO = Path(__file__).resolve().parents[1]

TINY = """\
version: 1
name: tiny
description: 8 GPUs, a short training queue behind a service with a 2-step peak
cluster: {nodes: 1, gpus_per_node: 8}
step_minutes: 60
horizon_steps: 6
duration_steps: 10
jobs:
- {name: a, type: training, gpus: 4, duration_steps: 3, estimate_steps: 3, arrival_step: 0,
   priority: 2}
- {name: b, type: training, gpus: 4, duration_steps: 4, estimate_steps: 4, arrival_step: 0,
   priority: 4}
- {name: c, type: training, gpus: 2, duration_steps: 3, estimate_steps: 3, arrival_step: 2,
   priority: 1}
- {name: d, type: training, gpus: 4, duration_steps: 2, estimate_steps: 2, arrival_step: 3,
   priority: 8}
services:
- name: chat
  priority: 6
  max_swap: 2
  demand: [0, 0, 1, 2, 4, 4, 1, 0, 0, 0]
  forecast: [0, 0, 1, 2, 4, 4, 1, 0, 0, 0]
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert out.returncode == 0, f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_the_wheel_installed_outside_the_checkout_runs_the_demo(tmp_path: Path) -> None:
    assert REPO not in tmp_path.parents, "the venv must live outside the checkout"
    bin_dir = binaries_dir(build=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    started = time.monotonic()
    # from a copy of what the wheel is made of: setuptools leaves build/ in the source tree
    src = tmp_path / "src"
    shutil.copytree(REPO / "extender", src / "extender",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
         tmp_path, env, 300)
    (wheel,) = wheels.glob("gpuroster-*.whl")
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    py = target / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp_path, env, 60).strip())
    (site / "borrowed-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
          str(wheel)], tmp_path, env, 300)
    where = _run([str(py), "-c", "import extender; print(extender.__file__)"], tmp_path, env, 60)
    assert Path(where.strip()).is_relative_to(target), where
    installed = time.monotonic() - started

    (tmp_path / "tiny.yaml").write_text(TINY)
    demo_env = {**env, "GPUROSTER_BIN_DIR": str(bin_dir)}
    found = _run([str(target / "bin" / "gpuroster"), "cluster", "bin-dir"], tmp_path, demo_env, 60)
    assert found.strip() == str(bin_dir)
    shown = _run([str(target / "bin" / "gpuroster"), "demo", "--scenario", "tiny.yaml",
                  "--step-seconds", "2", "--out", "out"], tmp_path, demo_env, 600)
    print(f"[wheel] built and installed in {installed:.0f}s; demo "
          f"{time.monotonic() - started - installed:.0f}s\n{shown}")
    assert "scenario" in shown and "tiny" in shown
    assert "gpuroster vs fifo on the cluster" in shown
    assert (tmp_path / "out" / "report.md").is_file()


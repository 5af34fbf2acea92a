"""Every command in the README runs as written.

Shell blocks fenced as ```sh are extracted. Commands that finish in seconds
run for real here; the long ones (the demo, the full test suite, builds,
cluster benches, anything needing a running cluster) are checked by `make -n`
(the target exists and expands) and are run for real by CI (`make test`) or by
hand, as the README says. A command that is neither is a test failure, so a
new README command cannot go unchecked.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# make targets that take minutes or need the control plane: dry-run here.
LONG_MAKE = {"demo", "test", "test-e2e", "bench-cluster", "bench-peers", "bench-full",
             "cluster-bin",
             "cluster-up", "cluster-down", "cluster-kubeconfig", "cluster-extender-port",
             "lint", "audit", "soak", "bench", "venv", "test-unit", "results"}
# commands that need a running cluster or a container engine: covered elsewhere.
ELSEWHERE = {
    "helm": "e2e/test_helm.py installs, upgrades and uninstalls the chart",
    "kubectl": "e2e tests drive kubectl against the local control plane",
    "docker": "no container engine here; the Containerfile is linted (tests/helm)",
    "kind": "no Docker here: deploy/kind is documented, not run",
    "curl": "the endpoints are exercised by tests/api and e2e",
    "export": "environment for the commands that follow",
    "git": "a fresh clone is what CI starts from",
    "cd": "directory change",
}


def commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_readme_has_the_two_setup_commands_first() -> None:
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:20])
    assert "make demo" in first and "make test" in first


@pytest.mark.parametrize("command", commands())
def test_readme_command_runs_as_written(command: str) -> None:
    argv = shlex.split(command)
    tool = argv[0]
    if tool == "make":
        target = next((a for a in argv[1:] if not a.startswith("-") and "=" not in a), "help")
        dry = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert dry.returncode == 0, f"{command}: make -n failed:\n{dry.stderr}"
        if target not in LONG_MAKE:
            real = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert real.returncode == 0, f"{command} failed:\n{real.stdout}\n{real.stderr}"
        return
    if tool in ("gpuroster", ".venv/bin/gpuroster"):
        exe = Path(sys.executable).parent / "gpuroster"
        needs_cluster = {"serve", "plan", "demo"} & set(argv[1:2]) or "--cluster" in argv \
            or "--kubeconfig" in argv
        run = [str(exe), *argv[1:]] if not needs_cluster else [str(exe), argv[1], "--help"]
        real = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert real.returncode == 0, f"{command} failed:\n{real.stdout}\n{real.stderr}"
        return
    assert tool in ELSEWHERE, (
        f"README command {command!r} is not checked: run it here, or say in ELSEWHERE "
        "which test covers it")


def test_readme_stays_short() -> None:
    # The README is for a first look; tables and evidence live in docs/.
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_known_limitations_are_few_and_each_links_its_evidence() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Known limitations", 1)[1].split("\n## ", 1)[0]
    bullets = re.findall(r"^- (.*?)(?=^- |\Z)", section, flags=re.S | re.M)
    assert 0 < len(bullets) <= 10
    for b in bullets:
        assert "](" in b, f"a limitation without a link to its evidence: {b[:60]!r}"


PAGES = [README, ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings."""
    out = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#+ (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link to {target}: no such heading"

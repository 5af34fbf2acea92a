"""The layering STYLE.md asks for: the adapter, the replay and the local cluster import
kubernetes, one package imports fastapi, the planner imports neither (nor the adapter)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "extender"


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
            if node.module.startswith("extender."):
                out.add(node.module)
    return out


@pytest.mark.parametrize(("library", "homes"), [
    ("kubernetes", {"adapter", "replay", "localcluster"}),
    ("fastapi", {"api"}), ("starlette", {"api"})])
def test_only_its_packages_import(library: str, homes: set[str]) -> None:
    offenders = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                 if library in imports(p) and p.relative_to(ROOT).parts[0] not in homes]
    assert offenders == []


def test_planner_sees_no_kubernetes_nor_http() -> None:
    for p in (ROOT / "planner").rglob("*.py"):
        found = imports(p)
        assert not found & {"kubernetes", "fastapi", "starlette", "uvicorn"}, p
        assert not any(m.startswith(("extender.adapter", "extender.api", "extender.controller"))
                       for m in found), p

"""The scenario files: reading and writing version-1 YAML/JSON, and the seven shipped scenarios.

Validation lives in the pure planner (`extender.planner.scenario.parse`); this
package only does the file I/O around it and holds the shipped files.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from extender.planner import model
from extender.planner.scenario import Problem, ScenarioError, parse, to_document

__all__ = [
    "Problem",
    "ScenarioError",
    "builtin_dir",
    "builtin_names",
    "dump",
    "load",
    "parse",
    "resolve",
    "to_document",
]


def load(path: str | Path) -> model.Scenario:
    """Load a scenario from a .yaml/.yml/.json file."""
    p = Path(path)
    source = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(
            source, [Problem("<file>", f"cannot be read: {e.strerror or e}")]
        ) from e
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ScenarioError(
            source,
            [
                Problem(
                    "<document>", f"is not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {e}"
                )
            ],
        ) from e
    return parse(data, source)


def dump(s: model.Scenario, path: str | Path) -> None:
    p = Path(path)
    doc = to_document(s)
    if p.suffix == ".json":
        p.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    else:
        p.write_text(
            yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120),
            encoding="utf-8",
        )


def builtin_dir() -> Path:
    """Where the seven shipped scenarios live (package data)."""
    return Path(__file__).resolve().parent


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


def resolve(name_or_path: str) -> Path:
    """A shipped scenario's name, or a path to any scenario file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml", ".json") or p.exists():
        return p
    candidate = builtin_dir() / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    raise ScenarioError(
        name_or_path,
        [
            Problem(
                "<file>",
                "no such file and no shipped scenario "
                f"of that name (shipped: {', '.join(builtin_names())})",
            )
        ],
    )

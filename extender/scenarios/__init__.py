"""The scenario files: reading and writing version-1 YAML/JSON, and the seven shipped scenarios.

Validation lives in the pure planner (`extender.planner.scenario.parse`); this
package only does the file I/O around it and holds the shipped files.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

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
    "load_all",
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
        data = _decode_json(text) if p.suffix == ".json" else yaml.load(text, _UniqueKeyLoader)
    except _DuplicateKey as e:
        raise ScenarioError(source, [Problem("<document>", str(e))]) from e
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


class _DuplicateKey(ValueError):
    """A mapping in a scenario file names the same key twice."""


# Both decoders keep the last of two equal keys without a word: a file with two `jobs:`
# lists would run with the second only. Refused instead, as MODEL.md asks of bad input.


def _decode_json(text: str) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise _DuplicateKey(f"has the key {key!r} twice in one mapping")
            out[key] = value
        return out

    return json.loads(text, object_pairs_hook=unique)


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]  # (PyYAML has no types)
    """yaml.safe_load's loader, refusing a key given twice in one mapping. A key from a
    merge (`<<: *base`) may still be overridden: that is what merging is for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in first:
                    raise _DuplicateKey(
                        f"has the key {key!r} twice in one mapping (lines {first[key]} and {line})"
                    )
                first[key] = line
            except TypeError:
                pass  # an unhashable key: the base loader says so below
        out: dict[Hashable, Any] = super().construct_mapping(node, deep)
        return out


def load_all(paths: Sequence[str | Path]) -> list[model.Scenario]:
    """Load several scenarios to run together, all before any runs. Their names must
    differ: a run's result files are named after its scenario (`{name}.{policy}.json`),
    so two of one name would overwrite each other's."""
    loaded: list[model.Scenario] = []
    first: dict[str, str] = {}
    for path in paths:
        s = load(path)
        if s.name in first:
            raise ScenarioError(
                s.source,
                [
                    Problem(
                        "name",
                        f"{s.name!r} is also the name of {first[s.name]}: scenarios run "
                        "together need different names (their result files are named "
                        "after them)",
                    )
                ],
            )
        first[s.name] = s.source
        loaded.append(s)
    return loaded


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

"""Print the settings table of docs/configuration.md from extender/config.py.

    .venv/bin/python docs/make_config_table.py > /tmp/table.md

tests/test_docs_config.py fails when docs/configuration.md lacks a row this
script would write, so a new setting cannot go undocumented.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from extender import config


def default_text(value: Any) -> str:
    if isinstance(value, Mapping):
        return "`" + json.dumps(dict(value), separators=(",", ":")) + "`"
    if isinstance(value, tuple):
        return "`" + ",".join(value) + "`" if value else "(empty: all)"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "":
        return "(empty)"
    return f"`{value}`"


def rows() -> list[tuple[str, str, str, str]]:
    """(flag, env var, default, meaning) for every setting, in config order."""
    defaults = {}
    for f in fields(config.Settings):
        if f.default is not MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not MISSING:
            defaults[f.name] = f.default_factory()
    out = []
    for name, _, help_text in config._FIELDS:
        out.append(("--" + name.replace("_", "-"), config.env_name(name),
                    default_text(defaults[name]), help_text))
    return out


def table() -> str:
    lines = ["| Flag | Environment | Default | Meaning |", "| --- | --- | --- | --- |"]
    for flag, env, default, meaning in rows():
        lines.append(f"| `{flag}` | `{env}` | {default} | {meaning.replace('|', '/')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())

"""Fail when a file speaks of how the project was built instead of what it is.

The product describes itself in the present tense: no numbered or relative
work sessions, no issue numbers, no tracker references, no "the issue" as the
source of a target (PATTERNS has each form). The operating-system sense of
"session" (a process group, an HTTP or pytest session) passes. This file
spells the forms out, so it skips itself.

    python tools/check_words.py [PATH ...]     # default: the repository
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

SELF = Path(__file__).resolve()
ROOT = SELF.parent.parent
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".tpl", ".txt"}
NAMES = {"Makefile", "Containerfile"}
SKIP_DIRS = {".git", ".venv", "out", "node_modules", "__pycache__", ".mypy_cache",
             ".ruff_cache", ".pytest_cache", ".hypothesis"}

_ORDINAL = (r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
            r"twelfth|[a-z]+teenth|[a-z]+tieth|twentieth|[a-z]+th|[0-9]+(?:st|nd|rd|th)")
_RELATIVE = r"next|previous|last|earlier|later|another|other|this|that"
PATTERNS = {
    "a work session": re.compile(rf"\b(?:{_ORDINAL}|{_RELATIVE})[ -]sessions?\b", re.I),
    "an issue number": re.compile(r"\bissues?[ -]?#?[0-9]+", re.I),
    # in parentheses, any number; bare, one or two digits: three and six are colours, as #222
    "a tracker reference": re.compile(r"\(#[0-9]+\)|(?<![\w&/])#[0-9]{1,2}\b"),
    "the issue as a source": re.compile(r"\bthe issue(?:'s)?\b|\bdone-when\b", re.I),
}


def files(paths: Sequence[Path]) -> Iterator[Path]:
    for top in paths:
        if top.is_file():
            yield top
            continue
        for p in sorted(top.rglob("*")):
            if any(part in SKIP_DIRS or part.endswith(".egg-info")
                   for part in p.relative_to(top).parts):
                continue
            if p == SELF:
                continue
            if p.is_file() and (p.suffix in SUFFIXES or p.name in NAMES):
                yield p


def hits(path: Path) -> Iterator[tuple[int, str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in PATTERNS.items():
            m = pattern.search(line)
            if m:
                yield n, what, m.group(0)


def main(argv: Sequence[str]) -> int:
    paths = [Path(a) for a in argv] or [ROOT]
    found = 0
    for p in files(paths):
        for n, what, text in hits(p):
            found += 1
            try:
                shown = p.relative_to(ROOT)
            except ValueError:
                shown = p
            print(f"{shown}:{n}: {what}: {text!r}")
    if found:
        print(f"{found} line(s) speak of how the project was built, not of what it is",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""tools/check_words.py: what it fails on, and the senses of its words it lets pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import check_words

# Spelled in pieces, so that this file passes the check it tests.
SESSION, ISSUE, HASH = "session", "issue", "#"


@pytest.mark.parametrize("line", [
    f"measured in the seventh {SESSION}", f"the sixteenth {SESSION}'s run", f"the 12th {SESSION}",
    f"since the next {SESSION}", f"({ISSUE} 25)", f"{ISSUE} {HASH}23", f"the {ISSUE}-7 faults",
    f"see ({HASH}123)",
    f"{HASH}25's bar", f"the {ISSUE}'s bar", "Done" + "-when",
], ids=lambda s: s)
def test_it_fails_on_how_the_project_was_built(tmp_path: Path, line: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"text\n{line}\n", encoding="utf-8")
    assert list(check_words.hits(page)), line
    assert check_words.main([str(page)]) == 1


@pytest.mark.parametrize("line", [
    "every child runs in its own session", "request.session.testsfailed",
    '@pytest.fixture(scope="session")', "an HTTP session", 'color: "#222"', "#0a0a0a",
    "no in-cluster Service to issue for", "#   make lint",
], ids=lambda s: s)
def test_it_lets_the_other_senses_pass(tmp_path: Path, line: str) -> None:
    page = tmp_path / "page.py"
    page.write_text(f"{line}\n", encoding="utf-8")
    assert not list(check_words.hits(page)), line
    assert check_words.main([str(page)]) == 0

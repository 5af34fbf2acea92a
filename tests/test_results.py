"""The published simulator tables are what their commands print for the shipped files.

`make results` (tools/results.py) writes each table between marker comments in the
README and docs/benchmarks.md. Here every marked block must name a known command, say
when and where it was measured, and appear once; the seven scenarios' tables (the
README's headline, the scenarios, every policy) are measured again and must match to
the character: they take about a second each. The wrong-forecast, step-length and
full-mode tables take one to several minutes, so `python tools/results.py --check`
compares them instead. A planner change that moves a number fails here until
`make results` is run.
"""

from __future__ import annotations

import re

import pytest

from tools import results

FAST = [name for name, block in results.BLOCKS.items() if block.minutes < 0.5]


def _published() -> dict[str, tuple[str, str]]:
    """Every marked block, by name: (page, body)."""
    out: dict[str, tuple[str, str]] = {}
    for page in results.PUBLISHED:
        for name, body in results.blocks(page.read_text(encoding="utf-8")).items():
            assert name not in out, f"results:{name} is published twice ({out[name][0]}, {page})"
            out[name] = (page.name, body)
    return out


def test_every_table_is_published_once_under_a_known_command() -> None:
    published = _published()
    assert set(published) == set(results.BLOCKS), (
        "marked blocks and tools/results.py's BLOCKS differ: "
        f"unknown {sorted(set(published) - set(results.BLOCKS))}, "
        f"missing {sorted(set(results.BLOCKS) - set(published))}")


@pytest.mark.parametrize("name", sorted(results.BLOCKS))
def test_a_table_says_when_where_and_by_what(name: str) -> None:
    page, body = _published()[name]
    first = body.splitlines()[0]
    assert re.match(r"Measured \d{4}-\d{2}-\d{2} on \d+ cores", first), (
        f"{page} results:{name}: first line {first!r} is not the provenance make results writes")
    assert f"`{results.BLOCKS[name].command}`" in first
    assert results.table_of(body).startswith(("|", "**")), f"{page} results:{name}: no table"


@pytest.mark.parametrize("name", FAST)
def test_a_seven_scenario_table_matches_its_command(name: str) -> None:
    page, body = _published()[name]
    now = results.measure(name)
    assert results.table_of(body) == now, (
        f"{page}'s results:{name} differs from what `{results.BLOCKS[name].command}` "
        "prints now: run `make results`")


def test_rewrite_replaces_only_the_block_and_keeps_the_rest() -> None:
    import datetime

    text = ("before\n<!-- results:seven begin -->\nold\n<!-- results:seven end -->\n"
            "<!-- results:steps begin -->\nkept\n<!-- results:steps end -->\nafter\n")
    new = results.rewrite(text, {"seven": "| a |"}, datetime.date(2030, 1, 2), "2 cores")
    assert new.startswith("before\n") and new.endswith("kept\n<!-- results:steps end -->\n"
                                                      "after\n")
    body = results.blocks(new)["seven"]
    assert body.startswith("Measured 2030-01-02 on 2 cores by `make results`: ")
    assert results.table_of(body) == "| a |"

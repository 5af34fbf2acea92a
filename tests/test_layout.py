"""The package stays in pieces one can hold."""

from __future__ import annotations

from pathlib import Path

import extender

MOST_LINES = 600


def test_no_module_of_the_package_is_over_six_hundred_lines() -> None:
    root = Path(extender.__file__).parent
    big = {str(p.relative_to(root)): n for p in sorted(root.rglob("*.py"))
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MOST_LINES}
    assert not big, f"modules over {MOST_LINES} lines (split them by what they decide): {big}"

"""The extender load bench runs end to end with either client and reports its numbers."""

from __future__ import annotations

import re
import shutil

import pytest

from extender.api import loadbench

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("client", [
    pytest.param("go", marks=pytest.mark.skipif(shutil.which("go") is None, reason="no go")),
    "python"])
def test_the_load_bench_measures_both_pods_with_either_client(
        client: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = loadbench.main(["--nodes", "50", "--seconds", "0.3", "--client", client])
    out = capsys.readouterr().out
    assert rc in (0, 1), out  # 1 is a missed threshold: numbers were still measured
    assert f"{client} client" in out
    pairs = re.findall(r"filter\+prioritize, NodeNames .*p50 ([\d.]+) ms\s+p99 ([\d.]+) ms "
                       r"\s+\((\d+) pairs\)", out)
    assert len(pairs) == 2, out  # the admitted and the waiting pod
    for p50, p99, n in pairs:
        assert 0 < float(p50) <= float(p99) and int(n) > 0
    assert re.search(r"server-side handler time, .*filter [\d.]+ ms, prioritize [\d.]+ ms", out)

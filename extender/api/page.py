"""The plan as an HTML page: GPUs down, steps (hours) across, a colour per job,
the committed step outlined. Self-contained (no scripts, no external assets)."""

from __future__ import annotations

import hashlib
import html
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def colour(name: str) -> str:
    if name == "(unavailable)":
        return "#555"
    h = int(hashlib.sha1(name.encode()).hexdigest()[:6], 16)
    return f"hsl({h % 360}, {55 + h // 360 % 30}%, {55 + h // 10800 % 20}%)"


def _label(t: float, step_seconds: float) -> str:
    fmt = "%H:%M" if step_seconds >= 60 else "%H:%M:%S"
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


def render(view: Mapping[str, Any]) -> str:
    esc = html.escape
    if not view or "grid" not in view:
        return ("<!doctype html><html><head><meta charset='utf-8'><title>gpuroster plan</title>"
                "</head><body><p>No plan yet: the first step has not run.</p></body></html>")
    grid: list[list[str | None]] = view["grid"]
    H = int(view["horizon"])
    start = float(view["step_start"])
    step_s = float(view["step_seconds"])
    g = int(view["gpus_per_node"]) or 1
    nodes: list[str] = view["nodes"]
    rows = []
    head = "".join(
        f"<th class='{'now' if k == 0 else ''}'>{esc(_label(start + k * step_s, step_s))}</th>"
        for k in range(H))
    rows.append(f"<tr><th>GPU</th>{head}</tr>")
    names: set[str] = set()
    for gpu, cells in enumerate(grid):
        node = nodes[gpu // g] if gpu // g < len(nodes) else "?"
        sep = " class='node'" if gpu % g == 0 else ""
        tds = []
        for k, name in enumerate(cells):
            cls = "now" if k == 0 else ""
            if name is None:
                tds.append(f"<td class='{cls}'></td>")
            else:
                names.add(name)
                tds.append(f"<td class='{cls}' style='background:{colour(name)}' "
                           f"title='{esc(name)}'></td>")
        rows.append(f"<tr{sep}><th>{esc(node)}:{gpu % g}</th>{''.join(tds)}</tr>")
    legend = "".join(f"<li><span style='background:{colour(n)}'></span>{esc(n)}</li>"
                     for n in sorted(names))
    queue = ", ".join(esc(q) for q in view.get("queue", [])) or "(empty)"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>gpuroster plan</title>
<style>
body{{font:13px sans-serif;margin:1em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ddd;padding:0;min-width:18px;height:12px;font-weight:normal}}
th{{padding:0 4px;font-size:11px;white-space:nowrap}}
tr.node td,tr.node th{{border-top:2px solid #333}}
td.now,th.now{{border-left:3px solid #d00;border-right:3px solid #d00}}
ul{{list-style:none;padding:0}} li{{display:inline-block;margin-right:1em}}
li span{{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}}
</style></head><body>
<h1>gpuroster plan: step {int(view['step'])} ({esc(str(view.get('step_start_utc', '')))})</h1>
<p>GPUs down, steps across ({step_s:g} s each); the committed step is outlined in red.
Queue: {queue}</p>
<table>{''.join(rows)}</table><ul>{legend}</ul></body></html>"""

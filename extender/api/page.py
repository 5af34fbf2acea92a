"""The plan as an HTML page, the screen an operator watches (in shadow mode above all):
what would run where in the next hours, and what is waiting for what.

A GPU x time grid (inline SVG: GPUs down, grouped by node; steps across; a colour
per job, services hatched, unavailable GPUs grey, the current step outlined),
then the waiting list (job, GPUs, priority, waiting since, planned start, what it
waits for or why it is not planned), the running jobs and the services.
Self-contained: no scripts, no external assets.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

UNAVAILABLE = "(unavailable)"


def colour(name: str) -> str:
    if name == UNAVAILABLE:
        return "#8a8a8a"
    h = int(hashlib.sha1(name.encode()).hexdigest()[:6], 16)
    return f"hsl({h % 360}, {55 + h // 360 % 30}%, {55 + h // 10800 % 20}%)"


def _label(t: float, step_seconds: float) -> str:
    fmt = "%H:%M" if step_seconds >= 60 else "%H:%M:%S"
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


def _when(text: str | None, step_seconds: float) -> str:
    """An ISO time of the view as the page shows it: day and time, UTC."""
    if not text:
        return "-"
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    return t.strftime("%b %d %H:%M" if step_seconds >= 60 else "%H:%M:%S")


def _priority(p: Any) -> str:
    if p is None:
        return "-"
    return f"{float(p):g}"


def _list(heads: Sequence[str], rows: list[str], empty: str) -> str:
    """A list table of `rows` (each a <tr>) under `heads`; `empty` as a paragraph when
    there are no rows."""
    if not rows:
        return f"<p>{empty}</p>"
    return ("<table class='list'><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>"
            + "".join(rows) + "</table>")


def _count(x: object) -> str:
    """A count from the plan's JSON for a table cell: '-' when absent or not a count."""
    return str(x) if isinstance(x, int) and not isinstance(x, bool) else "-"


def _grid_svg(view: Mapping[str, Any], services: set[str]) -> str:
    esc = html.escape
    grid: list[list[str | None]] = view["grid"]
    H = int(view["horizon"])
    start = float(view["step_start"])
    step_s = float(view["step_seconds"])
    g = int(view["gpus_per_node"]) or 1
    nodes: list[str] = view["nodes"]
    gpus = len(grid)
    row = 14 if gpus <= 96 else 8 if gpus <= 256 else 4
    col = max(26, min(64, 1150 // max(1, H)))
    left, top = 120, 22
    width, height = left + H * col + 2, top + gpus * row + 2
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' class='grid' width='{width}' "
           f"height='{height}' role='img' aria-label='GPU by time plan grid'>",
           "<defs><pattern id='svc' width='6' height='6' patternUnits='userSpaceOnUse' "
           "patternTransform='rotate(45)'><rect width='3' height='6' fill='#fff' "
           "fill-opacity='0.45'/></pattern></defs>"]
    every = max(1, H // 16)
    for k in range(H):
        x = left + k * col
        if k % every == 0:
            at = esc(_label(start + k * step_s, step_s))
            out.append(f"<text x='{x + 2}' y='14' class='t'>{at}</text>")
        out.append(f"<line x1='{x}' y1='{top}' x2='{x}' y2='{height - 2}' class='v'/>")
    for gpu in range(gpus):
        y = top + gpu * row
        node = nodes[gpu // g] if gpu // g < len(nodes) else "?"
        if gpu % g == 0:
            out.append(f"<line x1='0' y1='{y}' x2='{width}' y2='{y}' class='n'/>")
        if row >= 12 or (row >= 8 and gpu % g == 0):
            cls = "node" if gpu % g == 0 else "gpu"
            out.append(f"<text x='4' y='{y + row - 3}' class='{cls}'>{esc(node)}:{gpu % g}"
                       "</text>")
        cells = grid[gpu]
        k = 0
        while k < len(cells):
            name = cells[k]
            end = k + 1
            while end < len(cells) and cells[end] == name:
                end += 1
            if name is not None:
                x, w = left + k * col, (end - k) * col
                out.append(f"<rect x='{x + 1}' y='{y + 1}' width='{w - 2}' height='{row - 2}' "
                           f"fill='{colour(name)}'><title>{esc(name)}</title></rect>")
                if name in services:
                    out.append(f"<rect x='{x + 1}' y='{y + 1}' width='{w - 2}' "
                               f"height='{row - 2}' fill='url(#svc)'/>")
                above = grid[gpu - 1][k] if gpu > 0 and gpu % g else None
                if row >= 12 and w >= 44 and above != name:
                    short = name.split("/", 1)[-1]
                    room = max(1, (w - 6) // 6)
                    text = short if len(short) <= room else short[:max(1, room - 1)] + "…"
                    out.append(f"<text x='{x + 4}' y='{y + row - 3}' class='j'>{esc(text)}</text>")
            k = end
    out.append(f"<rect x='{left}' y='{top}' width='{col}' height='{gpus * row}' class='now'/>")
    out.append("</svg>")
    return "".join(out)


def render(view: Mapping[str, Any]) -> str:
    esc = html.escape
    if not view or "grid" not in view:
        return ("<!doctype html><html><head><meta charset='utf-8'><title>gpuroster plan</title>"
                "</head><body><p>No plan yet: the first step has not run.</p></body></html>")
    step_s = float(view["step_seconds"])
    jobs: Mapping[str, Mapping[str, Any]] = view.get("jobs", {})
    svcs: Mapping[str, Mapping[str, Any]] = view.get("services", {})
    grid: list[list[str | None]] = view["grid"]
    shadow = bool(view.get("shadow"))
    names = sorted({n for cells in grid for n in cells if n is not None})

    running = {n: j for n, j in jobs.items() if j.get("state") == "running"}
    starting = {n: j for n, j in jobs.items() if j.get("state") == "admitted"}
    waiting = {n: j for n, j in jobs.items() if j.get("state") in ("queued", "held")}
    total = len(grid)
    busy = sum(1 for cells in grid if cells and cells[0] not in (None, UNAVAILABLE))
    down = sum(1 for cells in grid if cells and cells[0] == UNAVAILABLE)

    def swatch(n: str) -> str:
        return f"<span class='sw' style='background:{colour(n)}'></span>"

    # The waiting list: those the plan starts now first, then by planned start, then
    # the unplanned; within each, the longest waiting first.
    def order(item: tuple[str, Mapping[str, Any]]) -> tuple[int, int, str, str]:
        n, j = item
        s = j.get("planned_start_step")
        return (0 if j.get("state") == "admitted" else 1 if s is not None else 2,
                int(s) if s is not None else 0, str(j.get("waiting_since_utc") or ""), n)

    wrows = []
    for n, j in sorted({**starting, **waiting}.items(), key=order):
        if j.get("state") == "admitted":
            when = ("<b>now</b>" + (" (the cluster has not started it)" if shadow else ""))
            what = f"block {esc(str(j.get('block')))}"
        elif j.get("planned_start_step") is not None:
            when = (f"{esc(_when(j.get('planned_start_utc'), step_s))} "
                    f"(step {int(j['planned_start_step'])})")
            holders = [h for h in j.get("waits_for") or []]
            held = ", ".join(f"{swatch(h)}{esc(h)}" for h in holders) or "-"
            what = f"block {esc(str(j.get('block')))}; its GPUs are held by {held}"
        else:
            when = "not planned"
            what = esc(str(j.get("reason") or "no start within the horizon"))
        wrows.append(
            f"<tr><td>{swatch(n) if n in names else ''}{esc(n)}</td>"
            f"<td class='r'>{int(j.get('gpus') or 0)}</td>"
            f"<td class='r'>{_priority(j.get('priority'))}</td>"
            f"<td>{esc(_when(j.get('waiting_since_utc'), step_s))}</td>"
            f"<td>{when}</td><td>{what}</td></tr>")
    waiting_table = _list(("Job", "GPUs", "Priority", "Waiting since", "Planned start",
                           "Waits for"), wrows, "Nothing is waiting.")

    rrows = []
    for n, j in sorted(running.items(), key=lambda kv: (kv[1].get("expected_end_step", 0),
                                                        kv[0])):
        by = "kube-scheduler" if j.get("placed_by") == "scheduler" else "gpuroster"
        rrows.append(f"<tr><td>{swatch(n)}{esc(n)}</td><td class='r'>{int(j['gpus'])}</td>"
                     f"<td class='r'>{_priority(j.get('priority'))}</td>"
                     f"<td>{esc(str(j.get('block')))}</td>"
                     f"<td>{esc(_when(j.get('expected_end_utc'), step_s))}</td>"
                     f"<td>{by}</td></tr>")
    running_table = _list(("Job", "GPUs", "Priority", "Where", "Expected end", "Placed by"),
                          rrows, "Nothing runs.")

    srows = []
    for n, v in sorted(svcs.items()):
        forecast = " ".join(str(x) for x in (v.get("forecast") or [])[:12])
        actual = v.get("replicas_actual")
        planned = v.get("replicas_planned")
        diff = ""
        if shadow and actual is not None and planned is not None and planned != actual:
            diff = f" <b>({'+' if planned > actual else ''}{planned - actual})</b>"
        srows.append(f"<tr><td>{swatch(n)}{esc(n)}</td>"
                     f"<td class='r'>{len(v.get('gpus_now') or [])}</td>"
                     f"<td class='r'>{planned if planned is not None else '-'}{diff}</td>"
                     f"<td class='r'>{actual if actual is not None else '-'}</td>"
                     f"<td class='r'>{_count(v.get('headroom'))}</td>"
                     f"<td class='r'>{_count(v.get('spare'))}</td>"
                     f"<td>{esc(forecast)}</td></tr>")
    services_table = _list(("Service", "GPUs planned now", "Replicas planned", "Replicas now",
                            "Headroom GPUs", "Spare GPUs", "Forecast GPUs (next steps)"),
                           srows, "No real-time services.")

    held = "unavailable: a node down, or GPUs held by pods outside the plan"
    legend = "".join(
        f"<li>{swatch(n)}{held if n == UNAVAILABLE else esc(n)}"
        f"{' (service)' if n in svcs else ''}</li>" for n in names)
    would = sum(int(j.get("gpus") or 0) for j in starting.values())
    banner = ("<p class='shadow'><b>Shadow mode.</b> This is what gpuroster would do; it "
              "writes nothing to the cluster, and kube-scheduler places every pod as if "
              "gpuroster were absent.</p>") if shadow else ""
    summary = (f"{total} GPUs: {busy} busy now, {down} unavailable, "
               f"{total - busy - down} free. {len(running)} running, "
               f"{len(starting)} to start now ({would} GPUs), {len(waiting)} waiting.")
    timed = view.get("plan_ms")
    if isinstance(timed, dict) and timed.get("rounds"):  # the plan time of the rounds kept
        summary += (f" Planned in {float(timed['p50']):.2f} ms at the median, "
                    f"{float(timed['p99']):.2f} ms at p99 over the last "
                    f"{int(timed['rounds'])} rounds.")
    if view.get("last_error"):  # rounds are failing: this plan is the last one published
        banner += ("<p class='shadow'><b>Rounds are failing.</b> This is the last plan "
                   f"published; the latest error: {esc(str(view['last_error']))}</p>")
    title = f"gpuroster plan{' (shadow)' if shadow else ''}"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>
body{{font:13px/1.4 system-ui,sans-serif;margin:1em 1.5em;color:#222}}
h1{{font-size:18px;margin:0 0 .3em}} h2{{font-size:15px;margin:1.2em 0 .4em}}
.shadow{{background:#fff3cd;border:1px solid #e0c46c;padding:.4em .7em;display:inline-block}}
svg.grid{{display:block;border:1px solid #ccc;background:#fafafa}}
svg .t{{font-size:10px;fill:#555}} svg .node{{font-size:10px;fill:#111;font-weight:600}}
svg .gpu{{font-size:9px;fill:#888}}
svg .j{{font-size:10px;fill:#111}} svg .v{{stroke:#e6e6e6}} svg .n{{stroke:#999}}
svg .now{{fill:none;stroke:#d00;stroke-width:2}}
table.list{{border-collapse:collapse}} table.list td,table.list th{{border:1px solid #ddd;
padding:2px 8px;text-align:left;vertical-align:top}} table.list th{{background:#f0f0f0}}
td.r{{text-align:right}}
.sw{{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px;
border:1px solid #0002}}
ul.legend{{list-style:none;padding:0;margin:.4em 0}} ul.legend li{{display:inline-block;
margin-right:1.2em}}
</style></head><body>
<h1>{title}: step {int(view['step'])}, {esc(str(view.get('step_start_utc', '')))}</h1>
{banner}
<p>{esc(summary)}</p>
<h2>What would run where: GPUs down (by node), {int(view['horizon'])} steps of {step_s:g} s
across; the current step is outlined in red, services are hatched</h2>
{_grid_svg(view, set(svcs))}
<ul class="legend">{legend}</ul>
<h2 id="waiting">Waiting: what each job waits for</h2>
{waiting_table}
<h2 id="running">Running</h2>
{running_table}
<h2 id="services">Services</h2>
{services_table}
</body></html>"""

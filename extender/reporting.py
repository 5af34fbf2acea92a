"""Pictures and the markdown report of a benchmark run (matplotlib, headless).

Builds on `results` only; the bench commands and the demo call it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from extender import results  # noqa: E402
from extender.planner import metrics, model  # noqa: E402

if TYPE_CHECKING:
    from extender.results import Row


def _colours(n: int, services: int) -> ListedColormap:
    base: list[Any] = []
    for name in ("tab20", "tab20b", "tab20c"):
        base += list(plt.get_cmap(name).colors)  # type: ignore[attr-defined]
    # No greys for jobs: grey means a service's reserved-but-idle GPUs, dark means a service.
    base = [c for c in base if max(c) - min(c) > 0.08]
    jobs = [base[i % len(base)] for i in range(n - services)]
    svc = [(0.15, 0.15, 0.15)] * services  # services drawn dark so troughs and peaks stand out
    held_idle = (0.78, 0.78, 0.78)  # a service's GPUs above its demand: reserved, not used
    return ListedColormap([(1, 1, 1), *jobs, *svc, held_idle])


def draw_grid(ax: Axes, row: Row) -> None:
    assert row.run is not None
    s = row.scenario
    names = row.run.names
    grid = row.run.grid + 1  # 0 = idle (white)
    idle_code = len(names) + 1
    nj = len(s.jobs)
    for k, v in enumerate(s.services):
        held = row.run.grid == nj + k
        for t in range(s.duration_steps):
            extra = int(held[:, t].sum()) - v.demand[t]
            if extra > 0:  # mark the lowest `extra` of its GPUs as held-but-idle
                rows = np.flatnonzero(held[:, t])[:extra]
                grid[rows, t] = idle_code
    cmap = _colours(len(names) + 1, len(s.services))
    ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=idle_code)
    g = s.cluster.gpus_per_node
    for n in range(1, s.cluster.nodes):
        ax.axhline(n * g - 0.5, color="grey", linewidth=0.4)
    m = row.metrics
    ax.set_title(f"{row.policy}: {m.utilization:.1f}% util, value {m.value:.0f}", fontsize=9)
    ax.set_xlabel(f"step ({s.step_minutes} min)", fontsize=8)
    ax.set_ylabel("GPU", fontsize=8)
    ax.tick_params(labelsize=7)


def write_report(rows: list[Row], out: Path) -> list[Path]:
    written: list[Path] = []
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.scenario.name, {})[r.policy] = r
    for name, pols in by.items():
        shown = [p for p in ("fifo", "gpuroster") if p in pols] or list(pols)[:2]
        fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 3.2), squeeze=False)
        for ax, p in zip(axes[0], shown, strict=True):
            draw_grid(ax, pols[p])
        fig.suptitle(
            f"{name}: GPUs down, steps across; a colour per job, services dark, reserved-idle grey",
            fontsize=10,
        )
        fig.tight_layout()
        path = out / f"{name}.grids.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    names = list(by)
    policy_names = list(dict.fromkeys(r.policy for r in rows))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4))
    width = 0.8 / max(1, len(policy_names))
    x = np.arange(len(names))
    for i, p in enumerate(policy_names):
        util = [by[n][p].metrics.utilization if p in by[n] else 0 for n in names]
        gain = [
            100 * (by[n][p].metrics.value / by[n]["fifo"].metrics.value - 1)
            if p in by[n] and "fifo" in by[n] and by[n]["fifo"].metrics.value
            else 0
            for n in names
        ]
        a1.bar(x + i * width, util, width, label=p)
        a2.bar(x + i * width, gain, width, label=p)
    for a, title in ((a1, "utilization (%)"), (a2, "value vs fifo (%)")):
        a.set_xticks(x + width * (len(policy_names) - 1) / 2)
        a.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        a.set_title(title)
        a.axhline(0, color="black", linewidth=0.5)
    a1.legend(fontsize=7)
    fig.tight_layout()
    path = out / "summary.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    md = [
        "# gpuroster benchmark",
        "",
        "```",
        results.format_table(rows),
        "```",
        "",
        results.summary(rows),
        "",
        "![summary](summary.png)",
        "",
    ]
    for name in names:
        md += [
            f"## {name}",
            "",
            by[name][next(iter(by[name]))].scenario.description,
            "",
            f"![{name}]({name}.grids.png)",
            "",
        ]
    path = out / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    written.append(path)
    return written


def write_peer_grids(
    runs: list[tuple[model.Scenario, str, np.ndarray, np.ndarray | None, metrics.Metrics]],
    out: Path,
) -> list[Path]:
    """One picture per scenario, every policy's cluster grid side by side; GPUs a peer
    held for a gang whose pods did not all run are red (allocated, not useful)."""
    by: dict[str, list[tuple[model.Scenario, str, np.ndarray, np.ndarray | None,
                             metrics.Metrics]]] = {}
    for r in runs:
        by.setdefault(r[0].name, []).append(r)
    written = []
    for name, rs in by.items():
        fig, axes = plt.subplots(1, len(rs), figsize=(4.2 * len(rs), 3.2), squeeze=False)
        for ax, (s, policy, grid, held, m) in zip(axes[0], rs, strict=True):
            n = len(s.jobs) + len(s.services)
            cmap = _colours(n + 1, len(s.services))
            ax.imshow(grid + 1, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0,
                      vmax=n + 1)
            if held is not None and (held >= 0).any():
                mask = np.ma.masked_where(held < 0, np.ones_like(held))
                ax.imshow(mask, aspect="auto", interpolation="nearest", cmap="autumn", vmin=0,
                          vmax=1)
            g = s.cluster.gpus_per_node
            for k in range(1, s.cluster.nodes):
                ax.axhline(k * g - 0.5, color="grey", linewidth=0.4)
            ax.set_title(f"{policy}: {m.utilization:.1f}% util, value {m.value:.0f}", fontsize=8)
            ax.set_xlabel("step", fontsize=7)
            ax.set_ylabel("GPU", fontsize=7)
            ax.tick_params(labelsize=6)
        fig.suptitle(f"{name} on the cluster: a colour per job, services dark, GPUs held by "
                     f"a partial gang red", fontsize=9)
        fig.tight_layout()
        path = out / f"{name}.peers.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def write_side_by_side(rows: list[Row], path: Path, held: dict[str, np.ndarray]) -> Path:
    """One scenario's grids side by side (`gpuroster whatif`: what happened, then the
    policies); `held`: per policy, the job holding each GPU whose gang did not all run,
    drawn red (allocated, not useful)."""
    fig, axes = plt.subplots(1, len(rows), figsize=(4.6 * len(rows), 3.4), squeeze=False)
    for ax, r in zip(axes[0], rows, strict=True):
        draw_grid(ax, r)
        h = held.get(r.policy)
        if h is not None and (h >= 0).any():
            mask = np.ma.masked_where(h < 0, np.ones_like(h))
            ax.imshow(mask, aspect="auto", interpolation="nearest", cmap="autumn", vmin=0,
                      vmax=1)
    fig.suptitle(f"{rows[0].scenario.name}: GPUs down, steps across; a colour per job, services "
                 f"dark, reserved-idle grey, held by a partial gang red", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

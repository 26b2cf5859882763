"""The pictures of one key's trials, shared by ``plot`` and ``report``.

Each key gets one figure of two panels: the distribution of its trials' times (a histogram over
log-spaced bins, readable at 20 trials or 20 000), with the winner and the ``test=`` parameters
marked; and how the time depends on the parameters: a heat map over the pair of parameters that
matters most (each cell the fastest time with those two values, relative to the winner), or a
profile when the space has one parameter. Legends sit outside the axes, never over the data.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def matplotlib_pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plots need matplotlib: pip install 'autotune[plot]'") from None
    return plt


@dataclass
class KeyTrials:
    """The successful trials of one key: parameters and median seconds, the winner, test=."""

    label: str
    parameters: list[dict[str, Any]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    winner: dict[str, Any] | None = None
    test: dict[str, Any] | None = None

    def time_of(self, params: dict[str, Any] | None) -> float | None:
        if params is None:
            return None
        times = [s for p, s in zip(self.parameters, self.seconds) if p == params]
        return min(times) if times else None


def _unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1e-6, "us"), (1e-3, "ms"), (1.0, "s")):
        if seconds < 1000 * scale:
            return scale, unit
    return 1.0, "s"


def _order(values: Sequence[Any]) -> list[Any]:
    return sorted(set(values), key=lambda v: (str(type(v)), v))


def _varied(key: KeyTrials, names: list[str]) -> list[str]:
    """The parameters the search varied: at least two of their values occur in two or more
    configurations each (a lone value, such as the test= parameters outside the space, does
    not count)."""
    from collections import Counter

    found = []
    for n in names:
        counts = Counter(json.dumps(p.get(n)) for p in key.parameters)
        if sum(1 for c in counts.values() if c >= 2) >= 2:
            found.append(n)
    return found


def _pair(key: KeyTrials, names: list[str]) -> tuple[str, str] | None:
    """The two parameters whose best-per-cell times spread most (the interaction that matters)."""
    varied = _varied(key, names)
    best: tuple[float, tuple[str, str]] | None = None
    for a, b in itertools.combinations(varied, 2):
        cells: dict[tuple, float] = {}
        for p, s in zip(key.parameters, key.seconds):
            cell = (json.dumps(p.get(a)), json.dumps(p.get(b)))
            cells[cell] = min(s, cells.get(cell, math.inf))
        spread = math.log(max(cells.values()) / min(cells.values()))
        if best is None or spread > best[0]:
            best = (spread, (a, b))
    return None if best is None else best[1]


_MANTISSAS = ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8),
              tuple(round(1 + 0.1 * i, 1) for i in range(90)))


def nice_log_ticks(low: float, high: float) -> list[float]:
    """Three to six round values between ``low`` and ``high`` for a log axis: from the sparsest
    of the series 1-10-100, 1-2-5, 1-1.5-2-3-5-7, ... that puts at least three in the range."""
    if not high > low > 0:
        return [low]
    for mantissas in _MANTISSAS:
        ticks = [float(f"{m * 10.0 ** e:.6g}") for e in range(math.floor(math.log10(low)) - 1,
                                                               math.ceil(math.log10(high)) + 1)
                 for m in mantissas if low <= m * 10.0 ** e <= high]
        if len(ticks) >= 3:
            return ticks[::-(-len(ticks) // 6)]
    return sorted({float(f"{t:.2g}") for t in np.geomspace(low, high, 3)})


def _plain_log_ticks(axis: Any, low: float, high: float) -> None:
    """Log-axis ticks at round values written as plain numbers (no 10^x, no minor labels)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, StrMethodFormatter

    axis.set_major_locator(FixedLocator(nice_log_ticks(low, high)))
    axis.set_major_formatter(StrMethodFormatter("{x:g}"))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def draw_distribution(ax: Any, key: KeyTrials) -> list[Any]:
    """Histogram of the trials' times; returns the handles for a legend."""
    seconds = np.asarray(key.seconds)
    scale, unit = _unit(float(np.median(seconds)))
    values = seconds / scale
    low, high = values.min(), values.max()
    bins = np.geomspace(low, high * 1.0001, min(60, max(8, int(len(values) ** 0.5) + 4))) \
        if high > low else np.array([low * 0.95, low * 1.05])
    ax.hist(values, bins=bins, color="#8da0cb", edgecolor="#4c5b8a", linewidth=0.4, label="trials")
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis, bins[0], bins[-1])
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"median time per call ({unit}), log scale")
    ax.set_ylabel("configurations")
    handles = []
    winner = key.time_of(key.winner)
    if winner is not None:
        handles.append(ax.axvline(winner / scale, color="#1b9e77", linewidth=2,
                                  label=f"winner {winner / scale:.3g} {unit}"))
    test = key.time_of(key.test)
    if test is not None:
        if not winner:
            speedup = ""
        elif key.test == key.winner or test / winner < 1.005:
            speedup = ", as fast as the winner"
        else:
            speedup = f", {test / winner:.2f}x slower"
        handles.append(ax.axvline(test / scale, color="#d95f02", linewidth=2, linestyle="--",
                                  label=f"test= {test / scale:.3g} {unit}{speedup}"))
    ax.set_title(f"{len(values)} configurations timed", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return handles


def draw_dependence(fig: Any, ax: Any, key: KeyTrials) -> None:
    """A heat map over the most influential pair of parameters, or a one-parameter profile."""
    names = sorted({n for p in key.parameters for n in p})
    best = min(key.seconds)
    pair = _pair(key, names)
    if pair is None:
        varied = _varied(key, names) or [n for n in names
                                         if len({json.dumps(p.get(n)) for p in key.parameters}) > 1]
        if not varied:
            ax.axis("off")
            ax.text(0.5, 0.5, "one configuration", ha="center", va="center")
            return
        name = varied[0]
        values = _order([p.get(name) for p in key.parameters])
        position = {json.dumps(v): i for i, v in enumerate(values)}
        xs = [position[json.dumps(p.get(name))] for p in key.parameters]
        ax.scatter(xs, [s / best for s in key.seconds], s=12, alpha=0.5, color="#4c5b8a")
        fastest = [min(s for p, s in zip(key.parameters, key.seconds) if p.get(name) == v) / best
                   for v in values]
        ax.plot(range(len(values)), fastest, color="#1b9e77", marker="o")
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set_xlabel(name)
        ax.set_ylabel("time / winner's")
        ax.set_yscale("log")
        ratios = [s / best for s in key.seconds]
        _plain_log_ticks(ax.yaxis, min(ratios), max(ratios))
        ax.set_title(f"time against {name} (line: fastest per value)", fontsize=10)
        ax.grid(alpha=0.3)
        return
    a, b = pair
    rows, cols = _order([p.get(a) for p in key.parameters]), _order([p.get(b) for p in key.parameters])
    grid = np.full((len(rows), len(cols)), np.nan)
    index_a = {json.dumps(v): i for i, v in enumerate(rows)}
    index_b = {json.dumps(v): i for i, v in enumerate(cols)}
    for p, s in zip(key.parameters, key.seconds):
        i, j = index_a[json.dumps(p.get(a))], index_b[json.dumps(p.get(b))]
        grid[i, j] = np.nanmin([grid[i, j], s / best])
    from matplotlib.colors import LogNorm

    top = max(np.nanmax(grid), 1.0001)
    image = ax.imshow(grid, cmap="viridis_r", norm=LogNorm(vmin=1.0, vmax=top), aspect="auto",
                      origin="lower")
    ax.set_xticks(range(len(cols)), [str(v) for v in cols], rotation=45 if len(cols) > 6 else 0)
    ax.set_yticks(range(len(rows)), [str(v) for v in rows])
    ax.set_xlabel(b)
    ax.set_ylabel(a)
    if grid.size <= 144:
        for i, j in itertools.product(range(len(rows)), range(len(cols))):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if grid[i, j] > math.sqrt(top) else "black")
    ax.set_title("time / winner's, best over the other parameters (blank: not tried)", fontsize=10)
    bar = fig.colorbar(image, ax=ax, label="time / winner's")
    _plain_log_ticks(bar.ax.yaxis, 1.0, top)


def key_figure(key: KeyTrials, path: Path) -> Path:
    """Write the two panels of one key to ``path`` (PNG)."""
    plt = matplotlib_pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 1.15]})
    handles = draw_distribution(left, key)
    draw_dependence(fig, right, key)
    fig.suptitle(key.label, fontsize=11)
    if handles:  # below the axes, never over the data
        fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.02, 0.0), ncol=len(handles),
                   frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _write_one(job: tuple[KeyTrials, Path]) -> Path:
    return key_figure(*job)


def write_figures(jobs: list[tuple[KeyTrials, Path]]) -> None:
    """Draw each ``(key, path)``; many pictures are drawn by several processes at once (drawing
    is matplotlib's CPU time, about a quarter second a picture)."""
    workers = min(len(jobs) // 8, os.cpu_count() or 1, 8)
    try:
        if workers < 2:
            for job in jobs:
                key_figure(*job)
            return
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for _ in pool.map(_write_one, jobs, chunksize=4):
                pass
    except OSError as exc:
        raise ValueError(f"cannot write {exc.filename or 'a picture'}: {exc.strerror or exc}") from None

"""Heat maps over the block tile (BM x BN) and bars around the winner: the notebook's figures, drawn with
matplotlib (imported only when drawing) from sweep records."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from .tables import params_text


@dataclass
class HeatPanel:
    """One heat map: value[i][j] for block tile rows[i] x cols[j] (NaN where nothing ran correctly), the
    record behind each cell, and a note for empty cells (the status of the points there)."""
    key: object
    rows: list
    cols: list
    values: list
    best: list
    notes: list


def heat_panels(records, tile: Callable[[Mapping[str, int]], tuple[int, int]], panel: str | None = None,
                value: str = "tflops") -> list[HeatPanel]:
    """Heat-map data over the block tile (BM x BN, from the family's `tile`), one panel per value of the
    `panel` parameter. A cell holds its fastest correct point (several points can share a tile: a
    parameter outside BM, BN and the panel's varies, or two warp layouts give one tile); `value` is the
    record field shown (tflops, pct_cublas, ...). Every panel has the same axes."""
    recs = [r for r in records if not r.is_baseline]
    tiles = [tuple(tile(r.params)) for r in recs]
    rows = sorted({t[0] for t in tiles})
    cols = sorted({t[1] for t in tiles})
    keys = sorted({r.params.get(panel) for r in recs}, key=lambda k: (k is None, k)) if panel else [None]
    out = []
    for key in keys:
        cells: dict[tuple, list] = {}
        for r, t in zip(recs, tiles):
            if panel is None or r.params.get(panel) == key:
                cells.setdefault(t, []).append(r)
        values, best, notes = [], [], []
        for bm in rows:
            vrow, brow, nrow = [], [], []
            for bn in cols:
                here = cells.get((bm, bn), [])
                ok = [r for r in here if r.status == "ok" and r.tflops is not None]
                if ok:
                    b = max(ok, key=lambda r: (r.tflops, r.variant))
                    v = getattr(b, value)
                    vrow.append(float("nan") if v is None else float(v))
                    brow.append(b)
                    nrow.append("")
                else:
                    vrow.append(float("nan"))
                    brow.append(None)
                    nrow.append(Counter(r.status for r in here).most_common(1)[0][0] if here else "")
            values.append(vrow)
            best.append(brow)
            notes.append(nrow)
        out.append(HeatPanel(key, rows, cols, values, best, notes))
    return out


_NOTE = {"invalid": "pruned", "compile_failed": "compile\nfailed", "launch_failed": "launch\nfailed",
         "incorrect": "wrong", "": ""}


def draw_heatmaps(records, tile, panel: str | None = None, title: str = ""):
    """A figure of heat maps: TFLOPS (top row) and % of cuBLAS (bottom row) over BM x BN, one column per
    value of `panel`, one colour scale per row. The fastest cell overall is outlined."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rows_of = [("TFLOPS", heat_panels(records, tile, panel, "tflops"), "viridis", ".0f"),
               ("% of cuBLAS", heat_panels(records, tile, panel, "pct_cublas"), "magma", ".0f")]
    n = len(rows_of[0][1])
    first = rows_of[0][1][0]
    fig, axes = plt.subplots(2, n, figsize=(1.2 + 1.1 * n * max(3, len(first.cols)), 2 * (1 + 0.9 * max(3, len(first.rows)))),
                             squeeze=False, constrained_layout=True)
    best_rec = None
    for p in rows_of[0][1]:
        for brow in p.best:
            for b in brow:
                if b is not None and (best_rec is None or b.tflops > best_rec.tflops):
                    best_rec = b
    for row, (label, panels, cmap, spec) in enumerate(rows_of):
        finite = [v for p in panels for vrow in p.values for v in vrow if not math.isnan(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
        image = None
        for col, p in enumerate(panels):
            ax = axes[row, col]
            colours = plt.get_cmap(cmap).with_extremes(bad="#eeeeee")  # cells where nothing ran correctly
            image = ax.imshow(p.values, cmap=colours, vmin=lo, vmax=hi if hi > lo else lo + 1, aspect="auto")
            ax.set_xticks(range(len(p.cols)))
            ax.set_xticklabels([str(c) for c in p.cols])
            ax.set_yticks(range(len(p.rows)))
            ax.set_yticklabels([str(r) for r in p.rows])
            ax.set_xlabel("BN")
            ax.set_ylabel("BM")
            ax.set_title(f"{panel}={p.key}" if panel else "all points", fontsize=10)
            for i in range(len(p.rows)):
                for j in range(len(p.cols)):
                    v = p.values[i][j]
                    if math.isnan(v):
                        ax.text(j, i, _NOTE.get(p.notes[i][j], p.notes[i][j]), ha="center", va="center",
                                fontsize=7, color="gray")
                    else:
                        bright = (v - lo) / (hi - lo) > 0.6 if hi > lo else True
                        ax.text(j, i, format(v, spec), ha="center", va="center", fontsize=9,
                                color="black" if bright else "white")
                    if best_rec is not None and p.best[i][j] is best_rec:
                        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
        if image is not None:
            fig.colorbar(image, ax=list(axes[row, :]), label=label, shrink=0.9)
    if title:
        fig.suptitle(title)
    return fig


def draw_detail(records, family: str, names: Iterable[str], title: str = ""):
    """Horizontal bars of TFLOPS for the points of a detail sweep, in grid order, labelled by the
    parameters it varies, the fastest in red; points that failed to compile, launch or verify are named
    so, pruned points are only counted (the failures table lists them)."""
    import matplotlib.pyplot as plt

    names = list(names)
    pruned = sum(r.status == "invalid" for r in records if not r.is_baseline)
    recs = [r for r in records if not r.is_baseline and r.status != "invalid"]
    heights = [r.tflops if r.status == "ok" and r.tflops else 0.0 for r in recs]
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.32 * max(1, len(recs))), constrained_layout=True)
    best = max(range(len(recs)), key=lambda i: heights[i]) if recs else None
    colours = ["tab:red" if i == best else "tab:blue" for i in range(len(recs))]
    ax.barh(range(len(recs)), heights, color=colours)
    for i, (r, h) in enumerate(zip(recs, heights)):
        pct = f" ({r.pct_cublas:.0f}% of cuBLAS)" if h and r.pct_cublas is not None else ""
        ax.text(h, i, f" {h:.1f}{pct}" if h else f" {r.status}", va="center", fontsize=8)
    ax.set_yticks(range(len(recs)))
    ax.set_yticklabels([params_text(r.params, names) for r in recs], fontsize=8)
    ax.invert_yaxis()  # grid order, top to bottom
    ax.set_xlabel("TFLOPS")
    ax.set_xlim(0, max(heights + [1.0]) * 1.3)  # room for the labels
    ax.set_title((title or f"{family}: around the winner")
                 + (f"\n({pruned} pruned points: see the failures table)" if pruned else ""), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig

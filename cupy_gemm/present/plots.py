"""Matplotlib figures of sweep records: TFLOPS against problem size, for `cupy-gemm bench --plot`, bench.py and
the notebook. Each function draws on a Figure or Axes it is given or makes its own Figure (never pyplot's
global state), and imports matplotlib only when called."""
from __future__ import annotations

import math

from ..measure.schedule import SweepResult


def bench_plot(result: SweepResult, path: str) -> None:
    """TFLOPS against problem size as a PNG: one panel per (dtype, accumulate type), each family's fastest
    variant as a line next to its cuBLAS row (see `draw_tflops`)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install matplotlib") from None
    panels = list(dict.fromkeys((r.dtype, r.acc) for r in result.records))
    if not panels:
        raise ValueError("--plot: there are no records to draw")
    # a Figure of its own, not pyplot: the caller's matplotlib backend and figures are left alone
    fig = Figure(figsize=(12, 4.5 * len(panels)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False)
    devices = ", ".join(dict.fromkeys(d.get("name", "") for d in result.metadata.get("devices", [])))
    for ax, (dtype, acc) in zip(axes[:, 0], panels):
        rows = [r for r in result.records if r.dtype == dtype and r.acc == acc]
        draw_tflops(ax, rows, f"{dtype}, {acc} accumulation" + (f" on {devices}" if devices else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # "tight": legends right of the axes are kept whole


def shape_label(shape) -> str:
    m, n, k = shape
    return f"{m}³" if m == n == k else f"{m}x{n}x{k}"


def _family_score(rows) -> tuple[int, float]:
    """Shapes where the variant ran correctly, then the geometric mean of its TFLOPS there."""
    ok = [r.tflops for r in rows if r.status == "ok" and r.tflops]
    return len(ok), math.exp(sum(math.log(x) for x in ok) / len(ok)) if ok else 0.0


def draw_tflops(ax, records, title: str = "") -> None:
    """TFLOPS against problem size (shapes ordered by M·N·K) on a matplotlib Axes: per family, its fastest
    variant (correct at the most shapes, then the highest geometric-mean TFLOPS) as a labelled line and
    its other variants faint in the same colour; every cuBLAS row dashed."""
    shapes = sorted({r.shape for r in records}, key=lambda s: (s[0] * s[1] * s[2], s))
    xs = list(range(len(shapes)))

    def series(rows):
        by_shape = {r.shape: r.tflops for r in rows if r.status == "ok" and r.tflops}
        return [by_shape.get(s, float("nan")) for s in shapes]

    groups: dict[str, dict[str, list]] = {}
    for r in records:
        groups.setdefault("cublas" if r.is_baseline else r.family, {}).setdefault(r.variant, []).append(r)
    colour = 0
    for fam, variants in groups.items():
        if fam == "cublas":
            continue
        best = max(variants, key=lambda name: _family_score(variants[name]))
        for name, rows in variants.items():
            if name != best:
                ax.plot(xs, series(rows), color=f"C{colour % 10}", alpha=0.25, linewidth=0.8)
        ax.plot(xs, series(variants[best]), color=f"C{colour % 10}", marker="o", markersize=3, linewidth=1.8,
                label=f"{fam}: {best}" + (f" (best of {len(variants)})" if len(variants) > 1 else ""))
        colour += 1
    for i, (name, rows) in enumerate(groups.get("cublas", {}).items()):
        ax.plot(xs, series(rows), "--", color=("black", "dimgray", "gray")[i % 3], marker="s", markersize=3,
                linewidth=2, label=name)
    ax.set_xticks(xs)
    ax.set_xticklabels([shape_label(s) for s in shapes], rotation=45 if len(shapes) > 6 else 0,
                       ha="right" if len(shapes) > 6 else "center", fontsize=8)
    ax.set_xlabel("M x N x K")
    ax.set_ylabel("TFLOPS")
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if groups:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

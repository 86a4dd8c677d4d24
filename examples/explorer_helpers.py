"""The pieces of tile_explorer.ipynb that are not measurement: suggested grids, the GPU check, progress
lines, heat-map data and drawing, tables (HTML in a notebook, text elsewhere) and the excerpt of a
rendered kernel. They take sweep records (cupy_gemm.results.Record), so the CPU test suite checks them
with made-up records; matplotlib is imported only by the functions that draw.
"""
from __future__ import annotations

import html
import importlib.util
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

_ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("cupy_gemm") is None and (_ROOT / "cupy_gemm" / "__init__.py").is_file():
    sys.path.insert(0, str(_ROOT))  # a checkout used without `pip install`: import the package beside us


# ---- what to sweep -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Suggestion:
    """A small grid for one family, about 20-30 points that run in a minute or two on an H100/H200.

    grid    values per parameter for the heat maps (parameters left out keep the family's defaults);
    panel   the parameter drawn as one heat map per value (None: one heat map);
    detail  parameters varied around the winning point (BK, padding, swizzle, ...): every other parameter
            keeps the winner's value."""
    grid: Mapping[str, list]
    panel: str | None
    detail: Mapping[str, list]


SUGGESTIONS = {
    # block tile = (WARPS_M * WARP_TILE_M * 16) x (WARPS_N * WARP_TILE_N * 8): 2x4 warps, warp tiles of 2-8
    # m16 by 2-8 n8 mma tiles; swizzled shared memory and register double-buffering as the fastest
    # catalogue kernels use them
    "mma": Suggestion(
        grid={"WARP_TILE_M": [2, 4, 8], "WARP_TILE_N": [2, 4, 8], "STAGES": [2, 3, 4], "BK": [32],
              "A_PAD": [0], "B_PAD": [0], "SMEM_SWIZZLE": [1], "RBUF": [1], "B_X4": [1], "SWIZZLE": [2048]},
        panel="STAGES",
        detail={"BK": [16, 32, 64], "SMEM_SWIZZLE": [0, 1], "A_PAD": [0, 8], "B_PAD": [0, 8]}),
    # block tile = (WARPS_M * FRAGS_M * WM) x (WARPS_N * FRAGS_N * WN) with 16x16 fragments and 4x2 warps
    "wmma": Suggestion(
        grid={"FRAGS_M": [1, 2, 4], "FRAGS_N": [2, 4, 8], "STAGES": [2, 3, 4], "BK": [32], "ASYNC": [1],
              "DSMEM": [1]},
        panel="STAGES",
        detail={"BK": [16, 32, 64], "A_PAD": [0, 8], "B_PAD": [0, 8]}),
    "wgmma": Suggestion(
        grid={"BM": [128, 256], "BN": [64, 128, 256], "STAGES": [3, 4, 5]},
        panel="STAGES",
        detail={"CONSUMERS": [1, 2], "TMA_STORE": [0, 1], "SWIZZLE": [0, 2048]}),
    "hgemm_simt": Suggestion(
        grid={"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [8, 16]},
        panel="BK",
        detail={"PAD": [0, 8], "BCF": [0, 1], "DBUF": [0, 1]}),
    "sgemm_simt": Suggestion(
        grid={"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [8, 16], "BCF": [1], "DBUF": [1]},
        panel="BK",
        detail={"PAD": [0, 4], "BCF": [0, 1], "ASYNC": [0, 1]}),
    "sliced_k": Suggestion(
        grid={"BM": [16, 32, 64], "BN": [16, 32, 64], "BK": [16, 32]},
        panel="BK",
        detail={"PAD": [0, 1, 8], "SWIZZLE": [0, 2048]}),
}


def suggestion(family: str) -> Suggestion:
    if family not in SUGGESTIONS:
        raise ValueError(f"no suggested grid for family {family!r} (there are for {sorted(SUGGESTIONS)}): set "
                         f"GRID, PANEL and DETAIL in the first cell (`cupy-gemm show` lists its parameters)")
    return SUGGESTIONS[family]


def resolve(family: str, grid=None, panel=None, detail=None) -> tuple[dict, str | None, dict]:
    """(grid, panel, detail): what the first cell gives, the family's suggestion for the rest."""
    if grid is None or detail is None:
        s = suggestion(family)
        panel = s.panel if panel is None and grid is None else panel
        grid = dict(s.grid) if grid is None else grid
        detail = dict(s.detail) if detail is None else detail
    return dict(grid), panel, dict(detail)


def cli_command(family: str, grid: Mapping[str, Iterable[int]], dtype: str, acc: str, shape: str) -> str:
    """The `cupy-gemm sweep` command that measures the same grid."""
    sets = " ".join(f"--set {name}={','.join(map(str, values))}" for name, values in grid.items())
    return f"cupy-gemm sweep {family} --dtype {dtype} --acc {acc} --shape {shape} {sets} --out {family}.csv"


def around(params: Mapping[str, int], detail: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    """A grid that keeps every parameter of `params` and varies those of `detail`."""
    grid = {name: [value] for name, value in params.items()}
    grid.update({name: list(values) for name, values in detail.items()})
    return grid


# ---- the GPU ---------------------------------------------------------------------------------------------

class NoGPUError(RuntimeError):
    pass


def require_gpu() -> dict:
    """The current CUDA device, described; NoGPUError (never a silent fallback) when there is none."""
    try:
        import cupy
    except ImportError as e:
        raise NoGPUError(f"tile_explorer needs a CUDA GPU and CuPy, and CuPy does not import ({e}). Install "
                         f"cupy-gemm (`pip install \".[notebook]\"`) on a machine with an NVIDIA GPU.") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        why = "no device"
    except Exception as e:  # CUDARuntimeError: no driver, driver too old, no device
        count, why = 0, f"{type(e).__name__}: {e}"
    if count < 1:
        raise NoGPUError(f"tile_explorer needs a CUDA GPU: CuPy finds none ({why}). Run the notebook on a "
                         f"machine with an NVIDIA GPU (compute capability 8.0 or newer for the tensor-core "
                         f"families; 9.0 for wgmma).")
    rt = cupy.cuda.runtime
    dev = cupy.cuda.Device()
    props = rt.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

    def version(v: int) -> str:
        return f"{v // 1000}.{v % 1000 // 10}"
    return {"id": dev.id, "name": name, "cc": int(dev.compute_capability), "sms": int(props["multiProcessorCount"]),
            "memory_gib": props["totalGlobalMem"] / 2**30, "driver": version(rt.driverGetVersion()),
            "runtime": version(rt.runtimeGetVersion()), "cupy": cupy.__version__, "count": count}


def describe_gpu(info: Mapping) -> str:
    cc = f"{info['cc'] // 10}.{info['cc'] % 10}"
    return (f"GPU {info['id']}: {info['name']} (compute capability {cc}, {info['sms']} SMs, "
            f"{info['memory_gib']:.0f} GiB), driver {info['driver']}, CUDA runtime {info['runtime']}, "
            f"CuPy {info['cupy']}")


# ---- progress --------------------------------------------------------------------------------------------

class Progress:
    """An on_event callback for cupy_gemm.sweep.measure: one line when the run starts and one at each
    quarter of its measurements, so a notebook's output stays short."""

    def __init__(self, label: str, out=None):
        self.label, self.out = label, out
        self.total = self.done = 0
        self.started = time.perf_counter()
        self.marks: set[int] = set()

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stdout)

    def __call__(self, kind: str, data) -> None:
        if kind == "start":
            self.total = data["measurements"]
            self.marks = {max(1, round(self.total * q / 4)) for q in (1, 2, 3, 4)} if self.total else set()
            reused = f", {data['resumed']} reused from earlier runs" if data.get("resumed") else ""
            self._print(f"{self.label}: {data['points']} points, {data['valid']} valid, {data['compiles']} to "
                        f"compile, {self.total} measurements{reused}")
        elif kind == "record" and data.status != "invalid":
            self.done += 1
            if self.done in self.marks:
                self._print(f"  {self.done}/{self.total} measured ({time.perf_counter() - self.started:.0f} s)")
        elif kind == "device" and data["state"] != "ready":
            self._print(f"  GPU {data['device']} worker {data['state']}: {data['message']}")


# ---- picking records -------------------------------------------------------------------------------------

def records_of(result, pts) -> list:
    """The kernel records of these points in a result (a run given `resume=` also returns the earlier
    records of other points)."""
    names = {p.name for p in pts}
    return [r for r in result.kernels() if r.variant in names]


def winner(records):
    """The fastest correct kernel record; a clear error when nothing ran correctly."""
    from cupy_gemm import results
    ranked = results.ranked(records)
    if not ranked:
        counts = Counter(r.status for r in records if not r.is_baseline)
        raise RuntimeError(f"no point ran correctly ({dict(counts)}); the reasons are in failures(records)")
    return ranked[0][0]


def best_per_family(records) -> list:
    """The fastest correct kernel record of each family, in order of first appearance."""
    best: dict[str, object] = {}
    for r in records:
        if r.is_baseline or r.status != "ok" or r.tflops is None:
            continue
        if r.family not in best or r.tflops > best[r.family].tflops:
            best[r.family] = r
    order = list(dict.fromkeys(r.family for r in records))
    return [best[f] for f in order if f in best]


def baselines_text(records) -> str:
    lines = []
    for b in (r for r in records if r.is_baseline):
        shape = "x".join(map(str, b.shape))
        if b.status == "ok":
            lines.append(f"{b.variant} at {shape}: {b.time_ms:.4f} ms, {b.tflops:.1f} TFLOPS")
        else:
            lines.append(f"{b.variant} at {shape}: {b.status}: {b.reason}")
    return "\n".join(lines)


# ---- labels and tables -----------------------------------------------------------------------------------

def params_text(params: Mapping[str, int], names: Iterable[str]) -> str:
    return " ".join(f"{k}={params[k]}" for k in names if k in params)


def point_label(r, family: str | None = None, swept: Iterable[str] = ()) -> str:
    """A record's swept parameters when it belongs to the explored family (with the catalogue name it
    matches), otherwise its variant name."""
    swept = list(swept)
    if r.family == family and swept and not r.is_baseline:
        text = params_text(r.params, swept)
        return f"{text} ({r.catalogue})" if r.catalogue else text
    return r.variant


def swept_names(grid: Mapping[str, Iterable[int]]) -> list[str]:
    """The parameters a grid gives more than one value."""
    return [name for name, values in grid.items() if len(list(values)) > 1]


def _fmt(value, spec: str) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


class Table:
    """Rows of text with an HTML form for notebooks (_repr_html_) and an aligned text form otherwise."""

    def __init__(self, columns: list[str], rows: list[list], title: str = ""):
        self.columns, self.title = list(columns), title
        self.rows = [["" if v is None else str(v) for v in row] for row in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def _repr_html_(self) -> str:
        out = ["<table>"]
        if self.title:
            out.append(f"<caption style=\"text-align:left\">{html.escape(self.title)}</caption>")
        out.append("<thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in self.columns) + "</tr></thead>")
        out.append("<tbody>")
        for row in self.rows:
            cells = "".join(f"<td style=\"text-align:left;white-space:pre-wrap\">{html.escape(v)}</td>"
                            for v in row)
            out.append(f"<tr>{cells}</tr>")
        out.append("</tbody></table>")
        return "\n".join(out)

    def __repr__(self) -> str:
        flat = [[" ".join(v.split()) for v in row] for row in self.rows]  # one line per row
        widths = [min(100, max([len(c)] + [len(row[i]) for row in flat])) for i, c in enumerate(self.columns)]
        lines = [self.title] if self.title else []
        lines.append("  ".join(c.ljust(w) for c, w in zip(self.columns, widths)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        for row in flat:
            lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
        if not self.rows:
            lines.append("(none)")
        return "\n".join(lines)


def ranked_table(records, family: str | None = None, swept: Iterable[str] = (), top: int = 10,
                 title: str = "") -> Table:
    """The fastest correct kernels, as `cupy-gemm sweep` ranks them (≈: the interquartile interval overlaps
    the next row's, so their order is not reliable)."""
    from cupy_gemm import results
    ranked = results.ranked(records)
    shapes = {r.shape for r, _ in ranked}
    rows = []
    for i, (r, tied) in enumerate(ranked[:top]):
        rows.append([f"{i + 1}{'≈' if tied else ''}", point_label(r, family, swept)]
                    + (["x".join(map(str, r.shape))] if len(shapes) > 1 else [])
                    + [_fmt(r.time_ms, ".4f"), _fmt(r.tflops, ".1f"), _fmt(r.pct_cublas, ".1f"),
                       _fmt(r.registers, "d"), _fmt(((r.static_smem or 0) + (r.dynamic_smem or 0)) / 1024, ".1f"),
                       _fmt((r.spill_stores or 0) + (r.spill_loads or 0), "d"), _fmt(r.occupancy, ".0%")])
    columns = ["#", "point"] + (["shape"] if len(shapes) > 1 else []) + \
        ["ms", "TFLOPS", "% cuBLAS", "regs", "smem KiB", "spill B", "occupancy"]
    return Table(columns, rows, title or f"fastest {min(top, len(ranked))} of {len(ranked)} correct points")


def failures(records, family: str | None = None, swept: Iterable[str] = ()) -> Table:
    """Every point that did not run correctly (pruned by a rule, failed to compile or launch, or gave a
    wrong answer) with its reason; a point failing the same way at several shapes is one row."""
    groups: dict[tuple, list] = {}
    for r in records:
        if r.status in ("ok", "compiled"):
            continue
        key = (r.family, r.variant, r.status, r.reason)
        groups.setdefault(key, []).append(r)
    rows = []
    for (_, _, status, reason), rs in groups.items():
        shapes = ", ".join(dict.fromkeys("x".join(map(str, r.shape)) for r in rs))
        rows.append([point_label(rs[0], family, swept), shapes, status, reason])
    counts = Counter(row[2] for row in rows)
    summary = ", ".join(f"{k} {v}" for k, v in counts.most_common())
    return Table(["point", "shapes", "status", "reason"], rows,
                 f"{len(rows)} points failed or were pruned" + (f" ({summary})" if summary else ""))


def resource_table(r) -> Table:
    """ptxas's report for a measured point, with the launch it implies."""
    spills = (r.spill_stores or 0) + (r.spill_loads or 0)
    rows = [["variant", r.variant], ["catalogue name", r.catalogue or "(not in the catalogue)"],
            ["parameters", params_text(r.params, r.params)],
            ["compiled for", r.arch], ["threads per block", _fmt(r.threads, "d")],
            ["registers per thread", _fmt(r.registers, "d")],
            ["static shared memory", f"{_fmt(r.static_smem, 'd')} B"],
            ["dynamic shared memory", f"{_fmt(r.dynamic_smem, 'd')} B"],
            ["local memory (stack frame)", f"{_fmt(r.local_bytes, 'd')} B"],
            ["spills (stores + loads)", f"{_fmt(r.spill_stores, 'd')} + {_fmt(r.spill_loads, 'd')} B"
             + ("" if spills else "  (none)")],
            ["resident blocks per SM", _fmt(r.blocks_per_sm, "d")], ["occupancy (warp slots)", _fmt(r.occupancy, ".0%")],
            ["time", f"{_fmt(r.time_ms, '.4f')} ms at {'x'.join(map(str, r.shape))} "
                     f"({_fmt(r.tflops, '.1f')} TFLOPS, {_fmt(r.pct_cublas, '.1f')}% of {r.cublas or 'cuBLAS'})"],
            ["error / bound", f"{_fmt(r.error, '.3f')} at the shape, {_fmt(r.ragged_error, '.3f')} at "
                              f"{r.ragged_shape or 'its ragged neighbour'} (<= 1 passes)"]]
    return Table(["", "value"], rows, "resources of the winning point")


def size_table(records) -> Table:
    """TFLOPS (and % of cuBLAS) of each variant at each shape, shapes ordered by M·N·K."""
    shapes = sorted({r.shape for r in records}, key=lambda s: (s[0] * s[1] * s[2], s))
    variants: dict[str, list] = {}
    for r in records:
        variants.setdefault(r.variant, []).append(r)
    rows = []
    for name, rs in variants.items():
        by_shape = {r.shape: r for r in rs}
        cells = []
        for s in shapes:
            r = by_shape.get(s)
            if r is None:
                cells.append("")
            elif r.status != "ok":
                cells.append(r.status)
            else:
                cells.append(_fmt(r.tflops, ".1f") + ("" if r.pct_cublas is None else f" ({r.pct_cublas:.0f}%)"))
        rows.append([rs[0].family, name] + cells)
    return Table(["family", "variant"] + ["x".join(map(str, s)) for s in shapes], rows,
                 "TFLOPS (% of cuBLAS) per shape")


# ---- heat maps -------------------------------------------------------------------------------------------

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


def short_names(records, family: str, names: Iterable[str]) -> list:
    """Copies of the records in which a swept point outside the catalogue is named by the parameters in
    `names` instead of all of them (for legends and tables)."""
    import dataclasses
    names = list(names)
    out = []
    for r in records:
        if r.family == family and not r.is_baseline and not r.catalogue:
            r = dataclasses.replace(r, variant=f"swept: {params_text(r.params, names)}")
        out.append(r)
    return out


# ---- the winner's source ---------------------------------------------------------------------------------

def kernel_excerpt(source: str, params: Mapping[str, int], lines: int = 60) -> str:
    """About `lines` lines of a rendered kernel where the family's own template begins (its comment and
    parameter constants), after the shared helpers it includes; the first `lines` lines when no line
    declares one of the parameters."""
    text = source.splitlines()
    start = None
    for i, line in enumerate(text):
        stripped = line.strip()
        if stripped.startswith("constexpr int ") and any(
                stripped[len("constexpr int "):].startswith(f"{name} =") or f" {name} =" in stripped
                for name in params):
            start = i
            break
    if start is None:
        return "\n".join(text[:lines])
    while start > 0 and text[start - 1].lstrip().startswith("//"):
        start -= 1  # the template's comment above its parameters
    header = [line for line in text[:5] if line.startswith("// Rendered variant")]
    excerpt = text[start:start + lines]
    out = header + ([f"// … {start} lines of shared helpers (templates/common/*.cuh) …"] if start else []) + excerpt
    if start + lines < len(text):
        out.append(f"// … {len(text) - start - lines} more lines")
    return "\n".join(out)

"""The notebook's views of sweep records: tables with an HTML form for Jupyter and an aligned text form
elsewhere, one-line progress for a notebook cell, the picks it makes (winner, best per family) and the
excerpt of a rendered kernel. They take cupy_gemm.measure.results.Record, so the CPU tests check them with
made-up records."""
from __future__ import annotations

import dataclasses
import html
import math
import sys
import time
from collections import Counter
from typing import Iterable, Mapping

from ..measure import results
from .tables import params_text


class Progress:
    """An on_event callback for cupy_gemm.measure.sweep.measure: one line when the run starts and one at each
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


def short_names(records, family: str, names: Iterable[str]) -> list:
    """Copies of the records in which a swept point outside the catalogue is named by the parameters in
    `names` instead of all of them (for legends and tables)."""
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

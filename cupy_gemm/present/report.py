"""Markdown tables of result files: what `cupy-gemm report` prints and docs/PERFORMANCE.md holds."""
from __future__ import annotations

from typing import Iterable

from ..measure.results import Record


def markdown(records: Iterable[Record]) -> str:
    """Per-family markdown tables: a row per variant, a column per shape the family was measured at, cells
    "TFLOPS (% of cuBLAS)"; the cuBLAS rows last. Records of several files merge (a later record of the
    same point wins)."""
    cells: dict[tuple, dict[tuple, Record]] = {}
    for r in records:
        group = "cuBLAS" if r.is_baseline else r.family
        cells.setdefault((group, r.variant, r.dtype, r.acc), {})[(r.M, r.N, r.K)] = r
    out = []
    for group in dict.fromkeys(g for g, *_ in sorted(cells, key=lambda key: key[0] == "cuBLAS")):
        rows = {key: row for key, row in cells.items() if key[0] == group}
        order = sorted({s for row in rows.values() for s in row}, key=lambda s: (s[0] * s[1] * s[2], s))
        out += [f"### {group}", "",
                "| variant | dtype / acc | " + " | ".join("×".join(map(str, s)) for s in order) + " |",
                "| --- | --- | " + " | ".join("---" for _ in order) + " |"]
        for (_, variant, dtype, acc), row in rows.items():
            out.append(f"| `{variant}` | {dtype} / {acc} | " + " | ".join(_md_cell(row.get(s)) for s in order) + " |")
        out.append("")
    return "\n".join(out)


def _md_cell(r: Record | None) -> str:
    if r is None:
        return ""
    if r.status != "ok" or r.tflops is None:
        return r.status
    return f"{r.tflops:.1f}" + (f" ({r.pct_cublas:.0f}%)" if r.pct_cublas is not None and not r.is_baseline else "")

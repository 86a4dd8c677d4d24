"""The seed READMEs' benchmark layout as plain text: one block per shape, grouped by family, each row with its
time, TFLOPS and % of cuBLAS, and `(+x%)` where a row beats every row above it."""
from __future__ import annotations

import dataclasses

from ..measure.results import Record
from .tables import fmt


def seed_block(dtype: str, shape, records, baselines, pts, width: int, line: int = 118) -> str:
    """One shape of the benchmark, laid out like the seed READMEs' tables: grouped by family, each row with
    its time, TFLOPS and % of cuBLAS, and `(+x%)` where a row beats every row above it."""
    by_name = {r.variant: r for r in records}
    out = ["-" * line, f"{f'M={shape[0]}, N={shape[1]}, K={shape[2]}  ({dtype})':^{line}}"]
    best = 0.0
    family = None
    for p in pts:
        r = by_name.get(p.name)
        if r is None:
            continue
        if p.family != family:
            family = p.family
            out.append(f"{family:-^{line}}")
        out.append(_seed_row(r, width, best))
        if r.status == "ok" and r.tflops:
            best = max(best, r.tflops)
    if baselines:
        out.append(f"{'cuBLAS':-^{line}}")
        several = len({b.device for b in baselines}) > 1  # one row per GPU of a multi-GPU run
        for b in sorted(baselines, key=lambda b: (b.variant, b.device if b.device is not None else -1)):
            label = f"{b.variant} (GPU {b.device})" if several else b.variant
            out.append(_seed_row(dataclasses.replace(b, variant=label), width, best))
            if b.status == "ok" and b.tflops:
                best = max(best, b.tflops)
    out.append("-" * line)
    return "\n".join(out)


def _seed_row(r: Record, width: int, best: float) -> str:
    name = f"{r.variant:>{width}}"
    if r.status != "ok":
        reason = (r.reason.splitlines() or [""])[0]
        return f"{name}: {r.status}: {reason[:80]}"
    text = f"{name}: time:{r.time_ms:.6f}ms (±{100 * (r.spread or 0) / 2:.1f}%), TFLOPS: {fmt(r.tflops, '<7.2f')}"
    if not r.is_baseline and r.pct_cublas is not None:
        text += f" {r.pct_cublas:6.1f}% of cuBLAS"
    if best and r.tflops and r.tflops > best:
        text += f" (+{100 * (r.tflops / best - 1):.2f}%)"
    return text

"""Markdown tables of the corpus benchmark for docs/PERFORMANCE.md: per precision a row per shape (the
variant the default picked, GPU µs per call of ours, cupy.matmul and torch.matmul, our TFLOPS, the two
ratios, our share of the copy bandwidth where the shape is memory-bound and of its traffic floor's speed)
closed by the geometric mean and the minimum of each ratio; then the host cost per call, and for a run over
candidate variants the fastest of each shape."""
from __future__ import annotations

from ..measure import corpus_records as records_

SHAPE_HEADER = ("shape", "M×N×K", "variant", "µs ours", "µs cupy", "µs torch", "TFLOPS", "×cupy", "×torch",
                "%HBM", "%floor")
HOST_HEADER = ("dtype", "M×N×K", "variant", "µs/call ours", "µs/call cupy", "µs/call torch", "×cupy", "×torch")


def _num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header, rows) -> list[str]:
    return [_row(header), _row("---" for _ in header), *(_row(r) for r in rows)]


def _mnk(r: dict) -> str:
    return f"{r['M']}×{r['N']}×{r['K']}"


def _shape_row(r: dict) -> list[str]:
    ok = r["status"] == "ok"
    return [r["name"], _mnk(r), f"`{r['variant']}`", _num(r["ours_us"]) if ok else r["status"], _num(r["cupy_us"]),
            _num(r["torch_us"]), _num(r["ours_tflops"]) if ok else "", _num(r["x_cupy"], 2), _num(r["x_torch"], 2),
            _num(r["ours_hbm_pct"], 0) if ok and r.get("memory_bound") else "",
            _num(r.get("ours_floor_pct"), 0) if ok else ""]


def _summary_rows(stats: dict) -> list[list[str]]:
    rows = []
    for label in ("geomean", "min"):
        cells = {key: _num(stats[key][label], 2) for key in records_.RATIOS}
        where = ", ".join(f"{key[2:]}: {stats[key]['min_at']}" for key in records_.RATIOS
                          if label == "min" and stats[key]["min_at"])
        rows.append([f"**{label}**", where, "", "", "", "", "", cells["x_cupy"], cells["x_torch"], "", ""])
    return rows


def heading(meta: dict) -> str:
    """One line of provenance: GPU, driver, library versions, date, and the copy bandwidth."""
    bandwidth = meta.get("hbm_bytes_per_s")
    parts = [meta.get("gpu") or "unknown GPU", f"driver {meta.get('driver') or '?'}", f"CuPy {meta.get('cupy') or '?'}",
             f"NVRTC {meta.get('nvrtc') or '?'}", f"torch {meta.get('torch') or 'absent'}", meta.get("time", "")[:10]]
    if bandwidth:
        parts.append(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    return ", ".join(p for p in parts if p)


def shape_tables(records: list[dict]) -> str:
    """Per precision: the corpus records, then the geometric mean and minimum of ×cupy and ×torch."""
    summary = records_.summarise(records)
    out = []
    for mode in records_.DTYPES:
        rows = [r for r in records if r["dtype"] == mode and r["kind"] == "corpus"]
        if not rows:
            continue
        out += [f"#### {mode}", "", *_table(SHAPE_HEADER, [_shape_row(r) for r in rows] + _summary_rows(summary[mode]))]
        decode, floor = summary[mode]["hbm_pct_m16"], summary[mode]["floor_pct_m16"]
        if decode["count"]:
            out.append(f"\nShapes with M ≤ 16: our share of the copy bandwidth has a geometric mean of "
                       f"{decode['geomean']:.0f}% and a minimum of {decode['min']:.0f}% ({decode['min_at']}).")
        if floor["count"]:
            out.append(f"Against their traffic floor (A and B read, C written by a plain kernel in the same rounds), "
                       f"ours runs at {floor['geomean']:.0f}% of its speed in geometric mean, {floor['min']:.0f}% at "
                       f"least ({floor['min_at']}).")
        if summary[mode]["failed"]:
            out.append(f"\nNot counted in the means (ours failed or was wrong): {', '.join(summary[mode]['failed'])}.")
        out.append("")
    return "\n".join(out)


def host_table(records: list[dict]) -> str:
    """Host cost per call (a loop of calls, one synchronisation) for every precision, with per-precision
    geometric mean and minimum of the ratios."""
    rows = []
    summary = records_.summarise(records)
    for mode in records_.DTYPES:
        host = [r for r in records if r["dtype"] == mode and r["kind"] == "host"]
        rows += [[mode, _mnk(r), f"`{r['variant']}`", _num(r["ours_us"]), _num(r["cupy_us"]), _num(r["torch_us"]),
                  _num(r["x_cupy"], 2), _num(r["x_torch"], 2)] for r in host]
        if host:
            stats = summary[mode]["host"]
            rows += [[mode, f"**{label}**", "", "", "", "", _num(stats["x_cupy"][label], 2),
                      _num(stats["x_torch"][label], 2)] for label in ("geomean", "min")]
    return "\n".join(_table(HOST_HEADER, rows)) if rows else ""


CANDIDATE_HEADER = ("dtype", "shape", "M×N×K", "fastest", "µs", "µs cupy", "×cupy", "×torch", "correct / tried")


def candidate_table(records: list[dict]) -> str:
    """Per precision and shape, the fastest correct candidate variant: what a dispatch table would hold."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r["kind"] == "candidate":
            groups.setdefault((r["dtype"], r["name"]), []).append(r)
    rows = []
    for (mode, name), group in groups.items():
        best = next((r for r in group if r.get("best")), None)
        ok = sum(r["status"] == "ok" for r in group)
        first = best or group[0]
        rows.append([mode, name, _mnk(first), f"`{best['variant']}`" if best else "none",
                     _num(best["ours_us"]) if best else "", _num(first["cupy_us"]),
                     _num(best["x_cupy"], 2) if best else "", _num(best["x_torch"], 2) if best else "",
                     f"{ok} / {len(group)}"])
    return "\n".join(_table(CANDIDATE_HEADER, rows)) if rows else ""


def markdown(meta: dict, records: list[dict]) -> str:
    """The whole section: provenance line, the per-precision shape tables, the host-cost table."""
    layout = " B column-major: x @ W.T with W stored N×K." if meta.get("settings", {}).get("b_layout") == "col" else ""
    parts = [f"Measured on {heading(meta)}. Command: `{meta.get('command', '')}`.{layout}", "", shape_tables(records)]
    host, chosen = host_table(records), candidate_table(records)
    if host:
        parts += ["#### Host cost per call", "", host, ""]
    if chosen:
        parts += ["#### Fastest candidate per shape", "", chosen, ""]
    return "\n".join(parts)


def markdown_file(path) -> str:
    """The section for a corpus.json written by cupy_gemm.measure.corpus_records.write."""
    return markdown(*records_.read(path))

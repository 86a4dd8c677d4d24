"""Rich tables and summary lines of sweep records. User text (names, reasons, parameters) goes in as
rich.text.Text, never as markup, and long names fold onto a second line instead of being cut with "…"."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..measure import results
from ..measure.schedule import SweepResult
from ..measure.space import Point

STATUS_STYLE = {"ok": "green", "invalid": "yellow", "compile_failed": "red", "launch_failed": "red",
                "incorrect": "magenta", "compiled": "cyan"}


def fmt(value, spec: str = ".3f", empty: str = "") -> str:
    return empty if value is None else format(value, spec)


def params_text(params: dict, names) -> str:
    return " ".join(f"{k}={params[k]}" for k in names if k in params)


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def new_table(title: str, columns, left=(), **kw) -> Table:
    """A table whose `left` columns are text (left-aligned, folded when too long) and the rest numbers."""
    table = Table(title=Text(title), title_justify="left", **kw)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right", overflow="fold")
    return table


def top_table(records, top: int, swept: list[str], title: str, gpu: str | None = None) -> Table:
    """The fastest `ok` records (of one GPU model); ±% is half the interquartile range relative to the median."""
    ranked = results.ranked(records, gpu)
    shapes = list(dict.fromkeys(r.shape for r, _ in ranked))
    columns = ["#", "parameters" if swept else "variant"] + (["shape"] if len(shapes) > 1 else []) + \
        ["ms", "±%", "TFLOPS", "%cuBLAS", "err", "regs", "smem", "spill", "occ"]
    table = new_table(f"{title} (≈: interval overlaps the next row's)" if ranked else title, columns,
                      left=("variant", "parameters", "shape"))
    for i, (r, tied) in enumerate(ranked[:top]):
        label = Text(params_text(r.params, swept) if swept else r.variant)
        if r.catalogue and swept:
            label.append(f" ({r.catalogue})", style="dim")
        row = [f"{i + 1}{'≈' if tied else ''}", label] + (["x".join(map(str, r.shape))] if len(shapes) > 1 else [])
        errors = [x for x in (r.error, r.ragged_error) if x is not None]
        row += [f"{r.time_ms:.4f}", fmt(None if r.spread is None else 50 * r.spread, ".1f"), fmt(r.tflops, ".2f"),
                fmt(r.pct_cublas, ".1f"), fmt(max(errors) if errors else None, ".2f"),
                fmt(r.registers, "d"), fmt((r.static_smem or 0) + (r.dynamic_smem or 0), "d"),
                fmt((r.spill_stores or 0) + (r.spill_loads or 0), "d"), fmt(r.occupancy, ".0%")]
        table.add_row(*row)
    return table


def top_tables(records, top: int, swept: list[str], title: str) -> list[Table]:
    """top_table per GPU model: timings of different models are never ranked together."""
    models = results.gpu_models(r for r in records if r.status == "ok" and not r.is_baseline)
    if len(models) <= 1:
        return [top_table(records, top, swept, title)]
    return [top_table(records, top, swept, f"{title} on {model}", model) for model in models]


def summary_lines(result: SweepResult, baselines: bool = True) -> list[Text]:
    """Counts per status, the cuBLAS rows, and the commonest reasons points failed."""
    counts = Text("points: ")
    for i, (status, n) in enumerate(result.counts().items()):
        counts.append(", " if i else "").append(status_text(status)).append(f" {n}")
    lines = [counts]
    for b in result.baselines() if baselines else ():
        where = f"GPU {b.device}" + (f" of {b.host}" if b.host else "")
        if b.status == "ok":
            lines.append(Text(f"{b.variant} at {b.M}x{b.N}x{b.K} on {where}: {b.time_ms:.4f} ms, "
                              f"{b.tflops:.2f} TFLOPS"))
        else:
            lines.append(Text(f"{b.variant}: {b.status} ", style="red").append(b.reason, style=""))
    reasons: dict[tuple, int] = {}
    for r in result.kernels():
        if r.status not in ("ok", "compiled"):
            first = r.reason.splitlines()[0] if r.reason else ""
            reasons[(r.status, first)] = reasons.get((r.status, first), 0) + 1
    for (status, reason), n in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
        lines.append(Text("  ").append(status_text(status)).append(f" ×{n}: {reason}"))
    return lines


def dry_run_table(pts: list[Point], swept: list[str], limit: int = 500) -> Table:
    table = new_table(f"{len(pts)} points, {sum(p.valid for p in pts)} valid", ("#", "parameters", "status", "reason"),
                      left=("parameters", "status", "reason"))
    for p in pts[:limit]:
        label = params_text(p.params, swept) + (f" ({p.catalogue})" if p.catalogue else "")
        status = Text("valid", style="green") if p.valid else Text("invalid", style="yellow")
        table.add_row(str(p.index), Text(label), status, Text(p.reason))
    return table


def pruned_line(pts: list[Point]) -> str:
    reasons: dict[str, int] = {}
    for p in pts:
        if not p.valid:
            reasons[p.param] = reasons.get(p.param, 0) + 1
    return "pruned by: " + ", ".join(f"{k} ×{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])) \
        if reasons else ""


def compiled_table(result: SweepResult, swept: list[str]) -> Table:
    table = new_table(f"compiled for {result.metadata.get('arch')}",
                      ("parameters", "status", "regs", "smem", "local", "spill", "occ", "s"), left=("parameters", "status"))
    seen = set()
    for r in result.kernels():
        if r.variant in seen:
            continue
        seen.add(r.variant)
        table.add_row(Text(params_text(r.params, swept) or r.variant), status_text(r.status),
                      fmt(r.registers, "d"), fmt((r.static_smem or 0) + (r.dynamic_smem or 0), "d"),
                      fmt(r.local_bytes, "d"), fmt((r.spill_stores or 0) + (r.spill_loads or 0), "d"),
                      fmt(r.occupancy, ".0%"), fmt(r.compile_s, ".1f"))
    return table


def tune_table(found, title: str) -> Table:
    table = new_table(title, ("shape", "winner", "ms", "TFLOPS", "vs default", "% cuBLAS", "bucket key"),
                      left=("shape", "winner", "bucket key"))
    for f in found:
        w, d = f.winner, f.default
        if w is None:
            table.add_row("x".join(map(str, f.shape)), Text("nothing ran correctly", style="red"), "", "", "", "",
                          Text(f.key))
            continue
        vs = f"{d.time_ms / w.time_ms:.2f}×" if d is not None and d.status == "ok" else "n/a"
        table.add_row("x".join(map(str, f.shape)), Text(w.variant), f"{w.time_ms:.4f}", f"{w.tflops:.2f}", vs,
                      fmt(w.pct_cublas, ".1f"), Text(f.key))
    return table


def tuned_table(entries, title: str) -> Table:
    """Entries of `cupy-gemm tune`'s default mode: the winner against the default's choice and cupy.matmul."""
    table = new_table(title, ("shape", "winner", "µs", "default's choice", "µs ", "× default", "× cupy.matmul"),
                      left=("shape", "winner", "default's choice"))
    for e in entries:
        us, default_us, cupy_us = (e[key] * 1e3 if e.get(key) else None
                                   for key in ("time_ms", "default_ms", "cublas_ms"))
        table.add_row("x".join(map(str, e["shape"])), Text(e["variant"]), fmt(us, ".1f"), Text(e["default"]),
                      fmt(default_us, ".1f"), fmt(default_us / us if default_us else None, ".2f"),
                      fmt(cupy_us / us if cupy_us else None, ".2f"))
    return table


def tuning_entries_table(entries, title: str) -> Table:
    table = new_table(title, ("key", "variant", "shape", "ms", "default ms", "cuBLAS ms", "tuned", "valid"),
                      left=("key", "variant", "shape", "tuned", "valid"))
    for e in entries:
        table.add_row(Text(e["key"]), Text(e["variant"]), "x".join(map(str, e["shape"])), fmt(e.get("time_ms"), ".4f"),
                      fmt(e.get("default_ms"), ".4f"), fmt(e.get("cublas_ms"), ".4f"), e.get("tuned_at", ""),
                      Text("yes", style="green") if e["valid"] else Text("stale (template changed)", style="yellow"))
    return table

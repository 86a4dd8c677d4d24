"""`cupy-gemm sweep | bench | tune`: argument parsing and rich output over cupy_gemm.sweep and cupy_gemm.tuning.

cli.py calls `add_commands(subparsers)` while building its parser and `run_command(args)` for these
commands; bench.py builds its own parser with `add_bench_arguments` and calls `run_bench`.
"""
from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import math
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import config, registry, results, sweep, timing, tuning
from .errors import CupyGemmError

COMMANDS = ("sweep", "bench", "tune")
STATUS_STYLE = {"ok": "green", "invalid": "yellow", "compile_failed": "red", "launch_failed": "red",
                "incorrect": "magenta", "compiled": "cyan"}


# ---- parsers ------------------------------------------------------------------------------------------

def _timing_arguments(p: argparse.ArgumentParser, repeats: int) -> None:
    g = p.add_argument_group("measurement")
    g.add_argument("--devices", default=None, help="GPU ids, e.g. 0,1, or 'all' (default: the current GPU)")
    g.add_argument("--repeats", type=int, default=repeats, help=f"timed calls per point (default {repeats})")
    g.add_argument("--warmup-ms", type=float, default=25.0, help="warm-up GPU time per point (default 25)")
    g.add_argument("--flush", choices=("l2", "rotate", "none"), default="l2",
                   help="between repeats: overwrite L2 (default), rotate input copies, or nothing")
    g.add_argument("--max-seconds", type=float, default=2.0,
                   help="timing budget per point; slower kernels get fewer repeats, at least 3 (default 2)")
    g.add_argument("--no-check", action="store_true", help="skip the correctness checks (not recommended)")
    g.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    g.add_argument("--compile-workers", type=int, default=None, help="NVRTC worker processes (default: CPUs)")
    g.add_argument("--compile-timeout", type=float, default=300.0, help="seconds per compile (default 300)")
    g.add_argument("--gpu-timeout", type=float, default=600.0, help="seconds per measured point (default 600)")


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", action="append", help="only these families (repeatable)")
    p.add_argument("--dtype", action="append", help="only these input dtypes (repeatable)")
    p.add_argument("--variant", action="append", help="only variants matching these globs (repeatable)")
    p.add_argument("--shapes", default="seed", help="seed (the seed tables' shapes per dtype), hgemm, sgemm, "
                   "square, quick, or MxNxK[,MxNxK…] (default: seed)")
    p.add_argument("--quick", action="store_true",
                   help="a short run: the 'quick' shapes (1024³, 4096³), 5 repeats, 5 ms warm-up")
    p.add_argument("--csv", help="also write the records to this CSV file")
    p.add_argument("--json", help="also write the records to this JSON file")
    p.add_argument("--plot", help="draw TFLOPS against size to this PNG: each family's fastest variant "
                   "next to cuBLAS (needs matplotlib)")
    _timing_arguments(p, repeats=10)


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="sweep a family's parameters at some shapes, ranked against cuBLAS")
    p.add_argument("family")
    p.add_argument("--shape", action="append", help="MxNxK (repeatable, or comma-separated; also seed, square, …)")
    p.add_argument("--set", action="append", metavar="NAME=VALUES",
                   help="values of a parameter: 64,128 or 8:64:*2 or 32:128:32 (repeatable)")
    p.add_argument("--grid", help="TOML grid file (see docs/SWEEP.md); --set overrides its values")
    p.add_argument("--dtype")
    p.add_argument("--acc")
    p.add_argument("--top", type=int, default=10, help="rows of the ranked table (default 10)")
    p.add_argument("--out", help="results.csv or results.json, written as the sweep goes")
    p.add_argument("--resume", action="store_true", help="keep the points --out already holds, measure the rest")
    p.add_argument("--dry-run", action="store_true", help="expand and prune the grid, with reasons; no GPU")
    p.add_argument("--compile-only", action="store_true", help="compile and report resources; no GPU")
    p.add_argument("--arch", help="architecture for --compile-only (default: the first of CUPY_GEMM_ARCH)")
    p.add_argument("--max-points", type=int, default=100_000)
    _timing_arguments(p, repeats=20)

    p = subparsers.add_parser("bench", help="every catalogue variant over the seed tables' shapes, seed-style")
    add_bench_arguments(p)

    p = subparsers.add_parser("report", help="markdown tables (TFLOPS and %% of cuBLAS per family) of result files")
    p.add_argument("files", nargs="+", help="CSV or JSON files written by sweep, bench or tune")

    p = subparsers.add_parser("tune", help="measure candidates at shapes and fill the tuning database")
    p.add_argument("--shape", action="append", help="MxNxK to tune (repeatable, or comma-separated)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--acc", help="accumulate type (default: what matmul uses for the dtype)")
    p.add_argument("--family", action="append", help="only catalogue variants of these families")
    p.add_argument("--variant", action="append", help="only these catalogue variants (globs)")
    p.add_argument("--sweep", metavar="FAMILY", help="also try the points of this family's grid (--set/--grid)")
    p.add_argument("--set", action="append", metavar="NAME=VALUES")
    p.add_argument("--grid")
    p.add_argument("--list", action="store_true", help="show the database's entries and exit")
    p.add_argument("--db", help="database file (default: tuning.json in the cache directory)")
    _timing_arguments(p, repeats=20)


def run_command(args) -> int:
    console = Console()
    handler = {"sweep": cmd_sweep, "bench": run_bench, "tune": cmd_tune, "report": cmd_report}[args.command]
    try:
        return handler(args, console)
    except (ValueError, OSError) as e:
        if isinstance(e, CupyGemmError):
            raise
        console.print(f"[red]error:[/red] {e}", highlight=False)
        return 2


def _settings(args) -> timing.Settings:
    return timing.Settings(repeats=args.repeats, warmup_ms=args.warmup_ms, flush=args.flush,
                           max_seconds=args.max_seconds, check=not args.no_check, seed=args.seed)


def _devices(args):
    if args.devices is None:
        return None
    return "all" if args.devices == "all" else [int(d) for d in args.devices.split(",") if d.strip()]


def _measure_kw(args) -> dict:
    return {"devices": _devices(args), "settings": _settings(args), "compile_workers": args.compile_workers,
            "compile_timeout": args.compile_timeout, "gpu_timeout": args.gpu_timeout}


def _grid(args) -> sweep.GridSpec:
    spec = sweep.load_grid(args.grid) if args.grid else sweep.GridSpec()
    for item in args.set or ():
        name, values = sweep.parse_set(item)
        spec.params[name] = values
    return spec


# ---- live display -------------------------------------------------------------------------------------

def _fmt(value, spec: str = ".3f", empty: str = "") -> str:
    return empty if value is None else format(value, spec)


def _params_text(params: dict, names) -> str:
    return " ".join(f"{k}={params[k]}" for k in names if k in params)


class _Display:
    """Progress bars and the live top-N table, fed by sweep events."""

    def __init__(self, console: Console, top: int, swept: list[str], writer=None):
        self.console, self.top, self.swept, self.writer = console, top, swept, writer
        self.records: list[results.Record] = []
        self.baselines: dict = {}
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description:<9}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        self.compile_task = self.progress.add_task("compile", total=None)
        self.measure_task = self.progress.add_task("measure", total=None)

    def __rich__(self):
        return Group(self.progress, top_table(self.records, self.top, self.swept, "best so far"))

    def __call__(self, kind: str, data) -> None:
        if kind == "start":
            self.progress.update(self.compile_task, total=data["compiles"])
            self.progress.update(self.measure_task, total=data["measurements"] or None)
            if data["resumed"]:
                self.console.print(f"resuming: {data['resumed']} measurements kept from the results file")
        elif kind == "compiled":
            self.progress.advance(self.compile_task)
        elif kind in ("record", "baseline"):
            if kind == "record":
                self.records.append(data)
                if data.status != "invalid":
                    self.progress.advance(self.measure_task)
            if self.writer is not None:
                self.writer.add(data)
        elif kind == "device" and data["state"] != "ready":
            self.console.print(f"[yellow]GPU {data['device']} worker {data['state']}:[/yellow] {data['message']}",
                               highlight=False)


def top_table(records, top: int, swept: list[str], title: str) -> Table:
    """The fastest `ok` records; ±% is half the interquartile range relative to the median."""
    ranked = results.ranked(records)
    shapes = list(dict.fromkeys(r.shape for r, _ in ranked))
    table = Table(title=f"{title} (≈: interval overlaps the next row's)" if ranked else title, title_justify="left")
    columns = ["#", "parameters" if swept else "variant"] + (["shape"] if len(shapes) > 1 else []) + \
        ["ms", "±%", "TFLOPS", "%cuBLAS", "err", "regs", "smem", "spill", "occ"]
    for col in columns:
        left = col in ("variant", "parameters", "shape")
        table.add_column(col, justify="left" if left else "right", no_wrap=left)
    for i, (r, tied) in enumerate(ranked[:top]):
        label = _params_text(r.params, swept) if swept else r.variant
        if r.catalogue and swept:
            label += f" [dim]({r.catalogue})[/dim]"
        row = [f"{i + 1}{'≈' if tied else ''}", label] + (["x".join(map(str, r.shape))] if len(shapes) > 1 else [])
        errors = [x for x in (r.error, r.ragged_error) if x is not None]
        row += [f"{r.time_ms:.4f}", _fmt(None if r.spread is None else 50 * r.spread, ".1f"), _fmt(r.tflops, ".2f"),
                _fmt(r.pct_cublas, ".1f"), _fmt(max(errors) if errors else None, ".2f"),
                _fmt(r.registers, "d"), _fmt((r.static_smem or 0) + (r.dynamic_smem or 0), "d"),
                _fmt((r.spill_stores or 0) + (r.spill_loads or 0), "d"), _fmt(r.occupancy, ".0%")]
        table.add_row(*row)
    return table


def _summary(console: Console, result: sweep.SweepResult, baselines: bool = True) -> None:
    counts = result.counts()
    console.print("points: " + ", ".join(f"[{STATUS_STYLE.get(k, 'white')}]{k}[/] {v}" for k, v in counts.items()))
    for b in result.baselines() if baselines else ():
        if b.status == "ok":
            console.print(f"{b.variant} at {b.M}x{b.N}x{b.K} on GPU {b.device}: {b.time_ms:.4f} ms, "
                          f"{b.tflops:.2f} TFLOPS", highlight=False)
        else:
            console.print(f"[red]{b.variant}: {b.status}[/red] {b.reason}", highlight=False)
    reasons: dict[tuple, int] = {}
    for r in result.kernels():
        if r.status not in ("ok", "compiled"):
            first = r.reason.splitlines()[0] if r.reason else ""
            reasons[(r.status, first)] = reasons.get((r.status, first), 0) + 1
    for (status, reason), n in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
        console.print(f"  [{STATUS_STYLE.get(status, 'white')}]{status}[/] ×{n}: {reason}", highlight=False)


# ---- sweep --------------------------------------------------------------------------------------------

def _print_dry_run(console: Console, pts: list[sweep.Point], swept: list[str]) -> None:
    table = Table(title=f"{len(pts)} points, {sum(p.valid for p in pts)} valid", title_justify="left")
    for col in ("#", "parameters", "status", "reason"):
        table.add_column(col, no_wrap=col != "reason")
    for p in pts[:500]:
        label = _params_text(p.params, swept) + (f" ({p.catalogue})" if p.catalogue else "")
        table.add_row(str(p.index), label, "[green]valid" if p.valid else "[yellow]invalid", p.reason)
    console.print(table)
    if len(pts) > 500:
        console.print(f"… and {len(pts) - 500} more")
    reasons: dict[str, int] = {}
    for p in pts:
        if not p.valid:
            reasons[p.param] = reasons.get(p.param, 0) + 1
    if reasons:
        console.print("pruned by: " + ", ".join(f"{k} ×{v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])))


def _resume_records(args, console: Console, devices) -> list[results.Record]:
    if not args.resume:
        return []
    if not args.out:
        raise ValueError("--resume continues the file given with --out")
    if not Path(args.out).exists():
        console.print(f"{args.out} does not exist yet: starting afresh")
        return []
    meta, records = results.read(args.out)
    ids = sweep._device_ids(devices)
    here = results.device_name(ids[0])
    there = {d.get("name") for d in meta.get("devices", [])}
    if there and here not in there:
        raise ValueError(f"{args.out} was measured on {', '.join(sorted(there))}, not {here}: "
                         f"write to another file instead of resuming")
    return records


def cmd_sweep(args, console: Console) -> int:
    spec = _grid(args)
    if spec.family and spec.family != args.family:
        raise ValueError(f"the grid file is for family {spec.family!r}, not {args.family!r}")
    pts = sweep.points(args.family, spec.params, args.dtype or spec.dtype, args.acc or spec.acc,
                       max_points=args.max_points)
    swept = [n for n, v in spec.params.items() if len(v) > 1] or list(spec.params)
    if args.dry_run:
        _print_dry_run(console, pts, swept)
        return 0
    dtype = pts[0].dtype
    shapes = sweep.parse_shapes(args.shape, dtype) if args.shape else spec.shapes
    if not shapes and not args.compile_only:
        raise ValueError("give at least one --shape (or shapes in the grid file)")
    if args.compile_only:
        arch = args.arch or config.default_archs()[0]
        display = _Display(console, args.top, swept)
        result = sweep.compile_only(pts, arch, shapes or None, compile_workers=args.compile_workers,
                                    compile_timeout=args.compile_timeout, on_event=display)
        _print_compiled(console, result, swept)
        if args.out:
            results.write(args.out, result.records, result.metadata)
        return 0
    kw = _measure_kw(args)
    previous = _resume_records(args, console, kw["devices"])
    meta = results.metadata(sweep._device_ids(kw["devices"]), command="sweep " + args.family,
                            settings=dict(kw["settings"].__dict__))
    writer = results.ResultWriter(args.out, meta, previous) if args.out else None
    display = _Display(console, args.top, swept, writer)
    started = time.perf_counter()
    try:
        with Live(display, console=console, refresh_per_second=4, transient=True):
            result = sweep.measure(pts, shapes, resume=previous, on_event=display, **kw)
    except KeyboardInterrupt:
        if writer is not None:
            writer.flush()
            console.print(f"interrupted: {len(writer.records)} records are in {args.out}; "
                          f"run again with --resume to measure the rest")
            return 130
        raise
    console.print(top_table(result.kernels(), args.top, swept,
                            f"{args.family} {dtype}: top {args.top} of {len(result.kernels())}"))
    _summary(console, result)
    console.print(f"{time.perf_counter() - started:.1f} s")
    if writer is not None:
        writer.meta = {**result.metadata, "command": meta["command"]}
        writer.close(result.records)
        console.print(f"wrote {args.out}")
    return 0


def _print_compiled(console: Console, result: sweep.SweepResult, swept: list[str]) -> None:
    table = Table(title=f"compiled for {result.metadata.get('arch')}", title_justify="left")
    for col in ("parameters", "status", "regs", "smem", "local", "spill", "occ", "s"):
        table.add_column(col, justify="left" if col in ("parameters", "status") else "right", no_wrap=True)
    seen = set()
    for r in result.kernels():
        if r.variant in seen:
            continue
        seen.add(r.variant)
        table.add_row(_params_text(r.params, swept) or r.variant, f"[{STATUS_STYLE.get(r.status, 'white')}]{r.status}",
                      _fmt(r.registers, "d"), _fmt((r.static_smem or 0) + (r.dynamic_smem or 0), "d"),
                      _fmt(r.local_bytes, "d"), _fmt((r.spill_stores or 0) + (r.spill_loads or 0), "d"),
                      _fmt(r.occupancy, ".0%"), _fmt(r.compile_s, ".1f"))
    console.print(table)
    _summary(console, result)


# ---- bench --------------------------------------------------------------------------------------------

def bench_variants(families=None, dtypes=None, globs=None) -> list[str]:
    out = []
    for name, v in registry.catalogue().items():
        if v.family.abi == "scaled":  # fp8 with scales: examples/fp8_timing.py measures those
            continue
        if families and v.family.name not in families:
            continue
        if dtypes and v.dtype not in dtypes:
            continue
        if globs and not any(fnmatch.fnmatchcase(name, g) for g in globs):
            continue
        out.append(name)
    return out


class _BenchPrinter:
    """Prints a shape's block, seed-style, as soon as every variant of its dtype has a record there."""

    def __init__(self, console: Console, pts: list[sweep.Point], shapes: dict, progress: Progress, task):
        self.console, self.progress, self.task = console, progress, task
        self.by_dtype = {d: [p for p in pts if p.dtype == d] for d in shapes}
        self.shapes = shapes
        self.records: dict[tuple, list] = {}
        self.baselines: dict[tuple, list] = {}
        self.width = max([len(p.name) for p in pts] + [20]) + 2

    def __call__(self, kind: str, data) -> None:
        if kind == "start":
            self.progress.update(self.task, total=sum(len(self.shapes[d]) * len(ps) for d, ps in self.by_dtype.items()))
        elif kind == "baseline":
            self.baselines.setdefault((data.dtype, data.shape), []).append(data)
        elif kind == "record":
            self.progress.advance(self.task)
            got = self.records.setdefault((data.dtype, data.shape), [])
            got.append(data)
            if len(got) == len(self.by_dtype[data.dtype]):
                self.console.print(seed_block(data.dtype, data.shape, got, self.baselines.get((data.dtype, data.shape), []),
                                              self.by_dtype[data.dtype], self.width),
                                   highlight=False, markup=False, soft_wrap=True)
        elif kind == "device" and data["state"] != "ready":
            self.console.print(f"GPU {data['device']} worker {data['state']}: {data['message']}", highlight=False,
                               markup=False)


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


def _seed_row(r: results.Record, width: int, best: float) -> str:
    name = f"{r.variant:>{width}}"
    if r.status != "ok":
        reason = (r.reason.splitlines() or [""])[0]
        return f"{name}: {r.status}: {reason[:80]}"
    text = f"{name}: time:{r.time_ms:.6f}ms (±{100 * (r.spread or 0) / 2:.1f}%), TFLOPS: {_fmt(r.tflops, '<7.2f')}"
    if not r.is_baseline and r.pct_cublas is not None:
        text += f" {r.pct_cublas:6.1f}% of cuBLAS"
    if best and r.tflops and r.tflops > best:
        text += f" (+{100 * (r.tflops / best - 1):.2f}%)"
    return text


def run_bench(args, console: Console | None = None) -> int:
    console = console or Console()
    if args.quick:
        args.shapes, args.repeats, args.warmup_ms, args.max_seconds = "quick", 5, 5.0, 0.5
    names = bench_variants(args.family, args.dtype, args.variant)
    if not names:
        raise ValueError("no catalogue variant matches the --family/--dtype/--variant filters")
    pts = sweep.catalogue_points(names)
    dtypes = list(dict.fromkeys(p.dtype for p in pts))
    shapes = {d: sweep.parse_shapes(args.shapes, d) for d in dtypes}
    kw = _measure_kw(args)
    progress = Progress(SpinnerColumn(), TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=True)
    task = progress.add_task("bench", total=None)
    printer = _BenchPrinter(console, pts, shapes, progress, task)
    with progress:
        result = sweep.measure(pts, shapes, on_event=printer, **kw)
    _summary(console, result, baselines=False)
    meta = {**result.metadata, "command": "bench"}
    for path in (args.csv, args.json):
        if path:
            results.write(path, result.records, meta)
            console.print(f"wrote {path}")
    if args.plot:
        plot(result, args.plot)
        console.print(f"wrote {args.plot}")
    return 0


def plot(result: sweep.SweepResult, path: str) -> None:
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


# ---- tune ---------------------------------------------------------------------------------------------

def cmd_report(args, console: Console) -> int:
    records, devices = [], {}
    for path in args.files:
        meta, recs = results.read(path)
        records += recs
        for d in meta.get("devices", []):
            devices[d.get("name", "")] = None
    print(f"Measured on {', '.join(d for d in devices if d) or 'an unnamed device'}.\n")
    print(results.markdown(records))
    return 0


def cmd_tune(args, console: Console) -> int:
    if args.list:
        return _print_tune_list(console, args.db)
    if not args.shape:
        raise ValueError("give at least one --shape to tune (or --list)")
    variants = None
    if args.variant:
        variants = [n for n in registry.catalogue() if any(fnmatch.fnmatchcase(n, g) for g in args.variant)]
        if not variants:
            raise ValueError(f"no catalogue variant matches {args.variant}")
    spec = _grid(args) if args.sweep else None
    if spec is None and (args.set or args.grid):
        raise ValueError("--set/--grid add sweep points to tuning: name their family with --sweep FAMILY")
    kw = _measure_kw(args)
    display = _Display(console, 5, [])
    with Live(display, console=console, refresh_per_second=4, transient=True):
        found = tuning.tune(args.shape, args.dtype, args.acc, families=args.family, variants=variants,
                          family=args.sweep, grid=spec.params if spec else None, path=args.db,
                          on_event=display, **kw)
    table = Table(title=f"tuned {args.dtype} ({args.acc or tuning.default_acc(args.dtype)})", title_justify="left")
    for col in ("shape", "winner", "ms", "TFLOPS", "vs default", "% cuBLAS", "bucket key"):
        table.add_column(col, justify="left" if col in ("shape", "winner", "bucket key") else "right")
    for f in found:
        w, d = f.winner, f.default
        if w is None:
            table.add_row("x".join(map(str, f.shape)), "[red]nothing ran correctly", "", "", "", "", f.key)
            continue
        vs = f"{d.time_ms / w.time_ms:.2f}×" if d is not None and d.status == "ok" else "n/a"
        table.add_row("x".join(map(str, f.shape)), w.variant, f"{w.time_ms:.4f}", f"{w.tflops:.2f}", vs,
                      _fmt(w.pct_cublas, ".1f"), f.key)
    console.print(table)
    console.print(f"stored in {args.db or tuning.db_path()}")
    return 0


def _print_tune_list(console: Console, path) -> int:
    entries = tuning.listing(path)
    table = Table(title=f"{len(entries)} entries in {path or tuning.db_path()}", title_justify="left")
    for col in ("key", "variant", "shape", "ms", "default ms", "cuBLAS ms", "tuned", "valid"):
        table.add_column(col)
    for e in entries:
        table.add_row(e["key"], e["variant"], "x".join(map(str, e["shape"])), _fmt(e.get("time_ms"), ".4f"),
                      _fmt(e.get("default_ms"), ".4f"), _fmt(e.get("cublas_ms"), ".4f"), e.get("tuned_at", ""),
                      "[green]yes" if e["valid"] else "[yellow]stale (template changed)")
    console.print(table)
    return 0

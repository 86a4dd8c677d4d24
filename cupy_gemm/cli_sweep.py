"""`cupy-gemm sweep | bench | tune | report`: argument parsing over cupy_gemm.measure, printing through
cupy_gemm.present.

cli.py calls `add_commands(subparsers)` while building its parser and `run_command(args)` for these
commands; bench.py builds its own parser with `add_bench_arguments` and calls `run_command` too.
"""
from __future__ import annotations

import argparse
import fnmatch
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from . import cli_corpus, cli_tune, config, registry, tuning
from .arrange import B_LAYOUTS
from .cli_output import FAILED, USAGE, dtype_name, fail
from .errors import CompilerNotFoundError, CupyGemmError, DeviceError
from .measure import grids, provenance, results, shapes as shapes_mod, space, sweep
from .measure.runner import runner_for
from .measure.schedule import GPUModel
from .measure.tune import tune
from .measure.workbench import Settings
from .present import plots, report, tables
from .present.live import BenchPrinter, SweepDisplay

COMMANDS = ("sweep", "bench", "tune", "report")


# ---- parsers ------------------------------------------------------------------------------------------

def _timing_arguments(p: argparse.ArgumentParser, repeats: int) -> None:
    g = p.add_argument_group("measurement")
    g.add_argument("--devices", default=None, help="GPU ids, e.g. 0,1, or 'all' (default: the current GPU)")
    g.add_argument("--scheduler", metavar="tcp://HOST:8786",
                   help="measure on the workers of this Dask scheduler, one per GPU (needs the cluster extra)")
    g.add_argument("--repeats", type=int, default=repeats, help=f"timed calls per point (default {repeats})")
    g.add_argument("--warmup-ms", type=float, default=25.0, help="warm-up GPU time per point (default 25)")
    g.add_argument("--flush", choices=("l2", "rotate", "none"), default="l2",
                   help="between repeats: overwrite L2 (default), rotate input copies, or nothing")
    g.add_argument("--max-seconds", type=float, default=2.0,
                   help="timing budget per point; slower kernels get fewer repeats, at least 3 (default 2)")
    g.add_argument("--no-check", action="store_true", help="skip the correctness checks (not recommended)")
    g.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    g.add_argument("--compile-workers", type=int, default=None,
                   help="NVRTC worker processes (default: the CPUs not driving a GPU, at most 32)")
    g.add_argument("--compile-timeout", type=float, default=300.0, help="seconds per compile (default 300)")
    g.add_argument("--gpu-timeout", type=float, default=600.0, help="seconds per measured point (default 600)")


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", action="append", help="only these families (repeatable)")
    p.add_argument("--dtype", action="append", help="only these input dtypes (repeatable)")
    p.add_argument("--variant", action="append", help="only variants matching these globs (repeatable)")
    p.add_argument("--shapes", default="seed", help="seed (the seed tables' shapes per dtype), hgemm, sgemm, "
                   "square, quick, or MxNxK[,MxNxK…] (default: seed); llm, llm-small, llm-dense or unseen: a "
                   "model-shape corpus, the default path against cupy.matmul and torch.matmul (--dtype also "
                   "takes tf32); llm:MxNxK,…: some of its shapes")
    p.add_argument("--out", help="corpus runs: the folder for corpus.json, corpus.csv and corpus.md (default .)")
    p.add_argument("--no-torch", action="store_true", help="corpus runs: leave torch.matmul out")
    p.add_argument("--b-layout", choices=B_LAYOUTS, default="row",
                   help="corpus runs: B row-major (x @ W, W stored K×N; the default) or column-major (x @ W.T, W "
                        "stored N×K as linear layers keep it)")
    path = p.add_mutually_exclusive_group()  # what the corpus benchmark times as ours; each also over MxNxK lists
    path.add_argument("--default", action="store_true",
                      help="the corpus benchmark of the default path (what a corpus gets anyway) over --shapes "
                           "MxNxK,…")
    path.add_argument("--tuned", action="store_true",
                      help="the corpus benchmark (also over --shapes MxNxK,…) of matmul(variant=\"auto\"), the "
                           "tuning database's choice, instead of the default")
    path.add_argument("--candidates", action="store_true",
                      help="the corpus benchmark (also over --shapes MxNxK,…) of the default's own candidates at "
                           "each shape (candidates.toml's [timed]; --family/--variant narrow them) instead of the "
                           "default")
    p.add_argument("--nondeterministic", action="store_true", help="corpus runs: time matmul(deterministic=False), "
                   "split-K partials added by atomics where a kernel splits K")
    p.add_argument("--table", help="corpus runs with --candidates or --variant: write the fastest candidate per "
                   "shape as a dispatch table (kernels/dispatch/table-<gpu>.toml); with --b-layout col its entries "
                   "answer calls whose B is column-major")
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
    p.add_argument("--max-points", type=int, default=100_000, help="refuse larger grids (default 100000)")
    _timing_arguments(p, repeats=20)

    p = subparsers.add_parser("bench", help="every catalogue variant over the seed tables' shapes, seed-style")
    add_bench_arguments(p)

    p = subparsers.add_parser("report", help="markdown tables (TFLOPS and %% of cuBLAS per family) of result files")
    p.add_argument("files", nargs="+", help="CSV or JSON files written by sweep, bench or tune")

    p = subparsers.add_parser("tune", help="measure candidates at shapes and fill the tuning database")
    p.add_argument("--shape", action="append", help="MxNxK to tune (repeatable, or comma-separated); without "
                   "--family/--variant/--sweep also a corpus: llm, llm-small, llm-dense, unseen, llm:MxNxK,…")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--acc", help="accumulate type (default: what matmul uses for the dtype)")
    p.add_argument("--b-layout", choices=B_LAYOUTS, default="row",
                   help="without --family/--variant/--sweep: B row-major (x @ W; the default) or column-major "
                        "(x @ W.T, W stored N×K); the entries answer calls whose B lies so")
    p.add_argument("--family", action="append", help="only catalogue variants of these families, timed against "
                   "the dtype's first default (without --family, --variant or --sweep: the default's own "
                   "candidates at each shape, against the default's choice there)")
    p.add_argument("--variant", action="append", help="only these catalogue variants (globs)")
    p.add_argument("--sweep", metavar="FAMILY", help="also try the points of this family's grid (--set/--grid)")
    p.add_argument("--set", action="append", metavar="NAME=VALUES")
    p.add_argument("--grid")
    p.add_argument("--list", action="store_true", help="show the database's entries and exit")
    p.add_argument("--db", help="database file (default: tuning.json in the cache directory)")
    _timing_arguments(p, repeats=20)


def run_command(args) -> int:
    """Run a parsed command; errors become one `error: …` line on stderr (cli_output.fail)."""
    console = Console(markup=False, highlight=False)  # user text is text: styles come as rich.text.Text
    handler = {"sweep": cmd_sweep, "bench": cmd_bench, "tune": cmd_tune, "report": cmd_report}[args.command]
    if getattr(args, "dtype", None):  # fp16, half, bf16, fp32 and float, as every command takes them
        args.dtype = [dtype_name(d) for d in args.dtype] if isinstance(args.dtype, list) else dtype_name(args.dtype)
    try:
        return handler(args, console)
    except (DeviceError, CompilerNotFoundError) as e:  # the machine cannot do the work
        return fail(str(e), FAILED)
    except (CupyGemmError, ValueError, OSError) as e:  # the command line or an input file is wrong
        return fail(str(e), USAGE)


def _settings(args) -> Settings:
    return Settings(repeats=args.repeats, warmup_ms=args.warmup_ms, flush=args.flush, max_seconds=args.max_seconds,
                    check=not args.no_check, seed=args.seed)


def _devices(args):
    if args.devices is None or args.devices == "all":
        return args.devices
    try:
        return [int(d) for d in args.devices.split(",") if d.strip()]
    except ValueError:
        raise ValueError(f"--devices takes GPU ids like 0,1 or 'all', not {args.devices!r}") from None


def _runner(args):
    return runner_for(_devices(args), args.scheduler, compile_workers=args.compile_workers,
                      compile_timeout=args.compile_timeout, gpu_timeout=args.gpu_timeout)


def _grid(args, family: str, limit: int = grids.MAX_VALUES) -> grids.GridSpec:
    """The grid file and --set values, with old names of renamed parameters mapped to today's."""
    spec = grids.load_grid(args.grid) if args.grid else grids.GridSpec()
    for item in args.set or ():
        name, values = grids.parse_set(item, limit)
        spec.params[name] = values
    spec.params = registry.family(family).canonical(spec.params)
    return spec


def _print_lines(console: Console, lines) -> None:
    for line in lines:
        console.print(line)


# ---- sweep --------------------------------------------------------------------------------------------

def _resume_records(args, console: Console, models: list[GPUModel]) -> list[results.Record]:
    if not args.resume:
        return []
    if not args.out:
        raise ValueError("--resume continues the file given with --out")
    if not Path(args.out).exists():
        console.print(f"{args.out} does not exist yet: starting afresh")
        return []
    meta, records = results.read(args.out)
    there = {d.get("name") for d in meta.get("devices", [])}
    here = {m.name for m in models}
    if there and not there & here:
        raise ValueError(f"{args.out} was measured on {', '.join(sorted(there))}, not {', '.join(sorted(here))}: "
                         f"write to another file instead of resuming")
    return records


def cmd_sweep(args, console: Console) -> int:
    spec = _grid(args, args.family, args.max_points)
    if spec.family and spec.family != args.family:
        raise ValueError(f"the grid file is for family {spec.family!r}, not {args.family!r}")
    pts = space.points(args.family, spec.params, args.dtype or spec.dtype, args.acc or spec.acc,
                       max_points=args.max_points)
    swept = [n for n, v in spec.params.items() if len(v) > 1] or list(spec.params)
    dtype = pts[0].dtype
    shapes = shapes_mod.parse_shapes(args.shape, dtype) if args.shape else spec.shapes  # checked before a dry run
    if args.dry_run:
        console.print(tables.dry_run_table(pts, swept))
        if len(pts) > 500:
            console.print(f"… and {len(pts) - 500} more")
        if tables.pruned_line(pts):
            console.print(tables.pruned_line(pts))
        return 0
    if args.compile_only:
        return _compile_only(args, console, pts, shapes, swept)
    if not shapes:
        raise ValueError("give at least one --shape (or shapes in the grid file)")
    runner = _runner(args)
    previous = _resume_records(args, console, runner.gpu_models())
    settings = _settings(args)
    command = "sweep " + args.family
    writer = results.ResultWriter(args.out, provenance.metadata(command=command), previous) if args.out else None
    display = SweepDisplay(console, args.top, swept, writer)
    started = time.perf_counter()
    try:
        with Live(display, console=console, refresh_per_second=4, transient=True):
            result = runner.measure(pts, shapes, settings, previous, display)
    except KeyboardInterrupt:
        if writer is None:
            raise
        writer.flush()
        console.print(f"interrupted: {len(writer.records)} records are in {args.out}; "
                      f"run again with --resume to measure the rest")
        return 130
    for table in tables.top_tables(result.kernels(), args.top, swept,
                                   f"{args.family} {dtype}: top {args.top} of {len(result.kernels())}"):
        console.print(table)
    _print_lines(console, tables.summary_lines(result))
    console.print(f"{time.perf_counter() - started:.1f} s")
    if writer is not None:
        writer.meta = {**result.metadata, "command": command}
        writer.close(result.records)
        console.print(f"wrote {args.out}")
    return 0


def _compile_only(args, console: Console, pts, shapes, swept) -> int:
    arch = args.arch or config.default_archs()[0]
    display = SweepDisplay(console, args.top, swept)
    result = sweep.compile_only(pts, arch, shapes or None, compile_workers=args.compile_workers,
                                compile_timeout=args.compile_timeout, on_event=display)
    console.print(tables.compiled_table(result, swept))
    _print_lines(console, tables.summary_lines(result))
    if args.out:
        results.write(args.out, result.records, result.metadata)
    return 0


# ---- bench --------------------------------------------------------------------------------------------

def bench_variants(families=None, dtypes=None, globs=None) -> list[str]:
    out = []
    for name, v in registry.catalogue().items():
        if v.family.abi in ("scaled", "grouped"):  # examples/fp8_timing.py and grouped_timing.py measure those
            continue
        if families and v.family.name not in families:
            continue
        if dtypes and v.dtype not in dtypes:
            continue
        if globs and not any(fnmatch.fnmatchcase(name, g) for g in globs):
            continue
        out.append(name)
    return out


def cmd_bench(args, console: Console) -> int:
    if cli_corpus.is_corpus(args):
        return cli_corpus.run(args, console)
    if args.quick:
        args.shapes, args.repeats, args.warmup_ms, args.max_seconds = "quick", 5, 5.0, 0.5
    names = bench_variants(args.family, args.dtype, args.variant)
    if not names:
        raise ValueError("no catalogue variant matches the --family/--dtype/--variant filters")
    pts = space.catalogue_points(names)
    shapes = {d: shapes_mod.parse_shapes(args.shapes, d) for d in dict.fromkeys(p.dtype for p in pts)}
    runner = _runner(args)  # no GPU: an error now, before anything is compiled
    printer = BenchPrinter(console, pts, shapes)
    with printer.progress:
        result = runner.measure(pts, shapes, _settings(args), (), printer)
    _print_lines(console, tables.summary_lines(result, baselines=False))
    meta = {**result.metadata, "command": "bench"}
    for path in (args.csv, args.json):
        if path:
            results.write(path, result.records, meta)
            console.print(f"wrote {path}")
    if args.plot:
        plots.bench_plot(result, args.plot)
        console.print(f"wrote {args.plot}")
    return 0


# ---- report and tune ----------------------------------------------------------------------------------

def cmd_report(args, console: Console) -> int:
    records, devices = [], {}
    for path in args.files:
        meta, recs = results.read(path)
        records += recs
        for d in meta.get("devices", []):
            devices[d.get("name", "")] = None
    print(f"Measured on {', '.join(d for d in devices if d) or 'an unnamed device'}.\n")
    print(report.markdown(records))
    return 0


def cmd_tune(args, console: Console) -> int:
    if args.list:
        entries = tuning.listing(args.db)
        console.print(tables.tuning_entries_table(entries, f"{len(entries)} entries in {args.db or tuning.db_path()}"))
        return 0
    if not args.shape:
        raise ValueError("give at least one --shape to tune (or --list)")
    if cli_tune.wanted(args):
        return cli_tune.run(args, console)
    if args.b_layout != "row":
        raise ValueError("--b-layout col tunes the default's candidates: leave out --family, --variant and --sweep")
    variants = None
    if args.variant:
        variants = [n for n in registry.catalogue() if any(fnmatch.fnmatchcase(n, g) for g in args.variant)]
        if not variants:
            raise ValueError(f"no catalogue variant matches {args.variant}")
    spec = _grid(args, args.sweep) if args.sweep else None
    if spec is None and (args.set or args.grid):
        raise ValueError("--set/--grid add sweep points to tuning: name their family with --sweep FAMILY")
    display = SweepDisplay(console, 5, [])
    with Live(display, console=console, refresh_per_second=4, transient=True):
        found = tune(args.shape, args.dtype, args.acc, families=args.family, variants=variants,
                     family=args.sweep, grid=spec.params if spec else None, path=args.db, on_event=display,
                     devices=_devices(args), scheduler=args.scheduler, settings=_settings(args),
                     compile_workers=args.compile_workers, compile_timeout=args.compile_timeout,
                     gpu_timeout=args.gpu_timeout)
    console.print(tables.tune_table(found, f"tuned {args.dtype} ({args.acc or tuning.default_acc(args.dtype)})"))
    console.print(f"stored in {args.db or tuning.db_path()}")
    return 0

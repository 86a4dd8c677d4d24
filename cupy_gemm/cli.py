"""`cupy-gemm`: list, show and compile variants (GPU-free); sweep, bench and tune on a GPU."""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from . import api, compile as compile_mod, config, registry
from .errors import CupyGemmError


def _parse_sets(items: list[str]) -> dict[str, int]:
    params = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes KEY=VALUE, got {item!r}")
        try:
            params[key.strip()] = int(value)
        except ValueError:
            raise SystemExit(f"--set {key}: parameters are integers, got {value!r}") from None
    return params


def cmd_list(args, console: Console) -> int:
    names = api.variants(args.dtype, args.family)
    cat = registry.catalogue()
    if args.json:
        print(json.dumps([{"name": n, "family": cat[n].family.name, "dtype": cat[n].dtype, "acc": cat[n].acc,
                           "layout": cat[n].family.layout, "params": dict(cat[n].params), "notes": cat[n].notes}
                          for n in names], indent=2))
        return 0
    table = Table(title=f"{len(names)} variants")
    for col in ("variant", "family", "dtype", "acc", "parameters"):
        table.add_column(col)
    for n in names:
        v = cat[n]
        table.add_row(n, v.family.name, v.dtype, v.acc, " ".join(f"{k}={x}" for k, x in v.params.items()))
    console.print(table)
    return 0


def cmd_show(args, console: Console) -> int:
    base = registry.lookup(args.variant)
    overrides = _parse_sets(args.set)
    variant = registry.make_variant(base.family, base.name, base.dtype, {**base.params, **overrides}, base.acc)
    kernel = api.Kernel(variant)
    fam = variant.family
    info = Table(show_header=False, title=variant.name)
    info.add_row("family", f"{fam.name}: {fam.doc}")
    info.add_row("dtype / acc / layout", f"{variant.dtype} / {variant.acc} / {fam.layout}-major")
    info.add_row("parameters", " ".join(f"{k}={x}" for k, x in variant.params.items()))
    cfg = kernel.launch_config(args.m, args.n, args.k, sm_count=132)
    info.add_row(f"launch for {args.m}×{args.n}×{args.k}", f"grid {cfg.grid}, block {cfg.block}, "
                 f"dynamic smem {cfg.smem} B" + (" (132 SMs assumed)" if fam.persistent else ""))
    info.add_row("alignment", f"{fam.align(variant.params, variant.dtype)} elements")
    info.add_row("minimum GPU", "sm_90a" if fam.needs_sm90a else
                 f"sm_{fam.min_cc(variant.params, variant.dtype, variant.acc)}")
    if variant.notes:
        info.add_row("notes", variant.notes)
    console.print(info)
    if not args.no_source:
        console.print(Syntax(kernel.source, "cuda", line_numbers=True))
    return 0


def _targets(variant, archs):
    """The requested archs this variant can take; Hopper-only families compile for sm_90a instead of sm_90."""
    for arch in archs:
        if variant.family.needs_sm90a:
            if arch in ("sm_90", "sm_90a"):
                yield "sm_90a"
            continue
        if int(arch.split("_")[1].rstrip("a")) >= variant.family.min_cc(variant.params, variant.dtype, variant.acc):
            yield arch


def _compile_one(job):
    """(resources, error message, seconds); runs in a worker process, which fills the disk cache."""
    name, arch = job
    start = time.perf_counter()
    try:
        return compile_mod.compile_variant(registry.lookup(name), arch).resources, None, time.perf_counter() - start
    except CupyGemmError as e:
        return None, str(e), time.perf_counter() - start


class _Inline:
    """A serial stand-in for a process pool."""
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def map(fn, items):
        return map(fn, items)


def cmd_compile(args, console: Console) -> int:
    archs = [a.strip() for a in (args.arch.split(",") if args.arch else config.default_archs())]
    names = list(registry.catalogue()) if args.all else args.variants
    if not names:
        console.print("name variants or pass --all")
        return 2
    table = Table(title=f"GPU-free NVRTC compile for {', '.join(archs)}")
    for col in ("variant", "arch", "status", "regs", "smem", "local", "seconds"):
        table.add_column(col, justify="right" if col in ("regs", "smem", "local", "seconds") else "left")
    jobs = [(name, arch) for name in names for arch in dict.fromkeys(_targets(registry.lookup(name), archs))]
    failures = 0
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else _Inline() as pool:
        for (name, arch), (res, error, seconds) in zip(jobs, pool.map(_compile_one, jobs)):
            if error is None:
                table.add_row(name, arch, "[green]ok", str(res.registers), str(res.static_smem),
                              str(res.local), f"{seconds:.2f}")
            else:
                failures += 1
                table.add_row(name, arch, "[red]failed", "", "", "", f"{seconds:.2f}")
                console.print(f"[red]{name} ({arch})[/red]: {error}")
    console.print(table)
    console.print(f"{failures} failed" if failures else "[green]all compiled")
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cupy-gemm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the catalogue")
    p.add_argument("--family")
    p.add_argument("--dtype")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("show", help="parameters, launch configuration and rendered source of a variant")
    p.add_argument("variant")
    p.add_argument("--set", action="append", metavar="K=V", help="override a parameter")
    p.add_argument("--shape", default="4096x4096x4096", help="MxNxK for the launch configuration")
    p.add_argument("--no-source", action="store_true")
    p = sub.add_parser("compile", help="compile variants with NVRTC, no GPU needed")
    p.add_argument("variants", nargs="*")
    p.add_argument("--all", action="store_true")
    p.add_argument("--arch", help="comma-separated, e.g. sm_80,sm_90 (default: CUPY_GEMM_ARCH or sm_80,sm_90)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="compile in this many processes")
    try:
        from . import cli_sweep
    except ImportError:
        cli_sweep = None
    if cli_sweep is not None:
        cli_sweep.add_commands(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        if args.command == "show":
            args.m, args.n, args.k = (int(x) for x in args.shape.lower().split("x"))
        handler = {"list": cmd_list, "show": cmd_show, "compile": cmd_compile}.get(args.command)
        if handler is None:
            from . import cli_sweep
            return cli_sweep.run_command(args)
        return handler(args, console)
    except CupyGemmError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        return 2


if __name__ == "__main__":
    sys.exit(main())

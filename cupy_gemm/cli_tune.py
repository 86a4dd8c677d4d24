"""`cupy-gemm tune --shape …` without --family, --variant or --sweep: the default's candidates timed at a
model's shapes (cupy_gemm.measure.tune_candidates), the winners stored for `matmul(variant="auto")`."""
from __future__ import annotations

import sys

from . import devices, tuning
from .measure import corpus, tune_candidates
from .measure.corpus_bench import Settings
from .present import tables

CATALOGUE_ONLY = ("devices", "scheduler")  # the catalogue mode measures on several GPUs; this one on the current


def wanted(args) -> bool:
    """Whether the command line asks for this mode: no family, variant or sweep to tune over."""
    return not (args.family or args.variant or args.sweep or args.set or args.grid)


def mode_of(dtype: str, acc: str | None) -> str:
    """The corpus precision that times dtype with acc: float16, bfloat16, float32 or tf32."""
    acc = acc or tuning.default_acc(dtype)
    if dtype in ("float16", "bfloat16") and acc == "float32":
        return dtype
    if dtype == "float32" and acc in ("float32", "tf32"):
        return acc
    raise ValueError(f"--dtype {dtype} --acc {acc}: the default's candidates serve float16 and bfloat16 (float32 "
                     f"accumulation), float32 and tf32; tune others among a family's variants (--family)")


def run(args, console) -> int:
    given = [f"--{name}" for name in CATALOGUE_ONLY if getattr(args, name, None)]
    if given:
        raise ValueError(f"{', '.join(given)}: options of tuning over a family (--family or --variant); the "
                         f"default's candidates are timed on the current GPU")
    mode = mode_of(args.dtype, args.acc)
    todo = corpus.named_or_listed(args.shape)
    devices.gpu_count()  # no GPU: a DeviceError now, not a CUDA error from deep inside
    settings = Settings(repeats=args.repeats, warmup_ms=args.warmup_ms, max_seconds=args.max_seconds,
                        check=not args.no_check, seed=args.seed)
    found = tune_candidates.tune(todo, [mode], b_layout=args.b_layout, settings=settings, path=args.db,
                                 command=" ".join(["cupy-gemm", *sys.argv[1:]]), progress=console.print)
    console.print(tables.tuned_table(found, f"tuned {mode}, B {'column' if args.b_layout == 'col' else 'row'}-major"))
    missing = len(todo) - len(found)
    if missing:
        console.print(f"{missing} shape(s) had no candidate that ran correctly: nothing stored for them")
    console.print(f"stored {len(found)} entries in {args.db or tuning.db_path()}")
    return 0

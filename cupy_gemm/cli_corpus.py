"""`cupy-gemm bench --shapes llm|llm-small|llm-dense|unseen`: the default path against cupy.matmul and
torch.matmul over a shape corpus (cupy_gemm.measure.corpus_bench), written as corpus.json/corpus.csv and
markdown tables."""
from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

from . import api, candidates, devices, dispatch, registry
from .measure import corpus, corpus_bench, corpus_records
from .present import corpus_tables


def is_corpus(args) -> bool:
    """--shapes llm, llm-small, llm-dense, unseen, or a subset of one (llm:MxNxK,…); or any shapes with
    --default, --tuned or --candidates, which only the corpus benchmark times."""
    return args.shapes.partition(":")[0] in corpus.CORPORA or args.default or args.tuned or args.candidates


def run(args, console) -> int:
    """Called by cmd_bench for a corpus (is_corpus). --dtype takes float16, bfloat16, float32, tf32;
    --candidates, --family and --variant name candidates to time per shape instead of the default
    (dispatch tables); --tuned times matmul(variant="auto") instead of the default."""
    dtypes = args.dtype or list(corpus_records.DTYPES)
    unknown = [d for d in dtypes if d not in corpus_records.DTYPES]
    if unknown:
        raise ValueError(f"--dtype {', '.join(unknown)}: a corpus run takes {', '.join(corpus_records.DTYPES)}")
    devices.gpu_count()  # no GPU: a DeviceError now, not a CUDA error from deep inside
    out = Path(args.out or ".")
    settings = corpus_bench.Settings(repeats=args.repeats, check=not args.no_check, seed=args.seed,
                                     torch=not args.no_torch, b_layout=args.b_layout,
                                     variant=api.AUTO if args.tuned else None,
                                     deterministic=not args.nondeterministic)
    command = " ".join(["cupy-gemm", *sys.argv[1:]])
    meta, rows = corpus_bench.run(corpus.named_or_listed(args.shapes), dtypes, variants=_candidates(args),
                                  settings=settings, progress=console.print, command=command,
                                  checkpoint=lambda meta, rows: corpus_records.write(out, meta, rows))
    paths = corpus_records.write(out, meta, rows)
    (out / "corpus.md").write_text(corpus_tables.markdown(meta, rows))
    for mode, stats in corpus_records.summarise(rows).items():
        parts = [f"{key} geomean {s['geomean']:.3f} min {s['min']:.3f} ({s['min_at']})"
                 for key, s in stats.items() if key in corpus_records.RATIOS and s["count"]]
        parts += [f"M <= 16 {label} {s['geomean']:.0f}% min {s['min']:.0f}% ({s['min_at']})"
                  for label, s in (("of the copy bandwidth", stats["hbm_pct_m16"]),
                                   ("of the traffic floor's speed", stats["floor_pct_m16"])) if s["count"]]
        console.print(f"{mode}: " + "; ".join(parts) + (f"; failed: {', '.join(stats['failed'])}"
                                                        if stats["failed"] else ""))
    console.print(f"wrote {paths['json']}, {paths['csv']} and {out / 'corpus.md'}")
    if args.table:
        Path(args.table).write_text(dispatch.format_table(candidate_table(meta, rows, command)))
        console.print(f"wrote the dispatch table {args.table}")
    return 0


def _candidates(args) -> list[str] | None:
    """The catalogue variants --candidates (the default's own, candidates.toml's [timed]) and --family/--variant
    (globs) pick, or None: the default path."""
    if not (args.family or args.variant or args.candidates):
        return None
    pool = candidates.timed() if args.candidates else list(registry.catalogue())
    names = [name for name in pool if (not args.family or registry.lookup(name).family.name in args.family)
             and (not args.variant or any(fnmatch.fnmatchcase(name, g) for g in args.variant))]
    if not names:
        raise ValueError("no catalogue variant matches the --candidates/--family/--variant filters")
    return names


def candidate_table(meta: dict, rows: list[dict], command: str) -> dict:
    """A dispatch table from a --variant corpus run: per precision and shape, the fastest correct candidate,
    its entries filed under the run's B layout (--b-layout col: entries for x @ W.T)."""
    gpu = meta["devices"][0]
    b_layout = meta.get("settings", {}).get("b_layout", "row")
    timed = [{"dtype": r["dtype"], "m": r["M"], "n": r["N"], "k": r["K"], "variant": r["variant"],
              "median_ms": r["ours_us"] / 1e3, "status": r["status"], "b_layout": b_layout}
             for r in rows if r["kind"] == "candidate" and r.get("ours_us") is not None]
    return dispatch.table_from_results(timed, gpu_name=gpu["name"], cc=int(gpu["compute_capability"]),
                                       sm_count=gpu.get("sm_count"), command=command,
                                       memory_bytes_per_ns=gpu.get("memory_bytes_per_ns"),
                                       cupy_version=meta.get("cupy"), nvrtc_version=meta.get("nvrtc"))

"""`cupy-gemm tune` without --family, --variant or --sweep: at each of a model's shapes, time the default's
own candidates (candidates.toml's [timed], what a shipped dispatch table is timed over) beside the default's
choice, on operands laid out as the model's calls lay them (B row-major, or column-major for x @ W.T), and
store the fastest correct one in the tuning database, keyed by the exact shape and B's layout.
`matmul(variant="auto")` then runs it: never slower than the default where it was tuned, as timed here.

The timing is the corpus benchmark's (corpus_bench): many calls between two CUDA events, operands rotated
through more than twice the L2, every output NaN-poisoned and checked against a float64 reference first; one
GPU, the current one. cupy_gemm.measure.tune times any catalogue family or swept grid instead, on several
GPUs if asked, against the dtype's first default."""
from __future__ import annotations

import dataclasses
import datetime
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterable

from .. import candidates, compile, registry, tuning
from ..errors import CupyGemmError
from ..version import __version__
from . import corpus_bench
from .corpus import Shape
from .pool import cpu_count


def tune(shapes: list[Shape], modes: Iterable[str], *, b_layout: str = "row",
         settings: corpus_bench.Settings | None = None, path=None, command: str = "",
         progress: Callable[[str], None] | None = None, names: list[str] | None = None) -> list[dict]:
    """Time the candidates (`names`, default candidates.timed()) at each shape in each mode (float16,
    bfloat16, float32, tf32) and store an entry per shape and mode where one ran correctly, as each shape is
    done (a run cut short keeps what it measured); returns them."""
    settings = dataclasses.replace(settings or corpus_bench.Settings(repeats=5, warmup_ms=10.0, max_seconds=1.0),
                                   torch=False, b_layout=b_layout, variant=None)
    names, modes = candidates.timed() if names is None else names, list(modes)
    say = progress or (lambda line: None)
    compile_ahead([v for mode in modes for v in corpus_bench.candidates(mode, names)], say)

    seen, stored = {"rows": 0, "shapes": 0}, []

    def shape_done(meta, rows):  # after each shape (and again after each mode): one line a shape
        if len(rows) == seen["rows"]:
            return
        last = rows[-1]
        entry = entries(meta, [r for r in rows[seen["rows"]:] if r["kind"] == "candidate"])
        seen.update(rows=len(rows), shapes=seen["shapes"] + 1)
        if entry:
            tuning.store(entry, path)
            stored.extend(entry)
        size = f"{last['M']}x{last['N']}x{last['K']}"
        where = size if last["name"] == size else f"{last['name']} {size}"  # a listed shape is named by its size
        say(f"[{last['dtype']} {seen['shapes']}/{len(shapes) * len(modes)}] {where}: "
            + (summary(entry[0]) if entry else "no candidate ran correctly"))

    corpus_bench.run(shapes, modes, variants=names, settings=settings, command=command,
                     progress=lambda line: None if line.startswith("[") else say(line),
                     checkpoint=shape_done, with_default=True)
    return stored


def summary(entry: dict) -> str:
    """The winner against the default's choice and cupy.matmul, in a line."""
    us, default_ms, cupy_ms = entry["time_ms"] * 1e3, entry["default_ms"], entry["cublas_ms"]
    versus = f", {default_ms * 1e3 / us:.2f}× the default's {entry['default']}" if default_ms else ""
    return f"{entry['variant']} {us:.1f} µs{versus}" + (f", {cupy_ms * 1e3 / us:.2f}× cupy.matmul" if cupy_ms else "")


def compile_ahead(variants: list[registry.Variant], say: Callable[[str], None]) -> None:
    """Compile the candidates for this GPU in parallel processes first (the disk cache then serves the
    timing's loads): a hundred NVRTC runs one by one would take minutes. Failures surface later, as the
    candidate's `invalid` record."""
    import cupy
    cc = cupy.cuda.Device().compute_capability
    jobs = []
    for v in {v.name: v for v in variants}.values():
        try:
            jobs.append((v.name, compile.arch_for(v, int(cc))))
        except CupyGemmError:
            continue  # does not run on this GPU: its Plan says so
    workers = max(1, min(32, cpu_count() - 1))  # one CPU left to drive the GPU
    say(f"compiling {len(jobs)} candidate{'s' if len(jobs) != 1 else ''} in {workers} "
        f"process{'es' if workers > 1 else ''}")
    try:  # children must not inherit a CUDA context: spawn
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(compile.compile_named, jobs))
    except BrokenProcessPool as e:  # e.g. a __main__ that cannot be re-imported (python - < script)
        say(f"no parallel compile ({e}): each candidate compiles when first timed")


def entries(meta: dict, records: list[dict]) -> list[dict]:
    """The tuning entries of a candidate run that timed the default too (corpus_bench.run with_default):
    per precision and shape, the fastest correct record, the default's beside it."""
    gpu = meta["devices"][0]
    name, cc = gpu["name"], int(gpu["compute_capability"])
    layout = meta.get("settings", {}).get("b_layout", "row")
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r["kind"] == "candidate":
            groups.setdefault((r["dtype"], r["M"], r["N"], r["K"]), []).append(r)
    tuned_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = []
    for (mode, m, n, k), rows in groups.items():
        timed = [r for r in rows if r["status"] == "ok" and r.get("ours_us")]
        if not timed:
            continue
        best = min(timed, key=lambda r: r["ours_us"])
        default = next((r for r in timed if r.get("default")), None)
        v = registry.lookup(best["variant"])
        source_hash = tuning.source_hash(v)
        dtype, acc = corpus_bench.input_dtype(mode), "tf32" if mode == "tf32" else "float32"
        entry = {"key": tuning.shape_key(name, cc, dtype, acc, layout, (m, n, k)), "device": name, "cc": cc,
                 "dtype": dtype, "acc": acc, "layout": layout, "bucket": list(tuning.bucket(m, n, k)),
                 "shape": [m, n, k], "variant": v.name, "family": v.family.name, "params": dict(v.params),
                 "source_hash": source_hash, "time_ms": best["ours_us"] / 1e3,
                 "time_q1_ms": None, "time_q3_ms": None,
                 "default": default["variant"] if default else "",
                 "default_ms": default["ours_us"] / 1e3 if default else None,
                 "cublas": "cupy.matmul", "cublas_ms": best["cupy_us"] / 1e3 if best.get("cupy_us") else None,
                 "tuned_at": tuned_at, "cupy_gemm": __version__,
                 "catalogue_variant": v.name, "catalogue_family": v.family.name,
                 "catalogue_params": dict(v.params), "catalogue_source_hash": source_hash,
                 "catalogue_ms": best["ours_us"] / 1e3}
        if v.acc != acc:
            entry["variant_acc"] = v.acc  # an exact float32 kernel that won under TF32
        out.append(entry)
    return out

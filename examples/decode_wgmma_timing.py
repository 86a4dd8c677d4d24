"""16-bit decode on Hopper: the dispatch's decode entry against the same layout on the other multiply, and
cupy.matmul. The tables name `…gemv_decode_wgmma_…` entries (the swapped product on wgmma, MMA = 1); each
has an mma.sync twin of the same layout (MMA = 0, the name without `wgmma_`).

    PYTHONPATH=. python3 examples/decode_wgmma_timing.py [--rows 1,8,16] [--projections NxK,...] [--json FILE]

Per shape, dtype (float16, bfloat16) and layout of B (row-major, and column-major as x @ W.T): GPU time per
call as the corpus benchmark takes it (measure/corpus_timing.py: many calls between two CUDA events over
operand sets that together exceed twice the L2, a spin kernel holding the stream while the host enqueues
them, the contenders in turn each round), every output first checked against a float64 product with its
NaN-poisoned output fully written. Shapes whose default is not a decode entry are listed and skipped.
"""
import argparse
import itertools
import json
import math
import statistics

import cupy

import cupy_gemm
from cupy_gemm import registry, verify
from cupy_gemm.measure.corpus_timing import Rotation, rotation_count, time_rounds

ROWS = (1, 8, 16)
PROJECTIONS = ("4096x4096,1024x4096,14336x4096,4096x14336,1024x8192,2048x7168,10240x8192,28672x8192,8192x28672,"
               "6144x4096,24576x1536")  # N×K: Llama-3 8B/70B, DeepSeek-V3
DECODE = ("decode", "decode_kmajor")


def twin(v):
    """The same layout on the other multiply: mma.sync for a wgmma entry, wgmma (a warpgroup per 64 columns)
    for an mma.sync one."""
    if v.params["MMA"]:
        return registry.lookup(v.name.replace("_wgmma_", "_"))
    name = v.name.replace("gemv_decode_kmajor_", "gemv_decode_kmajor_wgmma_").replace(
        "gemv_decode_n", "gemv_decode_wgmma_n")
    return registry.make_variant(v.family, name, v.dtype, {**v.params, "MMA": 1, "WARPS": v.params["BN"] // 16})


def time_shape(dtype, layout, m, n, k, l2, rounds):
    sets = []
    for i in range(rotation_count((m * k + k * n + m * n) * 2, l2)):
        a = verify.random_operand((m, k), dtype, 3 * i)
        b = (verify.random_operand((k, n), dtype, 3 * i + 1) if layout == "row"
             else verify.random_operand((n, k), dtype, 3 * i + 1).T)
        sets.append((a, b, cupy.empty((m, n), dtype)))
    default = cupy_gemm.plan(*sets[0][:2], out=sets[0][2]).variant
    if getattr(default, "family", None) is None or default.family.name not in DECODE:
        print(f"| {dtype} | {layout} | {m}×{n}×{k} | {getattr(default, 'name', default)}: not a decode entry | | | |")
        return None
    wgmma, mma = (default, twin(default)) if default.params["MMA"] else (twin(default), default)
    contenders = {"cupy": [lambda s=s: cupy.matmul(s[0], s[1], out=s[2]) for s in sets],
                  "wgmma": [cupy_gemm.plan(s[0], s[1], out=s[2], variant=wgmma) for s in sets],
                  "mma.sync": [cupy_gemm.plan(s[0], s[1], out=s[2], variant=mma) for s in sets]}
    a, b, out = sets[0]
    want, scale = verify.reference(a, b)
    for name in ("wgmma", "mma.sync"):
        out[...] = cupy.nan
        contenders[name][0]()
        verdict = verify.check(out, want, scale, dtype, "float32", k)
        assert verdict.ok, f"{name} at {dtype} {layout} {m}x{n}x{k}: {verdict}"
    timed = time_rounds({name: Rotation(calls) for name, calls in contenders.items()}, repeats=rounds)
    us = {name: statistics.median(t["times_ms"]) * 1e3 for name, t in timed.items()}
    print(f"| {dtype} | {layout} | {m}×{n}×{k} | {wgmma.name} | {us['mma.sync']:.1f} | {us['wgmma']:.1f} "
          f"({us['mma.sync'] / us['wgmma']:.2f}) | {us['cupy']:.1f} |", flush=True)
    return {"dtype": dtype, "layout": layout, "shape": f"{m}x{n}x{k}", "variant": wgmma.name, **us}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="M values, comma-separated")
    parser.add_argument("--projections", default=PROJECTIONS, help="NxK pairs, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    l2 = cupy.cuda.Device().attributes["L2CacheSize"]
    print(f"{cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)['name'].decode()}, CuPy {cupy.__version__}")
    print("| dtype | B | M×N×K | entry | mma.sync µs | wgmma µs (speed-up) | cupy.matmul µs |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    shapes = [(m, *(int(x) for x in nk.split("x")))
              for m, nk in itertools.product((int(x) for x in args.rows.split(",")), args.projections.split(","))]
    rows = [r for dtype, layout in itertools.product(("float16", "bfloat16"), ("row", "col")) for m, n, k in shapes
            if (r := time_shape(dtype, layout, m, n, k, l2, args.rounds)) is not None]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if rows:
        ratios = [r["mma.sync"] / r["wgmma"] for r in rows]
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"\n{len(rows)} shapes: wgmma over mma.sync {geo:.3f} (least {min(ratios):.2f}, most {max(ratios):.2f})")


if __name__ == "__main__":
    main()

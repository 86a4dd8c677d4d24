"""16-bit decode on Hopper: the dispatch's decode entry against the same layout on the other multiply, and
cupy.matmul. The tables name `…gemv_decode_wgmma_…` entries (the swapped product on wgmma, MMA = 1); each
has an mma.sync twin of the same layout (MMA = 0, the name without `wgmma_`). With --layouts, the default
(whatever serves the shape) against every decode layout on wgmma instead: ROWS the fewest of 16, 32, 64 and
128 that hold M, each width and cluster size whose blocks fill at most two rounds of the SMs.

    PYTHONPATH=. python3 examples/decode_wgmma_timing.py [--rows 1,8,16] [--projections NxK,...] [--json FILE]
    PYTHONPATH=. python3 examples/decode_wgmma_timing.py --layouts --rows 32,64,128 --dtypes float16 --b row

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
from cupy_gemm.compile import precompile
from cupy_gemm.families.decode import MAX_WGMMA_ACCUMULATORS, WGMMA_ROWS, smem_bytes, wgmma_accumulators
from cupy_gemm.measure.corpus_timing import Rotation, rotation_count, time_rounds
from cupy_gemm.scaled_choice import deepest_ring

ROWS = (1, 8, 16)
PROJECTIONS = ("4096x4096,1024x4096,14336x4096,4096x14336,1024x8192,2048x7168,10240x8192,28672x8192,8192x28672,"
               "6144x4096,24576x1536")  # N×K: Llama-3 8B/70B, DeepSeek-V3
DECODE = ("decode", "decode_kmajor")
WIDTHS, CLUSTERS = (64, 128, 192, 256), (1, 2, 4, 8)


def twin(v):
    """The same layout on the other multiply: mma.sync for a wgmma entry, wgmma (a warpgroup per 64 columns)
    for an mma.sync one."""
    if v.params["MMA"]:
        return registry.lookup(v.name.replace("_wgmma_", "_"))
    name = v.name.replace("gemv_decode_kmajor_", "gemv_decode_kmajor_wgmma_").replace(
        "gemv_decode_n", "gemv_decode_wgmma_n")
    return registry.make_variant(v.family, name, v.dtype, {**v.params, "MMA": 1, "WARPS": v.params["BN"] // 16})


def layout_variants(dtype, layout, m, n, k, sm_count):
    """--layouts: the decode kernel on wgmma for an m×n×k product at every width and cluster size whose blocks
    fill at most two rounds of the SMs, each on the deepest ring (up to 8 stages) with which an SM holds its
    share of blocks, a warpgroup per 64 columns or (where the accumulators fit) one for them all."""
    family = registry.family(DECODE[layout == "col"])
    rows = next(r for r in WGMMA_ROWS if m <= r)
    prefix = {"float16": "h", "bfloat16": "b"}[dtype] + "gemv_" + family.name + "_wgmma"
    found = []
    for bn, cs in itertools.product(WIDTHS, CLUSTERS):
        blocks = -(-n // bn) * cs
        if cs > -(-k // 64) or blocks > 2 * sm_count:
            continue
        each = -(-blocks // sm_count)
        for warps in sorted({4, bn // 16}):
            p = dict(ROWS=rows, BN=bn, BK=64, WARPS=warps, CS=cs, MMA=1)
            stages = deepest_ring(lambda s: smem_bytes({**p, "STAGES": s}, dtype, "float32"), each)
            if stages and wgmma_accumulators(rows, bn, warps) <= MAX_WGMMA_ACCUMULATORS:
                found.append(registry.make_variant(family, f"{prefix}_r{rows}_n{bn}_c{cs}_stages{stages}_w{warps}",
                                                   dtype, {**p, "STAGES": stages}))
    return found


def operand_sets(dtype, layout, m, n, k, l2):
    """Operand sets that together exceed twice the L2; B column-major (x @ W.T) where layout is "col"."""
    sets = []
    for i in range(rotation_count((m * k + k * n + m * n) * 2, l2)):
        a = verify.random_operand((m, k), dtype, 3 * i)
        b = (verify.random_operand((k, n), dtype, 3 * i + 1) if layout == "row"
             else verify.random_operand((n, k), dtype, 3 * i + 1).T)
        sets.append((a, b, cupy.empty((m, n), dtype)))
    return sets


def checked_plans(sets, variant, k, want, scale):
    """A plan of `variant` per operand set, its output first checked against the float64 product."""
    plans = [cupy_gemm.plan(s[0], s[1], out=s[2], variant=variant) for s in sets]
    out = sets[0][2]
    out[...] = cupy.nan
    plans[0]()
    verdict = verify.check(out, want, scale, out.dtype.name, "float32", k)
    assert verdict.ok, f"{getattr(variant, 'name', 'the default')} at {out.shape[0]}x{out.shape[1]}x{k}: {verdict}"
    return plans


def time_layouts(dtype, layout, m, n, k, l2, rounds, variants):
    sets = operand_sets(dtype, layout, m, n, k, l2)
    want, scale = verify.reference(*sets[0][:2])
    default = cupy_gemm.plan(*sets[0][:2], out=sets[0][2]).variant
    contenders = {"cupy": Rotation([lambda s=s: cupy.matmul(s[0], s[1], out=s[2]) for s in sets]),
                  "default": Rotation(checked_plans(sets, None, k, want, scale))}
    for v in variants:
        try:
            contenders[v.name] = Rotation(checked_plans(sets, v, k, want, scale))
        except AssertionError as e:  # reported, not timed
            print(f"| {dtype} | {layout} | {m}×{n}×{k} | WRONG: {e} | | | | |", flush=True)
    timed = time_rounds(contenders, repeats=rounds, warmup_ms=5.0)
    us = {name: statistics.median(t["times_ms"]) * 1e3 for name, t in timed.items()}
    layouts = {v.name: us[v.name] for v in variants if v.name in us}
    best = min(layouts, key=layouts.get)
    print(f"| {dtype} | {layout} | {m}×{n}×{k} | {default.name} | {us['default']:.1f} | {best} | {layouts[best]:.1f} "
          f"({us['default'] / layouts[best]:.2f}) | {us['cupy']:.1f} |", flush=True)
    return {"dtype": dtype, "layout": layout, "shape": f"{m}x{n}x{k}", "default_name": default.name, **us,
            "best": best, "layouts": layouts}


def time_shape(dtype, layout, m, n, k, l2, rounds):
    sets = operand_sets(dtype, layout, m, n, k, l2)
    default = cupy_gemm.plan(*sets[0][:2], out=sets[0][2]).variant
    if getattr(default, "family", None) is None or default.family.name not in DECODE:
        print(f"| {dtype} | {layout} | {m}×{n}×{k} | {getattr(default, 'name', default)}: not a decode entry | | | |")
        return None
    wgmma, mma = (default, twin(default)) if default.params["MMA"] else (twin(default), default)
    want, scale = verify.reference(*sets[0][:2])
    contenders = {"cupy": Rotation([lambda s=s: cupy.matmul(s[0], s[1], out=s[2]) for s in sets]),
                  "wgmma": Rotation(checked_plans(sets, wgmma, k, want, scale)),
                  "mma.sync": Rotation(checked_plans(sets, mma, k, want, scale))}
    timed = time_rounds(contenders, repeats=rounds)
    us = {name: statistics.median(t["times_ms"]) * 1e3 for name, t in timed.items()}
    print(f"| {dtype} | {layout} | {m}×{n}×{k} | {wgmma.name} | {us['mma.sync']:.1f} | {us['wgmma']:.1f} "
          f"({us['mma.sync'] / us['wgmma']:.2f}) | {us['cupy']:.1f} |", flush=True)
    return {"dtype": dtype, "layout": layout, "shape": f"{m}x{n}x{k}", "variant": wgmma.name, **us}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="M values, comma-separated")
    parser.add_argument("--projections", default=PROJECTIONS, help="NxK pairs, comma-separated")
    parser.add_argument("--dtypes", default="float16,bfloat16", help="comma-separated")
    parser.add_argument("--b", default="row,col", help="B's layouts, comma-separated: row, col (x @ W.T)")
    parser.add_argument("--layouts", action="store_true", help="time the decode layouts on wgmma against the default")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    device = cupy.cuda.Device()
    l2, sm_count = device.attributes["L2CacheSize"], device.attributes["MultiProcessorCount"]
    print(f"{cupy.cuda.runtime.getDeviceProperties(device.id)['name'].decode()}, CuPy {cupy.__version__}")
    shapes = [(m, *(int(x) for x in nk.split("x")))
              for m, nk in itertools.product((int(x) for x in args.rows.split(",")), args.projections.split(","))]
    cases = [(dtype, layout, *shape) for dtype, layout in itertools.product(args.dtypes.split(","), args.b.split(","))
             for shape in shapes]
    if args.layouts:
        grids = {case: layout_variants(*case, sm_count) for case in cases}
        precompile([v for grid in grids.values() for v in grid], "sm_90a")
        print("| dtype | B | M×N×K | default | µs | fastest layout | µs (speed-up) | cupy.matmul µs |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- |")
        rows = [time_layouts(*case, l2, args.rounds, grids[case]) for case in cases]
        ratios = [r["default"] / r["layouts"][r["best"]] for r in rows]
    else:
        print("| dtype | B | M×N×K | entry | mma.sync µs | wgmma µs (speed-up) | cupy.matmul µs |\n"
              "| --- | --- | --- | --- | --- | --- | --- |")
        rows = [r for case in cases if (r := time_shape(*case, l2, args.rounds)) is not None]
        ratios = [r["mma.sync"] / r["wgmma"] for r in rows]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if rows:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        what = "the fastest layout over the default" if args.layouts else "wgmma over mma.sync"
        print(f"\n{len(rows)} shapes: {what} {geo:.3f} (least {min(ratios):.2f}, most {max(ratios):.2f})")


if __name__ == "__main__":
    main()

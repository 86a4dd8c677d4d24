"""FP8 products of few rows (decode, small batches) on Hopper: scaled_mm's default, which takes the
decode_fp8 kernel up to 32 rows (and up to 64 where it leaves a deep K whole), against the wgmma tile the
default would take without it and torch._scaled_mm.

    python examples/fp8_decode_timing.py                  # the shapes below, per-tensor and block scales
    python examples/fp8_decode_timing.py --layouts        # also every plausible decode layout on wgmma
    python examples/fp8_decode_timing.py --layouts --mma 0,1 --layout-scales block   # and mma.sync, block scales

e4m3 operands built in PyTorch and viewed as uint8 for cupy_gemm (the same bytes for both), bf16 out. GPU
time per call as the corpus benchmark takes it (measure/corpus_timing.py): many calls between two CUDA
events over operand sets that together exceed twice the L2, a spin kernel holding the stream while the host
enqueues them (so host cost cannot hide GPU time), the contenders in turn each round, median of `--rounds`.
Our calls go through `cupy_gemm.scaled_plan` (checked and planned once). Before timing,
each of our kernels is checked: per-tensor against torch._scaled_mm's product of the same bytes, block
scales (which torch._scaled_mm takes only through a newer API) against a float64 product.
"""
import argparse
import itertools
import json
import math
import os
import statistics
import sys

import cupy
import torch

import cupy_gemm
from cupy_gemm import launch, registry, scaled_choice, toolkit, verify
from cupy_gemm.compile import precompile
from cupy_gemm.families.decode import MAX_WGMMA_ACCUMULATORS
from cupy_gemm.families.decode_fp8 import wgmma_accumulators
from cupy_gemm.measure.corpus_timing import Rotation, time_rounds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the operand sets of its sibling script
from fp8_timing import as_uint8, operand_sets  # noqa: E402

ROWS = (1, 8, 16, 32)
PROJECTIONS = ("4096x4096,6144x4096,14336x4096,4096x14336,8192x8192,1024x8192,10240x8192,28672x8192,8192x28672,"
               "128256x4096,7168x16384,2048x7168,24576x1536,7168x2048")  # N×K: Llama-3 8B/70B, its LM head, DeepSeek-V3


def layout_variants(m, n, k, sm_count, mma=(1,), mode="tensor"):
    """--layouts: the decode kernel (`mode` scales, e4m3, bf16 out) at every width and cluster size whose blocks
    fill at most two rounds of the SMs, each on the deepest ring with which an SM holds its share: with
    MMA = 1 (wgmma) the widths of whole 64-column slices, a warpgroup per slice or one for them all; with
    MMA = 0 (fp8 widened for mma.sync, at most 32 rows) 48 to 256 columns, a warp per 16 (32 past 128)."""
    rows, k_blocks = (16 if m <= 16 else 32 if m <= 32 else 64), -(-k // 128)
    widths = {1: scaled_choice.DECODE_WIDTHS, 0: (48,) + scaled_choice.WIDENED_WIDTHS if rows < 64 else ()}
    base = scaled_choice._decode_entry("e4m3", "e4m3", mode, "bfloat16", (rows, 64, 1, 8))
    found = []
    for kind, bn, cs in ((x, bn, cs) for x in mma for bn, cs in itertools.product(widths[x], (1, 2, 4, 8))):
        blocks = -(-n // bn) * cs
        if cs > k_blocks or bn % cs or blocks > 2 * sm_count:
            continue
        stages = scaled_choice.decode_stages(rows, bn, cs, -(-blocks // sm_count))
        fits = lambda w: wgmma_accumulators(rows, bn, w) <= MAX_WGMMA_ACCUMULATORS
        for warps in sorted(filter(fits, {4, bn // 16})) if kind else (
                scaled_choice.decode_warps(bn, 0),):
            name = f"fp8gemv_decode_{'wgmma_' if kind else ''}r{rows}_n{bn}_c{cs}_stages{stages}_w{warps}_{mode}"
            found.append(registry.make_variant(base.family, name, base.dtype, {
                **base.params, "BN": bn, "CS": cs, "STAGES": stages, "MMA": kind, "WARPS": warps}))
    return found


def time_shape(m, n, k, args, l2_bytes, sm_count):
    sets = operand_sets(m, n, k, l2_bytes)
    sa_t, sb_t = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    sa, sb = cupy.from_dlpack(sa_t.reshape(1)), cupy.from_dlpack(sb_t.reshape(1))
    kb, nb = -(-k // 128), -(-n // 128)
    rng = cupy.random.default_rng(0)
    sa_block = cupy.exp2(rng.random((kb, m), dtype=cupy.float32) - 0.5).T  # [K-block][M] in memory
    sb_block = cupy.exp2(rng.random((nb, kb), dtype=cupy.float32) - 0.5)
    out = cupy.empty((m, n), dtype="bfloat16")
    plans = lambda v, s_a, s_b: [cupy_gemm.scaled_plan(as_uint8(a), as_uint8(b_t).T, s_a, s_b, out=out, variant=v)
                                 for a, b_t in sets]
    torch_calls = [lambda a=a, b_t=b_t: torch._scaled_mm(a, b_t.t(), scale_a=sa_t, scale_b=sb_t,
                                                         out_dtype=torch.bfloat16) for a, b_t in sets]
    default = {mode: scaled_choice.variant_for("e4m3", "e4m3", mode, "bfloat16", m, n, k, sm_count)
               for mode in ("tensor", "block")}
    tile = {mode: scaled_choice.tile_variant_for("e4m3", "e4m3", mode, "bfloat16", m, n, k, sm_count)
            for mode in ("tensor", "block")}
    contenders = {"torch._scaled_mm": torch_calls, "default": plans(default["tensor"], sa, sb),
                  "wgmma tile": plans(tile["tensor"], sa, sb),
                  "default, block scales": plans(default["block"], sa_block, sb_block),
                  "wgmma tile, block scales": plans(tile["block"], sa_block, sb_block)}
    layouts = layout_variants(m, n, k, sm_count, args.mma, args.layout_scales) if args.layouts else []
    layout_scales = (sa_block, sb_block) if args.layout_scales == "block" else (sa, sb)
    contenders.update({v.name: plans(v, *layout_scales) for v in layouts})
    ref = cupy.from_dlpack(torch_calls[0]().contiguous()).astype(cupy.float32)
    for name, calls in contenders.items():
        if name == "torch._scaled_mm":
            continue
        got = calls[0]().astype(cupy.float32)
        if "block" in name:
            a, b_t = sets[0]
            want, scale = verify.reference(cupy_gemm.dequantize(as_uint8(a), sa_block, "e4m3"),
                                           cupy_gemm.dequantize(as_uint8(b_t).T, sb_block, "e4m3"))
            verdict = verify.check(got, want, scale, "bfloat16", "fp8", k)
            assert verdict.ok, f"{name} at {m}x{n}x{k}: {verdict}"
        else:
            diff = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
            assert diff < 1e-2, f"{name} at {m}x{n}x{k} differs from torch._scaled_mm by {diff:.1e}"
    timed = time_rounds({name: Rotation(calls) for name, calls in contenders.items()}, repeats=args.rounds)
    us = {name: statistics.median(t["times_ms"]) * 1e3 for name, t in timed.items()}
    b_bytes = n * k + m * k + 2 * m * n
    row = {"shape": f"{m}x{n}x{k}", "torch": us["torch._scaled_mm"], "default": us["default"],
           "tile": us["wgmma tile"], "block": us["default, block scales"], "tile_block": us["wgmma tile, block scales"],
           "default_name": default["tensor"].name, "gbps": b_bytes / us["default"] / 1e3}
    layouts = {v.name: us[v.name] for v in layouts}
    if layouts:
        row["layouts"] = layouts
        best = min(layouts, key=layouts.get)
        row["best_layout"] = f"{best} {layouts[best]:.1f} ({layouts[best] / us['default']:.2f}× the default's time)"
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="M values, comma-separated")
    parser.add_argument("--projections", default=PROJECTIONS, help="NxK pairs, comma-separated")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layouts", action="store_true",
                        help="also time the decode kernel at every width and cluster size whose blocks fill at most "
                             "two rounds of the SMs (with --layout-scales)")
    parser.add_argument("--mma", type=lambda x: tuple(int(v) for v in x.split(",")), default=(1,),
                        help="--layouts: the decode kernel's MMA values to time, comma-separated (0 mma.sync, 1 wgmma)")
    parser.add_argument("--layout-scales", choices=("tensor", "block"), default="tensor",
                        help="--layouts: the scales the layouts are timed with")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()
    device = cupy.cuda.Device()
    sm_count = launch.sm_count(device)
    print(f"{torch.cuda.get_device_name()}, {sm_count} SMs, torch {torch.__version__}, CuPy {cupy.__version__}, "
          f"NVRTC {'.'.join(map(str, toolkit.nvrtc_version()))}")
    l2 = int(device.attributes.get("L2CacheSize", 50 << 20))
    print("| M×N×K | torch._scaled_mm µs | default µs (× torch) | GB/s | wgmma tile µs | block scales: default µs "
          "(× torch per-tensor) | wgmma tile µs | default's kernel |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    shapes = [(m, *(int(x) for x in nk.split("x")))
              for m, nk in itertools.product((int(x) for x in args.rows.split(",")), args.projections.split(","))]
    if args.layouts:
        precompile([v for m, n, k in shapes for v in layout_variants(m, n, k, sm_count, args.mma, args.layout_scales)],
                   "sm_90a")
    rows = []
    for m, n, k in shapes:
        r = time_shape(m, n, k, args, l2, sm_count)
        rows.append(r)
        print(f"| {r['shape']} | {r['torch']:.1f} | {r['default']:.1f} ({r['torch'] / r['default']:.2f}) | "
              f"{r['gbps']:.0f} | {r['tile']:.1f} | {r['block']:.1f} ({r['torch'] / r['block']:.2f}) | "
              f"{r['tile_block']:.1f} | {r['default_name']} |", flush=True)
        if "best_layout" in r:
            print(f"|   fastest layout: {r['best_layout']} | | | | | | | |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "sm_count": sm_count, "rows": rows}, f, indent=1)
    geo = lambda key, over: math.exp(sum(math.log(r[over] / r[key]) for r in rows) / len(rows))
    print(f"\ngeomean over {len(rows)} shapes: default × torch._scaled_mm {geo('default', 'torch'):.3f} (min "
          f"{min(r['torch'] / r['default'] for r in rows):.2f}); default over the wgmma tile {geo('default', 'tile'):.3f}; "
          f"block scales × torch per-tensor {geo('block', 'torch'):.3f}, over the wgmma tile {geo('block', 'tile_block'):.3f}")


if __name__ == "__main__":
    main()

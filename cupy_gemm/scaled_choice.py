"""The default FP8 variant for a call: formats, scaling and output pick the catalogue's entries (or one
derived from them), and M, N, K and the SM count pick the kernel: the decode kernel for at most 32 rows
(and 64 over a deep K it leaves whole), else the wgmma tile and how many units share its K (scaled.py
checks and runs)."""
from __future__ import annotations

from functools import lru_cache

from . import fp8, registry
from .arrange import check_sizes
from .families.decode_fp8 import smem_bytes as decode_smem_bytes
from .families.wgmma_fp8 import K_BLOCK

FAMILY = "wgmma_fp8"
DECODE_FAMILY = "decode_fp8"
FAMILIES = (FAMILY, DECODE_FAMILY)
SCALING_IDS = {"tensor": 0, "rowcol": 1, "block": 2}
# Where the shape is known the default is the tile expected to finish first: its rounds of tiles (waves of
# persistent blocks, one an SM) × (K-blocks × ns per K-block + ns per tile), the first listed (the
# catalogue's first entry) on a tie. Per-tensor and row/column scales leave the main loop the same; block
# scales add their loads and an FFMA promotion. Fitted on an H100 80GB HBM3 (2026-11-28) by least squares
# in relative error to 29 shapes from 129×7168×2048 to 8192³ (e4m3, bf16 out; rms error 6–11% a tile).
# There the rule's pick ran within 1.002× (geomean; 1.05 at most) of the fastest of the five tiles where
# the rules before it ran 1.15× (2.1 at most); block scales 1.001× against 1.27× (2.9 at most). On an H200
# the same costs picked the fastest of the five tiles at all 29 shapes, both scalings (2026-11-28).
TILE_COSTS = {
    "tensor": {(128, 256): (757, 3341), (128, 192): (539, 3376), (128, 128): (432, 2097),
               (64, 128): (377, 851), (64, 64): (241, 358)},
    "block": {(128, 256): (804, 3305), (128, 192): (625, 3067), (128, 128): (547, 1367),
              (64, 128): (370, 1075), (64, 64): (264, 465)},
}


# Split-K (SPLIT_K = s): a tile's K-blocks shared by s units, so few tiles over a deep K fill the SMs. A
# round of split units costs SPLIT_COST[0] + SPLIT_COST[1] × s ns more (the partials' stores, the arrival,
# the last split's sum), fitted on an H200 (2026-11-28) to 14 shapes of 64 to 1024 rows and K of 4096 to
# 16384, splits 2 to 4 of the tiles below. A split is taken only where expected SPLIT_MARGIN sooner than the
# best unsplit tile: there the pick ran within 1.004× (per-tensor) and 1.002× (block) of the fastest of the
# 17 and 12 timed choices, 1.07× and 1.14× faster (geomean; up to 1.5×, 1.6×) than the unsplit rule's tile.
# A split tile larger than SPLIT_COST_TILE (per-tensor 128×192) pays that cost times its area over it: its
# partials are that much larger. With it, 128×192 splits were taken at 14 of 28 shapes of 64 to 1024 rows
# timed on an H200 (2026-11-29), 13 of them faster than the pick without it (up to 1.21×) and one slower
# (0.96×); priced like 128×128 they were also taken where they ran up to 12% slower.
SPLITS = (2, 3, 4)
SPLIT_TILES = {"tensor": ((128, 128), (128, 192), (64, 128), (64, 64)), "block": ((128, 128), (64, 128))}
SPLIT_COST = (1000, 1500)
SPLIT_COST_TILE = 128 * 128
SPLIT_MARGIN = 0.9


# With few rows (decode, small batches) the product is bound by reading B once: the decode_fp8 kernel
# streams it, BN columns a cluster whose CS blocks split K, on wgmma's swapped product (MMA = 1: B's rows as
# its m64, a warpgroup per 64 columns; it ran 1.01–1.36× faster than fp8 widened for mma.sync, MMA = 0, at
# the 12 shapes of 16 and 32 rows timed on an H200, 2026-11-29). 64 columns, as many blocks a cluster (8, 4,
# 2) as keep one block per SM; where 64-column clusters outnumber the SMs, the narrowest of DECODE_WIDTHS
# that does not, the ring DECODE_STAGES deep where a block's shared memory allows it. Past 256-column
# clusters, one an SM, 64 columns on DECODE_SHARED_STAGES stages, several blocks an SM. At those 12 shapes
# every pick ran within 1.01× of the fastest layout of widths 64 to 256, clusters of 1 to 8 and one or a
# warpgroup a slice (examples/fp8_decode_timing.py --layouts). (MMA = 0 had been fitted the same way on
# 2026-11-28: WIDENED_WIDTHS, a warp per 16 columns, 32 past 128.)
# Rows come in DECODE_ROWS (A's box; wgmma's N). Up to 32 rows the kernel beat the wgmma tiles at all 56
# shapes timed (1.05–1.9×; K from 1536), block scales too. Up to 64 rows the tiles read little of B twice,
# and the kernel won where its layout leaves K whole (a cluster splitting K costs 64 rows' partial sums, and
# clusters of blocks that each fill an SM fit the GPCs badly) over a K of WIDE_ROWS_K or more, with scales
# constant along K: 48 and 64 rows, 1.0–1.25× (geomean 1.07 over 16 shapes); with block scales it ran
# 0.91–1.09× the tiles' speed. Where 64 columns would split K, 128 columns in clusters of 8 or 4 filling at
# most half the SMs (one block an SM: the GPCs hold few such clusters at once) ran 1.08–1.39× faster than the
# tiles at N 1024 and 2048 (the experts of a mixture at few tokens); other splits lost to the tiles.
DECODE_ROWS = (16, 32, 64)
WIDE_ROWS_K, WIDE_ROWS_MODES = 4096, ("tensor", "rowcol")
WIDE_ROWS_SPLIT_WIDTH, WIDE_ROWS_SPLITS = 128, (8, 4)
DECODE_COLUMNS = 64
DECODE_WIDTHS = (64, 128, 192, 256)
WIDENED_WIDTHS = (64, 80, 96, 112, 128, 160, 192, 224, 256)
DECODE_SPLITS = (8, 4, 2)
DECODE_STAGES = 8
DECODE_SHARED_STAGES = 4
SM_SHARED_BYTES = 228 * 1024  # an sm_90 SM's shared memory; each resident block also reserves 1 KB


def decode_warps(bn: int, mma: int = 1) -> int:
    """Consumer warps of a BN-column decode block: a warpgroup per 64 columns on wgmma (MMA = 1); with
    mma.sync a warp per 16 columns, 32 past 8 warps."""
    return bn // 16 if mma or bn <= 128 else bn // 32


def deepest_ring(smem_of, blocks_per_sm: int = 1) -> int:
    """The deepest ring up to DECODE_STAGES with which blocks_per_sm blocks of smem_of(stages) bytes each fit
    in an SM's shared memory together; 0 where not even 2 stages fit."""
    fits = lambda s: blocks_per_sm * (smem_of(s) + 1024) <= SM_SHARED_BYTES
    return max((s for s in range(2, DECODE_STAGES + 1) if fits(s)), default=0)


def decode_stages(rows: int, bn: int, cs: int, blocks_per_sm: int = 1) -> int:
    """deepest_ring of the FP8 decode kernel (block scales: the largest stage), at least 2."""
    return deepest_ring(lambda s: decode_smem_bytes(dict(ROWS=rows, BN=bn, CS=cs, STAGES=s, SCALING=2), "", ""),
                        blocks_per_sm) or 2


def decode_layout(m: int, n: int, k: int, sm_count: int, mode: str = "tensor") -> tuple[int, int, int, int] | None:
    """(ROWS, BN, CS, STAGES) of the decode kernel for an m×n×k product on sm_count SMs with `mode` scales,
    or None where the wgmma tiles serve it (past 64 rows; past 32 where K is under WIDE_ROWS_K, the scales
    vary along K or K would be split other than by WIDE_ROWS_SPLITS blocks of 128 columns)."""
    rows = next((r for r in DECODE_ROWS if m <= r), None)
    if rows is None or (rows == 64 and (k < WIDE_ROWS_K or mode not in WIDE_ROWS_MODES)):
        return None
    bn = next((w for w in DECODE_WIDTHS if -(-n // w) <= sm_count), None)
    if bn is None:  # no width gives one block per SM: several share one, on a shallower ring
        return rows, DECODE_COLUMNS, 1, DECODE_SHARED_STAGES
    clusters, k_blocks = -(-n // bn), -(-k // K_BLOCK)
    cs = next((c for c in DECODE_SPLITS if clusters * c <= sm_count and c <= k_blocks), 1)
    if rows == 64 and cs > 1:  # 128 columns (A read half as often) in clusters of 8 or 4 that fit the GPCs
        bn, clusters = WIDE_ROWS_SPLIT_WIDTH, -(-n // WIDE_ROWS_SPLIT_WIDTH)
        cs = next((c for c in WIDE_ROWS_SPLITS if 2 * clusters * c <= sm_count and c <= k_blocks), None)
        if cs is None:
            return None
    return rows, bn, cs, decode_stages(rows, bn, cs)


@lru_cache(maxsize=None)
def _decode_entry(format_a: str, format_b: str, mode: str, out_dtype: str, layout) -> registry.Variant:
    """The catalogue's decode entry with this (ROWS, BN, CS, STAGES) for these formats, scaling and output,
    else the first decode entry made to take them."""
    rows, bn, cs, stages = layout
    want = {"FORMAT_A": fp8.FORMATS.index(format_a), "FORMAT_B": fp8.FORMATS.index(format_b),
            "SCALING": SCALING_IDS[mode], "ROWS": rows, "BN": bn, "CS": cs, "STAGES": stages, "MMA": 1,
            "WARPS": decode_warps(bn)}
    entries = [v for v in registry.catalogue().values() if v.family.name == DECODE_FAMILY]
    found = [v for v in entries if v.dtype == out_dtype and all(v.params[p] == x for p, x in want.items())]
    if found:
        return found[0]
    name = (f"fp8gemv_decode_wgmma_{f'r{rows}_' if rows > 16 else ''}n{bn}_c{cs}_stages{stages}_"
            f"{format_a}{'' if format_b == format_a else format_b}_{mode}_{out_dtype}")
    return registry.make_variant(entries[0].family, name, out_dtype, {**entries[0].params, **want})


OUTPUT_SUFFIXES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}  # the catalogue's name endings


def with_output(variant: registry.Variant, out_dtype: str) -> registry.Variant:
    """An FP8 variant made to write out_dtype: named after it, its output's suffix swapped."""
    stem = variant.name.removesuffix("_" + OUTPUT_SUFFIXES[variant.dtype])
    return registry.make_variant(variant.family, f"{stem}_{OUTPUT_SUFFIXES[out_dtype]}", out_dtype, variant.params)


def _costed_as(mode: str) -> str:
    """The cost tables' key of a scaling mode: row/column scales cost as per-tensor ones."""
    return "block" if mode == "block" else "tensor"


def tile_costs(mode: str) -> dict:
    """TILE_COSTS for a scaling mode."""
    return TILE_COSTS[_costed_as(mode)]


def choices(mode: str, k: int) -> list[tuple[tuple[int, int], int]]:
    """(tile, splits) pairs the default weighs: every tile unsplit, then the split ones with a K-block a split."""
    k_blocks = -(-k // K_BLOCK)
    return [(t, 1) for t in tile_costs(mode)] + [
        (t, s) for t in SPLIT_TILES[_costed_as(mode)] for s in SPLITS if s <= k_blocks]


def expected_ns(mode: str, tile: tuple[int, int], m: int, n: int, k: int, sm_count: int, splits: int = 1) -> float:
    """A tile's expected time at m×n×k on sm_count SMs under TILE_COSTS, its K shared by `splits` units."""
    per_k_block, per_tile = tile_costs(mode)[tile]
    units = -(-m // tile[0]) * -(-n // tile[1]) * splits
    k_blocks = -(-k // K_BLOCK)
    area = max(1.0, tile[0] * tile[1] / SPLIT_COST_TILE)
    split_ns = (SPLIT_COST[0] + SPLIT_COST[1] * splits) * area if splits > 1 else 0
    return -(-units // sm_count) * (-(-k_blocks // splits) * per_k_block + per_tile + split_ns)


def variant_for(format_a: str, format_b: str, mode: str, out_dtype: str, m: int | None = None,
                n: int | None = None, k: int | None = None, sm_count: int | None = None) -> registry.Variant:
    """With the shape and the SM count, the tile expected to finish first, split where a split tile is
    expected SPLIT_MARGIN sooner still; without them the first catalogue entry for these formats, scaling
    and output that promotes every K-block. A tile the catalogue lacks for this call is derived from an
    entry with it (validated like any variant)."""
    if not (m and n and k and sm_count):
        return _first(format_a, format_b, mode, out_dtype)
    layout = decode_layout(m, n, k, sm_count, mode)
    if layout is not None:
        return _decode_entry(format_a, format_b, mode, out_dtype, layout)
    return tile_variant_for(format_a, format_b, mode, out_dtype, m, n, k, sm_count)


def tile_variant_for(format_a: str, format_b: str, mode: str, out_dtype: str, m: int, n: int, k: int,
                     sm_count: int) -> registry.Variant:
    """The wgmma tile (and split) expected to finish first, whatever M (variant_for's pick where
    decode_layout gives none)."""
    tile, splits = _pick(mode, m, n, k, sm_count)
    return _entry_with_split(format_a, format_b, mode, out_dtype, tile, splits)


def _pick(mode: str, m: int, n: int, k: int, sm_count: int) -> tuple[tuple[int, int], int]:
    """(tile, splits) of variant_for's choice: the first of equals."""
    expected = lambda c: expected_ns(mode, c[0], m, n, k, sm_count, c[1])
    unsplit = min((c for c in choices(mode, k) if c[1] == 1), key=expected)
    split = min((c for c in choices(mode, k) if c[1] > 1), key=expected, default=None)
    return split if split and expected(split) < SPLIT_MARGIN * expected(unsplit) else unsplit


@lru_cache(maxsize=None)
def _entry_with_split(format_a: str, format_b: str, mode: str, out_dtype: str, tile, splits: int) -> registry.Variant:
    """_entry_with_tile's variant with its K shared by `splits` units per tile (itself for one)."""
    v = _entry_with_tile(format_a, format_b, mode, out_dtype, tile)
    if splits == 1:
        return v
    return registry.make_variant(v.family, f"{v.name}_splitk{splits}", v.dtype, {**v.params, "SPLIT_K": splits})


def _wanted(format_a: str, format_b: str, mode: str) -> dict:
    return {"FORMAT_A": fp8.FORMATS.index(format_a), "FORMAT_B": fp8.FORMATS.index(format_b),
            "SCALING": SCALING_IDS[mode], "PROMOTE": 1}


def _derived(base: registry.Variant, tag: str, format_a: str, format_b: str, mode: str,
             out_dtype: str) -> registry.Variant:
    """base's tile and pipeline made to take these formats, scaling and output (validated like any variant)."""
    name = f"fp8gemm_wgmma_{tag}{format_a}{'' if format_b == format_a else format_b}_{mode}_{out_dtype}"
    return registry.make_variant(base.family, name, out_dtype, {**base.params, **_wanted(format_a, format_b, mode)})


def _matching(want: dict, out_dtype: str) -> list[registry.Variant]:
    return [v for v in registry.catalogue().values() if v.family.name == FAMILY and v.dtype == out_dtype
            and all(v.params[key] == value for key, value in want.items())]


@lru_cache(maxsize=None)
def _entry_with_tile(format_a: str, format_b: str, mode: str, out_dtype: str, tile) -> registry.Variant:
    """The catalogue entry with this BM×BN tile (no clusters) for these formats, scaling and output; else one
    with the tile, of the same scaling where there is one (block scales take shared memory in each stage),
    made to take them."""
    want = _wanted(format_a, format_b, mode)
    with_tile = lambda v: (v.params["BM"], v.params["BN"]) == tile and v.params["CLUSTER"] == 1
    found = [v for v in _matching(want, out_dtype) if with_tile(v)]
    if found:
        return found[0]
    bases = [v for v in registry.catalogue().values() if v.family.name == FAMILY and with_tile(v)]
    base = next((v for v in bases if v.params["SCALING"] == want["SCALING"]), bases[0])
    return _derived(base, f"tile{tile[0]}x{tile[1]}_", format_a, format_b, mode, out_dtype)


@lru_cache(maxsize=None)
def _first(format_a: str, format_b: str, mode: str, out_dtype: str) -> registry.Variant:
    """The first catalogue entry for these formats, scaling and output, else the per-tensor default's tile and
    pipeline made to take them."""
    matching = _matching(_wanted(format_a, format_b, mode), out_dtype)
    if matching:
        return matching[0]
    first = next(v for v in registry.catalogue().values() if v.family.name == FAMILY)
    return _derived(first, "", format_a, format_b, mode, out_dtype)


def explain(format_a: str, format_b: str, mode: str, out_dtype: str, m: int, n: int, k: int, device=None) -> str:
    """Which variant `scaled_mm(variant=None)` runs for an m×n×k product, and why (each tile's expected time).
    device: as dispatch.explain's (None: the current GPU; a (name, cc) pair for one not present)."""
    from .dispatch import ASSUMED_SM_COUNT, gpu_for
    check_sizes(M=m, N=n, K=k)  # scaled_mm refuses the call before it chooses
    gpu = gpu_for(device)
    sm_count = gpu.sm_count or ASSUMED_SM_COUNT
    variant = variant_for(format_a, format_b, mode, out_dtype, m, n, k, sm_count)
    estimate = {c: expected_ns(mode, c[0], m, n, k, sm_count, c[1]) for c in choices(mode, k)}
    ranked = ", ".join(f"{t[0]}×{t[1]}{f' ÷{s}' if s > 1 else ''} ~{estimate[t, s] / 1000:.1f} µs"
                       for t, s in sorted(estimate, key=estimate.get))
    sms = f"{gpu.sm_count} SMs" if gpu.sm_count else f"SM count unknown, {ASSUMED_SM_COUNT} assumed"
    why = (f"the tile expected to finish first, rounds of tiles × (K-blocks × ns per K-block + ns per tile), costs "
           f"fitted on an H100 (scaled_choice.TILE_COSTS; ÷s: K split over s units, SPLIT_COST, taken where "
           f"{1 - SPLIT_MARGIN:.0%} sooner than unsplit): {ranked}")
    layout = decode_layout(m, n, k, sm_count, mode)
    if layout is not None:
        rows, bn, cs, stages = layout
        reach = (f"at most {rows} rows" if rows < 64 else
                 f"at most 64 rows over a K of {WIDE_ROWS_K} or more, scales constant along K, K whole or split "
                 f"by clusters of {' or '.join(map(str, WIDE_ROWS_SPLITS))} on 128 columns")
        why = (f"{reach}: the decode kernel streams B once, {bn} columns a cluster, K split "
               f"over its {cs} blocks, {stages} stages ({-(-n // bn) * cs} blocks for {sm_count} SMs; "
               f"scaled_choice.decode_layout); the wgmma tiles would be {ranked}")
    lines = [f"{format_a} × {format_b} {m}×{n}×{k}, {mode} scales, {out_dtype} out, on {gpu.name} (sm_{gpu.cc}, {sms})",
             f"variant: {variant.name}", f"why: {why}"]
    if gpu.cc < 90:
        lines.append("note: the FP8 kernels need an sm_90 GPU; scaled_mm raises DeviceError on this one")
    return "\n".join(lines) + "\n"

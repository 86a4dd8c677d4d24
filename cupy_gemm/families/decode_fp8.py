"""Hopper (sm_90a) FP8 decode-style products: M <= 16, 32 or 64, Bᵀ streamed by TMA, K split over a cluster.

templates/decode_fp8.cu.j2: `decode_kmajor`'s ring, cluster split of K and on-chip sum
(templates/common/decode_ring.cuh) with fp8 operands and scales, as wgmma_fp8 takes them through
`cupy_gemm.scaled_mm` (abi "scaled"; `dtype` names the OUTPUT, FORMAT_A / FORMAT_B / SCALING as in
wgmma_fp8). MMA = 1: warpgroups run the swapped product Cᵀ = B·Aᵀ on wgmma (B's rows as its m64, A's ROWS
rows as its N); MMA = 0: warps widen the fp8 fragments to f16 (exact) for mma.sync m16n8k16 (at most 32
rows). Either adds every 128-deep K-block into fp32 registers (block scales applied there: the producer
warp copies each K-block's into its stage). A cluster of CS blocks owns BN columns of C; the grid is one
cluster per BN columns, so `tile` is the BN / CS columns one block stores.

    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                T* C, const float* scale_a, const float* scale_b, int M, int N, int K, long long ldc,
                long long sa_row, long long sa_block)

With block scales (SCALING = 2) A's (M × K-blocks) scales are read where they lie: sa_row and sa_block are
the scale array's strides in floats (else 0); B's are [ceil(N / 128)][K-blocks], contiguous.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError, InputError
from . import decode
from .base import Family, Param
from .wgmma_fp8 import K_BLOCK, _rule_formats

BOX_BYTES = 128  # one swizzle row: a K-block of fp8


def smem_bytes(p, dtype: str, acc: str) -> int:
    stage = (p["ROWS"] + p["BN"]) * K_BLOCK
    tile = p["ROWS"] * p["BN"] * 4 if p["CS"] > 1 else 0  # the fp32 partial tile the cluster reads
    # block scales: a slot a stage for its K-block's scales of A's rows and of B's column blocks the BN
    # columns can touch, in 16-byte units
    scales = p["ROWS"] + -(-p["BN"] // 128) + 1 if p["SCALING"] == 2 else 0
    slot = -(-scales * 4 // 16) * 16
    # + 16 per stage: full/empty barriers; + 1024: the kernel rounds the start up to the swizzle period
    return p["STAGES"] * (stage + 16 + slot) + tile + 1024


def wgmma_accumulators(rows: int, bn: int, warps: int) -> int:
    """The fp32 registers a consumer thread holds with MMA = 1: a sum and a K-block's part, each what the
    16-bit decode kernel's swapped product holds (decode.wgmma_accumulators)."""
    return 2 * decode.wgmma_accumulators(rows, bn, warps)


def _rule_columns(p, dtype, acc):
    if p["BN"] % (16 * p["WARPS"]):
        yield ConfigError("BN", p["BN"], f"a multiple of 16 * WARPS = {16 * p['WARPS']} (each warp takes pairs "
                          "of n8 tiles)")
    if p["MMA"] and p["WARPS"] % 4:
        yield ConfigError("WARPS", p["WARPS"], "a multiple of 4 with MMA = 1 (warpgroups; BN then takes whole "
                          "64-column slices)")
    if not p["MMA"] and p["ROWS"] == 64:
        yield ConfigError("ROWS", 64, "16 or 32 with MMA = 0 (one or two m16 tiles); 64 needs MMA = 1")
    if p["MMA"] and wgmma_accumulators(p["ROWS"], p["BN"], p["WARPS"]) > decode.MAX_WGMMA_ACCUMULATORS:
        yield ConfigError("WARPS", p["WARPS"], f"more warpgroups: {p['ROWS']} rows of {p['BN']} columns take more "
                          f"than {decode.MAX_WGMMA_ACCUMULATORS} accumulator registers a thread")
    # BN % CS == 0 (each block of the cluster stores BN / CS columns) follows: CS is at most 8


def make_args(variant, a, b_t, c, scale_a, scale_b, m: int, n: int, k: int, lda: int, ldb: int, ldc: int) -> tuple:
    """Kernel arguments for A (m×k, row stride lda), Bᵀ (n×k, row stride ldb) and C (m×n, row stride ldc),
    CuPy arrays meeting the copy engine's 16-byte rules, and float32 scales (A's block scales as the caller's
    (M, K-blocks) array, any strides; the others contiguous)."""
    from .. import tma
    p = variant.params
    if k + K_BLOCK >= 2**31 or n + p["BN"] >= 2**31:  # the copies' coordinates and K-block offsets are 32-bit
        raise InputError(f"{variant.name} addresses K and N below 2**31 - {K_BLOCK} and 2**31 - {p['BN']}; got "
                         f"K={k}, N={n}")
    map_a = tma.tensor_map_2d(a.data.ptr, "uint8", rows=m, cols=k, ld=lda, box_rows=p["ROWS"], box_cols=BOX_BYTES)
    map_b = tma.tensor_map_2d(b_t.data.ptr, "uint8", rows=n, cols=k, ld=ldb, box_rows=p["BN"], box_cols=BOX_BYTES)
    # block scales of A are read where they lie, (M, K-blocks) by the array's own strides
    row_step, block_step = (s // 4 for s in scale_a.strides) if p["SCALING"] == 2 else (0, 0)
    return (map_a, map_b, c, scale_a, scale_b, np.int32(m), np.int32(n), np.int32(k), np.int64(ldc),
            np.int64(row_step), np.int64(block_step))


DECODE_FP8 = Family(
    name="decode_fp8",
    template="decode_fp8.cu.j2",
    doc="Hopper FP8 with scales, M <= 16, 32 or 64: Bᵀ streamed by TMA, K split over a cluster of CS blocks and "
        "summed in distributed shared memory; the swapped product on wgmma (MMA = 1) or fp8 widened to f16 for "
        "mma.sync, K-blocks promoted into fp32; dtype = output",
    params=(
        Param("ROWS", 16, "the most rows of C the kernel serves: one or two m16 tiles, or 64 with MMA = 1",
              choices=(16, 32, 64)),
        Param("BN", 64, "columns of C per cluster", lo=16, hi=256),
        Param("STAGES", 8, "shared-memory pipeline stages, one 128-deep K-block each", lo=2, hi=16),
        Param("WARPS", 4, "consumer warps (one more warp produces): BN / 16, a warpgroup per 64 columns with MMA = 1; "
              "with mma.sync BN / 16, or BN / 32 past 128 columns", lo=1, hi=16),
        Param("CS", 2, "blocks per cluster, each summing one slice of K (portable clusters: at most 8)",
              choices=(1, 2, 4, 8)),
        Param("MMA", 0, "0 = fp8 widened to f16 for mma.sync, 1 = the swapped product on wgmma (warpgroups of "
              "64-column slices)", choices=(0, 1)),
        Param("FORMAT_A", 0, "A's fp8 format: 0 = e4m3, 1 = e5m2", choices=(0, 1)),
        Param("FORMAT_B", 0, "B's fp8 format: 0 = e4m3, 1 = e5m2", choices=(0, 1)),
        Param("SCALING", 0, "scales: 0 = per tensor, 1 = per row of A and column of B, 2 = 1×128 / 128×128 blocks",
              choices=(0, 1, 2)),
    ),
    dtypes={"bfloat16": ("float32",), "float16": ("float32",), "float32": ("float32",)},
    threads=lambda p: 32 * (p["WARPS"] + 1),
    tile=lambda p: (p["ROWS"], p["BN"] // p["CS"]),
    smem_bytes=smem_bytes,
    rules=(_rule_columns, _rule_formats),
    abi="scaled",
    make_args=make_args,
    min_cc=lambda p, dtype, acc: 90,
    needs_sm90a=True,
    max_rows=lambda p: p["ROWS"],
    cluster=lambda p: p["CS"],
    pdl=True,
)

FAMILIES = (DECODE_FP8,)

"""Hopper (sm_90a): TMA + wgmma, warp-specialised and persistent, fp16/bf16 in, fp32 accumulate.

The "tma" ABI: the kernel takes tensor maps (encoded on the host, cupy_gemm/tma.py) for A and B, and for
C, which the epilogue writes with TMA stores when beta = 0 (C's pointer serves the beta != 0 path):

    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, T* C, int M, int N, int K, long long ldc,
                float alpha, float beta)

with A (M×K), B (K×N) and C (M×N) row-major. The copy engine zero-fills loads and clips stores at the
matrix edge, so any M, N, K is right; it needs 16-byte aligned base addresses and leading dimensions,
which `align` = 8 elements makes the API guarantee (padding when a problem does not meet it).

No TF32 variant: wgmma takes a transposed (N-major) B only for 16-bit inputs, so fp32 B would need a
K-major copy (a transpose pass over B) first.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .base import CUDA_TYPES, Family, Param, flag

SWIZZLE_BYTES = 128  # shared-memory swizzle of every tile: rows of 64 16-bit elements
C_BOX = 64  # the epilogue stages and stores C in 64×64 boxes (one 128-byte swizzle row wide)


def _elems_per_row(dtype: str) -> int:
    return SWIZZLE_BYTES // CUDA_TYPES[dtype][1]


def smem_bytes(p, dtype: str, acc: str) -> int:
    size = CUDA_TYPES[dtype][1]
    stage = (p["BM"] * p["BK"] + p["BK"] * p["BN"]) * size
    staging = p["TMA_STORE"] * p["CONSUMERS"] * 2 * C_BOX * C_BOX * size  # two C boxes per consumer
    # + 1024: the kernel rounds the start up to the swizzle period; + 16 per stage: full/empty barriers
    return p["STAGES"] * stage + staging + 1024 + 16 * p["STAGES"]


def _rule_tiles(p, dtype, acc):
    if p["BM"] % (64 * p["CONSUMERS"]):
        yield ConfigError("BM", p["BM"], f"a multiple of 64 * CONSUMERS = {64 * p['CONSUMERS']} "
                          "(each consumer warpgroup takes whole m64 wgmma tiles)")
    row = _elems_per_row(dtype)
    if p["BN"] % row:
        yield ConfigError("BN", p["BN"], f"a multiple of {row} (B is loaded in {row}-column, "
                          f"{SWIZZLE_BYTES}-byte swizzled boxes)")
    if p["BK"] % row:
        yield ConfigError("BK", p["BK"], f"a multiple of {row} (one {SWIZZLE_BYTES}-byte swizzle row of "
                          f"{dtype} elements)")


def _rule_registers(p, dtype, acc):
    per_thread = p["BM"] // p["CONSUMERS"] * p["BN"] // 128
    if per_thread > 128:
        yield ConfigError("BN", p["BN"], f"at most 128 fp32 accumulators per consumer thread: "
                          f"BM / CONSUMERS * BN / 128 <= 128 (got {per_thread})")


def make_args(variant, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta) -> tuple:
    from .. import tma
    p, dtype = variant.params, variant.dtype
    row = _elems_per_row(dtype)
    map_a = tma.tensor_map_2d(A.data.ptr, dtype, rows=m, cols=k, ld=lda, box_rows=p["BM"], box_cols=row)
    map_b = tma.tensor_map_2d(B.data.ptr, dtype, rows=k, cols=n, ld=ldb, box_rows=p["BK"], box_cols=row)
    map_c = tma.tensor_map_2d(C.data.ptr, dtype, rows=m, cols=n, ld=ldc, box_rows=C_BOX, box_cols=C_BOX)
    return (map_a, map_b, map_c, C, np.int32(m), np.int32(n), np.int32(k), np.int64(ldc),
            np.float32(alpha), np.float32(beta))


WGMMA = Family(
    name="wgmma",
    template="wgmma.cu.j2",
    doc="Hopper: TMA ring of STAGES stages, one producer and CONSUMERS wgmma warpgroups, persistent",
    params=(
        Param("BM", 128, "rows of C per block, split over the consumer warpgroups", lo=64, hi=256),
        Param("BN", 256, "columns of C per block: the wgmma N", lo=64, hi=256),
        Param("BK", 64, "depth of one pipeline stage", choices=(64, 128)),
        Param("STAGES", 4, "shared-memory pipeline stages", lo=2, hi=8),
        Param("CONSUMERS", 2, "consumer warpgroups (one more warpgroup produces)", choices=(1, 2)),
        flag("TMA_STORE", "epilogue through shared memory and TMA stores (beta = 0; else direct stores)", 1),
        Param("SWIZZLE", 2048, "block-swizzle stride in columns of C, 0 = off", lo=0, hi=1 << 16),
    ),
    dtypes={"float16": ("float32",), "bfloat16": ("float32",)},
    threads=lambda p: 128 * (p["CONSUMERS"] + 1),
    tile=lambda p: (p["BM"], p["BN"]),
    smem_bytes=smem_bytes,
    align=lambda p, dtype: 16 // CUDA_TYPES[dtype][1],
    rules=(_rule_tiles, _rule_registers),
    abi="tma",
    min_cc=lambda p, dtype, acc: 90,
    needs_sm90a=True,
    persistent=1,
    make_args=make_args,
)

FAMILIES = (WGMMA,)

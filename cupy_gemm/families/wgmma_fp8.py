"""Hopper (sm_90a) FP8: e4m3/e5m2 operands with scales, TMA + wgmma m64nNk32, warp-specialised, persistent.

templates/wgmma_fp8.cu.j2 computes C = (scale_a ∘ A) · (scale_b ∘ B) for fp8 A (M×K) and B (K×N) given
as bytes, with fp32 accumulation; `dtype` names the OUTPUT (bfloat16, float16 or float32), the operand
formats are the integer parameters FORMAT_A and FORMAT_B (0 = e4m3, 1 = e5m2). The family is reached
through `cupy_gemm.scaled_mm`, not matmul/gemm (abi "scaled"):

    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, const float* scale_a, const float* scale_b,
                int M, int N, int K)

(with SCALING = 2, scale_a's place holds map_sa, the tensor map of A's block scales)

A is (M×K) row-major and B arrives as Bᵀ, (N×K) row-major: fp8 wgmma has no transpose bit, so both
operands are K-major, as torch._scaled_mm's "b must be column-major". SCALING selects the scales:
0 one per tensor; 1 per row of A (M floats) and per column of B (N floats); 2 blocks: 1×128 of A stored
[ceil(K/128)][M] (rows padded to a multiple of 4 floats, TMA's 16-byte stride) and 128×128 of B stored
[ceil(N/128)][ceil(K/128)]. PROMOTE = 1 adds each 128-deep K-block's tensor-core sum into separate fp32
registers (the tensor core's own fp8 accumulation keeps fewer bits than fp32), PROMOTE = 2 every two
K-blocks' (half the promotions; per-tensor and row/column scales only); block scales are applied
there (A's land in each pipeline stage with its tiles, B's are read a K-block ahead), the others in the
epilogue. SPLIT_K != 1 splits K over several units of work per C tile (templates/common/split_k.cuh): the
kernel then takes `int splits, void* workspace` last, as the wgmma family's split-K entries do. STREAM_K = 1
or 2 (with SPLIT_K = 0) walks stream-K's units instead (templates/common/stream_k.cuh), as `wgmma` does.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .base import (CUDA_TYPES, RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, split_k_param,
                   stream_k_param, stream_k_rule)
from .wgmma import A_COPY_ROWS, WARP_SPECIALISED

K_BLOCK = 128  # K per stage, per promotion and per scale block: one 128-byte swizzled row of fp8
SWIZZLE_BYTES = 128
C_BOX_ROWS = 64  # the epilogue stores C in boxes of 64 rows by one swizzle row
FORMATS = ("e4m3", "e5m2")  # FORMAT_A / FORMAT_B values
SCALINGS = ("tensor", "rowcol", "block")  # SCALING values
# accumulators per consumer thread, leaving room for addresses and scales under the registers a consumer
# gets: 232 with two consumer warpgroups, 160 with three (the producer keeps 24 then)
MAX_ACC_REGS = {1: 192, 2: 192, 3: 128}


def smem_bytes(p, dtype: str, acc: str) -> int:
    stage = (p["BM"] + p["BN"]) * K_BLOCK
    if p["SCALING"] == 2:  # a stage carries its K-block's scales of A's BM rows
        stage += p["BM"] * 4
    staging = p["CONSUMERS"] * 2 * C_BOX_ROWS * SWIZZLE_BYTES  # two C boxes per consumer
    # + 1024: the kernel rounds the start up to the swizzle period, and keeps its barriers in that slack
    return p["STAGES"] * stage + staging + 1024


def _rule_tiles(p, dtype, acc):
    if p["BM"] % (64 * p["CONSUMERS"]):
        yield ConfigError("BM", p["BM"], f"a multiple of 64 * CONSUMERS = {64 * p['CONSUMERS']} "
                          "(each consumer warpgroup takes whole m64 wgmma tiles)")
    if p["BN"] % p["INSTR_N"]:
        yield ConfigError("BN", p["BN"], f"a multiple of INSTR_N (the wgmma N) = {p['INSTR_N']}")
    if p["CLUSTER"] == 2 and p["BN"] % 16:
        yield ConfigError("CLUSTER", p["CLUSTER"], "1 unless BN is a multiple of 16 (each block loads BN / 2 "
                          "rows of B, whole 8-row swizzle atoms)")
    if p["SPLIT_K"] == 0 and not p["STREAM_K"]:
        yield ConfigError("SPLIT_K", 0, "a fixed count, 1 or more (scaled_mm's default picks one per shape), or 0 "
                          "with STREAM_K")
    if p["CLUSTER"] != 1 and p["SPLIT_K"] != 1:
        yield ConfigError("SPLIT_K", p["SPLIT_K"], "1 with CLUSTER = 2 (a split's partial is one block's tile)")


def _rule_formats(p, dtype, acc):
    if p["FORMAT_A"] and p["FORMAT_B"]:
        yield ConfigError("FORMAT_B", p["FORMAT_B"], "0 (e4m3) when FORMAT_A is 1: at most one e5m2 operand, "
                          "as torch._scaled_mm (two 2-bit mantissas leave products of about one significant bit)")


def _rule_promotion(p, dtype, acc):
    if not p["PROMOTE"] and p["INSTR_N"] != p["BN"]:
        yield ConfigError("INSTR_N", p["INSTR_N"], f"equal to BN = {p['BN']} without PROMOTE "
                          "(the accumulators are the wgmma's own)")
    if p["SCALING"] == 2 and p["PROMOTE"] != 1:
        yield ConfigError("SCALING", p["SCALING"], "block scaling (SCALING = 2) needs PROMOTE = 1")
    regs = p["BM"] // p["CONSUMERS"] * (p["BN"] + (p["INSTR_N"] if p["PROMOTE"] else 0)) // 128
    limit = MAX_ACC_REGS[p["CONSUMERS"]]
    if regs > limit:
        yield ConfigError("BN", p["BN"], f"at most 192 accumulator registers per consumer thread (128 with three "
                          f"consumers): BM / CONSUMERS * (BN + INSTR_N with PROMOTE) / 128 <= {limit} (got {regs})")
    if p["PROMOTE"] >= p["STAGES"]:
        yield ConfigError("PROMOTE", p["PROMOTE"], f"below STAGES = {p['STAGES']}: a consumer holds PROMOTE stages at once")


def make_args(variant, a, b_t, c, scale_a, scale_b, m: int, n: int, k: int, lda: int, ldb: int, ldc: int) -> tuple:
    """Kernel arguments for A (m×k, row stride lda), Bᵀ (n×k, row stride ldb) and C (m×n, row stride ldc),
    all CuPy arrays already meeting the copy engine's 16-byte rules, and float32 scales laid out for
    the variant's SCALING (see the module docstring; block scales of A as a 2-D [K-block][row] array)."""
    from .. import tma
    p = variant.params
    # A lands in copies of A_COPY_ROWS rows; the kernel leaves out those wholly below M
    map_a = tma.tensor_map_2d(a.data.ptr, "uint8", rows=m, cols=k, ld=lda, box_rows=A_COPY_ROWS, box_cols=K_BLOCK)
    # with clusters each block loads half of a B stage (and multicasts it): the box is BN / CLUSTER rows
    map_b = tma.tensor_map_2d(b_t.data.ptr, "uint8", rows=n, cols=k, ld=ldb, box_rows=p["BN"] // p["CLUSTER"],
                              box_cols=K_BLOCK)
    box_cols = SWIZZLE_BYTES // CUDA_TYPES[variant.dtype][1]
    map_c = tma.tensor_map_2d(c.data.ptr, variant.dtype, rows=m, cols=n, ld=ldc, box_rows=C_BOX_ROWS,
                              box_cols=box_cols)
    if p["SCALING"] == 2:  # a stage's box: one K-block's scales of the tile's rows
        rows, ld = scale_a.shape[0], scale_a.strides[0] // 4 if scale_a.shape[0] > 1 else scale_a.shape[1]
        scale_a = tma.tensor_map_2d(scale_a.data.ptr, "float32", rows=rows, cols=m, ld=ld, box_rows=1,
                                    box_cols=p["BM"], swizzle=0)
    return (map_a, map_b, map_c, scale_a, scale_b, np.int32(m), np.int32(n), np.int32(k))


WGMMA_FP8 = Family(
    name="wgmma_fp8",
    template="wgmma_fp8.cu.j2",
    doc="Hopper FP8 with scales: e4m3/e5m2 m64nNk32 wgmma, K-blocks promoted into fp32; dtype = output",
    params=(
        Param("BM", 128, "rows of C per block, split over the consumer warpgroups", lo=64, hi=256),
        Param("BN", 256, "columns of C per block", lo=64, hi=256),
        Param("INSTR_N", 128, "columns per wgmma instruction (its N)", choices=(64, 128, 192, 256)),
        Param("STAGES", 4, "shared-memory pipeline stages", lo=2, hi=8),
        Param("CONSUMERS", 2, "consumer warpgroups (one more warpgroup produces)", choices=(1, 2, 3)),
        Param("FORMAT_A", 0, "A's fp8 format: 0 = e4m3, 1 = e5m2", choices=(0, 1)),
        Param("FORMAT_B", 0, "B's fp8 format: 0 = e4m3, 1 = e5m2", choices=(0, 1)),
        Param("SCALING", 0, "scales: 0 = per tensor, 1 = per row of A and column of B, 2 = 1×128 / 128×128 blocks",
              choices=(0, 1, 2)),
        Param("PROMOTE", 1, "128-deep K-blocks the tensor core sums before they are added into fp32 registers "
              "(0: all of K)", choices=(0, 1, 2)),
        block_swizzle_param(2048),
        Param("CLUSTER", 1, "blocks per cluster: vertically adjacent tiles whose B stages one TMA multicast "
              "fills (templates/common/cluster.cuh)", choices=(1, 2)),
        split_k_param(1),  # 1: the plain kernel, without the split-K steps
        stream_k_param(),
    ),
    dtypes={"bfloat16": ("float32",), "float16": ("float32",), "float32": ("float32",)},
    **WARP_SPECIALISED,
    smem_bytes=smem_bytes,
    rules=(_rule_tiles, _rule_formats, _rule_promotion, stream_k_rule),
    cluster=lambda p: p["CLUSTER"],
    stream_k=lambda p: p["STREAM_K"],
    k_block=lambda p: K_BLOCK,
    abi="scaled",
    make_args=make_args,
    split_k=True,
    atomic_sum=True,
    split_k_args_optional=True,
    renamed={**RENAMED_BLOCK_SWIZZLE, "WN": "INSTR_N"},
)

FAMILIES = (WGMMA_FP8,)

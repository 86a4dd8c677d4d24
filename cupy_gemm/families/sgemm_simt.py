"""CUDA-core SGEMM with register tiles: the LeetCUDA `sgemm_t_*_sliced_k*_f32x4*` ladder in one template.

Row-major fp32 inputs and accumulation; C is fp32, or float16 / bfloat16 rounded once in the store
(`convert`). Two families share the template: `sgemm_simt` reads B row-major (x @ W with W stored K×N),
`sgemm_simt_kmajor` column-major (x @ W.T with W stored N×K, as linear layers keep it), in place: B's
float4s then run along K as A's do, and land transposed in shared memory as a transposed A's do, so the
multiply is the same; the dispatch's B-layout rule hands such a B to the twin of the entry it chose.
Each thread owns a TM×TN tile of C made of float4
groups; the flags add the seed's steps one by one: A stored transposed, K-major, in shared memory
(A_TRANSPOSED, the seed names' "bcf"), row padding (PAD, the seed's OFFSET), a register-staged double
buffer (DBUF) and cp.async copies (ASYNC). MIN_BLOCKS is the __launch_bounds__ minimum, as in the mma family.
Split-K (SPLIT_K, `split_k`): blockIdx.y is the block's split of K; 1 (the default) compiles it out, 0 lets
the launcher choose per shape, for the small tiles that serve small and skinny problems.
STREAM_K (with SPLIT_K = 0, `stream_k`): a grid of as many blocks as the SMs hold, each walking its units of
templates/common/stream_k.cuh (whole tiles, then a share of the last tiles' K slices), so a last wave of
few tiles no longer costs a whole one.
Batched, gemm_kernel runs the body (gemm_member) for each member of blockIdx.z; a member's split-K counters
and partials follow the previous members' in the workspace. Every store, the last split's included, goes
through store_c_vec, which applies a fused epilogue when there is one.
UNALIGNED=1 takes operands as they come (align 1: any K and N, leading dimensions and base addresses
aligned to the float only), so ragged products need no padded copies: a float4 group is one 16-byte
access where it is aligned and inside the matrix, else guarded single floats (4-byte cp.async with
ASYNC), zeros past K and N; C's groups go through store_c_any (element stores where not aligned).
"""
from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from .base import (FILL_RESIDENT, RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, few_rows_param,
                   flag, split_k_param, stream_k_param, stream_k_rule)


def _threads(p) -> int:
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def _smem_bytes(p, dtype, acc) -> int:
    stages = 2 if p["DBUF"] else 1
    a_stage = p["BK"] * (p["BM"] + p["PAD"]) if p["A_TRANSPOSED"] else p["BM"] * (p["BK"] + p["PAD"])
    b_stage = p["BK"] * (p["BN"] + p["PAD"])
    return stages * (a_stage + b_stage) * 4


def _rules(p, dtype, acc):
    """Each constraint once; templates/sgemm_simt.cu.j2 repeats it as a static_assert in the same words."""
    if p["TM"] % 4:
        yield ConfigError("TM", p["TM"], "a multiple of 4 (a thread's rows are read as float4 fragments)")
    if p["TN"] % 4:
        yield ConfigError("TN", p["TN"], "a multiple of 4 (a thread's columns are read as float4 fragments)")
    if p["TM"] * p["TN"] > 128:
        yield ConfigError("TN", p["TN"], f"at most {128 // p['TM']} so that TM*TN is at most 128 accumulators "
                                         "per thread (255 registers)")
    if p["BM"] % (4 * p["TM"]):
        yield ConfigError("BM", p["BM"], f"a multiple of 4*TM={4 * p['TM']} (a warp is 4 threads along M, "
                                         "each owning TM rows)")
    if p["BN"] % (8 * p["TN"]):
        yield ConfigError("BN", p["BN"], f"a multiple of 8*TN={8 * p['TN']} (a warp is 8 threads along N, "
                                         "each owning TN columns)")
    if p["BK"] % 4:
        yield ConfigError("BK", p["BK"], "a multiple of 4 (A is loaded as float4 along K)")
    if p["PAD"] % 4:
        yield ConfigError("PAD", p["PAD"], "a multiple of 4 (shared rows stay 16-byte aligned for float4)")
    threads = _threads(p)
    if p["BM"] * p["BK"] // 4 % threads:
        yield ConfigError("BK", p["BK"], f"a value that makes the A tile's BM*BK/4 float4 loads a multiple of "
                                         f"the block's {threads} threads")
    if p["BK"] * p["BN"] // 4 % threads:
        yield ConfigError("BK", p["BK"], f"a value that makes the B tile's BK*BN/4 float4 loads a multiple of "
                                         f"the block's {threads} threads")
    if threads * p["MIN_BLOCKS"] > 2048:
        yield ConfigError("MIN_BLOCKS", p["MIN_BLOCKS"], f"at most {max(1, 2048 // threads)} (an SM holds 2048 "
                                                         f"threads; a block has {threads})")
    if p["ASYNC"] and not p["DBUF"]:
        yield ConfigError("ASYNC", p["ASYNC"], "0 unless DBUF=1 (the copy of the next slice overlaps the "
                                               "current one)")


SGEMM_SIMT = Family(
    name="sgemm_simt",
    template="sgemm_simt.cu.j2",
    doc="fp32 CUDA-core GEMM: TM×TN float4 register tiles, optional transposed A, padding, "
        "double buffer and cp.async",
    params=(
        Param("BM", 128, "rows of C per block", lo=16, hi=512),
        Param("BN", 128, "columns of C per block", lo=32, hi=512),
        Param("BK", 8, "depth of the K slice staged in shared memory", lo=4, hi=64),
        Param("TM", 8, "rows of C per thread, in float4 groups BM/(TM/4) apart", lo=4, hi=32),
        Param("TN", 8, "columns of C per thread, in float4 groups BN/(TN/4) apart", lo=4, hi=32),
        Param("PAD", 0, "floats appended to each shared-memory row (the seed's OFFSET)", lo=0, hi=32),
        Param("MIN_BLOCKS", 1, "blocks per SM the register budget must allow (__launch_bounds__ minimum)",
              lo=1, hi=8),
        block_swizzle_param(),
        flag("A_TRANSPOSED", "store A transposed (K-major) in shared memory so fragments are float4 reads "
             "(bank-conflict free)"),
        flag("DBUF", "double-buffer shared memory, one barrier per K slice"),
        flag("ASYNC", "cp.async global->shared copies (sm_80+); needs DBUF"),
        flag("PAIRS", "interleave warp lanes in pairs that share fragment addresses: float4 shared reads "
                      "in two wavefronts instead of four", default=1),
        split_k_param(1),  # 1: the plain kernel, without the split-K steps
        stream_k_param(),
        Param("FMA_ORDER", 0, "the thread tile's FMAs each k: 0 row by row; 1 rows, 2 columns in a snake (each "
              "walked back from where the last ended, so every FMA shares an operand with the one before: "
              "ptxas's reuse cache, fewer register-bank conflicts); the same bits", choices=(0, 1, 2)),
        flag("UNALIGNED", "read A and B and write C wherever they lie (align 1): float4 accesses only where "
             "a group is aligned and inside the matrix, else guarded single floats"),
        few_rows_param(),
    ),
    dtypes={"float32": ("float32",)},
    threads=_threads,
    tile=lambda p: (p["BM"], p["BN"]),
    smem_bytes=_smem_bytes,
    # float4 loads along K (A; B when K-major) and N (B), float4 stores along N (C); UNALIGNED checks each
    # group instead
    align=lambda p, dtype: 1 if p["UNALIGNED"] else 4,
    rules=(_rules, stream_k_rule),
    layout="row",
    min_cc=lambda p, dtype, acc: 80 if p["ASYNC"] else 70,
    max_rows=lambda p: p["FEW_ROWS"] or None,
    split_k=True,
    stream_k=lambda p: p["STREAM_K"],
    atomic_sum=True,
    # the unaligned loads (element by element off a float4 group) wait on their latency: the automatic split
    # fills the blocks an SM holds, in one wave, down to 64 of K a split. H100, 17×4095×1000 (64 tiles):
    # 32×64 (5 blocks an SM) 27.0 µs at the cost model's 3 splits, 18.6 at 10, 22.5 at 12; 64×64 (4 an SM)
    # 25.8 at 3, 21.3 at 8 (cupy.matmul 18.1)
    split_k_fill=lambda p: FILL_RESIDENT if p["UNALIGNED"] else None,
    split_k_min_k=lambda p: 64 if p["UNALIGNED"] else None,
    batched=True,
    epilogue=True,
    convert=True,
    pdl=True,
    renamed={**RENAMED_BLOCK_SWIZZLE, "MINB": "MIN_BLOCKS", "BCF": "A_TRANSPOSED"},
)

SGEMM_SIMT_KMAJOR = dataclasses.replace(
    SGEMM_SIMT,
    name="sgemm_simt_kmajor",
    doc="fp32 CUDA-core GEMM reading B column-major (x @ W.T, W stored N×K) in place; as sgemm_simt otherwise",
    b_layout="col",
    ragged_n=True,  # rows of n past N read row N - 1; C's float4 groups that start inside N are stored whole
)

FAMILIES = (SGEMM_SIMT, SGEMM_SIMT_KMAJOR)

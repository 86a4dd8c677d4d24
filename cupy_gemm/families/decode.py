"""Hopper (sm_90a) decode-style products: M <= ROWS (16; up to 128 on wgmma), B streamed by TMA, K split over
a thread-block cluster.

templates/decode.cu.j2. A cluster of CS blocks owns BN columns of C and block r of it sums the r-th slice
of K: B (K×N, row-major) streams through a TMA ring of STAGES stages into each block, WARPS warps multiply
it, and the blocks' partial tiles are summed in distributed shared memory, in rank order, by the block
that stores each column. So the split of K costs no workspace, no atomics and no second kernel, and a
repeat is bitwise the same. The warps multiply on tensor cores for float16/bfloat16 (m16n8k16, or with
MMA = 1 warpgroups on wgmma by the swapped product: B's 64-column slices as its m64, A's ROWS rows as its
N, which lets one block serve up to 128 rows)
and tf32 (m16n8k8), A's 16 rows as the m16, and on CUDA cores for exact float32 (4 columns × 16 rows a
thread).
Two families share the template: `decode` reads B row-major (x @ W with W stored K×N), `decode_kmajor`
column-major (x @ W.T with W stored N×K, as linear layers keep it), each in place.

The grid is one cluster per BN columns of C: `tile` is the BN / CS columns one block stores, which makes
the launcher's grid CS blocks per BN columns (launch.launch_config rounds a clustered grid up to whole
clusters). The "tma" ABI, without C's map (the store goes from registers or the summed tile):

    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                T* C, int M, int N, int K, long long c_rs, long long c_cs, float alpha, float beta)

C is stored element by element at its own row and column strides (Family.scalar_c): in place whatever its
layout, alignment or N, the column-major Cᵀ of a swapped product (`A @ x` with few columns) included.

TMA needs 16-byte aligned bases and leading dimensions: `align` is 16 bytes of elements (the API pads
otherwise).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError, InputError
from .base import CUDA_TYPES, Family, Param

SWIZZLE_BYTES = 128  # one swizzle row: the width of every TMA box
ROWS = 16  # one m16 tile: mma.sync's rows; wgmma's swapped product takes WGMMA_ROWS
WGMMA_ROWS = (16, 32, 64, 128)
SIMT_FEWER_ROWS = 8  # exact float32 (CUDA cores) also takes 8 rows: half the FMAs and A's loads of 16
MAX_WGMMA_ACCUMULATORS = 128  # fp32 registers a consumer thread holds with MMA = 1


def box(dtype: str) -> int:
    """Elements in one swizzle row."""
    return SWIZZLE_BYTES // CUDA_TYPES[dtype][1]


def _stage_bytes(p, dtype: str) -> int:
    return (p["ROWS"] * p["BK"] + p["BK"] * p["BN"]) * CUDA_TYPES[dtype][1]


def smem_bytes(p, dtype: str, acc: str) -> int:
    stage = _stage_bytes(p, dtype)
    tile = p["ROWS"] * p["BN"] * 4 if p["CS"] > 1 else 0  # the fp32 partial tile the cluster reads
    # + 16 per stage: full/empty barriers; + 1024: the kernel rounds the start up to the swizzle period
    return p["STAGES"] * stage + tile + 16 * p["STAGES"] + 1024


def wgmma_accumulators(rows: int, bn: int, warps: int) -> int:
    """The fp32 accumulators a consumer thread holds on the swapped product (MMA = 1): rows / 2 for each of
    its warpgroup's 64-column slices of bn (fewer than 4 warps count as one warpgroup)."""
    return bn // max(warps // 4, 1) // 64 * rows // 2


def _rules(p, dtype, acc):
    simt = dtype == "float32" and acc == "float32"  # exact fp32 on CUDA cores
    for name in ("BN", "BK"):
        if p[name] % box(dtype):
            yield ConfigError(name, p[name], f"a multiple of one {SWIZZLE_BYTES}-byte swizzle row ({box(dtype)} "
                              f"{dtype} elements): tiles move in such boxes")
    if p["MMA"] and (dtype == "float32" or p["WARPS"] % 4):
        yield ConfigError("MMA", p["MMA"], "0 here: MMA = 1 (wgmma) takes float16 or bfloat16 and warpgroups: "
                          "WARPS a multiple of 4")
    elif not p["MMA"] and p["ROWS"] != ROWS and not (p["ROWS"] == SIMT_FEWER_ROWS and simt):
        yield ConfigError("ROWS", p["ROWS"], f"{ROWS} with MMA = 0 (one m16 tile; exact float32 also "
                          f"{SIMT_FEWER_ROWS}); more rows need MMA = 1 (wgmma)")
    elif p["MMA"] and (held := wgmma_accumulators(p["ROWS"], p["BN"], p["WARPS"])) > MAX_WGMMA_ACCUMULATORS:
        yield ConfigError("WARPS", p["WARPS"], f"more warpgroups: {p['ROWS']} rows of {p['BN']} columns take "
                          f"{held} fp32 registers a thread, at most {MAX_WGMMA_ACCUMULATORS}")
    if simt:  # CUDA cores: groups of 4 columns by slices of K
        threads, groups = 32 * p["WARPS"], p["BN"] // 4
        if threads % groups:
            yield ConfigError("BN", p["BN"], f"BN / 4 must divide the consumer threads ({threads}): on CUDA "
                              "cores a thread takes 4 columns")
        elif p["BK"] % (4 * (threads // groups)):
            yield ConfigError("BK", p["BK"], f"a multiple of 4 times the k-slices ({threads // groups}: the "
                              "consumer threads over BN / 4)")
        elif 4 * (threads // groups) * p["ROWS"] * p["BN"] > p["STAGES"] * _stage_bytes(p, dtype):
            yield ConfigError("STAGES", p["STAGES"], "enough stages for the k-slice sums, which reuse the ring")
        return
    per_warp = 8 if acc == "tf32" else 16  # tf32: n8 tiles; 16-bit: pairs of them
    if p["BN"] % (per_warp * p["WARPS"]):
        yield ConfigError("BN", p["BN"], f"a multiple of {per_warp} * WARPS = {per_warp * p['WARPS']} (each warp "
                          "takes whole mma n tiles)")
    # BN % CS == 0 (each block of the cluster stores BN / CS columns) follows: CS is at most 8, BN a multiple of 32


def make_args(variant, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta, batch=None) -> tuple:
    from .. import tma
    p, dtype = variant.params, variant.dtype
    if k + p["BK"] >= 2**31 or n + p["BN"] >= 2**31:  # the copies' coordinates are 32-bit signed integers
        raise InputError(f"{variant.name} addresses K and N below 2**31 - {p['BK']} and 2**31 - {p['BN']}; "
                         f"got K={k}, N={n}: use a skinny variant")
    map_a = tma.tensor_map_2d(A.data.ptr, dtype, rows=m, cols=k, ld=lda, box_rows=p["ROWS"], box_cols=box(dtype))
    rows, cols, box_rows = tma.b_extent(variant.family.b_layout, k, n, p["BK"], p["BN"])
    map_b = tma.tensor_map_2d(B.data.ptr, dtype, rows=rows, cols=cols, ld=ldb, box_rows=box_rows, box_cols=box(dtype))
    c_rs, c_cs = (stride // C.itemsize for stride in C.strides)  # C's own strides, whatever its layout
    return (map_a, map_b, C, np.int32(m), np.int32(n), np.int32(k), np.int64(c_rs), np.int64(c_cs),
            np.float32(alpha), np.float32(beta))


DECODE = Family(
    name="decode",
    template="decode.cu.j2",
    doc="Hopper, M <= ROWS (16; to 128 on wgmma): B streamed by TMA, K split over a cluster of CS blocks and "
        "summed in distributed shared memory",
    params=(
        Param("ROWS", ROWS, "the most rows of C the kernel serves: one m16 tile, or with MMA = 1 wgmma's N "
              "(32, 64 and 128 too; exact float32 8)", choices=(SIMT_FEWER_ROWS, *WGMMA_ROWS)),
        Param("BN", 64, "columns of C per cluster", lo=32, hi=512),
        Param("BK", 64, "depth of one pipeline stage", choices=(64, 128)),
        Param("STAGES", 8, "shared-memory pipeline stages", lo=2, hi=16),
        Param("WARPS", 4, "consumer warps (one more warp produces)", choices=(1, 2, 4, 8, 12, 16)),
        Param("CS", 8, "blocks per cluster, each summing one slice of K (portable clusters: at most 8)",
              choices=(1, 2, 4, 8)),
        Param("MMA", 0, "16-bit: 0 = mma.sync m16n8k16, 1 = the swapped product on wgmma (warpgroups of "
              "64-column slices)", choices=(0, 1)),
    ),
    dtypes={"float16": ("float32",), "bfloat16": ("float32",), "float32": ("float32", "tf32")},
    threads=lambda p: 32 * (p["WARPS"] + 1),
    tile=lambda p: (p["ROWS"], p["BN"] // p["CS"]),
    smem_bytes=smem_bytes,
    align=lambda p, dtype: 16 // CUDA_TYPES[dtype][1],
    rules=(_rules,),
    abi="tma",
    make_args=make_args,
    min_cc=lambda p, dtype, acc: 90,
    needs_sm90a=True,
    max_rows=lambda p: p["ROWS"],
    cluster=lambda p: p["CS"],
    scalar_c=True,
    pdl=True,
)


def _kmajor_box(p, dtype, acc):
    if p["BN"] > 256:
        yield ConfigError("BN", p["BN"], "at most 256: a K-major B moves in boxes of BN rows (TMA's limit)")


DECODE_KMAJOR = dataclasses.replace(
    DECODE,
    name="decode_kmajor",
    doc="Hopper, M <= ROWS, B column-major (x @ W.T): B streamed by TMA, K split over a cluster of CS blocks "
        "and summed in distributed shared memory",
    rules=(_rules, _kmajor_box),
    b_layout="col",
    ragged_n=True,
)

FAMILIES = (DECODE, DECODE_KMAJOR)

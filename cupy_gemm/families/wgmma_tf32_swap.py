"""Hopper (sm_90a) TF32 reading a row-major B in place by the swapped product Cᵀ = Bᵀ·Aᵀ.

wgmma reads 32-bit operands from shared memory only K-major, which a row-major B (N contiguous) is not;
its A operand may come from registers, though. So the kernel makes Bᵀ that operand: each consumer
warpgroup loads its n-rows of the landed B stage into the tf32 fragment layout, and A (K-major as TMA
lands it) is the instruction's B, with the wgmma N = BM. Nothing rewrites B in shared memory (as
`wgmma_tf32_rowb`'s converter warps do) and nothing copies it in global memory (as `wgmma_tf32` needs).
The accumulators are a tile of Cᵀ, stored transposed, straight from registers (C = alpha·acc + beta·C).

Since the instruction's N is BM, a few rows of C cost a narrow instruction (m64n16k8 for M = 16) instead
of a 64-row tile mostly of zeros.

The ABI and tensor maps are `wgmma_tf32_rowb`'s (families/wgmma.py: make_args; C's map is passed but unused,
C being stored from registers): A, B and C row-major, 16-byte aligned bases and leading dimensions; the
maps of A and B have the tf32 data type, so the copy engine rounds both operands to tf32 on their way to
shared memory.
"""
from __future__ import annotations

from ..errors import ConfigError
from .base import (RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, split_k_param, stream_k_param,
                   stream_k_rule)
from .wgmma import WARP_SPECIALISED, make_args

FP32_BYTES = 4
SWIZZLE_ELEMS = 32  # fp32 elements in one 128-byte swizzled row
MOST_REGISTERS = 192  # accumulators and two stages of B fragments per consumer thread


def smem_bytes(p, dtype: str, acc: str) -> int:
    stage = (p["BM"] + p["BN"]) * p["BK"] * FP32_BYTES
    # + 1024: the kernel rounds the start up to the swizzle period; + 16 per stage: full/empty barriers;
    # + 16 with split-K: the flag of templates/common/split_k.cuh's arrival
    return p["STAGES"] * stage + 1024 + 16 * p["STAGES"] + (16 if p["SPLIT_K"] != 1 else 0)


def consumer_registers(p) -> int:
    """Accumulators (BM / 2 per m64 tile of Cᵀ) and two stages of B fragments (BK / 2 per m64 tile)."""
    tiles = p["BN"] // p["CONSUMERS"] // 64
    return tiles * (p["BM"] // 2 + p["BK"])


# the swapped products' tile rows (wgmma's N) and stage depth, the same in wgmma_3xtf32_swap
SWAP_BM = Param("BM", 128, "rows of C per block: the wgmma N", lo=8, hi=256)
SWAP_BK = Param("BK", 32, "depth of one pipeline stage", choices=(32, 64))


def swap_tile_rules(p):
    """The swapped product's tile rules (wgmma_3xtf32_swap's too): BM is the wgmma N, each consumer takes
    whole m64 tiles of Cᵀ, and a stage is whole swizzle rows of k."""
    if p["BM"] % 8:
        yield ConfigError("BM", p["BM"], "a multiple of 8: BM is the wgmma N")
    if p["BN"] % (64 * p["CONSUMERS"]):
        yield ConfigError("BN", p["BN"], f"a multiple of 64 * CONSUMERS = {64 * p['CONSUMERS']} (each consumer "
                          "warpgroup takes whole m64 tiles of Cᵀ, 64 columns of C)")
    if p["BK"] % SWIZZLE_ELEMS:
        yield ConfigError("BK", p["BK"], f"a multiple of one 128-byte swizzle row ({SWIZZLE_ELEMS} fp32 elements)")


def _rules(p, dtype, acc):
    yield from swap_tile_rules(p)
    yield from stream_k_rule(p, dtype, acc)
    regs = consumer_registers(p)
    if regs > MOST_REGISTERS:
        yield ConfigError("BM", p["BM"], f"at most {MOST_REGISTERS} registers of accumulators and B fragments per "
                          f"consumer thread: BN / CONSUMERS / 64 * (BM / 2 + BK) <= {MOST_REGISTERS} (got {regs})")


WGMMA_TF32_SWAP = Family(
    name="wgmma_tf32_swap",
    template="wgmma_tf32_swap.cu.j2",
    doc="Hopper TF32 with a row-major B read in place: Cᵀ = Bᵀ·Aᵀ, Bᵀ's rows loaded as wgmma's register "
        "operand",
    params=(
        SWAP_BM,
        Param("BN", 128, "columns of C per block, split over the consumer warpgroups (64 per m64 tile of Cᵀ)",
              lo=64, hi=512),
        SWAP_BK,
        Param("STAGES", 4, "shared-memory pipeline stages", lo=2, hi=12),
        Param("CONSUMERS", 2, "consumer warpgroups (one more warpgroup produces)", choices=(1, 2)),
        block_swizzle_param(2048),
        split_k_param(1),  # 1: the plain kernel, without the split-K steps
        stream_k_param(),
    ),
    dtypes={"float32": ("tf32",)},
    **WARP_SPECIALISED,
    smem_bytes=smem_bytes,
    align=lambda p, dtype: 16 // FP32_BYTES,
    rules=(_rules,),
    abi="tma",
    make_args=make_args,
    split_k=True,
    atomic_sum=True,
    stream_k=lambda p: p["STREAM_K"],
    renamed=RENAMED_BLOCK_SWIZZLE,
    convert=True,
)

FAMILIES = (WGMMA_TF32_SWAP,)

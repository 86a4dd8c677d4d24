"""Hopper (sm_90a) 3xTF32 reading a row-major B in place, by the swapped product Cᵀ = Bᵀ·Aᵀ.

The arithmetic is `wgmma_3xtf32`'s (each fp32 element split into two tf32 parts in the kernel, three
tf32 products per k8 step, each stage promoted into fp32), the operand roles `wgmma_tf32_swap`'s: wgmma
reads 32-bit operands from shared memory only K-major, so Bᵀ, loaded from the landed row-major B stage
into registers and split there, is the instruction's register operand, and A (K-major as TMA lands it),
split in shared memory by the producer warpgroup's three idle warps, is its shared-memory operand with
N = BM. The accumulators are a tile of Cᵀ, stored transposed from registers (C = alpha·acc + beta·C).
So a C-ordered B costs no copy, where `wgmma_3xtf32` needs the API to copy it column-major.

The ABI and tensor maps are `wgmma_3xtf32`'s (families/wgmma.py: make_args) with B row-major: A, B and C
row-major, 16-byte aligned bases and leading dimensions, float32 maps (the copy engine must not round:
the split needs the low bits); C's map is passed but unused.
"""
from __future__ import annotations

from ..errors import ConfigError
from .base import RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param
from .wgmma import WARP_SPECIALISED, make_args
from .wgmma_tf32_swap import SWAP_BK, SWAP_BM, swap_tile_rules

FP32_BYTES = 4
MOST_REGISTERS = 192  # accumulators, the stage's partial tile and its B fragments per consumer thread (192×128: 224 spilled)


def smem_bytes(p, dtype: str, acc: str) -> int:
    a_stage, b_stage = p["BM"] * p["BK"] * FP32_BYTES, p["BN"] * p["BK"] * FP32_BYTES
    # per stage: A (big parts in place), A's small parts and B; + 1024: the kernel rounds the start up to
    # the swizzle period; + 24 per stage: full, empty and converted barriers
    return p["STAGES"] * (2 * a_stage + b_stage) + 1024 + 24 * p["STAGES"]


def consumer_registers(p) -> int:
    """Per m64 tile of Cᵀ: BM / 2 accumulators, as many for the partial tile, and BK fragment registers
    (big and small parts of BK / 8 k8 steps, four each)."""
    return p["BN"] // p["CONSUMERS"] // 64 * (p["BM"] + p["BK"])


def _rules(p, dtype, acc):
    yield from swap_tile_rules(p)
    regs = consumer_registers(p)
    if regs > MOST_REGISTERS:
        yield ConfigError("BM", p["BM"], f"at most {MOST_REGISTERS} registers of accumulators, partials and B "
                          f"fragments per consumer thread: BN / CONSUMERS / 64 * (BM + BK) <= {MOST_REGISTERS} "
                          f"(got {regs})")


WGMMA_3XTF32_SWAP = Family(
    name="wgmma_3xtf32_swap",
    template="wgmma_3xtf32_swap.cu.j2",
    doc="Hopper 3xTF32 with a row-major B read in place: Cᵀ = Bᵀ·Aᵀ, Bᵀ split in registers, A in shared memory",
    params=(
        SWAP_BM,
        Param("BN", 128, "columns of C per block, split over the consumer warpgroups (64 per m64 tile of Cᵀ)",
              lo=64, hi=256),
        SWAP_BK,
        Param("STAGES", 4, "shared-memory pipeline stages", lo=2, hi=8),
        Param("CONSUMERS", 2, "consumer warpgroups (one more warpgroup loads and splits A)", choices=(1, 2)),
        block_swizzle_param(2048),
    ),
    dtypes={"float32": ("3xtf32",)},
    **WARP_SPECIALISED,
    smem_bytes=smem_bytes,
    align=lambda p, dtype: 16 // FP32_BYTES,
    rules=(_rules,),
    abi="tma",
    make_args=make_args,
    renamed=RENAMED_BLOCK_SWIZZLE,
    convert=True,
)

FAMILIES = (WGMMA_3XTF32_SWAP,)

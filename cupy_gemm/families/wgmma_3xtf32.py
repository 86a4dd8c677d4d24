"""Hopper (sm_90a) 3xTF32: fp32 inputs at about fp32 accuracy on the tensor cores.

Each fp32 element x is split in the kernel into x = big + small, two tf32 values (big = tf32(x), small =
tf32(x - big)), and C = A_big·B_big + A_big·B_small + A_small·B_big, accumulated in fp32: three tf32 wgmma
per k8 step instead of one. TMA loads plain fp32 tiles (float32 tensor maps: the copy engine does not
round); consumers split A in registers (wgmma takes a tf32 A from registers), the producer warpgroup's
idle warps split B in shared memory (wgmma reads B only from there). The caller's arrays are untouched
and nothing makes an extra pass over memory.

With PROMOTE = 1 each pipeline stage's products accumulate in the tensor cores into a zeroed partial tile,
added to the fp32 accumulators with ordinary (round-to-nearest) adds: the tensor cores round toward zero
when they accumulate, an error that would otherwise grow with K (measured with the TF32 kernels: a
mean bias of 0.02 × 2^-11 of |C| at K = 4096). The partial tile doubles the accumulator registers.

The ABI, tensor maps and layouts are the `wgmma_tf32` family's (families/wgmma.py): A and C row-major,
B column-major (K-major; the API copies a row-major B), 16-byte aligned bases and leading dimensions;
C may be stored as float16 or bfloat16 (`convert`), as in `wgmma_tf32`.
"""
from __future__ import annotations

from ..errors import ConfigError
from .base import RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, flag
from .wgmma import C_BOX_ROWS, SWIZZLE_BYTES, WARP_SPECIALISED, make_args
from .wgmma import _rule_tiles as rule_tiles  # the same tile rules and words as the TF32 family

FP32_BYTES = 4


def smem_bytes(p, dtype: str, acc: str) -> int:
    a_stage, b_stage = p["BM"] * p["BK"] * FP32_BYTES, p["BN"] * p["BK"] * FP32_BYTES
    staging = p["TMA_STORE"] * p["CONSUMERS"] * 2 * C_BOX_ROWS * SWIZZLE_BYTES  # two C boxes per consumer
    # per stage: A, B (big parts in place) and B's small parts; + 1024: the kernel rounds the start up to
    # the swizzle period; + 24 per stage: full, empty and converted barriers
    return p["STAGES"] * (a_stage + 2 * b_stage) + staging + 1024 + 24 * p["STAGES"]


def _rule_registers(p, dtype, acc):
    consumer_m = p["BM"] // p["CONSUMERS"]
    per_thread = consumer_m * p["BN"] // 128 * (1 + p["PROMOTE"]) + consumer_m * p["BK"] // 64
    if per_thread > 224:
        yield ConfigError("BN", p["BN"], "at most 224 registers of accumulators and A fragments per consumer "
                          "thread: BM / CONSUMERS * (BN / 128 * (1 + PROMOTE) + BK / 64) <= 224 "
                          f"(got {per_thread})")


WGMMA_3XTF32 = Family(
    name="wgmma_3xtf32",
    template="wgmma_3xtf32.cu.j2",
    doc="Hopper 3xTF32: fp32 split into two tf32 parts in the kernel, three tf32 wgmma products per k8 step",
    params=(
        Param("BM", 128, "rows of C per block, split over the consumer warpgroups", lo=64, hi=256),
        Param("BN", 128, "columns of C per block: the wgmma N", lo=32, hi=256),
        Param("BK", 32, "depth of one pipeline stage", choices=(32, 64)),
        Param("STAGES", 4, "shared-memory pipeline stages", lo=2, hi=8),
        Param("CONSUMERS", 2, "consumer warpgroups (one more warpgroup loads and splits B)", choices=(1, 2)),
        flag("TMA_STORE", "epilogue through shared memory and TMA stores (beta = 0; else direct stores)", 1),
        block_swizzle_param(2048),
        flag("PROMOTE", "each stage's products summed in a zeroed partial tile, then added in fp32 "
             "(round to nearest) instead of accumulated by the tensor cores (round toward zero)", 1),
        flag("TRUNCATE_B", "B's big part is B as loaded, which the tensor cores truncate to tf32: the converters "
             "write only the small parts (a third less of their shared-memory traffic, twice the split's error in B)", 0),
    ),
    dtypes={"float32": ("3xtf32",)},
    **WARP_SPECIALISED,
    b_layout="col",
    ragged_n=True,
    unaligned_c=True,
    smem_bytes=smem_bytes,
    align=lambda p, dtype: 16 // FP32_BYTES,
    rules=(rule_tiles, _rule_registers),
    abi="tma",
    make_args=make_args,
    renamed=RENAMED_BLOCK_SWIZZLE,
    convert=True,
)

FAMILIES = (WGMMA_3XTF32,)

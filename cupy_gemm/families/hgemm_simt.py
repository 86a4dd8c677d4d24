"""HGEMM on CUDA cores: fp16 operands with half2, half or fp32 arithmetic (templates/hgemm_simt.cu.j2).

One template covers LeetCUDA's thread-tiled fp16 kernels: the thread tile (TM×TN), the K slice (BK),
the global vector width (VEC), half2 packing (PACK), A stored transposed, K-major, in shared memory
(A_TRANSPOSED, the seed names' "bcf"; XOR-swizzled unless rows are padded), row padding (PAD), double
buffering (DBUF) and cp.async (ASYNC). The
accumulate type is the variant's `acc`: seed-named entries accumulate in half like the seed.
"""
from __future__ import annotations

from .base import RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, divides, flag
from ..errors import ConfigError

_TILE = (2, 4, 8, 16)


def _acc_bytes(acc: str) -> int:
    return 4 if acc == "float32" else 2


def _shared_types(p, acc) -> tuple[int, int]:
    """Bytes per shared element of A and B: data staged through registers is widened to float for fp32
    accumulation; cp.async copies (B with ASYNC, A with ASYNC and not A_TRANSPOSED) stay half."""
    wide = _acc_bytes(acc)
    a = wide if (p["A_TRANSPOSED"] or not p["ASYNC"]) else 2
    b = wide if not p["ASYNC"] else 2
    return a, b


def smem_bytes(p, dtype, acc) -> int:
    bufs = 2 if p["DBUF"] else 1
    a_size, b_size = _shared_types(p, acc)
    a_elems = p["BK"] * (p["BM"] + p["PAD"]) if p["A_TRANSPOSED"] else p["BM"] * (p["BK"] + p["PAD"])
    a_bytes = -(-bufs * a_elems * a_size // 16) * 16  # B's buffers start 16-byte aligned
    return a_bytes + bufs * p["BK"] * (p["BN"] + p["PAD"]) * b_size


def _rules(p, dtype, acc):
    for name in ("BM", "BN"):  # BN % 8 == 0 also makes B's rows whole VEC-half vectors
        if p[name] % 8:
            yield ConfigError(name, p[name], f"a multiple of 8 ({name} must be a multiple of 8: "
                                             "16-byte aligned shared-memory rows)")
    if p["PAD"] % 8:
        yield ConfigError("PAD", p["PAD"], "a multiple of 8 (PAD must be a multiple of 8: keeps "
                                           "shared-memory rows 16-byte aligned)")
    if p["BK"] % p["VEC"]:
        yield ConfigError("BK", p["BK"], f"a multiple of VEC={p['VEC']} (BK must be a multiple of VEC: "
                                         "A is loaded in VEC-half vectors along K)")
    if p["PACK"] and acc != "float16":
        yield ConfigError("PACK", p["PACK"], f"0 with acc={acc!r} (PACK=1 needs fp16 accumulation: "
                                             "half2 arithmetic accumulates in half)")
    if p["ASYNC"] and not p["DBUF"]:
        yield ConfigError("ASYNC", p["ASYNC"], "0 when DBUF=0 (ASYNC=1 needs DBUF=1: cp.async fills the "
                                               "buffer that is not being read)")
    limit = 128 if acc == "float32" else 256
    if p["TM"] * p["TN"] > limit:
        yield ConfigError("TN", p["TN"], f"TM*TN <= {limit} (TM*TN must be at most 128 with fp32 and 256 "
                                         "with fp16 accumulation: accumulators live in registers)")


HGEMM_SIMT = Family(
    name="hgemm_simt",
    template="hgemm_simt.cu.j2",
    doc="fp16 GEMM on CUDA cores: thread tiles, half2 packing, transposed A, double buffering, cp.async",
    params=(
        Param("BM", 128, "rows of C per block", lo=8, hi=512),
        Param("BN", 128, "columns of C per block", lo=8, hi=512),
        Param("BK", 16, "depth of the K slice staged in shared memory", lo=4, hi=128),
        Param("TM", 8, "rows of C per thread", choices=_TILE),
        Param("TN", 8, "columns of C per thread", choices=_TILE),
        Param("VEC", 8, "halves per global load (64 or 128 bits)", choices=(4, 8)),
        Param("PAD", 0, "padding elements per shared-memory row (with 0, transposed A is XOR-swizzled instead)",
              lo=0, hi=64),
        block_swizzle_param(),
        flag("PACK", "half2 arithmetic (HFMA2, fp16 accumulation)", 1),
        flag("A_TRANSPOSED", "A stored transposed (K-major) in shared memory: one vector read per k instead of "
             "TM scalar reads", 1),
        flag("DBUF", "double-buffered shared memory: loads of the next slice overlap the math", 1),
        flag("ASYNC", "cp.async global->shared copies (sm_80+), needs DBUF"),
    ),
    dtypes={"float16": ("float16", "float32")},
    threads=lambda p: (p["BM"] // p["TM"]) * (p["BN"] // p["TN"]),
    tile=lambda p: (p["BM"], p["BN"]),
    smem_bytes=smem_bytes,
    align=lambda p, dtype: p["VEC"],
    rules=(
        divides("TM", "BM", "BM must be a multiple of TM"),
        divides("TN", "BN", "BN must be a multiple of TN"),
        _rules,
    ),
    min_cc=lambda p, dtype, acc: 80 if p["ASYNC"] else 70,
    renamed={**RENAMED_BLOCK_SWIZZLE, "BCF": "A_TRANSPOSED"},
)

FAMILIES = (HGEMM_SIMT,)

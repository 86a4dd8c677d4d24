"""Skinny GEMM for decode-style products: at most ROWS rows of C, bound by streaming B once.

Two families share templates/skinny.cu.j2 and differ in how B is laid out in memory, so that each of
the common orientations is served without copying the big operand:
  skinny         B row-major (N contiguous): x @ W with W stored K×N; by operand swap (Cᵀ = Bᵀ·Aᵀ) also
                 W @ x for a column-major (Fortran) W.
  skinny_kmajor  B column-major (K contiguous): x @ W.T with W stored N×K, as linear layers keep it; by
                 operand swap also W @ x for a row-major W, the small-N product.
With MMA=1 (fp16, bf16) either family multiplies on tensor cores, so 8 or 16 rows cost what one does.
UNALIGNED=1 reads the operands wherever they lie (align 1: an odd K or N, a view), each 16-byte vector as
the one or two aligned blocks it overlaps, shifted into place.
Either family computes any problem whose smaller side (M, or N after the swap) is at most ROWS: the API
puts that side in M (`max_rows`), and copies an operand whose layout does not fit.
"""
from __future__ import annotations

from .base import CUDA_TYPES, Family, Param, divides, flag, split_k_param
from ..errors import ConfigError

_DTYPES = {"float32": ("float32",), "float16": ("float32",), "bfloat16": ("float32",)}


def _params(bn: int, extra: tuple[Param, ...] = ()) -> tuple[Param, ...]:
    return (
        Param("ROWS", 8, "the most rows of C the kernel serves (register arrays are sized by it)",
              choices=(1, 2, 4, 8, 16)),
        Param("BN", bn, "columns of C per block", lo=1, hi=1024),
        Param("VEC", 8, "elements per vector load of B (16 bytes: 8 halves or 4 floats)", choices=(1, 2, 4, 8)),
        Param("WARPS", 8, "warps per block", lo=1, hi=32),
        Param("KU", 4, "K steps unrolled: B loads in flight per thread are KU times the vectors of a step",
              choices=(1, 2, 4, 8, 16)),
        Param("BK", 256, "K granule: splits cut K in multiples of BK", lo=1, hi=4096),
        *extra,
        flag("MMA", "multiply on tensor cores (m16n8k16, 16-bit inputs, 8 or 16 rows, sm_80+)"),
        flag("UNALIGNED", "read A and B wherever they lie (align 1): 16-byte vectors from the aligned blocks they "
             "overlap, shifted into place; A's shorter runs element by element where they are off their vector"),
        split_k_param(),
    )


def _vec_fits(p, dtype, acc):
    if p["VEC"] * CUDA_TYPES[dtype][1] > 16:
        yield ConfigError("VEC", p["VEC"], "VEC elements fit one 16-byte load "
                          f"(at most {16 // CUDA_TYPES[dtype][1]} for {dtype})")


def _rows_threads(p, dtype, acc):
    if p["MMA"]:
        if p["BN"] % 64 or p["WARPS"] % (p["BN"] // 64):
            yield ConfigError("BN", p["BN"], "MMA=1 needs BN a multiple of 64 (a warp's columns) and BN / 64 "
                              f"dividing the warps ({p['WARPS']})")
        return
    ct, threads = p["BN"] // p["VEC"], 32 * p["WARPS"]
    if threads % ct or (32 % ct and ct % 32):
        yield ConfigError("BN", p["BN"], "BN / VEC must divide 32 or be a multiple of 32, and divide the "
                          f"threads ({threads})")
        return
    kg = threads // ct
    if p["BK"] % (kg * p["KU"]):
        yield ConfigError("BK", p["BK"], f"BK must be a multiple of KU times the k-groups ({p['KU']} × {kg})")
    if p["VEC"] % min(p["KU"], 16 // CUDA_TYPES[dtype][1]):
        yield ConfigError("KU", p["KU"], "A's run of KU elements must be whole aligned vectors: "
                          f"min(KU, 16 bytes) must divide VEC={p['VEC']}")


def _kmajor_threads(p, dtype, acc):
    if p["WARPS"] % (p["BN"] // p["NT"]):
        yield ConfigError("BN", p["BN"], f"BN / NT must divide the warps ({p['WARPS']})")


def _mma(p, dtype, acc):
    if p["MMA"] and (CUDA_TYPES[dtype][1] != 2 or p["VEC"] != 8 or p["ROWS"] < 8):
        yield ConfigError("MMA", p["MMA"], "MMA=1 needs 16-bit inputs, VEC=8 and ROWS of 8 or 16 "
                          f"(got {dtype}, VEC={p['VEC']}, ROWS={p['ROWS']})")


def _unaligned(p, dtype, acc):
    if p["UNALIGNED"] and p["VEC"] * CUDA_TYPES[dtype][1] != 16:
        yield ConfigError("UNALIGNED", p["UNALIGNED"], "UNALIGNED=1 needs 16-byte vectors (VEC = 16 / element "
                          f"size; got VEC={p['VEC']} for {dtype})")


def _mma_kmajor(p, dtype, acc):
    if p["MMA"] and p["NT"] % 8:
        yield ConfigError("NT", p["NT"], "MMA=1 needs NT a multiple of 8")


def _family(name: str, doc: str, params, rules, b_layout) -> Family:
    return Family(
        name=name,
        template="skinny.cu.j2",
        doc=doc,
        params=params,
        dtypes=_DTYPES,
        threads=lambda p: 32 * p["WARPS"],
        tile=lambda p: (p["ROWS"], p["BN"]),
        smem_bytes=lambda p, dtype, acc: 4 * p["ROWS"] * p["BN"],  # the block's fp32 tile of C
        align=lambda p, dtype: 1 if p["UNALIGNED"] else p["VEC"],
        rules=(_vec_fits, divides("VEC", "BK", "BK must be a multiple of VEC"), _mma, _unaligned, *rules),
        b_layout=b_layout,
        split_k=True,
        split_k_fill=lambda p: 4,
        split_k_min_k=lambda p: 128,
        pdl=True,
        max_rows=lambda p: p["ROWS"],
        min_cc=lambda p, dtype, acc: 80 if p["MMA"] else 70,
    )


SKINNY = _family(
    "skinny", "M <= ROWS: B (N contiguous) streamed once with 16-byte loads, split over K and N",
    _params(256), (divides("VEC", "BN", "BN must be a multiple of VEC"), _rows_threads), None)

SKINNY_KMAJOR = _family(
    "skinny_kmajor", "M <= ROWS: B (K contiguous, x @ W.T) streamed once with 16-byte loads along K",
    _params(8, (Param("NT", 1, "columns of C per warp (B vectors per step)", lo=1, hi=64),)),
    (divides("NT", "BN", "BN must be a multiple of NT"), _kmajor_threads, _mma_kmajor), "col")

FAMILIES = (SKINNY, SKINNY_KMAJOR)

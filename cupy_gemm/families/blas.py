"""BLAS-convention SGEMM: column-major C = alpha·A·B + beta·C, wu-kan's optimisation ladder as parameters.

One template covers the ladder: global-memory kernels with a chosen thread→element mapping
(BK = 0), shared-memory slices with optional row padding (BK > 0), then float4 kernels with TM×TN
thread tiles and an optional double buffer (VEC = 4). Unlike the original kernels, which shift
their pointers back at the matrix edge (right only for beta = 0 and m, n >= tile), every load is
predicated and every store guarded, so any shape and any beta are exact.
"""
from __future__ import annotations

from ..errors import ConfigError
from .base import RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, flag

_STATIC_SMEM_LIMIT = 48 * 1024


def _threads(p) -> int:
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def _smem_floats(p) -> int:
    """Static shared memory of the template, in floats (0 when nothing is staged)."""
    if p["BK"] == 0:
        return 0
    if p["VEC"] == 4:
        stages = 2 if p["DBUF"] else 1
        return stages * p["BK"] * (p["BM"] + p["PAD"] + p["BN"] + p["PAD"])
    return p["BM"] * (p["BK"] + p["PAD"]) + p["BK"] * (p["BN"] + p["PAD"])


def _rules(p, dtype, acc):
    """Each constraint once; templates/blas.cu.j2 repeats it as a static_assert in the same words."""
    if p["BM"] % p["TM"]:
        yield ConfigError("BM", p["BM"], f"a multiple of TM={p['TM']}")
    if p["BN"] % p["TN"]:
        yield ConfigError("BN", p["BN"], f"a multiple of TN={p['TN']}")
    if p["VEC"] == 1:
        for name in ("TM", "TN"):
            if p[name] != 1:
                yield ConfigError(name, p[name], "1 when VEC=1 (one element of C per thread)")
    else:
        threads = _threads(p)
        if p["BK"] == 0:
            yield ConfigError("BK", p["BK"], "> 0 when VEC=4 (float4 kernels stage slices in shared memory)")
        if p["TM"] % 4:
            yield ConfigError("TM", p["TM"], "a multiple of 4 when VEC=4 (rows are float4 groups)")
        if p["TN"] != 1 and p["TN"] % 4:
            yield ConfigError("TN", p["TN"], "1 or a multiple of 4 when VEC=4 (columns are a scalar or float4 groups)")
        if p["BK"] % 4:
            yield ConfigError("BK", p["BK"], "a multiple of 4 when VEC=4 (B is loaded as float4 along K)")
        if p["PAD"] % 4:
            yield ConfigError("PAD", p["PAD"], "a multiple of 4 when VEC=4 (shared rows stay 16-byte aligned)")
        if not p["ROW_FAST"]:
            yield ConfigError("ROW_FAST", p["ROW_FAST"], "1 when VEC=4 (float4 groups run down the rows)")
        if p["BM"] // 4 * p["BK"] % threads:
            yield ConfigError("BK", p["BK"], f"a value that makes the A slice's BM/4*BK float4 loads a multiple "
                                             f"of the block's {threads} threads")
        if p["BK"] // 4 * p["BN"] % threads:
            yield ConfigError("BK", p["BK"], f"a value that makes the B slice's BK/4*BN float4 loads a multiple "
                                             f"of the block's {threads} threads")
    if p["BK"] == 0 and p["PAD"]:
        yield ConfigError("PAD", p["PAD"], "0 when BK=0 (nothing is staged in shared memory)")
    if p["WALK"] and p["BK"]:
        yield ConfigError("WALK", p["WALK"], "0 when BK > 0 (only the global-memory K loop walks pointers)")
    if p["DBUF"] and p["VEC"] != 4:
        yield ConfigError("DBUF", p["DBUF"], "0 unless VEC=4 (the float4 kernels double-buffer)")
    smem = _smem_floats(p) * 4
    if smem > _STATIC_SMEM_LIMIT:
        yield ConfigError("BK", p["BK"], f"a slice small enough to keep the static shared memory within 48 KB "
                                         f"(needs {smem} bytes)")


BLAS = Family(
    name="blas",
    template="blas.cu.j2",
    doc="column-major C = alpha·A·B + beta·C: global, shared-memory and float4 register-tile kernels",
    params=(
        Param("BM", 32, "rows of C per block", lo=1, hi=256),
        Param("BN", 32, "columns of C per block", lo=1, hi=256),
        Param("BK", 32, "depth of the K slice staged in shared memory, 0 = operands from global memory",
              lo=0, hi=64),
        Param("TM", 1, "rows of C per thread (VEC=4: float4 groups BM/(TM/4) apart)", lo=1, hi=16),
        Param("TN", 1, "columns of C per thread (VEC=4 and TN > 1: float4 groups BN/(TN/4) apart)", lo=1, hi=16),
        Param("PAD", 0, "floats added to each shared-memory row (1: the `| 1` padding)", lo=0, hi=16),
        Param("VEC", 1, "floats per global and shared access", choices=(1, 4)),
        flag("ROW_FAST", "consecutive threads take consecutive rows of C (coalesced in column-major)", 1),
        flag("WALK", "the global-memory K loop walks pointers by their strides (BK=0)"),
        flag("DBUF", "two shared buffers used in turn, one barrier per K slice (VEC=4)"),
        Param("UNROLL", 4, "unroll factor of the innermost k loop", lo=1, hi=64),
        block_swizzle_param(),
    ),
    dtypes={"float32": ("float32",)},
    threads=_threads,
    tile=lambda p: (p["BM"], p["BN"]),
    align=lambda p, dtype: 4 if p["VEC"] == 4 else 1,  # float4 along M (A, C) and along K (B)
    rules=(_rules,),
    layout="col",
    renamed=RENAMED_BLOCK_SWIZZLE,
)

FAMILIES = (BLAS,)

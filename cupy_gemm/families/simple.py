"""The two first steps of the zoo: the naive kernel and shared-memory sliced-K, for every dtype."""
from __future__ import annotations

from .base import RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param

_DTYPES = {"float32": ("float32",), "float16": ("float16", "float32"), "bfloat16": ("float32",)}
_BLOCK_SWIZZLE = block_swizzle_param()

NAIVE = Family(
    name="naive",
    template="naive.cu.j2",
    doc="one thread per element of C, operands from global memory",
    params=(
        Param("BM", 16, "rows of C per block", lo=1, hi=1024),
        Param("BN", 16, "columns of C per block", lo=1, hi=1024),
        _BLOCK_SWIZZLE,
    ),
    dtypes=_DTYPES,
    threads=lambda p: p["BM"] * p["BN"],
    tile=lambda p: (p["BM"], p["BN"]),
    renamed=RENAMED_BLOCK_SWIZZLE,
)

SLICED_K = Family(
    name="sliced_k",
    template="sliced_k.cu.j2",
    doc="A and B slices staged in shared memory, one thread per element of C",
    params=(
        Param("BM", 32, "rows of C per block", lo=1, hi=1024),
        Param("BN", 32, "columns of C per block", lo=1, hi=1024),
        Param("BK", 32, "depth of the K slice staged in shared memory", lo=1, hi=256),
        Param("PAD", 0, "padding elements per shared-memory row", lo=0, hi=16),
        _BLOCK_SWIZZLE,
    ),
    dtypes=_DTYPES,
    threads=lambda p: p["BM"] * p["BN"],
    tile=lambda p: (p["BM"], p["BN"]),
    rules=(lambda p, dtype, acc: _static_smem(p, dtype),),
    renamed=RENAMED_BLOCK_SWIZZLE,
)


def _static_smem(p, dtype):
    from ..errors import ConfigError
    from .base import CUDA_TYPES
    size = CUDA_TYPES[dtype][1]
    smem = size * (p["BM"] * (p["BK"] + p["PAD"]) + p["BK"] * (p["BN"] + p["PAD"]))
    if smem > 48 * 1024:
        yield ConfigError("BK", p["BK"], f"a tile whose static shared memory fits 48 KB (needs {smem} bytes)")


FAMILIES = (NAIVE, SLICED_K)

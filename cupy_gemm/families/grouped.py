"""Hopper (sm_90a) grouped GEMM: many products in one persistent launch (mixture-of-experts layers).

templates/grouped.cu.j2 is the `wgmma` family's warp-specialised TMA + wgmma pipeline walking a tile
schedule that spans every group. Reached through `cupy_gemm.grouped_matmul` (abi "grouped"), which packs
the arguments; one compiled kernel serves the three layouts, told apart at run time (`layout`):

    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                T* C, long long ldc, const int* ends, const GroupDesc* list, const CUtensorMap* list_maps,
                int layout, int groups, int rows, int n, int k, int group_rows)

  experts (0)  A (rows × K) as one 2-D map; B (G, K, N), or (G, N, K) with B_KMAJOR = 1, as one 3-D map whose
               boxes zero-fill at each expert's own K (and N) edge; `ends` the G cumulative row ends
               (torch._grouped_mm's offs). Rows from the last end to `rows` are a group of their own that
               is written with zeros, so the whole output is written.
  masked (1)   A (G · group_rows × K), group g's rows g·group_rows …; `ends` holds G row counts; rows past
               a group's count are written with zeros.
  list (2)     per-group maps in global memory (`list_maps`: A of every group, then B of every group, each
               B a 3-D map of depth one) and a GroupDesc {C, ldc, M, N, K} per group; B row-major (N-major).

The schedule is built on the device (no host synchronisation on the offsets): the block's first warp
reads the group bounds, counts each group's tiles (its rows in BM, its N in BN) and scans them into
shared memory; work units walk that flat range and find their group by binary search. Offsets are
clamped to [0, rows] there; offsets that decrease give overlapping groups (undefined rows, as torch).
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .base import CUDA_TYPES, Family, Param, flag
from .wgmma import SWIZZLE_BYTES, WARP_SPECIALISED

MAX_GROUPS = 1024  # the schedule's prefix lives in shared memory: one int per group, plus the experts' tail
LAYOUTS = {"experts": 0, "masked": 1, "list": 2}
# one GroupDesc of the template, byte for byte: C's address, its row stride, M, N, K and padding
GROUP_DESC_DTYPE = np.dtype([("c", "<u8"), ("ldc", "<i8"), ("m", "<i4"), ("n", "<i4"), ("k", "<i4"),
                             ("pad", "<i4")])


def schedule_bytes() -> int:
    return -(-4 * (MAX_GROUPS + 1) // 16) * 16


def smem_bytes(p, dtype: str, acc: str) -> int:
    stage = (p["BM"] * p["BK"] + p["BK"] * p["BN"]) * CUDA_TYPES[dtype][1]
    # + 1024: the start rounded up to the swizzle period; + 16 per stage: full/empty barriers; the schedule
    return p["STAGES"] * stage + 1024 + 16 * p["STAGES"] + schedule_bytes()


def _rule_tiles(p, dtype, acc):
    if p["BM"] % (64 * p["CONSUMERS"]):
        yield ConfigError("BM", p["BM"], f"a multiple of 64 * CONSUMERS = {64 * p['CONSUMERS']} "
                          "(each consumer warpgroup takes whole m64 wgmma tiles)")
    row = SWIZZLE_BYTES // CUDA_TYPES[dtype][1]
    for name in ("BN", "BK"):
        if p[name] % row:
            yield ConfigError(name, p[name], f"a multiple of one {SWIZZLE_BYTES}-byte swizzle row ({row} elements)")
    per_thread = p["BM"] // p["CONSUMERS"] * p["BN"] // 128
    if per_thread > 128:
        yield ConfigError("BN", p["BN"], f"at most 128 fp32 accumulators per consumer thread: "
                          f"BM / CONSUMERS * BN / 128 <= 128 (got {per_thread})")


GROUPED = Family(
    name="grouped",
    template="grouped.cu.j2",
    doc="Hopper grouped GEMM (experts, masked and list layouts) in one persistent TMA + wgmma launch",
    params=(
        Param("BM", 128, "rows of C per tile, split over the consumer warpgroups", lo=64, hi=256),
        Param("BN", 128, "columns of C per tile: the wgmma N", lo=64, hi=256),
        Param("BK", 64, "depth of one pipeline stage", choices=(64, 128)),
        Param("STAGES", 5, "shared-memory pipeline stages", lo=2, hi=8),
        Param("CONSUMERS", 2, "consumer warpgroups (one more warpgroup produces)", choices=(1, 2)),
        flag("B_KMAJOR", "B stored (G, N, K), each expert's weight N×K as a linear layer keeps it"),
    ),
    dtypes={"float16": ("float32",), "bfloat16": ("float32",)},
    **WARP_SPECIALISED,
    smem_bytes=smem_bytes,
    rules=(_rule_tiles,),
    abi="grouped",
)

FAMILIES = (GROUPED,)

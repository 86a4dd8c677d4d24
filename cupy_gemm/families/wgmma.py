"""Hopper (sm_90a): TMA + wgmma, warp-specialised and persistent; fp32 accumulate.

Four families share templates/wgmma.cu.j2:

- `wgmma`: fp16/bf16 inputs, every matrix row-major; wgmma reads B N-major through its transpose bit.
- `wgmma_kmajor`: `wgmma` reading a column-major B (x @ W.T with W stored N×K, as linear layers keep it)
  in place, K-major like A; its entries are `wgmma`'s, and the dispatch's B-layout rule hands such a B to
  the twin of the entry it chose. In clusters each block multicasts half the rows of n of every B box.
- `wgmma_tf32`: fp32 inputs multiplied as tf32. A's and B's maps have the copy engine's tf32 type, so TMA
  rounds each element to tf32 (nearest, ties to even, as cuBLAS's TF32 mode) on its way to shared memory,
  at no cost (with fp32 maps the tensor cores would truncate: a bias toward zero). wgmma has no transpose
  bit for 32-bit types, so both operands are K-major: the family reads B column-major (`b_layout = "col"`,
  ldb = column stride); the API copies a row-major one.
- `wgmma_tf32_rowb`: `wgmma_tf32` reading a row-major B in place. TMA lands B's N-major boxes in a
  landing buffer per stage, and the producer warpgroup's three idle warps transpose each stage into the
  K-major layout in shared memory (templates/common/tf32_transpose.cuh) before the consumers read it:
  no copy of B in global memory, which costs as much as the product when M is small and K deep.

The "tma" ABI: the kernel takes tensor maps (encoded on the host, cupy_gemm/tma.py) for A and B, and for
C, which the epilogue writes with TMA stores when beta = 0 (C's pointer serves beta != 0):

    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, T* C, int M, int N, int K, long long ldc,
                float alpha, float beta, int splits, void* workspace)

with A (M×K) and C (M×N) row-major and B (K×N) row-major or, for tf32 and wgmma_kmajor, column-major.
Tiles move in boxes of one 128-byte swizzle row; a 16-bit tile of 32·odd columns (64×96, 128×224) lands an
N-major B in boxes of 64-byte rows (`b_swizzle`) and stages C in such boxes (`c_swizzle`).
The copy engine zero-fills loads and clips stores at the matrix edge, so any M, N, K is right; it needs
16-byte aligned bases and leading dimensions, which `align` makes the API guarantee for A and B (padding
where they miss it). A C that misses it (an odd N's rows, a view) is written where it lies by the rendering
with_extras(unaligned_c=True): no map of C, pairs of columns from registers where aligned, else elements.

Batches (`batched`): a BatchArgs follows beta. The persistent blocks walk every member's tiles (numbered
member-major); A, B and C's maps have rank 5, the matrix's two dimensions and then the three batch
dimensions, so a copy's coordinates name the member (`batch_fits` says which batches the maps can address
in place). A fused epilogue (`epilogue`) takes its EpilogueParams next and runs on alpha·acc + beta·C of
every element, whichever path stores it. C may have another dtype than A and B (`convert`): C's tensor map
is then of that dtype with boxes of 128 bytes of it, and where BN holds no whole number of such boxes (a
tf32 tile of 32·odd columns with a 16-bit C) the kernel stores from registers instead.

PINGPONG = 1: each consumer warpgroup owns whole BM×BN tiles, the two alternating at the tensor cores,
so one's epilogue (TMA stores, a fused epilogue) runs while the other multiplies.

Split-K (`split_k`, the last two arguments): the persistent blocks walk tiles × splits work units, each a
K slice of one C tile; the consumer warpgroups keep to templates/common/split_k.cuh's protocol. SPLIT_K = 1
(the family's default, what every entry without it gets) compiles the split-K steps out; SPLIT_K = 0
lets the launcher choose per shape, which small-M and skinny problems need to fill the GPU.
STREAM_K = 1 or 2 (with SPLIT_K = 0) walks stream-K's units instead (templates/common/stream_k.cuh): whole
tiles first, then shares of the rest's K blocks (1: the last one to two waves' in equal shares over every
block; 2: each tile of the last wave cut into equal shares), so a last wave of a few tiles no longer idles
most SMs; `splits` is then the most blocks any tile has (cupy_gemm/stream_k.py).
"""
from __future__ import annotations

import numpy as np

from ..batching import MAX_BATCH_DIMS
from ..errors import ConfigError, InputError
from .base import (CUDA_TYPES, RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, flag, split_k_param,
                   stream_k_param, stream_k_rule)

SWIZZLE_BYTES = 128  # shared-memory swizzle of every tile: rows of 128 bytes (64 16-bit or 32 fp32 elements)
C_BOX_ROWS = 64  # the epilogue stages and stores C in boxes of 64 rows (one m64 tile) by one swizzle row
# wgmma.cu.j2 and wgmma_fp8.cu.j2 load A in copies of 64 rows and leave out those wholly below M (their
# A_COPY_ROWS); the other templates that share these maps (TF32 swap, 3xTF32) load BM rows at a time
A_COPY_ROWS = 64


def _elems_per_row(dtype: str) -> int:
    return SWIZZLE_BYTES // CUDA_TYPES[dtype][1]


def c_swizzle(p, dtype: str) -> int:
    """Bytes in one row of a C staging box (what the epilogue's TMA stores swizzle): SWIZZLE_BYTES, or 64 for
    a 16-bit tile of 32·odd columns (128×224), whose 16-bit C is no whole number of 128-byte rows."""
    return 64 if CUDA_TYPES[dtype][1] == 2 and p["BN"] % 64 else SWIZZLE_BYTES


def b_swizzle(p, dtype: str, b_layout: str | None) -> int:
    """Bytes in one row of an N-major B box (row-major B): SWIZZLE_BYTES, or 64 for a 16-bit tile of 32·odd
    columns, whose boxes are then 32 columns wide and bring none past the tile."""
    return 64 if b_layout != "col" and CUDA_TYPES[dtype][1] == 2 and p["BN"] % 64 else SWIZZLE_BYTES


def smem_bytes(p, dtype: str, acc: str) -> int:
    size = CUDA_TYPES[dtype][1]
    stage = (p["BM"] * p["BK"] + p["BK"] * p["BN"]) * size
    staging = p["TMA_STORE"] * p["CONSUMERS"] * p["EPI_BOXES"] * C_BOX_ROWS * c_swizzle(p, dtype)  # boxes per consumer
    # + 1024: the kernel rounds the start up to the swizzle period; + 16 per stage: full/empty barriers;
    # + 16 with split-K: the flag of templates/common/split_k.cuh's arrival; with KCLUSTER, the fp32
    # partial tile and the two barriers of common/cluster_split_k.cuh's exchange
    exchange = p["BM"] * p["BN"] * 4 + 16 if p.get("KCLUSTER", 1) > 1 else 0
    return p["STAGES"] * stage + staging + exchange + 1024 + 16 * p["STAGES"] + (16 if p["SPLIT_K"] != 1 else 0)


def smem_bytes_rowb(p, dtype: str, acc: str) -> int:
    # + per stage: the landing buffer of B as TMA brings it, and the converted barrier
    return smem_bytes(p, dtype, acc) + p["STAGES"] * (p["BK"] * p["BN"] * CUDA_TYPES[dtype][1] + 8)


def _consumer_rows(p) -> int:
    """Rows of C a consumer warpgroup holds: its share of the tile, or with PINGPONG the whole tile."""
    return p["BM"] if p.get("PINGPONG") else p["BM"] // p["CONSUMERS"]


def _rule_tiles(p, dtype, acc):
    pingpong = p.get("PINGPONG", 0)  # wgmma_3xtf32 shares these rules without the parameter
    if pingpong and (p["CONSUMERS"] != 2 or p["SPLIT_K"] != 1):
        yield ConfigError("PINGPONG", pingpong, "1 only with CONSUMERS = 2 and SPLIT_K = 1 (two consumers "
                          "take turns at whole tiles)")
    elif pingpong and p["BM"] % 64:
        yield ConfigError("BM", p["BM"], "a multiple of 64 (the consumer takes whole m64 wgmma tiles)")
    elif not pingpong and p["BM"] % (64 * p["CONSUMERS"]):
        yield ConfigError("BM", p["BM"], f"a multiple of 64 * CONSUMERS = {64 * p['CONSUMERS']} "
                          "(each consumer warpgroup takes whole m64 wgmma tiles)")
    row = _elems_per_row(dtype)
    if p["BN"] % 32:
        yield ConfigError("BN", p["BN"], f"a multiple of 32 (one {SWIZZLE_BYTES}-byte swizzle row of fp32, half of one "
                          "of 16-bit elements): tiles move in boxes of whole rows, and an N-major 16-bit B of "
                          "32·odd columns reads half of its last box")
    if p["BK"] % row:
        yield ConfigError("BK", p["BK"], f"a multiple of one {SWIZZLE_BYTES}-byte swizzle row (64 16-bit or 32 "
                          f"fp32 elements) ({row} for {dtype})")


def _rule_kcluster(p, dtype, acc):
    """KCLUSTER: split-K inside a cluster, whose blocks each store their share of the tile from registers."""
    if p["KCLUSTER"] == 1:
        return
    for name, value, want in (("CLUSTER", p["CLUSTER"], 1), ("SPLIT_K", p["SPLIT_K"], 1),
                              ("PINGPONG", p["PINGPONG"], 0), ("TMA_STORE", p["TMA_STORE"], 0)):
        if value != want:
            yield ConfigError(name, value, f"{want} with KCLUSTER = {p['KCLUSTER']} (a cluster's blocks share one "
                              "tile along K and each stores its share of it from registers)")


def _b_share_k(p, dtype: str, b_layout: str | None) -> int:
    """Rows of k of every box of an N-major B stage that each block of a cluster multicasts: all BK where the
    boxes divide among the blocks (each takes whole ones), else BK / CLUSTER (64×192 tiles in fours,
    odd numbers of 32-column boxes in pairs)."""
    cluster = p.get("CLUSTER", 1)  # wgmma_3xtf32 shares make_args and has no clusters
    boxes = p["BN"] * CUDA_TYPES[dtype][1] // b_swizzle(p, dtype, b_layout)
    return p["BK"] if boxes % cluster == 0 else p["BK"] // cluster


def _rule_cluster(p, dtype, acc):
    """The blocks of a cluster multicast equal shares of each B stage in whole 8-row swizzle atoms: an
    N-major B's whole boxes or BK / CLUSTER rows of k of each (BK a multiple of 64), a K-major B's BN /
    CLUSTER rows of n of each (BN a multiple of 32, _rule_tiles), with CLUSTER at most 4 (its choices); and
    they walk the same tiles in step, one wgmma per k step."""
    if p["CLUSTER"] == 1:
        return
    if p["PINGPONG"]:
        yield ConfigError("CLUSTER", p["CLUSTER"], "1 with PINGPONG (a cluster's blocks walk the same tiles in "
                          "step)")
    if p["BN"] > 256:
        yield ConfigError("CLUSTER", p["CLUSTER"], "1 with BN > 256 (two wgmma per k step)")


def _no_cluster(p, dtype, acc):
    for name in ("CLUSTER", "KCLUSTER"):
        if p[name] != 1:
            yield ConfigError(name, p[name], "1: the transposing producer reads each B stage it lands")


def _registers_rule(most: int):
    """The rule that a consumer thread holds at most `most` fp32 accumulators: its registers after the
    hand-over (232, or 208 beside the transposing producer) less 40 for addresses, counters and the epilogue."""
    def rule(p, dtype, acc):
        per_thread = _consumer_rows(p) * p["BN"] // 128
        if per_thread > most:
            yield ConfigError("BN", p["BN"], f"at most {most} fp32 accumulators per consumer thread: "
                              f"BM / CONSUMERS (BM with PINGPONG) * BN / 128 <= {most} (got {per_thread})")
    return rule


def make_args(variant, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta, batch=None) -> tuple:
    """The tensor maps and scalars of the "tma" ABI. batch: the batching.BatchPlan of a batched variant, in
    the kernel's orientation (A, B and C are member 0's); every map then has the batch dimensions too.
    C's map is of C's own dtype (the variant's out_dtype), its boxes one 128-byte swizzle row wide."""
    from .. import tma
    p, dtype = variant.params, variant.dtype
    out = variant.out_dtype or dtype
    row, size, c_size = _elems_per_row(dtype), CUDA_TYPES[dtype][1], CUDA_TYPES[out][1]
    operand = "tfloat32" if variant.acc == "tf32" else dtype  # TMA rounds fp32 operands to tf32 (nearest even)
    # K-major B: a cluster's blocks each load their rows of n (wgmma_3xtf32 shares this and has no clusters);
    # a tile wider than 256 rows of n (the most one copy moves) takes them in two copies (B_COPY_ROWS)
    b_share = p["BN"] // p.get("CLUSTER", 1)
    b_layout = variant.family.b_layout
    b_rows, b_cols, b_box = tma.b_extent(b_layout, k, n, _b_share_k(p, dtype, b_layout),
                                         b_share // 2 if b_share > 256 else b_share)
    b_sw = b_swizzle(p, dtype, b_layout)
    c_sw = c_swizzle(p, dtype)
    a_box = A_COPY_ROWS if variant.family.template == _COMMON["template"] else p["BM"]
    # a C rendered for any stride (unaligned_c) has no map: the kernel stores it from registers
    maps = ((A, operand, m, k, lda, a_box, row, size, SWIZZLE_BYTES),
            (B, operand, b_rows, b_cols, ldb, b_box, b_sw // size, size, b_sw),
            (C, out, m, n, ldc, C_BOX_ROWS, c_sw // c_size, c_size, c_sw))[:2 if variant.unaligned_c else 3]
    if batch is None:
        made = [tma.tensor_map_2d(x.data.ptr, t, rows=r, cols=c, ld=ld, box_rows=box, box_cols=cols, swizzle=sw)
                for x, t, r, c, ld, box, cols, _, sw in maps]
    else:
        strides = (batch.a_strides, batch.b_strides, batch.c_strides)
        made = [_batched_map(x.data.ptr, t, r, c, ld, box, cols, batch.shape, st, bytes_, sw)
                for (x, t, r, c, ld, box, cols, bytes_, sw), st in zip(maps, strides)]
    map_a, map_b, map_c = (*made, tma.empty_map())[:3]
    return (map_a, map_b, map_c, C, np.int32(m), np.int32(n), np.int32(k), np.int64(ldc),
            np.float32(alpha), np.float32(beta))


def _batched_map(ptr, dtype, rows, cols, ld, box_rows, box_cols, shape, strides, size, swizzle):
    """One operand's map over the batch, of rank 2 + MAX_BATCH_DIMS (the kernel's copies are 5-D), its
    batch dimensions padded outward with size 1 as BatchArgs pads them."""
    from .. import tma
    tma.check_2d(ptr, dtype, rows, cols, ld, box_rows, box_cols, swizzle)
    tma.check_batch_strides(strides, size)
    pad = MAX_BATCH_DIMS - len(shape)
    dims, byte_strides = tma.batched_layout(rows, cols, ld, (1,) * pad + tuple(shape), (0,) * pad + tuple(strides),
                                            size)
    return tma.tensor_map(ptr, dtype, dims=dims, strides=byte_strides, box=(box_cols, box_rows) + (1,) * MAX_BATCH_DIMS,
                          swizzle=swizzle)


def batch_fits(plan, dtype: str, out_dtype: str | None = None) -> bool:
    """Whether the tensor maps can address this batch (a batching.BatchPlan of `dtype` elements, C of
    `out_dtype`'s, None: dtype's) in place:
    at most MAX_BATCH_DIMS dimensions, and every batch stride of A, B and C either 0 (broadcast) or a
    positive multiple of 16 bytes (the copy engine's rule, which make_args enforces with InputError). When
    it is False the caller copies the batch into contiguous arrays (whose strides then fit, given 16-byte
    aligned leading dimensions) or picks another family."""
    from .. import tma
    try:
        for strides, of in ((plan.a_strides, dtype), (plan.b_strides, dtype), (plan.c_strides, out_dtype or dtype)):
            tma.check_batch_strides(strides, CUDA_TYPES[of][1])
    except InputError:
        return False
    return plan.fits


def _params(bk_choices: tuple[int, ...], bk_default: int, bn_most: int = 256) -> tuple[Param, ...]:
    """bn_most: the widest tile, 256 (one wgmma's N) unless two instructions share a k step (16-bit
    inputs: the `wgmma` and `wgmma_kmajor` families)."""
    return (
        Param("BM", 128, "rows of C per block, split over the consumer warpgroups", lo=64, hi=256),
        Param("BN", 256, "columns of C per block: the wgmma N (above 256: two wgmma per k step, 256 columns "
              "and the rest)", lo=64, hi=bn_most),
        Param("BK", bk_default, "depth of one pipeline stage", choices=bk_choices),
        Param("STAGES", 4, "shared-memory pipeline stages", lo=2, hi=16),
        Param("CONSUMERS", 2, "consumer warpgroups (one more warpgroup produces)", choices=(1, 2)),
        flag("TMA_STORE", "epilogue through shared memory and TMA stores (beta = 0; else direct stores)", 1),
        block_swizzle_param(2048),
        split_k_param(1),  # 1: the plain kernel, without the split-K steps
        flag("PINGPONG", "the two consumers take whole tiles in turn: one's epilogue overlaps the other's MMAs", 0),
        Param("EPI_BOXES", 2, "C staging boxes (64 rows × 128 bytes) per consumer for the TMA-store epilogue: "
              "a box is refilled once the store that read it is done", lo=2, hi=8),
        Param("CLUSTER", 1, "blocks per cluster: vertically adjacent tiles whose B stages one TMA multicast "
              "fills (templates/common/cluster.cuh)", choices=(1, 2, 4)),
        Param("KCLUSTER", 1, "blocks per cluster that share one tile along K, their fp32 partials summed "
              "through distributed shared memory (templates/common/cluster_split_k.cuh); 1 = off", lo=1, hi=8),
        stream_k_param(),
    )


# what every warp-specialised Hopper family shares (this one, wgmma_3xtf32, wgmma_fp8): a producer
# warpgroup and CONSUMERS consumer warpgroups over a BM×BN tile, persistent, sm_90a only
WARP_SPECIALISED = dict(
    threads=lambda p: 128 * (p["CONSUMERS"] + 1),
    tile=lambda p: (p["BM"], p["BN"]),
    min_cc=lambda p, dtype, acc: 90,
    needs_sm90a=True,
    persistent=1,
    pdl=True,
)

_COMMON = dict(
    **WARP_SPECIALISED,
    template="wgmma.cu.j2",
    smem_bytes=smem_bytes,
    align=lambda p, dtype: 16 // CUDA_TYPES[dtype][1],
    rules=(_rule_tiles, _registers_rule(192), _rule_cluster, _rule_kcluster, stream_k_rule),
    cluster=lambda p: p["CLUSTER"] * p["KCLUSTER"],
    cluster_splits_k=lambda p: p["KCLUSTER"] > 1,
    stream_k=lambda p: p["STREAM_K"],
    abi="tma",
    make_args=make_args,
    split_k=True,
    atomic_sum=True,
    renamed=RENAMED_BLOCK_SWIZZLE,
    batched=True,
    epilogue=True,
    convert=True,
    unaligned_c=True,
)

WGMMA = Family(
    name="wgmma",
    doc="Hopper: TMA ring of STAGES stages, one producer and CONSUMERS wgmma warpgroups, persistent",
    params=_params((64, 128), 64, bn_most=384),
    dtypes={"float16": ("float32",), "bfloat16": ("float32",)},
    **_COMMON,
)

WGMMA_TF32 = Family(
    name="wgmma_tf32",
    doc="Hopper TF32: fp32 inputs as tf32 m64nNk8 wgmma, B read K-major (column-major); as `wgmma` otherwise",
    params=_params((32, 64), 32),
    dtypes={"float32": ("tf32",)},
    b_layout="col",
    ragged_n=True,
    **_COMMON,
)

WGMMA_TF32_ROWB = Family(
    name="wgmma_tf32_rowb",
    doc="Hopper TF32 with a row-major B read in place: producer warps transpose each B stage in shared "
        "memory; as `wgmma_tf32` otherwise",
    params=_params((32, 64), 32),
    dtypes={"float32": ("tf32",)},
    **{**_COMMON, "smem_bytes": smem_bytes_rowb,
       "rules": (_rule_tiles, _registers_rule(168), _no_cluster, stream_k_rule)},
)

WGMMA_KMAJOR = Family(
    name="wgmma_kmajor",
    doc="Hopper 16-bit with B column-major (x @ W.T, W stored N×K) read in place, K-major as wgmma prefers "
        "it (no transpose bit); as `wgmma` otherwise",
    params=_params((64, 128), 64, bn_most=384),
    dtypes={"float16": ("float32",), "bfloat16": ("float32",)},
    b_layout="col",
    ragged_n=True,
    **_COMMON,
)

FAMILIES = (WGMMA, WGMMA_TF32, WGMMA_TF32_ROWB, WGMMA_KMAJOR)

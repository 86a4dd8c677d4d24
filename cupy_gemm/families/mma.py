"""Tensor cores through hand-written PTX: mma.sync m16n8k16 (float16, bfloat16) and m16n8k8 (tf32).

Row-major A and B. STAGES K tiles in flight through 16-byte cp.async into dynamic shared memory,
padded (A_PAD/B_PAD) or XOR-swizzled (SMEM_SWIZZLE) so that ldmatrix reads are bank-conflict free;
fragments loaded with ldmatrix (x4 for A, x2/x4 .trans for B), optionally double-buffered in
registers across the k steps of a tile (RBUF); an epilogue staged through shared memory with
16-byte coalesced, guarded stores. The block tile is (WARPS_M*WARP_TILE_M*16) x (WARPS_N*WARP_TILE_N*8).
TF32 rounds each landed stage to tf32 (cvt.rna) in shared memory, once per element per block; the
caller's float32 inputs are never modified.
Batched, the kernel body is one member's product (gemm_member) that gemm_kernel runs for each member of
blockIdx.z; a fused epilogue goes through common/epilogue_vec.cuh's store.
Split-K (SPLIT_K, `split_k`): split blockIdx.y multiplies a contiguous run of the K tiles (the body sees A,
B and K narrowed to it), stores its accumulators as an fp32 partial tile and arrives on the tile's counter
(templates/common/split_k.cuh); the last split sums the partials in a fixed order into its accumulators and
runs the usual epilogue once (alpha, beta·C, a fused epilogue). 1 (the default) renders the kernel without
the split-K steps or arguments, byte for byte the source the family had before split-K; 0 lets the
launcher choose per shape. TF32 entries read row-major B in place (no transposed copy, unlike the Hopper
tf32 families), which is what small-M, deep-K float32 products need. Batched, a member's counters and
partials follow the previous members' in the workspace. Float16 accumulation does not split (the partials
are fp32).
C may be stored in another dtype than A and B (`convert`): the 16-byte chunks of VEC columns become VEC
elements of T_OUT.
UNALIGNED=1 takes operands as they come (align 1: any K and N, leading dimensions and base addresses
aligned to the element only), so ragged products need no padded copies: each thread reads its chunks
of a K tile into registers (one 16-byte load where a chunk is aligned and inside the matrix, else
guarded element loads, zero past the edge) and stores them to the same shared-memory layout once the
tile in hand is multiplied; C chunks off a 16-byte boundary or across N's end are stored element by
element. The shared-memory layouts and the ldmatrix/mma path are the aligned kernel's.
`mma_kmajor` is the same template reading B column-major (x @ W.T with W stored N×K, as linear layers keep
it) in place, 16-bit inputs: B's tile is BN rows of BK + B_PAD, copied (or loaded, UNALIGNED) as A's is,
and its fragments come through plain ldmatrix as A's do; the dispatch's B-layout rule hands a column-major B
to the twin of the mma entry it chose.
"""
from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from .base import (ACC_TYPES, CUDA_TYPES, FILL_RESIDENT, RENAMED_BLOCK_SWIZZLE, Family, Param,
                   block_swizzle_param, few_rows_param, flag, split_k_param)

# float16 accumulates in float32 by default; float16 accumulation serves the seed-named kernels.
_DTYPES = {"float16": ("float32", "float16"), "bfloat16": ("float32",), "float32": ("tf32",)}
_ACC_BYTES = {"float": 4, "half": 2}
C_PAD = 8  # accumulators added to each row of the staged C tile (the template's C_STRIDE)


def _esize(dtype: str) -> int:
    return CUDA_TYPES[dtype][1]


def _vec(dtype: str) -> int:
    """Elements in one 16-byte chunk (one cp.async, one ldmatrix row, one epilogue store)."""
    return 16 // _esize(dtype)


def _kstep(acc: str) -> int:
    return 8 if acc == "tf32" else 16


def tile(p) -> tuple[int, int]:
    return p["WARPS_M"] * p["WARP_TILE_M"] * 16, p["WARPS_N"] * p["WARP_TILE_N"] * 8


def threads(p) -> int:
    return 32 * p["WARPS_M"] * p["WARPS_N"]


def _smem_bytes(b_kmajor: bool):
    def smem_bytes(p, dtype: str, acc: str) -> int:
        """The larger of the cp.async pipeline and the epilogue's staged C tile (they share the space); B's
        tile is BK rows of BN, or with a K-major B BN rows of BK."""
        bm, bn = tile(p)
        bk = p["BK"]
        b_tile = bn * (bk + p["B_PAD"]) if b_kmajor else bk * (bn + p["B_PAD"])
        pipeline = p["STAGES"] * (bm * (bk + p["A_PAD"]) + b_tile) * _esize(dtype)
        c_tile = bm * (bn + C_PAD) * _ACC_BYTES[ACC_TYPES[acc]]
        return max(pipeline, c_tile)
    return smem_bytes


smem_bytes = _smem_bytes(False)


def _pow2(x: int) -> bool:
    return x > 0 and not x & (x - 1)


def _rules(p, dtype, acc, b_kmajor=False):
    """b_kmajor: B's tile has BK-long rows as A's does, so A's swizzle rule covers it (BN's chunks must still
    divide the threads: the epilogue stages C in rows of them)."""
    esize, vec, kstep = _esize(dtype), _vec(dtype), _kstep(acc)
    bm, bn = tile(p)
    a_chunks, b_chunks = p["BK"] // vec, bn // vec
    if p["BK"] % kstep:
        yield ConfigError("BK", p["BK"], "a multiple of the k depth of one mma.sync (16 for 16-bit inputs, 8 for tf32)")
        return
    if p["RBUF"] and (p["BK"] // kstep) % 2:
        yield ConfigError("BK", p["BK"], "an even number of mma k steps when RBUF=1 (the two fragment buffers "
                          "alternate)")
    if p["RBUF"] and p["STAGES"] == 1:
        yield ConfigError("RBUF", 1, "0 when STAGES=1 (it prefetches fragments from the next pipeline stage)")
    if p["B_X4"] and p["WARP_TILE_N"] % 2:
        yield ConfigError("WARP_TILE_N", p["WARP_TILE_N"], "even when B_X4=1 (one ldmatrix.x4.trans loads two "
                          "n8 tiles)")
    for pad in ("A_PAD", "B_PAD"):
        if (p[pad] * esize) % 16:
            yield ConfigError(pad, p[pad], "a multiple of 16 bytes (8 halves, 4 floats): cp.async and ldmatrix "
                              "need 16-byte aligned rows")
        if p["SMEM_SWIZZLE"] and p[pad]:
            yield ConfigError(pad, p[pad], "0 when SMEM_SWIZZLE=1 (the XOR swizzle replaces padding)")
    if p["SMEM_SWIZZLE"]:
        if a_chunks < 2 or not _pow2(a_chunks):
            yield ConfigError("BK", p["BK"], "a power-of-two number of 16-byte chunks per row, at least 2, when "
                              "SMEM_SWIZZLE=1")
        least = 8 if acc == "tf32" else 2
        if not b_kmajor and (b_chunks < least or not _pow2(b_chunks)):
            yield ConfigError("WARP_TILE_N", p["WARP_TILE_N"], f"a tile width BN={bn} of a power-of-two number "
                              "of 16-byte chunks per row, at least 2 (8 for tf32), when SMEM_SWIZZLE=1")
    if threads(p) % a_chunks:
        yield ConfigError("BK", p["BK"], f"a number of 16-byte chunks per row that divides the thread count "
                          f"({a_chunks} chunks, {threads(p)} threads)")
    if threads(p) % b_chunks:
        yield ConfigError("WARP_TILE_N", p["WARP_TILE_N"], f"a tile width BN={bn} that makes a number of "
                          f"16-byte chunks per row that divides the thread count ({b_chunks} chunks, "
                          f"{threads(p)} threads)")
    acc_regs = p["WARP_TILE_M"] * p["WARP_TILE_N"] * (2 if acc == "float16" else 4)
    if acc_regs > 128:
        yield ConfigError("WARP_TILE_N", p["WARP_TILE_N"], f"a warp tile that needs at most 128 accumulator "
                          f"registers per thread (WARP_TILE_M * WARP_TILE_N gives {acc_regs})")
    if p["SPLIT_K"] != 1 and acc == "float16":
        yield ConfigError("SPLIT_K", p["SPLIT_K"], "1 when accumulating in float16 (the split-K partial tiles are "
                          "float32: split float16 inputs with acc=float32)")


MMA = Family(
    name="mma",
    template="mma.cu.j2",
    doc="mma.sync PTX tensor cores: ldmatrix, multi-stage cp.async, padded or swizzled shared memory",
    params=(
        Param("WARPS_M", 2, "warps along M in a block", lo=1, hi=8),
        Param("WARPS_N", 4, "warps along N in a block", lo=1, hi=8),
        Param("WARP_TILE_M", 4, "m16 mma tiles along M per warp", lo=1, hi=8),
        Param("WARP_TILE_N", 4, "n8 mma tiles along N per warp", lo=1, hi=16),
        Param("BK", 32, "K depth of a shared-memory stage, elements", lo=8, hi=128),
        Param("STAGES", 3, "K tiles in the cp.async pipeline (1: load, then compute)", lo=1, hi=5),
        Param("A_PAD", 8, "elements added to each shared-memory row of A", lo=0, hi=32),
        Param("B_PAD", 8, "elements added to each shared-memory row of B", lo=0, hi=32),
        flag("SMEM_SWIZZLE", "XOR-swizzle 16-byte chunks of shared-memory rows instead of padding"),
        flag("RBUF", "double-buffer fragments in registers across the k steps of a tile"),
        flag("B_X4", "ldmatrix.x4.trans loads two n8 tiles of B at once (else .x2.trans, one)"),
        block_swizzle_param(),
        Param("MIN_BLOCKS", 1, "blocks per SM promised to the compiler (__launch_bounds__), capping registers",
              lo=1, hi=4),
        split_k_param(1),  # 1: the plain kernel, its source unchanged
        flag("UNALIGNED", "read A and B and write C wherever they lie (align 1): register-staged, guarded "
             "element loads instead of 16-byte cp.async, element stores where C's chunks are not aligned"),
        few_rows_param(),
    ),
    dtypes=_DTYPES,
    threads=threads,
    tile=tile,
    smem_bytes=smem_bytes,
    # 16-byte cp.async along K and 16-byte stores along N; UNALIGNED checks each chunk instead
    align=lambda p, dtype: 1 if p["UNALIGNED"] else _vec(dtype),
    rules=(_rules,),
    min_cc=lambda p, dtype, acc: 80,
    max_rows=lambda p: p["FEW_ROWS"] or None,
    renamed=RENAMED_BLOCK_SWIZZLE,
    split_k=True,
    atomic_sum=True,
    split_k_args_optional=True,
    # the unaligned loader's register-staged K blocks wait on their loads: its splits fill the blocks an SM
    # holds (by registers: 4 of the 64×64 fp16 tile, 3 of tf32's, 2 of 64×128), in one wave, down to 128
    # of K a split. H100, 17×4095×1000 (64 tiles of 64×64): fp16 22.9 µs at the cost model's 3 splits,
    # 16.6 at 6 to 8 (cupy.matmul 13.8); tf32 22.5 at 3, 17.5 at 6, 24.3 at 8 (a second wave; cupy.matmul
    # 16.2); 33×4095×2000 fp16 35.4 at 3, 23.0 at 8 (24.6; 64×128: 58.2 at 3, 31.9 at 8, 40.3 at 12)
    split_k_fill=lambda p: FILL_RESIDENT if p["UNALIGNED"] else None,
    split_k_min_k=lambda p: 128 if p["UNALIGNED"] else None,
    batched=True,
    epilogue=True,
    convert=True,
    pdl=True,
)

MMA_KMAJOR = dataclasses.replace(
    MMA,
    name="mma_kmajor",
    doc="mma.sync with B column-major (x @ W.T, W stored N×K) read in place: its tile copied and its fragments "
        "loaded as A's; 16-bit inputs; as mma otherwise",
    dtypes={d: accs for d, accs in _DTYPES.items() if d != "float32"},
    smem_bytes=_smem_bytes(True),
    rules=(lambda p, dtype, acc: _rules(p, dtype, acc, b_kmajor=True),),
    b_layout="col",
)

FAMILIES = (MMA, MMA_KMAJOR)

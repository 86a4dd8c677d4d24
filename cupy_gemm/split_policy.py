"""How many blocks share a C tile along K (split-K), and how many blocks of a variant an SM holds: a cost
model of one SM and the memory, which launch.launch_config asks."""
from __future__ import annotations

from . import stream_k
from .families.base import CUDA_TYPES, FILL_RESIDENT
from .registry import Variant

MAX_SPLITS = 32
MIN_K_PER_SPLIT = 256  # below this a split's partial tile costs more traffic than its K slice saves
# The split-K cost model (k_splits) estimates a launch's time in ns from what one SM and the memory can
# do — an H100 at its sustained clock; the choice follows their ratios more than their values:
SM_BYTES_PER_NS = 100  # operand bytes one SM's loads bring in at most (~64 B a clock)
DRAM_BYTES_PER_NS_PER_SM = 23  # HBM bandwidth shared over the SMs where the GPU's is not given (an H100's
# ~3 TB/s over 132); the launcher gives the device's own (devices.memory_bytes_per_ns: an H200 ~4.3 TB/s)
# multiply-adds one SM does per ns, by what a split-K family of that precision runs on: tensor cores for
# 16-bit inputs and TF32, CUDA cores for fp32
SM_MACS_PER_NS = {"tf32": 1900, "float32": 250, "float16": 3800, "bfloat16": 3800}
UNIT_OVERHEAD_K_BLOCKS = 2  # a work unit's pipeline fill and C store, in K blocks
SPLIT_MARGIN = 0.9  # a split must beat none by this much: L2 misses and the counters' atomics are not modelled
SM_THREADS, SM_REGISTERS, SM_SMEM = 2048, 65536, 228 * 1024  # per SM on sm_80 … sm_90


def resident_blocks(variant: Variant, registers: int | None = None) -> int:
    """Blocks of a variant that one SM runs at once: `persistent` for persistent families, else from
    threads, shared memory and the registers a thread uses (ptxas's count; 128 assumed when unknown)."""
    fam, p = variant.family, variant.params
    if fam.persistent:
        return fam.persistent
    threads = fam.threads(p)
    smem = fam.smem_bytes(p, variant.dtype, variant.acc) + 1024  # the driver reserves 1 KB a block
    warp_registers = -(-(registers or 128) * 32 // 256) * 256  # allocated per warp, 256 at a time
    by_registers = SM_REGISTERS // warp_registers // (threads // 32)
    return max(1, min(SM_THREADS // threads, SM_SMEM // smem, by_registers, 32))


def stream_k_partition(variant: Variant, k: int, tiles: int, sm_count: int | None,
                       registers: int | None = None) -> tuple[int, int, int]:
    """A stream-K variant's (blocks, splits, shared tiles) for `tiles` C tiles over K (cupy_gemm/stream_k.py): a
    grid of as many blocks as the SMs hold (resident_blocks each)."""
    fam, p = variant.family, variant.params
    k_blocks = max(1, -(-k // fam.k_block(p)))
    return stream_k.launch(tiles, k_blocks, resident_blocks(variant, registers) * (sm_count or 1), fam.stream_k(p))


def min_k_per_split(variant: Variant) -> int:
    """The least K one split sums: the family's own least for these parameters, else MIN_K_PER_SPLIT."""
    fam = variant.family
    return (fam.split_k_min_k and fam.split_k_min_k(variant.params)) or MIN_K_PER_SPLIT


def k_splits(variant: Variant, m: int, n: int, k: int, tiles: int, sm_count: int | None,
             registers: int | None = None, memory_bytes_per_ns: float | None = None) -> int:
    """How many blocks share one C tile along K: SPLIT_K when set (never more than the K blocks), else
    the count the cost model says finishes first, each split keeping at least MIN_K_PER_SPLIT of K.

    The model: a work unit (one tile's K slice) takes its K blocks plus a fixed overhead, each as long
    as the SM needs to load it or to multiply it, whichever is longer, and with splits also writes an
    fp32 partial tile. An SM runs ceil(units / SMs) units; fewer than the blocks it can hold leaves
    it partly idle (a block alone gets 1 / resident of it). The whole launch cannot beat HBM bandwidth
    for A, B and the partials, and the last split of a tile reads every partial back. So small M×N with
    a long K splits until the SMs are busy, and memory-bound products stop splitting once bandwidth,
    not SMs, is the limit: the partials' traffic then only costs. A persistent kernel's splits never take
    a second round. memory_bytes_per_ns: the GPU's memory bandwidth (None: DRAM_BYTES_PER_NS_PER_SM an SM)."""
    return split_plan(variant, m, n, k, tiles, sm_count, registers, memory_bytes_per_ns)[0]


def split_plan(variant: Variant, m: int, n: int, k: int, tiles: int, sm_count: int | None,
               registers: int | None = None, memory_bytes_per_ns: float | None = None) -> tuple[int, float | None]:
    """(k_splits's count, the model's time for it in ns; None where the model is not asked: a fixed
    SPLIT_K, no split-K steps, or a memory-bound family)."""
    fam, p = variant.family, variant.params
    if not fam.takes_split_k_args(p):
        return 1, None
    if fam.stream_k(p):  # as many splits as the most blocks sharing a tile
        return stream_k_partition(variant, k, tiles, sm_count, registers)[1], None
    bk = fam.k_block(p)
    k_blocks = max(1, -(-k // bk))
    requested = p.get("SPLIT_K", 0)
    if requested:
        return max(1, min(requested, k_blocks)), None
    sms = sm_count or 132
    min_k = min_k_per_split(variant)
    fill = fam.split_k_fill and fam.split_k_fill(p)
    if fill:  # bound by its loads: enough blocks to keep them in flight, no arithmetic to model
        blocks = sms * (resident_blocks(variant, registers) if fill == FILL_RESIDENT else fill)
        return (1 if tiles >= blocks else max(1, min(blocks // tiles, k // min_k, k_blocks, MAX_SPLITS))), None
    resident = resident_blocks(variant, registers)
    most = max(1, min(k // min_k, k_blocks, MAX_SPLITS))
    if fam.persistent:
        # a persistent kernel's splits stay in one round: a block that walks several K slices runs far
        # slower than the model's sum of them (H100, tf32 512×1536×7168, 48 tiles of 128×128: 59.9 µs at 2
        # splits, 73.5 at 4, 74.3 at the 5 the model preferred; fp16 1024³, 128 tiles of 64×128: 6.4 µs
        # unsplit, 14.7 at 2). Blocks that are not persistent take a second wave well (float32 on CUDA
        # cores: 128×10240×8192, 160 tiles of 128×64 in 264 slots, ran 0.54× cupy.matmul unsplit)
        most = max(1, min(most, sms * resident // tiles))
    bm, bn = fam.tile(p)
    size = CUDA_TYPES[variant.dtype][1]
    macs = SM_MACS_PER_NS["tf32" if variant.acc == "tf32" else variant.dtype]
    k_block_ns = max((bm + bn) * bk * size / SM_BYTES_PER_NS, bm * bn * bk / macs)
    partial_ns = bm * bn * 4 / SM_BYTES_PER_NS  # one fp32 partial tile written, or read back
    operand_bytes = (m + n) * k * size + m * n * size
    memory = memory_bytes_per_ns or DRAM_BYTES_PER_NS_PER_SM * sms

    def cost(splits: int) -> float:
        unit_ns = (-(-k_blocks // splits) + UNIT_OVERHEAD_K_BLOCKS) * k_block_ns
        if splits == 1:
            dram_ns = operand_bytes / memory
            return max(max(resident, -(-tiles // sms)) * unit_ns, dram_ns)
        partial_bytes = 2 * splits * tiles * bm * bn * 4
        dram_ns = (operand_bytes + partial_bytes) / memory
        per_sm = max(resident, -(-tiles * splits // sms)) * (unit_ns + partial_ns)
        return max(per_sm, dram_ns) + splits * partial_ns

    best = min(range(1, most + 1), key=lambda s: (cost(s), s))
    return (best, cost(best)) if cost(best) <= SPLIT_MARGIN * cost(1) else (1, cost(1))

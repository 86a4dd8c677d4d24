"""How many blocks of a kernel fit on one SM, from its launch and ptxas's counts: what a sweep reports as
occupancy, for the GPU it measured on or, GPU-free, for the architecture it compiled for."""
from __future__ import annotations

# registers, threads, shared memory bytes, resident blocks, shared memory the system reserves per block.
SM_LIMITS = {
    70: (65536, 2048, 96 << 10, 32, 0), 75: (65536, 1024, 64 << 10, 16, 0),
    80: (65536, 2048, 164 << 10, 32, 1024), 86: (65536, 1536, 100 << 10, 16, 1024),
    89: (65536, 1536, 100 << 10, 24, 1024), 90: (65536, 2048, 228 << 10, 32, 1024),
}


def sm_limits(cc: int, attributes: dict | None = None) -> tuple[int, int, int, int, int]:
    base = SM_LIMITS.get(cc) or SM_LIMITS[max(c for c in SM_LIMITS if c <= max(cc, 70))]
    if not attributes:
        return base
    keys = ("MaxRegistersPerMultiprocessor", "MaxThreadsPerMultiProcessor", "MaxSharedMemoryPerMultiprocessor",
            "MaxBlocksPerMultiprocessor", "ReservedSharedMemoryPerBlock")
    return tuple(int(attributes.get(key) or value) for key, value in zip(keys, base))


def occupancy(threads: int, registers: int, smem: int, limits) -> tuple[int, float]:
    """(resident blocks per SM, fraction of the SM's warp slots in use) from the launch and ptxas's counts."""
    regs_sm, threads_sm, smem_sm, blocks_sm, reserved = limits
    warps = -(-threads // 32)
    by_threads = threads_sm // (warps * 32)
    regs_per_warp = -(-max(registers, 1) * 32 // 256) * 256  # registers are allocated per warp, 256 at a time
    by_regs = (regs_sm // regs_per_warp) // warps
    by_smem = smem_sm // (smem + reserved) if smem + reserved > 0 else blocks_sm
    blocks = max(0, min(by_threads, by_regs, by_smem, blocks_sm))
    return blocks, blocks * warps * 32 / threads_sm

"""What `explain` says of a chosen variant's launch: its grid, and how K is split and the splits summed — in K
order through the workspace (bitwise repeatable), by atomics under deterministic=False, on chip across a
cluster, or in stream-K's shares. On the GPU it asks launch.configure, which loads the kernel; for a GPU
that is not present it runs the launcher's model with the registers of a local compile (NVRTC needs no GPU)."""
from __future__ import annotations

from . import launch, registry
from .compile import arch_for, compile_variant
from .errors import CupyGemmError
from .registry import Variant
from .workspace import ATOMIC_MIN_SPLITS, ATOMIC_MIN_SPLITS_LARGE, ATOMIC_SMALL_TILE, atomic_sum


def _present(device):
    """The cupy Device explain was asked about, or None for a GPU only named (a dispatch.Gpu or (name, cc))."""
    if isinstance(device, tuple) or hasattr(device, "cc"):  # (name, cc), or a dispatch.Gpu (no device id)
        return None
    import cupy
    return cupy.cuda.Device(device if device is None or isinstance(device, int) else device.id)


def _configs(variant: Variant, m: int, n: int, k: int, gpu, device):
    """(config, config with deterministic=False, its variant, a note or None), on `device` when it is a
    present GPU (a cupy Device), else from the model for `gpu` (dispatch.Gpu)."""
    if device is not None:
        _, _, cfg = launch.configure(variant, device, m, n, k)
        twin, _, loose = launch.configure(variant, device, m, n, k, deterministic=False)
        return cfg, loose, twin, None
    try:
        registers, note = compile_variant(variant, arch_for(variant, gpu.cc)).resources.registers, None
    except CupyGemmError as e:  # no NVRTC here: the split model assumes a register count
        registers, note = None, f"registers unknown ({type(e).__name__}), the split model assumed 128 a thread"
    if variant.family.cluster(variant.params) > 1:
        note = "; ".join(filter(None, (note, "the GPU may run fewer clusters at once than SMs ÷ cluster size, "
                                             "which trims a persistent grid (the launcher asks the driver)")))

    def model(v: Variant):
        return launch.launch_config(v, m, n, k, gpu.sm_count, registers, memory_bytes_per_ns=gpu.memory_bytes_per_ns)
    cfg = model(variant)
    if not atomic_sum(variant, cfg, gpu.cc, deterministic=False):
        return cfg, cfg, variant, note
    twin = variant.with_extras(split_atomic=True)
    return cfg, model(twin), twin, note


def _sum(variant: Variant, cfg, loose, twin: Variant, cc: int) -> str:
    fam, p = variant.family, variant.params
    on_chip = max(p.get("KCLUSTER", 1), p.get("CS", 1))  # wgmma's split in a cluster, decode's
    if on_chip > 1:
        return (f"K split over the {on_chip} blocks of each cluster, their fp32 partials summed on chip "
                f"(distributed shared memory): repeatable, deterministic=False changes nothing")
    if cfg.splits <= 1:
        return "K whole in each block: no split to sum"
    bm, bn = fam.tile(p)
    how = (f"stream-K ({cfg.grid[0]} blocks take whole tiles, then shares of the other {cfg.split_tiles} tiles' "
           f"K, up to {cfg.splits} blocks a tile)" if fam.stream_k(p) else
           f"K split {cfg.splits} ways (cupy_gemm/split_policy.py's model)")
    text = f"{how}, fp32 partials summed in K order through a {cfg.workspace / 2**20:.2f} MiB workspace (bitwise repeatable)"
    if twin.split_atomic:
        return (text + f"; deterministic=False adds them by atomics into one slot a tile "
                       f"({loose.workspace / 2**20:.2f} MiB), not bitwise repeatable")
    if not variant.sums_atomically:
        why = "this family sums its own splits"
    elif cc < 90:
        why = "atomic sums need compute capability 9.0 (a float4 in one reduction)"
    else:
        least = ATOMIC_MIN_SPLITS if bm * bn <= ATOMIC_SMALL_TILE else ATOMIC_MIN_SPLITS_LARGE
        why = f"atomics win from {least} splits on {bm}×{bn} tiles (workspace.atomic_sum)"
    return text + f"; deterministic=False changes nothing: {why}"


def describe(variant, placement, m: int, n: int, k: int, gpu, device=None) -> list[str]:
    """explain's lines for `variant` (a name or Variant) on an m×n×k call whose operands lie as `placement`
    (arrange.Placement) says: the kernel's own problem is transposed or padded where the call's is.
    gpu: its dispatch.Gpu; device: as dispatch.explain was given it (a GPU named, not present: a Gpu or a
    (name, cc) pair)."""
    variant = registry.lookup(variant) if isinstance(variant, str) else variant
    arrangement = placement.for_variant(variant)
    if arrangement.padded:
        m, k, n = arrangement.padded
    elif arrangement.swapped:
        m, n = n, m
    cfg, loose, twin, note = _configs(variant, m, n, k, gpu, _present(device))
    bm, bn = variant.family.tile(variant.params)
    cluster = f", clusters of {cfg.cluster}" if cfg.cluster > 1 else ""
    changed = [w for w, done in (("A and B swapped", arrangement.swapped), ("zero-padded", arrangement.padded),
                                 ("C into a buffer of its own, copied back", arrangement.temp_c),
                                 ("C stored in place from registers, at its unaligned stride", arrangement.unaligned_c))
               if done]
    kernel = f"the kernel's {m}×{n}×{k} ({', '.join(changed)}), " if changed else ""
    lines = [f"launch: {kernel}grid {'×'.join(map(str, cfg.grid))} of {cfg.block[0] * cfg.block[1] * cfg.block[2]} "
             f"threads{cluster}, {cfg.smem / 1024:.0f} KB shared memory a block, {cfg.tiles} tiles of {bm}×{bn}",
             f"sum: {_sum(variant, cfg, loose, twin, gpu.cc)}"]
    return lines + ([f"note: {note}"] if note else [])

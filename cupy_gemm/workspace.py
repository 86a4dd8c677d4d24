"""The split-K workspace (templates/common/split_k.cuh): its size, one buffer per device and stream, and when
the partials are added by atomics instead of summed in order (atomic_sum)."""
from __future__ import annotations

import numpy as np


SPLIT_K_MAX_GROUPS = 8  # templates/common/split_k.cuh: each tile's counter, then its groups' counters


def split_k_counter_bytes(tiles: int) -> int:
    """The counters at the start of templates/common/split_k.cuh's workspace, padded to 256 bytes."""
    return -(-tiles * 4 * (1 + SPLIT_K_MAX_GROUPS) // 256) * 256


def split_k_workspace(tiles: int, splits: int, tile_elems: int, atomic: bool = False) -> int:
    """Bytes of templates/common/split_k.cuh's workspace: the counters, then fp32 partial tiles, a slot a
    split and tile, or with atomics (SPLIT_ATOMIC) one a tile."""
    slots = 0 if splits <= 1 else 1 if atomic else splits
    return split_k_counter_bytes(tiles) + slots * tiles * tile_elems * 4


# Partials added by atomics against the ordered sum, the default's split shapes of the llm corpus (H200, each
# precision): 2 or 3 splits gained nothing (0.94-1.01x); 4 or more of tiles of up to 64×128 ran 1.0-1.17x
# faster (0.99 at worst); 128×128 tiles lost 1-6% at 2 to 4 splits and won from 6.
ATOMIC_MIN_SPLITS, ATOMIC_SMALL_TILE, ATOMIC_MIN_SPLITS_LARGE = 4, 64 * 128, 6


def atomic_sum(variant, cfg, cc: int, deterministic: bool) -> bool:
    """Whether a launch of `variant` (launch.LaunchConfig cfg, on a GPU of compute capability cc) adds its
    split-K partials by atomics (with_extras(split_atomic=True)): the caller allows it, the variant can
    (Variant.sums_atomically), the GPU adds a float4 in one reduction (9.0 and later; older ones sum in
    order), and enough splits share each tile for atomics to win."""
    if deterministic or cc < 90 or not variant.sums_atomically:
        return False
    bm, bn = variant.family.tile(variant.params)
    return cfg.splits >= (ATOMIC_MIN_SPLITS if bm * bn <= ATOMIC_SMALL_TILE else ATOMIC_MIN_SPLITS_LARGE)


_workspaces: dict[tuple[int, int], list] = {}  # (device, stream) -> [buffer, bytes at its start known zero]


def workspace(device, nbytes: int, counter_bytes: int = 0, partials: bool = False):
    """A scratch buffer of at least nbytes for split-K kernels, one per device and stream (kernels on one
    stream run in order), whose first counter_bytes — the counters of templates/common/split_k.cuh — are
    zero when the next kernel on the stream starts. A kernel leaves its own counters at zero, but its
    partial tiles (partials=True), written right after them, fill the place where a launch with more tiles
    keeps counters: so the buffer's zero prefix is tracked here, and a launch that needs more counters
    than it holds first zeroes the difference (one memset on the stream; none when shapes repeat)."""
    import cupy
    stream = cupy.cuda.get_current_stream()
    key = (device.id, stream.ptr)
    entry = _workspaces.get(key)
    if entry is None or entry[0].nbytes < nbytes:
        size = max(nbytes, 2 * (entry[0].nbytes if entry is not None else 0), 1 << 16)
        with device:
            entry = [cupy.zeros(size, dtype=np.uint8), size]
        _workspaces[key] = entry
    buf, zero = entry
    if zero < counter_bytes:
        with device:
            cupy.cuda.runtime.memsetAsync(buf.data.ptr + zero, 0, counter_bytes - zero, stream.ptr)
        zero = counter_bytes
    entry[1] = min(zero, counter_bytes) if partials else zero
    return buf


def for_launch(device, cfg, atomic: bool) -> int | None:
    """The split-K workspace's address for a launch (launch.LaunchConfig cfg), None without splits: the workspace
    of the stream current at the launch, not at preparation (a launch reused on another stream must not share
    counters with a kernel still running on the first). With atomics the slots start zero too, and the
    kernel leaves them so."""
    if cfg.splits == 1:
        return None
    if atomic:
        return workspace(device, cfg.workspace, cfg.workspace).data.ptr
    return workspace(device, cfg.workspace, split_k_counter_bytes(cfg.split_tiles), True).data.ptr

"""The split-K workspace (templates/common/split_k.cuh): its size, and one buffer per device and stream."""
from __future__ import annotations

import numpy as np


SPLIT_K_MAX_GROUPS = 8  # templates/common/split_k.cuh: each tile's counter, then its groups' counters


def split_k_counter_bytes(tiles: int) -> int:
    """The counters at the start of templates/common/split_k.cuh's workspace, padded to 256 bytes."""
    return -(-tiles * 4 * (1 + SPLIT_K_MAX_GROUPS) // 256) * 256


def split_k_workspace(tiles: int, splits: int, tile_elems: int) -> int:
    """Bytes of templates/common/split_k.cuh's workspace: the counters, then fp32 partial tiles."""
    return split_k_counter_bytes(tiles) + (splits * tiles * tile_elems * 4 if splits > 1 else 0)


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

"""Grid, block and shared memory as pure functions of a variant and a problem; the one launcher."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .compile import Compiled, arch_for, compile_variant, image_file
from .errors import ConfigError, InputError
from .registry import Variant
from .render import KERNEL_NAME

MAX_GRID_X = 2**31 - 1
MAX_SPLITS = 32
MIN_K_PER_SPLIT = 256  # below this a split's partial tile costs more traffic than its K slice saves


@dataclass(frozen=True)
class LaunchConfig:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int  # dynamic shared memory bytes
    tiles: int  # C tiles of the problem (= grid blocks unless the family is persistent or splits K)
    splits: int = 1  # blocks sharing a C tile along K (split_k families)
    workspace: int = 0  # bytes of the split-K workspace (counters + fp32 partial tiles)


def k_splits(variant: Variant, m: int, n: int, k: int, tiles: int, sm_count: int | None) -> int:
    """How many blocks share one C tile along K: SPLIT_K when set, else enough for the family's
    `split_k_fill` blocks per SM with at least MIN_K_PER_SPLIT (or its `split_k_min_k`) of K each;
    never more splits than K blocks."""
    fam, p = variant.family, variant.params
    if not fam.split_k:
        return 1
    k_blocks = max(1, -(-k // p.get("BK", 1)))
    requested = p.get("SPLIT_K", 0)
    if requested:
        return max(1, min(requested, k_blocks))
    blocks = (sm_count or 132) * fam.split_k_fill
    if tiles >= blocks:
        return 1
    return max(1, min(blocks // tiles, k // (fam.split_k_min_k or MIN_K_PER_SPLIT), k_blocks, MAX_SPLITS))


def split_k_counter_bytes(tiles: int) -> int:
    """Bytes of the counters at the start of split_k.cuh's workspace (padded to 256 B): the fp32 partials
    begin right after, so where they begin depends on the tile count."""
    return -(-tiles * 4 // 256) * 256


def split_k_workspace(tiles: int, splits: int, tile_elems: int) -> int:
    """Bytes of templates/common/split_k.cuh's workspace: counters padded to 256 B, then fp32 partials."""
    return split_k_counter_bytes(tiles) + (splits * tiles * tile_elems * 4 if splits > 1 else 0)


def launch_config(variant: Variant, m: int, n: int, k: int, sm_count: int | None = None) -> LaunchConfig:
    fam, p = variant.family, variant.params
    if fam.max_rows is not None and m > fam.max_rows(p):
        raise InputError(f"{variant.name} serves at most {fam.max_rows(p)} rows of C; got M={m}")
    bm, bn = fam.tile(p)
    tiles = -(-m // bm) * -(-n // bn)
    if tiles > MAX_GRID_X:
        raise InputError(f"{m}×{n} needs {tiles} tiles of {bm}×{bn}, more than a grid can hold "
                         f"({MAX_GRID_X}); use a variant with a larger tile")
    splits = k_splits(variant, m, n, k, tiles, sm_count)
    grid = (tiles, splits, 1)
    if fam.persistent:
        grid = (min(tiles * splits, fam.persistent * (sm_count or 1)), 1, 1)
    workspace = split_k_workspace(tiles, splits, bm * bn) if fam.split_k else 0
    return LaunchConfig(grid=grid, block=(fam.threads(p), 1, 1), smem=fam.smem_bytes(p, variant.dtype, variant.acc),
                        tiles=tiles, splits=splits, workspace=workspace)


def compute_capability(device) -> int:
    return int(device.compute_capability)


_loaded: dict[tuple, tuple[object, Compiled]] = {}


def _identity(variant: Variant, device) -> tuple:
    return (variant.family.name, variant.name, variant.dtype, variant.acc, tuple(variant.params.items()), device.id)


def load(variant: Variant, device) -> tuple[object, Compiled]:
    """Compile (cached) for the device and load the kernel onto it. Returns (RawKernel, Compiled)."""
    import cupy

    identity = _identity(variant, device)  # checked first: rendering and hashing cost ~0.5 ms a call
    if identity in _loaded:
        return _loaded[identity]
    compiled = compile_variant(variant, arch_for(variant, compute_capability(device)))
    with device:
        kernel = cupy.RawModule(path=str(image_file(compiled))).get_function(KERNEL_NAME)
        smem = variant.family.smem_bytes(variant.params, variant.dtype, variant.acc)
        limit = device.attributes["MaxSharedMemoryPerBlockOptin"]
        if smem + compiled.resources.static_smem > limit:
            raise ConfigError("smem", smem, f"at most {limit - compiled.resources.static_smem} bytes of "
                              f"dynamic shared memory on this GPU", where=variant.name)
        if smem > 48 * 1024:  # above 48 KB a kernel must opt in
            kernel.max_dynamic_shared_size_bytes = smem
    _loaded[identity] = (kernel, compiled)
    return kernel, compiled


def pointer_args(A, B, C, m, n, k, lda, ldb, ldc, alpha, beta) -> tuple:
    return (A, B, C, np.int32(m), np.int32(n), np.int32(k), np.int64(lda), np.int64(ldb), np.int64(ldc),
            np.float32(alpha), np.float32(beta))


_workspaces: dict[tuple[int, int, int], object] = {}


def workspace(device, nbytes: int, counter_bytes: int):
    """A zero-filled scratch buffer of at least nbytes for split-K kernels, one per device, stream and size
    of the counter region: kernels on one stream run in order, and each leaves the counters it used back
    at zero. Kernels whose counter regions differ in size get different buffers, or one kernel's partials
    would land on the other's counters (partials start where the counters end)."""
    import cupy
    key = (device.id, cupy.cuda.get_current_stream().ptr, counter_bytes)
    buf = _workspaces.get(key)
    if buf is None or buf.nbytes < nbytes:
        with device:
            buf = cupy.zeros(max(nbytes, 2 * (buf.nbytes if buf is not None else 0), 1 << 16), dtype=np.uint8)
        _workspaces[key] = buf
    return buf


def prepare(variant: Variant, device, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta):
    """Everything a launch needs, for operands already in the family's layout and alignment:
    a callable that launches on CuPy's current stream."""
    kernel, _ = load(variant, device)
    cfg = launch_config(variant, m, n, k, device.attributes["MultiProcessorCount"])
    make_args = variant.family.make_args or (lambda v, *rest: pointer_args(*rest))
    args = make_args(variant, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta)
    if variant.family.split_k:
        args = (*args, np.int32(cfg.splits), workspace(device, cfg.workspace, split_k_counter_bytes(cfg.tiles)))
    return lambda: kernel(cfg.grid, cfg.block, args, shared_mem=cfg.smem)

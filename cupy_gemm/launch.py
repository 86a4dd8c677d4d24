"""Grid, block and shared memory as pure functions of a variant and a problem; the one launcher."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import toolkit
from .compile import Compiled, arch_for, compile_variant, evict, image_file
from .errors import ConfigError, InputError, ModuleLoadError
from .registry import Variant
from .render import KERNEL_NAME

MAX_GRID_X = 2**31 - 1
MAX_SPLITS = 32
MIN_K_PER_SPLIT = 256  # below this a split's partial tile costs more traffic than its K slice saves

# driver errors that blame the image, not the GPU or the context: the image is evicted and compiled afresh
IMAGE_ERRORS = {
    200: "CUDA_ERROR_INVALID_IMAGE", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 218: "CUDA_ERROR_INVALID_PTX",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 300: "CUDA_ERROR_INVALID_SOURCE", 301: "CUDA_ERROR_FILE_NOT_FOUND",
    500: "CUDA_ERROR_NOT_FOUND",
}


@dataclass(frozen=True)
class LaunchConfig:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int  # dynamic shared memory bytes
    tiles: int  # C tiles of the problem (= grid blocks unless the family is persistent or splits K)
    splits: int = 1  # blocks sharing a C tile along K (split_k families)
    workspace: int = 0  # bytes of the split-K workspace (counters + fp32 partial tiles)


def k_splits(variant: Variant, m: int, n: int, k: int, tiles: int, sm_count: int | None) -> int:
    """How many blocks share one C tile along K: SPLIT_K when set, else enough to fill the SMs with
    at least MIN_K_PER_SPLIT of K each; never more splits than K blocks."""
    fam, p = variant.family, variant.params
    if not fam.split_k:
        return 1
    k_blocks = max(1, -(-k // p.get("BK", 1)))
    requested = p.get("SPLIT_K", 0)
    if requested:
        return max(1, min(requested, k_blocks))
    sm_count = sm_count or 132
    if tiles >= sm_count:
        return 1
    return max(1, min(sm_count // tiles, k // MIN_K_PER_SPLIT, k_blocks, MAX_SPLITS))


def split_k_workspace(tiles: int, splits: int, tile_elems: int) -> int:
    """Bytes of templates/common/split_k.cuh's workspace: counters padded to 256 B, then fp32 partials."""
    return -(-tiles * 4 // 256) * 256 + (splits * tiles * tile_elems * 4 if splits > 1 else 0)


def launch_config(variant: Variant, m: int, n: int, k: int, sm_count: int | None = None) -> LaunchConfig:
    fam, p = variant.family, variant.params
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
    identity = _identity(variant, device)  # checked first: rendering and hashing cost ~0.5 ms a call
    if identity in _loaded:
        return _loaded[identity]
    with device:
        kernel, compiled = _load_module(variant, arch_for(variant, compute_capability(device)))
        smem = variant.family.smem_bytes(variant.params, variant.dtype, variant.acc)
        limit = device.attributes["MaxSharedMemoryPerBlockOptin"]
        if smem + compiled.resources.static_smem > limit:
            raise ConfigError("smem", smem, f"at most {limit - compiled.resources.static_smem} bytes of "
                              f"dynamic shared memory on this GPU", where=variant.name)
        if smem > 48 * 1024:  # above 48 KB a kernel must opt in
            kernel.max_dynamic_shared_size_bytes = smem
    _loaded[identity] = (kernel, compiled)
    return kernel, compiled


def _load_module(variant: Variant, arch: str) -> tuple[object, Compiled]:
    """Load the image onto the current device. An image the driver refuses (damaged after it was verified,
    or written by another toolchain) is evicted from both caches and compiled once more before anything
    reaches the caller; a second refusal is a ModuleLoadError, and that image stays for inspection."""
    import cupy

    refused = []
    for attempt in range(2):
        compiled = compile_variant(variant, arch)
        path = image_file(compiled)
        try:
            return cupy.RawModule(path=str(path)).get_function(KERNEL_NAME), compiled
        except cupy.cuda.driver.CUDADriverError as e:
            if e.status not in IMAGE_ERRORS:
                raise
            refused.append(e)
            if attempt == 0:
                evict(compiled)
    nvrtc = ".".join(map(str, toolkit.nvrtc_version()))
    driver = cupy.cuda.runtime.driverGetVersion()
    raise ModuleLoadError(
        f"the CUDA driver refused variant {variant.name!r} compiled for {arch}: {refused[0]}; and again after "
        f"it was evicted and compiled afresh: {refused[1]}. The image is {path} (kept for inspection). This "
        f"driver supports CUDA {driver // 1000}.{driver % 1000 // 10} and NVRTC is {nvrtc}: a driver older "
        f"than NVRTC refuses its output, so update the driver or install the NVRTC of its CUDA version; "
        f"`cupy-gemm cache clear` empties the kernel cache") from refused[1]


def pointer_args(A, B, C, m, n, k, lda, ldb, ldc, alpha, beta) -> tuple:
    return (A, B, C, np.int32(m), np.int32(n), np.int32(k), np.int64(lda), np.int64(ldb), np.int64(ldc),
            np.float32(alpha), np.float32(beta))


_workspaces: dict[tuple[int, int], object] = {}


def workspace(device, nbytes: int):
    """A zero-filled scratch buffer of at least nbytes for split-K kernels, one per device and stream:
    kernels on one stream run in order, and each leaves the counters it used back at zero."""
    import cupy
    key = (device.id, cupy.cuda.get_current_stream().ptr)
    buf = _workspaces.get(key)
    if buf is None or buf.nbytes < nbytes:
        with device:
            buf = cupy.zeros(max(nbytes, 2 * (buf.nbytes if buf is not None else 0), 1 << 16), dtype=np.uint8)
        _workspaces[key] = buf
    return buf


POINTER_SLOTS = 3  # A, B and C lead a "pointers" ABI argument tuple; the rest depends on shapes only


@dataclass(frozen=True)
class Launch:
    """A kernel, its launch configuration and its argument tuple: calling it launches on the current stream."""
    kernel: object
    config: LaunchConfig
    args: tuple
    variant: Variant
    geometry: tuple  # (m, n, k, lda, ldb, ldc, alpha, beta) the arguments were made for

    def __call__(self):
        self.kernel(self.config.grid, self.config.block, self.args, shared_mem=self.config.smem)

    def rebind(self, A, B, C) -> tuple:
        """The argument tuple for other operands with the same geometry (shapes, leading dimensions and
        alignment): the pointer ABI swaps its first three slots, other ABIs make their arguments anew."""
        make_args = self.variant.family.make_args
        if make_args is None:
            return (A, B, C) + self.args[POINTER_SLOTS:]
        head = launchable(make_args(self.variant, A, B, C, *self.geometry))
        return head + self.args[len(head):]  # the split-K tail (splits, workspace) stays


def launchable(args: tuple) -> tuple:
    """The arguments in the form CuPy's launcher turns them into, so that a prepared launch kept for later
    calls holds no arrays and costs no conversions:
    - a CuPy array becomes its address: a kept argument tuple must not keep the caller's arrays (and so
      their memory) alive, and calls that reuse it pass arrays at the same addresses;
    - NumPy scalars and by-value arrays (tensor maps) become CuPy's converted forms, which its launcher
      passes through instead of converting every launch (about a microsecond apiece).
    Where this CuPy lacks those forms, addresses become NumPy integers and the rest stays as it is."""
    import cupy
    converters = _converters()
    if converters is None:
        return tuple(np.uintp(x.data.ptr) if isinstance(x, cupy.ndarray) else x for x in args)
    scalar, by_value, address = converters
    return tuple(address(x.data.ptr) if isinstance(x, cupy.ndarray) else scalar(x) if isinstance(x, np.generic)
                 else by_value(x) if isinstance(x, np.ndarray) else x for x in args)


@lru_cache(maxsize=1)
def _converters():
    try:
        from cupy._core._scalar import CScalar
        from cupy.cuda.function import CIntptr, CNumpyArray
    except ImportError:
        return None
    return CScalar, CNumpyArray, CIntptr


_sm_counts: dict[int, int] = {}


def sm_count(device) -> int:
    """The device's SM count, queried once (device.attributes reads every attribute: ~tens of µs)."""
    if device.id not in _sm_counts:
        _sm_counts[device.id] = device.attributes["MultiProcessorCount"]
    return _sm_counts[device.id]


def prepare(variant: Variant, device, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta) -> Launch:
    """Everything a launch needs, for operands already in the family's layout and alignment: a Launch,
    which launches on CuPy's current stream when called."""
    kernel, _ = load(variant, device)
    kernel = getattr(kernel, "kernel", kernel)  # a RawKernel's CUfunction for this device: one layer less per call
    cfg = launch_config(variant, m, n, k, sm_count(device))
    make_args = variant.family.make_args or (lambda v, *rest: pointer_args(*rest))
    args = launchable(make_args(variant, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta))
    if variant.family.split_k:  # the workspace stays an array: the launch keeps it alive
        args = (*args, *launchable((np.int32(cfg.splits),)), workspace(device, cfg.workspace))
    return Launch(kernel, cfg, args, variant, (m, n, k, lda, ldb, ldc, alpha, beta))


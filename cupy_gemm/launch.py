"""Grid, block and shared memory as pure functions of a variant and a problem; the one launcher."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import config, devices, driver, toolkit
from .compile import Compiled, arch_for, compile_source, compile_variant, evict, image_file
from .errors import ConfigError, InputError, ModuleLoadError
from .registry import Variant
from .split_policy import (MAX_SPLITS, MIN_K_PER_SPLIT, k_splits, resident_blocks,  # noqa: F401  (launch.*)
                           stream_k_partition)
from .render import KERNEL_NAME
from .workspace import atomic_sum, for_launch, split_k_counter_bytes, split_k_workspace, workspace  # noqa: F401

MAX_GRID_X = 2**31 - 1
MAX_GRID_Z = 65535  # a larger batch loops over blockIdx.z
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
    batch: int = 1  # members of a batched launch (tiles counts every member's)
    cluster: int = 1  # blocks per thread-block cluster (Family.cluster)
    split_tiles: int = 0  # tiles the workspace keeps a counter and partials for: every tile, or with
    # stream-K the tiles its blocks share (those after the tiles taken whole)


def launch_config(variant: Variant, m: int, n: int, k: int, sm_count: int | None = None,
                  registers: int | None = None, batch: int = 1, clusters: int | None = None,
                  memory_bytes_per_ns: float | None = None) -> LaunchConfig:
    """registers: per thread, from the compiled kernel, for the split-K policy's occupancy and a stream-K grid of
    blocks that are not persistent (else assumed).
    batch: members of a batched launch (a variant rendered with batched=True); their tiles fill the GPU
    together, and the split-K workspace holds a counter and partials for every member's tiles.
    clusters: of a family with clusters, how many the GPU runs at once (driver.max_active_clusters; else
    sm_count // cluster): a persistent grid holds no more, or the surplus would wait for a second wave.
    memory_bytes_per_ns: the device memory's bandwidth, for the split-K model (None: an H100's assumed)."""
    fam, p = variant.family, variant.params
    if m > (variant.max_rows() or m):
        raise InputError(f"{variant.name} serves at most {variant.max_rows()} rows of C; got M={m}")
    if batch != 1 and not variant.batched:
        raise InputError(f"a batch of {batch} needs the variant rendered for batches (with_extras(batched=True))")
    bm, bn = fam.tile(p)
    member_tiles = -(-m // bm) * -(-n // bn)
    tiles = member_tiles * batch
    if member_tiles > MAX_GRID_X or (fam.persistent and tiles > MAX_GRID_X):
        raise InputError(f"{m}×{n}{f' × {batch} members' if batch > 1 else ''} needs {tiles} tiles of "
                         f"{bm}×{bn}, more than a grid can hold ({MAX_GRID_X}); use a variant with a larger tile")
    cluster, split_tiles, stream_k_mode = fam.cluster(p), tiles, fam.stream_k(p)
    if stream_k_mode:  # the grid, the splits and the shared tiles of one partition
        blocks, splits, split_tiles = stream_k_partition(variant, k, tiles, sm_count, registers)
    else:
        splits = k_splits(variant, m, n, k, tiles, sm_count, registers, memory_bytes_per_ns)
    grid = (member_tiles, splits, min(batch, MAX_GRID_Z))
    if fam.persistent and cluster > 1:  # a cluster's blocks take one cluster tile
        cluster_tiles = -(-m // fam.cluster_rows(p)) * -(-n // bn) * batch
        slots = clusters if clusters is not None else max(1, (sm_count or cluster) // cluster)
        grid = (min(cluster_tiles * splits, fam.persistent * slots) * cluster, 1, 1)
        if splits > 1:  # split-K (CLUSTER, not KCLUSTER): each block's part of a cluster tile is a workspace tile
            split_tiles = cluster_tiles * cluster
    elif stream_k_mode:
        grid = (blocks, 1, 1)
    elif fam.persistent:
        grid = (min(tiles * splits, fam.persistent * (sm_count or 1)), 1, 1)
    elif cluster > 1:  # clusters run along x: a whole number of them (the kernel masks the columns past N)
        grid = (-(-member_tiles // cluster) * cluster, *grid[1:])
    workspace = (split_k_workspace(split_tiles, splits, bm * bn, variant.split_atomic)
                 if fam.takes_split_k_args(p) else 0)
    return LaunchConfig(grid=grid, block=(fam.threads(p), 1, 1), smem=fam.smem_bytes(p, variant.dtype, variant.acc),
                        tiles=tiles, splits=splits, workspace=workspace, batch=batch, cluster=cluster,
                        split_tiles=split_tiles)


def compute_capability(device) -> int:
    return int(device.compute_capability)


_loaded: dict[tuple, tuple[object, Compiled]] = {}


def _identity(variant: Variant, device) -> tuple:
    return (variant.family.name, variant.name, variant.dtype, variant.acc, tuple(variant.params.items()),
            *variant.extras.values(), device.id)


def load(variant: Variant, device) -> tuple[object, Compiled]:
    """Compile (cached) for the device and load the kernel onto it. Returns (its CuPy Function, Compiled)."""
    identity = _identity(variant, device)  # checked first: rendering and hashing cost ~0.5 ms a call
    if identity in _loaded:
        return _loaded[identity]
    with device:
        arch = arch_for(variant, compute_capability(device))
        kernel, compiled = _load_module(lambda: compile_variant(variant, arch), KERNEL_NAME)
        smem = variant.family.smem_bytes(variant.params, variant.dtype, variant.acc)
        limit = device.attributes["MaxSharedMemoryPerBlockOptin"]
        if smem + compiled.resources.static_smem > limit:
            raise ConfigError("smem", smem, f"at most {limit - compiled.resources.static_smem} bytes of "
                              f"dynamic shared memory on this GPU", where=variant.name)
        if smem > 48 * 1024:  # above 48 KB a kernel must opt in
            kernel.max_dynamic_shared_size_bytes = smem
        kernel = kernel.kernel  # the RawKernel's CUfunction on this device: what every launch reads
    _loaded[identity] = (kernel, compiled)
    return kernel, compiled


_helpers: dict[tuple, object] = {}


def load_helper(name: str, source: str, kernel_name: str, device):
    """A kernel that is no catalogue variant (the fused epilogue alone, for K = 0), compiled through the
    same caches as the variants and loaded once per source and device."""
    identity = (source, device.id)
    if identity not in _helpers:
        with device:
            arch = f"sm_{compute_capability(device)}"
            _helpers[identity] = _load_module(lambda: compile_source(name, source, arch), kernel_name)[0]
    return _helpers[identity]


def _load_module(compile_it, kernel_name: str) -> tuple[object, Compiled]:
    """Load the image compile_it() returns onto the current device. An image the driver refuses (damaged
    after it was verified, or written by another toolchain) is evicted from both caches and compiled once
    more before anything reaches the caller; a second refusal is a ModuleLoadError, and that image stays
    for inspection."""
    import cupy

    refused = []
    for attempt in range(2):
        compiled = compile_it()
        path = image_file(compiled)
        try:
            return cupy.RawModule(path=str(path)).get_function(kernel_name), compiled
        except cupy.cuda.driver.CUDADriverError as e:
            if e.status not in IMAGE_ERRORS:
                raise
            refused.append(e)
            if attempt == 0:
                evict(compiled)
    nvrtc = ".".join(map(str, toolkit.nvrtc_version()))
    driver = cupy.cuda.runtime.driverGetVersion()
    raise ModuleLoadError(
        f"the CUDA driver refused {compiled.variant!r} compiled for {compiled.arch}: {refused[0]}; and again after "
        f"it was evicted and compiled afresh: {refused[1]}. The image is {path} (kept for inspection). This "
        f"driver supports CUDA {driver // 1000}.{driver % 1000 // 10} and NVRTC is {nvrtc}: a driver older "
        f"than NVRTC refuses its output, so update the driver or install the NVRTC of its CUDA version; "
        f"`cupy-gemm cache clear` empties the kernel cache") from refused[1]


def pointer_args(A, B, C, m, n, k, lda, ldb, ldc, alpha, beta) -> tuple:
    return (A, B, C, np.int32(m), np.int32(n), np.int32(k), np.int64(lda), np.int64(ldb), np.int64(ldc),
            np.float32(alpha), np.float32(beta))


POINTER_SLOTS = 3  # A, B and C lead a "pointers" ABI argument tuple; the rest depends on shapes only


@dataclass(frozen=True)
class Launch:
    """A kernel, its launch configuration and its argument tuple: calling it launches on the current stream.
    The tuple ends with the split-K arguments where the family takes them: `splits`, then the workspace,
    whose slot each launch fills with the current stream's."""
    kernel: object
    config: LaunchConfig
    args: tuple
    variant: Variant
    device: object
    geometry: tuple  # (m, n, k, lda, ldb, ldc, alpha, beta) the arguments were made for
    batch: object = None  # the batching.BatchPlan of a batched launch (TMA families' maps address it)
    pdl: bool = False  # launched with programmatic dependent launch (uses_pdl)

    def __call__(self):
        self.launch(self.args)

    def pack(self, args: tuple) -> driver.Packed:
        """args packed once, for a cache of argument tuples that later launches reuse."""
        return driver.Packed(args)

    def launch(self, args) -> None:
        """Launch with these arguments: self.args or rebind's for other operands, or either packed."""
        packed = args if type(args) is driver.Packed else driver.Packed(args)
        self._kernel(current_stream(), packed.with_pointers(last=self._workspace()))

    def launch_pointers(self, A, B, C) -> None:
        """The pointer ABI's launch for other operands of the same geometry: only A, B and C change."""
        self._kernel(current_stream(), self._packed.with_pointers((A.data.ptr, B.data.ptr, C.data.ptr), self._workspace()))

    def _workspace(self) -> int | None:
        """The split-K workspace's address for this launch (workspace.for_launch), None without splits."""
        return for_launch(self.device, self.config, self.variant.split_atomic)

    @cached_property
    def _kernel(self) -> driver.Kernel:
        cfg = self.config
        return driver.Kernel(self.kernel.ptr, cfg.grid, cfg.block, cfg.smem, self.pdl, cfg.cluster)

    @cached_property
    def _packed(self) -> driver.Packed:
        return driver.Packed(self.args)

    def rebind(self, A, B, C) -> tuple:
        """The argument tuple for other operands with the same geometry (shapes, leading dimensions and
        alignment): the pointer ABI swaps its first three slots, other ABIs make their arguments anew."""
        make_args = self.variant.family.make_args
        if make_args is None:
            return (A, B, C) + self.args[POINTER_SLOTS:]
        head = launchable(make_args(self.variant, A, B, C, *self.geometry, **_batch_kw(self.batch)))
        return head + self.args[len(head):]  # BatchArgs, EpilogueParams and the split-K tail stay

    def with_epilogue(self, params, args=None) -> tuple:
        """args (self.args when None; a tuple or packed) with another EpilogueParams: the epilogue's
        operands at other addresses."""
        args = self.args if args is None else args.values if type(args) is driver.Packed else args
        at = self.args_epilogue
        return args[:at] + launchable((params,)) + args[at + 1:]

    @property
    def args_epilogue(self) -> int:
        """The index of the EpilogueParams argument."""
        split_tail = 2 if self.variant.family.takes_split_k_args(self.variant.params) else 0
        return len(self.args) - split_tail - 1


def launchable(args: tuple) -> tuple:
    """The arguments in the form the launcher passes on unconverted (driver.c_argument's ctypes values), so
    that a prepared launch kept for later calls holds no arrays and costs no conversions: a CuPy array
    becomes its address (a kept tuple must not keep the caller's arrays, and so their memory, alive; calls
    that reuse it pass arrays at the same addresses), NumPy scalars and by-value arrays (tensor maps) their
    bytes."""
    return tuple(driver.c_argument(x) for x in args)


def split_k_args(variant: Variant, cfg: LaunchConfig) -> tuple:
    """The arguments a split-K kernel takes last, none for others: `splits`, then the workspace's slot, which
    each launch fills with its stream's (Launch._workspace; one split never touches it)."""
    if not variant.family.takes_split_k_args(variant.params):
        return ()
    return launchable((np.int32(cfg.splits), np.uintp(0)))


def uses_pdl(variant: Variant, device) -> bool:
    """Whether the variant's launches may start before the previous kernel on the stream ends
    (driver.py): its template waits for that kernel in pdl_wait(), the GPU is sm_90 or later and
    CUPY_GEMM_PDL is not 0."""
    return variant.family.pdl and compute_capability(device) >= 90 and config.programmatic_launch()


def launch_kernel(kernel, grid, block, smem: int, args: tuple, pdl: bool, cluster: int = 1) -> None:
    """Launch a loaded kernel (a CuPy Function) once on CuPy's current stream; repeated launches keep a
    Launch, which packs its arguments and launch configuration once."""
    driver.Kernel(kernel.ptr, grid, block, smem, pdl, cluster)(current_stream(), driver.Packed(args).addresses)


_cupy = None


def current_stream() -> int:
    """The handle of CuPy's current stream (imported once: this runs on every launch)."""
    global _cupy
    if _cupy is None:
        import cupy
        _cupy = cupy
    return _cupy.cuda.get_current_stream().ptr


_sm_counts: dict[int, int] = {}
_cluster_slots: dict[int, int] = {}


def sm_count(device) -> int:
    """The device's SM count, queried once (device.attributes reads every attribute: ~tens of µs)."""
    if device.id not in _sm_counts:
        _sm_counts[device.id] = device.attributes["MultiProcessorCount"]
    return _sm_counts[device.id]


def cluster_slots(variant: Variant, kernel, device) -> int | None:
    """How many clusters of a clustered variant's kernel run at once on the device (None without clusters),
    asked of the driver once per variant and device."""
    fam, p = variant.family, variant.params
    if fam.cluster(p) == 1:
        return None
    if kernel.ptr not in _cluster_slots:  # a loaded kernel's handle is its variant's on one device
        slots = driver.max_active_clusters(kernel.ptr, (fam.threads(p), 1, 1),
                                           fam.smem_bytes(p, variant.dtype, variant.acc), fam.cluster(p))
        if slots < 1:
            raise ConfigError("CLUSTER", fam.cluster(p), "a size this GPU can run: no cluster of this kernel's "
                              "blocks fits on one of its GPCs", where=variant.name)
        _cluster_slots[kernel.ptr] = slots
    return _cluster_slots[kernel.ptr]


def _batch_kw(batch) -> dict:
    return {} if batch is None else {"batch": batch}


def configure(variant: Variant, device, m: int, n: int, k: int, count: int = 1,
              deterministic: bool = True) -> tuple[Variant, object, LaunchConfig]:
    """(variant, its loaded kernel, launch configuration) for an m×n×k product (of `count` members); with
    deterministic=False the variant's twin that adds its split-K partials by atomics, where they win."""
    for _ in range(2):
        kernel, compiled = load(variant, device)
        cfg = launch_config(variant, m, n, k, sm_count(device), compiled.resources.registers, count,
                            cluster_slots(variant, kernel, device), devices.memory_bytes_per_ns(device.id))
        if variant.split_atomic or not atomic_sum(variant, cfg, compute_capability(device), deterministic):
            break
        variant = variant.with_extras(**{**variant.extras, "split_atomic": True})
    return variant, kernel, cfg


def prepare(variant: Variant, device, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta, *, batch=None,
            swapped: bool = False, epilogue_params=None, deterministic: bool = True) -> Launch:
    """Everything a launch needs, for operands already in the family's layout and alignment: a Launch,
    which launches on CuPy's current stream when called. batch: the batching.BatchPlan of a batched
    variant in the caller's orientation (A, B and C are then member 0's; swapped: the kernel computes
    Cᵀ = Bᵀ·Aᵀ, and make_args, BatchArgs and Launch.batch get the plan transposed); epilogue_params:
    the packed EpilogueParams of a variant with an epilogue; deterministic: as configure takes it."""
    if variant.batched != (batch is not None) or (variant.epilogue is None) != (epilogue_params is None):
        raise InputError(f"{variant.name}: a batched variant needs a batch plan and one with an epilogue its "
                         f"parameters (and neither without)")
    c_dtype = getattr(getattr(C, "dtype", None), "name", None)
    if c_dtype is not None and c_dtype != (variant.out_dtype or variant.dtype):
        raise InputError(f"{variant.name}: C is {c_dtype} but the kernel stores {variant.out_dtype or variant.dtype} "
                         f"(render it with_extras(out_dtype={c_dtype!r}) where the family converts)")
    if batch is not None and swapped:
        batch = batch.transposed()  # the kernel's view: make_args, BatchArgs and rebind all take it so
    variant, kernel, cfg = configure(variant, device, m, n, k, 1 if batch is None else batch.count, deterministic)
    make_args = variant.family.make_args or (lambda v, *rest, **kw: pointer_args(*rest))
    args = launchable(make_args(variant, A, B, C, m, n, k, lda, ldb, ldc, alpha, beta, **_batch_kw(batch)))
    if batch is not None:
        args = (*args, *launchable((batch.kernel_args(),)))
    if epilogue_params is not None:
        args = (*args, *launchable((epilogue_params,)))
    args = (*args, *split_k_args(variant, cfg))
    return Launch(kernel, cfg, args, variant, device, (m, n, k, lda, ldb, ldc, alpha, beta), batch,
                  uses_pdl(variant, device))


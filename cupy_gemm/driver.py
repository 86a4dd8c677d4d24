"""The CUDA driver calls CuPy does not wrap, through ctypes: cuTensorMapEncodeTiled (tma.py) and
cuLaunchKernelEx, the launch that takes attributes (here: programmatic dependent launch and clusters).

Programmatic dependent launch lets a kernel start while the kernel before it on the stream still runs,
once that one allows it (pdl_allow_next(), which kernels that hold an SM alone call first): its blocks
become resident on the SMs left free and get through their prologue (shared memory, barriers), then wait
in pdl_wait() (templates/common/prelude.cuh) until that kernel has finished and its writes are visible.
Back-to-back products then lose no launch gap between them — about a microsecond, a tenth of a
decode-sized product. Only families whose templates call pdl_wait() before touching global memory
(Family.pdl) get the attribute, and only on sm_90 and later.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .errors import DeviceError

_library = None


def library():
    """libcuda, loaded once."""
    global _library
    if _library is None:
        try:
            _library = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise DeviceError(f"the CUDA driver (libcuda.so.1) could not be loaded ({e}); cupy-gemm calls it for "
                              f"tensor maps and kernel launches") from None
        _library.cuGetErrorString.restype = ctypes.c_int
        _library.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return _library


def error_string(code: int) -> str:
    text = ctypes.c_char_p()
    library().cuGetErrorString(code, ctypes.byref(text))
    return text.value.decode() if text.value else f"error {code}"


# ---- cuLaunchKernelEx ----------------------------------------------------------------------------------
_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


class _Attribute(ctypes.Structure):
    """CUlaunchAttribute: the id, padding to 8 bytes, then a 64-byte union of values (a flag, or the
    cluster's x, y, z)."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_uint * 16)]


class _Config(ctypes.Structure):
    """CUlaunchConfig."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attribute)), ("count", ctypes.c_uint)]


_launch = None


def _config(grid, block, smem: int, stream: int, pdl: bool, cluster: int) -> ctypes.Structure:
    """The CUlaunchConfig of a launch with programmatic stream serialization when `pdl` and clusters of
    `cluster` blocks along x when cluster > 1; it holds its attribute array."""
    attributes = []
    if pdl:
        attributes.append(_Attribute(_PROGRAMMATIC_STREAM_SERIALIZATION, 0, (ctypes.c_uint * 16)(1)))
    if cluster > 1:
        attributes.append(_Attribute(_CLUSTER_DIMENSION, 0, (ctypes.c_uint * 16)(cluster, 1, 1)))
    array = (_Attribute * max(1, len(attributes)))(*attributes)
    config = _Config(grid, block, smem, stream, ctypes.cast(array, ctypes.POINTER(_Attribute)), len(attributes))
    config.held = array
    return config


def max_active_clusters(function: int, block, smem: int, cluster: int) -> int:
    """How many clusters of `cluster` blocks of this kernel the GPU runs at once (cuOccupancyMaxActiveClusters):
    a cluster's blocks share one GPC, so this can be fewer than SMs / cluster."""
    count = ctypes.c_int()
    config = _config((cluster, 1, 1), block, smem, 0, False, cluster)
    result = library().cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(function), ctypes.byref(config))
    if result != 0:
        import cupy
        raise cupy.cuda.driver.CUDADriverError(result)
    return count.value


_ndarray = None
_CTYPES = (ctypes._SimpleCData, ctypes.Array)


def c_argument(x):
    """One kernel argument as the ctypes value whose bytes the driver copies: a CuPy array's address, a
    NumPy scalar of its own width, a NumPy array passed by value (a tensor map, a struct) as its bytes."""
    global _ndarray
    if _ndarray is None:
        import cupy
        _ndarray = cupy.ndarray
    if isinstance(x, _ndarray):
        return ctypes.c_void_p(x.data.ptr)
    if isinstance(x, _CTYPES):
        return x
    if isinstance(x, np.ndarray):
        return (ctypes.c_byte * x.nbytes).from_buffer_copy(np.ascontiguousarray(x))
    for kind, c_type in ((np.int32, ctypes.c_int32), (np.int64, ctypes.c_int64), (np.float32, ctypes.c_float),
                         (np.uint64, ctypes.c_uint64), (np.uint32, ctypes.c_uint32)):
        if isinstance(x, kind):
            return c_type(x.item())
    raise TypeError(f"a kernel argument must be a CuPy array, a NumPy scalar or array, or a ctypes value; "
                    f"got {type(x).__name__}")


class Packed:
    """A kernel's arguments as cuLaunchKernelEx reads them: their ctypes values and the array of their
    addresses (which holds the values, so the array alone is enough to launch). Packing costs
    microseconds; a launch of packed arguments converts nothing."""
    __slots__ = ("values", "addresses")

    def __init__(self, args):
        self.values = tuple(x if isinstance(x, _CTYPES) else c_argument(x) for x in args)
        self.addresses = (ctypes.c_void_p * len(self.values))(*map(ctypes.addressof, self.values))
        self.addresses.values = self.values

    def with_pointers(self, leading=(), last=None):
        """The address array with the first len(leading) arguments and, when `last` is given, the last one
        replaced by these device pointers (a copy holding them)."""
        if not leading and last is None:
            return self.addresses
        addresses = type(self.addresses).from_buffer_copy(self.addresses)
        held = [ctypes.c_void_p(p) for p in leading]
        for i, value in enumerate(held):
            addresses[i] = ctypes.addressof(value)
        if last is not None:
            held.append(ctypes.c_void_p(last))
            addresses[len(addresses) - 1] = ctypes.addressof(held[-1])
        addresses.values = self.values, held
        return addresses


class Kernel:
    """A CUfunction with its grid, block, dynamic shared memory and cluster size, launched by
    cuLaunchKernelEx; one launch configuration kept per stream."""
    __slots__ = ("function", "shape", "pdl", "cluster", "configs")

    def __init__(self, function: int, grid, block, smem: int, pdl: bool, cluster: int = 1):
        self.function = ctypes.c_void_p(function)
        self.shape, self.pdl, self.cluster, self.configs = (tuple(grid), tuple(block), smem), pdl, cluster, {}

    def __call__(self, stream: int, addresses) -> None:
        """Launch on `stream` with a Packed's address array (or with_pointers' copy); with programmatic
        stream serialization when pdl (the kernel must call pdl_wait())."""
        config = self.configs.get(stream)
        if config is None:
            config = self.configs[stream] = ctypes.pointer(_config(*self.shape, stream, self.pdl, self.cluster))
        result = (_launch or _launch_function())(config, self.function, addresses, None)
        if result != 0:
            import cupy
            raise cupy.cuda.driver.CUDADriverError(result)


def _launch_function():
    global _launch
    fn = library().cuLaunchKernelEx
    fn.restype = ctypes.c_int
    # no argtypes: Kernel passes only ctypes values (a pointer, a c_void_p, an array, None), which go through
    # as they are, without a conversion per argument and call
    _launch = fn
    return fn

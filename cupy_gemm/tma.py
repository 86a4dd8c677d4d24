"""Host side of the tensor-memory accelerator: CUtensorMap descriptors for Hopper kernels.

CuPy does not wrap cuTensorMapEncodeTiled, so this module calls it through ctypes on the CUDA driver
(libcuda.so.1, already loaded by CuPy on a GPU machine). A tensor map is 128 opaque bytes that a kernel
takes by value (`const __grid_constant__ CUtensorMap`); CuPy passes a NumPy array of size one by value,
so a map is returned as such an array, its bytes 64-byte aligned as the driver's CUtensorMap type is.
Encoding costs a driver call, so maps are cached per (address, dtype, dimensions, strides, box).
A batched operand's map has the batch dimensions after the matrix's (`batched_layout`).
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict

import numpy as np

from . import driver
from .errors import DeviceError, InputError

TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64
MAP_DTYPE = np.dtype((np.void, TENSOR_MAP_BYTES))

# CUtensorMapDataType, and element sizes, by dtype name ("uint8" carries fp8 bytes). "tfloat32": fp32 in memory, rounded to tf32 by the
# copy engine on its way to shared memory (to nearest, ties to even, measured on an H200: as cuBLAS's TF32)
_DATA_TYPES = {"uint8": (0, 1), "float16": (6, 2), "bfloat16": (9, 2), "float32": (7, 4), "tfloat32": (11, 4)}
_SWIZZLE_MODES = {0: 0, 32: 1, 64: 2, 128: 3}  # CUtensorMapSwizzle by bytes
_INTERLEAVE_NONE = 0
_L2_PROMOTION_256B = 3  # fetch whole 256-byte L2 lines: tiles are read row by row
_OOB_FILL_ZEROS = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside the tensor read as zeros
_CACHE_ENTRIES = 512

_lock = threading.Lock()
_cache: OrderedDict = OrderedDict()
_encode = None


def _encode_function():
    global _encode
    if _encode is None:
        fn = driver.library().cuTensorMapEncodeTiled
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                       ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _encode = fn
    return _encode


def empty_map() -> np.ndarray:
    """A (1,)-shaped array of one 128-byte void element of zero bytes, starting on a 64-byte boundary: what
    tensor_map_2d fills in, and as it is, a map argument the kernel never reads (where its operand lies as
    no map can describe)."""
    raw = np.zeros(TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN, dtype=np.uint8)
    skip = -raw.ctypes.data % TENSOR_MAP_ALIGN
    return raw[skip: skip + TENSOR_MAP_BYTES].view(MAP_DTYPE)


def check_2d(ptr: int, dtype: str, rows: int, cols: int, ld: int, box_rows: int, box_cols: int,
             swizzle: int = 128) -> None:
    """The copy engine's rules for a row-major matrix, as InputError (or ValueError for a bad box)."""
    if dtype not in _DATA_TYPES:
        raise InputError(f"tensor maps take {sorted(_DATA_TYPES)}, not {dtype}")
    size = _DATA_TYPES[dtype][1]
    if rows < 1 or cols < 1 or rows >= 2**32 or cols >= 2**32:
        raise InputError(f"a tensor map needs 1 <= rows, cols < 2**32; got {rows}×{cols}")
    if ptr % 16:
        raise InputError(f"TMA needs a 16-byte aligned base address; got {ptr:#x}")
    if ld < cols or (ld * size) % 16 or ld * size >= 2**40:
        raise InputError(f"TMA needs a leading dimension >= cols whose byte stride is a multiple of 16 "
                         f"(below 2**40); got ld={ld} for {cols} {dtype} columns")
    if swizzle not in _SWIZZLE_MODES:
        raise ValueError(f"swizzle must be one of {sorted(_SWIZZLE_MODES)} bytes; got {swizzle}")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256) or (box_cols * size) % 16:
        raise ValueError(f"a TMA box is at most 256×256 with rows of a multiple of 16 bytes; "
                         f"got {box_rows}×{box_cols} {dtype}")
    if swizzle and box_cols * size > swizzle:
        raise ValueError(f"with a {swizzle}-byte swizzle a box row holds at most {swizzle} bytes; "
                         f"got {box_cols} {dtype} elements")


def b_extent(b_layout: str | None, k: int, n: int, box_k: int, box_n: int) -> tuple[int, int, int]:
    """(rows, cols, box_rows) of B's 2-D map: K×N with boxes of box_k rows, or for a column-major B
    (b_layout "col": x @ W.T, W stored N×K) over Bᵀ, N rows of K contiguous elements, boxes of box_n rows."""
    return (n, k, box_n) if b_layout == "col" else (k, n, box_k)


def tensor_map_2d(ptr: int, dtype: str, *, rows: int, cols: int, ld: int, box_rows: int, box_cols: int,
                  swizzle: int = 128) -> np.ndarray:
    """The tensor map of a row-major rows×cols matrix at device address `ptr` with leading dimension `ld`
    (elements), copied in boxes of box_rows×box_cols elements with a `swizzle`-byte shared-memory swizzle.
    Elements outside the matrix read as zeros. Returns a cached (1,)-shaped array to pass to a kernel."""
    size = _DATA_TYPES.get(dtype, (0, 0))[1]
    dims, strides, box = (cols, rows), (ld * size,), (box_cols, box_rows)
    hit = _cached((ptr, dtype, dims, strides, box, swizzle))
    if hit is None:  # checked once per map, as encoded once
        check_2d(ptr, dtype, rows, cols, ld, box_rows, box_cols, swizzle)
        hit = tensor_map(ptr, dtype, dims=dims, strides=strides, box=box, swizzle=swizzle)
    return hit


def tensor_map_3d(ptr: int, dtype: str, *, depth: int, rows: int, cols: int, ld: int, stride: int, box_rows: int,
                  box_cols: int, swizzle: int = 128) -> np.ndarray:
    """The tensor map of `depth` row-major rows×cols matrices, matrix d at ptr + d·stride elements (row
    stride `ld`), copied in boxes of one matrix's box_rows×box_cols elements: a box zero-fills at its own
    matrix's edge, never reading the next matrix. Cached like tensor_map_2d."""
    size = _DATA_TYPES.get(dtype, (0, 0))[1]
    dims, strides, box = (cols, rows, depth), (ld * size, stride * size), (box_cols, box_rows, 1)
    hit = _cached((ptr, dtype, dims, strides, box, swizzle))
    if hit is None:
        check_2d(ptr, dtype, rows, cols, ld, box_rows, box_cols, swizzle)
        if not 1 <= depth < 2**32 or (stride * size) % 16 or stride * size >= 2**40 or stride < rows * ld:
            raise InputError(f"a stack of {depth} matrices needs a matrix stride of at least rows·ld = {rows * ld} "
                             f"elements whose byte size is a multiple of 16; got {stride}")
        hit = tensor_map(ptr, dtype, dims=dims, strides=strides, box=box, swizzle=swizzle)
    return hit


def batched_layout(rows: int, cols: int, ld: int, shape, strides, itemsize: int) -> tuple[tuple, tuple]:
    """(dims innermost first, byte strides) of a row-major rows×cols matrix repeated over a batch: the
    matrix's two dimensions, then one per batch dimension, innermost first (`shape` and element `strides`
    are outermost first, as batching.BatchPlan and BatchArgs hold them). A map's strides cannot be 0, so a
    dimension the operand is broadcast over becomes size 1 (the kernel reads it at coordinate 0), with the
    stride of a packed next slice, which is as good as any."""
    dims, byte_strides = [cols, rows], [ld * itemsize]
    for size, stride in zip(reversed(shape), reversed(strides)):
        if stride:
            dims.append(size)
            byte_strides.append(stride * itemsize)
        else:
            byte_strides.append(byte_strides[-1] * dims[-1])
            dims.append(1)
    return tuple(dims), tuple(byte_strides)


def check_batch_strides(strides, itemsize: int) -> None:
    """The copy engine's rule for the batch strides (elements; 0 = broadcast) of one operand."""
    bad = [s for s in strides if s and (s < 0 or (s * itemsize) % 16 or s * itemsize >= 2**40)]
    if bad:
        raise InputError(f"TMA needs batch strides whose byte size is positive, a multiple of 16 and below "
                         f"2**40 (or 0: broadcast); got {tuple(strides)} elements of {itemsize} bytes; copy "
                         f"the batch into a contiguous array")


def tensor_map(ptr: int, dtype: str, *, dims: tuple, strides: tuple, box: tuple, swizzle: int = 128) -> np.ndarray:
    """The tensor map of a tiled tensor of rank len(dims) <= 5: dims innermost first, byte `strides` of every
    dimension but the innermost, `box` elements per dimension. Returns a cached (1,)-shaped array."""
    key = (ptr, dtype, dims, strides, box, swizzle)
    hit = _cached(key)
    if hit is not None:
        return hit
    rank = len(dims)
    if not 1 <= rank <= 5 or len(strides) != rank - 1 or len(box) != rank:
        raise ValueError(f"a tensor map has rank 1 to 5 with one stride fewer than dimensions and one box "
                         f"size per dimension; got dims {dims}, strides {strides}, box {box}")
    if ptr % 16 or any(s <= 0 or s % 16 or s >= 2**40 for s in strides) or not all(1 <= d < 2**32 for d in dims):
        raise InputError(f"TMA needs a 16-byte aligned base, byte strides that are positive multiples of 16 "
                         f"below 2**40 and dimensions of 1 to 2**32 - 1; got {ptr:#x}, {strides}, {dims}")
    if dtype not in _DATA_TYPES:
        raise InputError(f"tensor maps take {sorted(_DATA_TYPES)}, not {dtype}")
    code = _DATA_TYPES[dtype][0]
    encode = _encode_function()
    tensor_map = empty_map()
    result = encode(tensor_map.ctypes.data, code, rank, ctypes.c_void_p(ptr), (ctypes.c_uint64 * rank)(*dims),
                    (ctypes.c_uint64 * max(rank - 1, 1))(*strides), (ctypes.c_uint32 * rank)(*box),
                    (ctypes.c_uint32 * rank)(*(1,) * rank),
                    _INTERLEAVE_NONE, _SWIZZLE_MODES[swizzle], _L2_PROMOTION_256B, _OOB_FILL_ZEROS)
    if result != 0:
        reason = driver.error_string(result)
        raise DeviceError(f"cuTensorMapEncodeTiled refused a {dtype} tensor of dims {dims} (innermost first, "
                          f"byte strides {strides}, box {box}, swizzle {swizzle} B) at {ptr:#x}: {reason}")
    with _lock:
        _cache[key] = tensor_map
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)
    return tensor_map


def _cached(key) -> np.ndarray | None:
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
        return hit


def clear_cache() -> None:
    with _lock:
        _cache.clear()

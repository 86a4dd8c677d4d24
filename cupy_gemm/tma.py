"""Host side of the tensor-memory accelerator: CUtensorMap descriptors for Hopper kernels.

CuPy does not wrap cuTensorMapEncodeTiled, so this module calls it through ctypes on the CUDA driver
(libcuda.so.1, already loaded by CuPy on a GPU machine). A tensor map is 128 opaque bytes that a kernel
takes by value (`const __grid_constant__ CUtensorMap`); CuPy passes a NumPy array of size one by value,
so a map is returned as such an array, its bytes 64-byte aligned as the driver's CUtensorMap type is.
Encoding costs a driver call, so maps are cached per (address, dtype, shape, leading dimension, box).
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict

import numpy as np

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
_driver = None


def _encode_function():
    global _driver
    if _driver is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise DeviceError(f"the CUDA driver (libcuda.so.1) could not be loaded ({e}); tensor maps for "
                              f"Hopper kernels are encoded by the driver") from None
        fn = lib.cuTensorMapEncodeTiled
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                       ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        errors = lib.cuGetErrorString
        errors.restype = ctypes.c_int
        errors.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _driver = (fn, errors)
    return _driver


def _empty_map() -> np.ndarray:
    """A (1,)-shaped array of one 128-byte void element whose bytes start on a 64-byte boundary."""
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


def tensor_map_2d(ptr: int, dtype: str, *, rows: int, cols: int, ld: int, box_rows: int, box_cols: int,
                  swizzle: int = 128) -> np.ndarray:
    """The tensor map of a row-major rows×cols matrix at device address `ptr` with leading dimension `ld`
    (elements), copied in boxes of box_rows×box_cols elements with a `swizzle`-byte shared-memory swizzle.
    Elements outside the matrix read as zeros. Returns a cached (1,)-shaped array to pass to a kernel."""
    key = (ptr, dtype, rows, cols, ld, box_rows, box_cols, swizzle)
    return _cached(key, lambda: check_2d(ptr, dtype, rows, cols, ld, box_rows, box_cols, swizzle),
                   ptr, dtype, (cols, rows), (ld,), (box_cols, box_rows), swizzle,
                   f"a {rows}×{cols} {dtype} matrix (ld={ld}, box {box_rows}×{box_cols}, swizzle {swizzle} B)")


def tensor_map_3d(ptr: int, dtype: str, *, depth: int, rows: int, cols: int, ld: int, stride: int, box_rows: int,
                  box_cols: int, swizzle: int = 128) -> np.ndarray:
    """The tensor map of `depth` row-major rows×cols matrices, matrix d at ptr + d·stride elements (row
    stride `ld`), copied in boxes of one matrix's box_rows×box_cols elements: a box zero-fills at its own
    matrix's edge, never reading the next matrix. Cached like tensor_map_2d."""
    key = (ptr, dtype, depth, rows, cols, ld, stride, box_rows, box_cols, swizzle)

    def check():
        check_2d(ptr, dtype, rows, cols, ld, box_rows, box_cols, swizzle)
        size = _DATA_TYPES[dtype][1]
        if not 1 <= depth < 2**32 or (stride * size) % 16 or stride * size >= 2**40 or stride < rows * ld:
            raise InputError(f"a stack of {depth} matrices needs a matrix stride of at least rows·ld = {rows * ld} "
                             f"elements whose byte size is a multiple of 16; got {stride}")
    return _cached(key, check, ptr, dtype, (cols, rows, depth), (ld, stride), (box_cols, box_rows, 1), swizzle,
                   f"{depth} {rows}×{cols} {dtype} matrices (ld={ld}, stride {stride}, box {box_rows}×{box_cols}, "
                   f"swizzle {swizzle} B)")


def _cached(key, check, ptr: int, dtype: str, dims, strides, box, swizzle: int, what: str) -> np.ndarray:
    """The map of `key` from the cache, or checked, encoded and cached. dims and box innermost first;
    strides in elements, for every dimension but the innermost."""
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    check()
    code, size = _DATA_TYPES[dtype]
    encode, error_string = _encode_function()
    tensor_map = _empty_map()
    rank = len(dims)
    c_dims = (ctypes.c_uint64 * rank)(*dims)
    c_strides = (ctypes.c_uint64 * (rank - 1))(*(s * size for s in strides))  # bytes
    c_box = (ctypes.c_uint32 * rank)(*box)
    steps = (ctypes.c_uint32 * rank)(*([1] * rank))
    result = encode(tensor_map.ctypes.data, code, rank, ctypes.c_void_p(ptr), c_dims, c_strides, c_box, steps,
                    _INTERLEAVE_NONE, _SWIZZLE_MODES[swizzle], _L2_PROMOTION_256B, _OOB_FILL_ZEROS)
    if result != 0:
        text = ctypes.c_char_p()
        error_string(result, ctypes.byref(text))
        reason = text.value.decode() if text.value else f"error {result}"
        raise DeviceError(f"cuTensorMapEncodeTiled refused {what} at {ptr:#x}: {reason}")
    with _lock:
        _cache[key] = tensor_map
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)
    return tensor_map


def clear_cache() -> None:
    with _lock:
        _cache.clear()

"""Zero-padded operands in one launch (templates/zero_pad.cu.j2). Where a call's K (or N, or M) misses its
kernel's alignment, A and B are copied into buffers of the padded problem's shape, in the kernel's layouts,
with zeros past their edges. One kernel fills both: slice assignments took a copy and a fill per padded
side, each a launch of CuPy's with its host time, on every call.

A Padder is built once per call geometry (shapes, strides, dtype, device: prepared.py keeps it with the
launch), so that a repeated call only allocates the two buffers and launches with the new addresses. A
Cropper does the way back, where the kernel wrote a C of its own: its leading view into a dense out."""
from __future__ import annotations

import numpy as np

from . import driver, launch
from .render import render_file

THREADS, VEC = 256, 4  # a block fills THREADS * VEC elements
WORDS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}  # by item size
_functions: dict = {}  # (item size, device id) -> the loaded kernel's CUfunction handle


def source(itemsize: int) -> str:
    return render_file("zero_pad.cu.j2", WORD=WORDS[itemsize], THREADS=THREADS, VEC=VEC)


class Padder:
    """The zero-padded copies of a (M×K) and b (K×N) for one call geometry: the (M, K, N) of `padded`, each
    buffer in its layout of `orders` ("row" or "col"). Calling it with arrays of that geometry returns new
    (A, B), filled by one launch on the current stream."""
    __slots__ = ("shapes", "orders", "dtype", "launch")

    def __init__(self, a, b, padded, orders):
        m, k, n = padded
        self.shapes, self.dtype = ((m, k), (k, n)), a.dtype
        self.orders = tuple("C" if order == "row" else "F" for order in orders)
        self.launch = _Launch(a, _job(a, (m, k), orders[0]), _job(b, (k, n), orders[1]))

    def __call__(self, a, b):
        import cupy
        A = cupy.empty(self.shapes[0], self.dtype, order=self.orders[0])
        B = cupy.empty(self.shapes[1], self.dtype, order=self.orders[1])
        self.launch(a.data.ptr, A.data.ptr, b.data.ptr, B.data.ptr)
        return A, B


class Cropper:
    """The copy of C's leading view of a buffer of the kernel's own (a padded or ragged C) into an out that is
    dense in the kernel's layout: the same kernel, one job that pads nothing; for one call geometry."""
    __slots__ = ("launch",)

    def __init__(self, view, dest, layout: str):
        self.launch = _Launch(view, _job(view, dest.shape, layout))

    @staticmethod
    def fits(dest, layout: str) -> bool:
        """Whether dest is dense in `layout`, as the kernel writes it."""
        return dest.flags.c_contiguous if layout == "row" else dest.flags.f_contiguous

    def __call__(self, view, dest) -> None:
        self.launch(view.data.ptr, dest.data.ptr, 0, 0)


class _Launch:
    """zero_padded_copy for one or two jobs (_job's) of x's item size and device: grid and scalar arguments
    packed once, a call passing the four addresses (src0, dst0, src1, dst1) and launching on the current
    stream."""
    __slots__ = ("kernel", "packed")

    def __init__(self, x, first, second=None):
        (scalars0, blocks0), (scalars1, blocks1) = first, second or ((np.int64(0),) * 4 + (np.int32(0),) * 2, 0)
        key = (x.itemsize, x.data.device_id)
        if key not in _functions:  # the RawKernel's CUfunction on that device
            import cupy
            _functions[key] = launch.load_helper("zero_pad", source(x.itemsize), "zero_padded_copy",
                                                 cupy.cuda.Device(x.data.device_id)).kernel.ptr
        self.kernel = driver.Kernel(_functions[key], (blocks0 + blocks1, 1, 1), (THREADS, 1, 1), 0, False)
        # the four pointers lead (replaced on every call), then what the geometry fixes
        self.packed = driver.Packed((np.uint64(0),) * 4 + scalars0 + (np.int64(blocks0),) + scalars1)

    def __call__(self, *pointers) -> None:
        self.kernel(launch.current_stream(), self.packed.with_pointers(pointers))


def _job(x, shape, order: str):
    """The kernel's scalar arguments for x into a dense buffer of `shape` in `order` ("row" or "col"), seen
    with the buffer's contiguous dimension inner, and the blocks they take."""
    size = x.itemsize
    (rows, cols), (s_rows, s_cols), (outer, inner) = x.shape, x.strides, shape
    if order == "col":
        rows, cols, s_rows, s_cols, outer, inner = cols, rows, s_cols, s_rows, inner, outer
    blocks = -(-outer * inner // (THREADS * VEC))
    return (np.int64(s_rows // size), np.int64(s_cols // size), np.int64(outer), np.int64(inner),
            np.int32(rows), np.int32(cols)), blocks

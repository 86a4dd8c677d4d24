"""Checking operands and reducing any call to what a kernel takes.

A kernel computes C = alpha·A·B + beta·C with all three matrices in its family's layout (row- or
column-major with a leading dimension). This module checks a call before anything launches and carries
out the arrangement that arrange.py decides from the operands' geometry: which operands are used in place
(zero-copy, also strided views), when A and B swap (Cᵀ = Bᵀ·Aᵀ), and what is copied or zero-padded so
that a kernel's alignment assumptions hold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import padding
from .arrange import (INDEX_LIMIT, Placement, arrange, c_align, check_sizes, fresh, geometry,  # noqa: F401 (re-exported)
                      leading_dim, swap_for_rows)
from .errors import DeviceError, DTypeError, InputError
from .families.base import OUT_DTYPES  # what a family that converts stores C as


def require_cupy(x, name: str):
    import cupy
    if not isinstance(x, cupy.ndarray):
        kind = "a NumPy array" if isinstance(x, np.ndarray) else f"a {type(x).__name__}"
        raise DTypeError(f"{name} is {kind}; cupy-gemm works on CuPy arrays on the GPU: "
                         f"convert it with cupy.asarray({name})")
    return x


def span(x) -> tuple[int, int]:
    """[first, last] byte addresses an array can touch."""
    lo = hi = x.data.ptr
    for extent, stride in zip(x.shape, x.strides):
        if extent == 0:
            return (lo, lo - 1)
        if stride > 0:
            hi += (extent - 1) * stride
        else:
            lo += (extent - 1) * stride
    return lo, hi + x.itemsize - 1


def overlaps(x, y) -> bool:
    (a0, a1), (b0, b1) = span(x), span(y)
    return a0 <= b1 and b0 <= a1 and a1 >= a0 and b1 >= b0


@dataclass(frozen=True)
class Problem:
    """A checked call: C(M×N) = alpha·A(M×K)·B(K×N) + beta·C. placement: where its operands lie, for the
    arrangement's copies (None where unknown: a batch's members)."""
    m: int
    n: int
    k: int
    dtype: np.dtype  # of A and B
    device_id: int
    out_dtype: str | None = None  # C's dtype name where it is not `dtype` (a family that converts stores it)
    placement: Placement | None = None


def deterministic_flag(deterministic) -> bool:
    """The `deterministic` argument as a bool: True or False (a NumPy bool too), else InputError."""
    if not isinstance(deterministic, (bool, np.bool_)):
        raise InputError(f"deterministic must be True (split-K sums in a fixed order, bitwise repeatable) or "
                         f"False (atomic adds where a kernel splits K); got {deterministic!r}")
    return bool(deterministic)


def out_dtype_name(out_dtype) -> str | None:
    """The name of a requested output dtype (a name, a NumPy dtype or type), or None for none requested.
    Raises DTypeError for anything else, before anything runs."""
    if out_dtype is None:
        return None
    if isinstance(out_dtype, str):
        name = out_dtype
    else:
        try:
            name = np.dtype(out_dtype).name
        except TypeError:
            name = repr(out_dtype)
    if name not in OUT_DTYPES:
        raise DTypeError(f"out_dtype {out_dtype!r}: one of {', '.join(OUT_DTYPES)} (or None: the inputs' dtype)")
    return name


def output_dtype(in_dtype: str, c, out, out_dtype: str | None) -> str:
    """C's dtype name for a call: out_dtype (checked by out_dtype_name), else out's, else the inputs'.
    out must agree with out_dtype (InputError), and c, read as beta·C, must have the output dtype."""
    want = out_dtype or (out.dtype.name if out is not None else in_dtype)
    if out is not None and out.dtype.name != want:
        raise InputError(f"out is {out.dtype.name} but out_dtype is {want}: give one of them, or make them agree")
    if want != in_dtype and want not in OUT_DTYPES:
        raise DTypeError(f"out is {want}: the result is {in_dtype} like a and b, or one of {', '.join(OUT_DTYPES)} "
                         f"(converted in the kernel's store)")
    if c is not None and c.dtype.name != want:
        raise DTypeError(f"c must have the output dtype {want} (beta·c is added before the result is stored as "
                         f"{want}); got {c.dtype.name}: convert it with c.astype({want!r})")
    return want


def matrix_sizes(a, b) -> tuple[int, int, int]:
    """(m, n, k) of a @ b for 2-D a and b: inner dimensions that agree, each small enough to index."""
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise InputError(f"inner dimensions differ: a is {m}×{k}, b is {k2}×{n}")
    check_sizes(M=m, N=n, K=k)
    return m, n, k


def check(a, b, c, out, beta: float, out_dtype: str | None = None) -> Problem:
    """Every check that needs no variant. Raises before anything launches. out_dtype: a name from
    out_dtype_name, or None (out's dtype, else the inputs')."""
    a, b = require_cupy(a, "a"), require_cupy(b, "b")
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2:
            raise InputError(f"{name} must be a 2-D matrix; got {x.ndim}-D with shape {x.shape}")
    if a.dtype != b.dtype:
        raise DTypeError(f"a and b must have the same dtype; got {a.dtype} and {b.dtype} "
                         f"(convert one with .astype)")
    m, n, k = matrix_sizes(a, b)
    if a.device.id != b.device.id:
        raise DeviceError(f"a is on GPU {a.device.id} and b on GPU {b.device.id}; move one with cupy.asarray "
                          f"inside `with cupy.cuda.Device(i):`")
    for name, x in (("c", c), ("out", out)):
        if x is None:
            continue
        require_cupy(x, name)
        if x.shape != (m, n):
            raise InputError(f"{name} must have shape {(m, n)} for a {m}×{k} by {k}×{n} product; got {x.shape}")
        if x.device.id != a.device.id:
            raise DeviceError(f"{name} is on GPU {x.device.id} but a and b are on GPU {a.device.id}")
    want = output_dtype(a.dtype.name, c, out, out_dtype)
    check_addresses(a, b, c, out, beta)
    # the kernel writes out, or a fresh array that c (when given) is copied into first
    written = geometry(out) if out is not None else fresh((m, n), np.dtype(want).itemsize)
    placement = Placement(geometry(a), geometry(b), written, c is not None and beta != 0)
    return Problem(m, n, k, a.dtype, a.device.id, None if want == a.dtype.name else want, placement)


def check_addresses(a, b, c, out, beta: float) -> None:
    """The checks that look at where the arrays lie, not only at their shapes: a repeated call with new
    arrays must run them again."""
    if out is not None:
        for name, x in (("a", a), ("b", b)):
            if overlaps(out, x):
                raise InputError(f"out overlaps {name}: the kernel would read what it overwrites; "
                                 f"pass a separate output array")
        if c is not None and beta != 0 and overlaps(out, c) and not same_view(out, c):
            raise InputError("out partially overlaps c; pass out=c to update c in place, or separate arrays")


def same_view(x, y) -> bool:
    return x.data.ptr == y.data.ptr and x.shape == y.shape and x.strides == y.strides


@dataclass
class Operands:
    """What the kernel sees: the three matrices in its layout, the (possibly swapped and padded)
    problem size and leading dimensions, and what to copy back afterwards."""
    A: object
    B: object
    C: object
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    copy_back: object = None  # (destination, source view) to copy after the kernel, or None
    c_buffer: tuple | None = None  # (shape, order) of the buffer of resolve's own whose leading view C is
    copied: bool = False  # some operand is a copy: a repeated call must copy again
    swapped: bool = False  # the kernel computes Cᵀ = Bᵀ·Aᵀ: its rows are the caller's columns
    arrangement: object = None  # the arrange.Arrangement carried out: what was copied, at what cost
    padder: object = None  # the padding.Padder that zero-padded A and B, for a repeated call to pad again

    @property
    def zero_copy(self) -> bool:
        return not self.copied and self.copy_back is None


def resolve(a, b, out, layout: str, align: int, b_layout: str | None = None,
            max_rows: int | None = None, beta_read: bool = True, ragged_n: bool = False,
            scalar_c: bool = False, unaligned_c: bool = False) -> Operands:
    """Arrange a, b and out (all checked, out allocated) for a kernel of `layout` needing `align`;
    `b_layout` is B's own layout where it differs (a "row" kernel reading B K-major takes "col");
    `max_rows` fixes the orientation for a kernel serving few rows of C (see swap_for_rows). An out of
    another dtype than a and b (a converting family) is aligned to as many bytes in its own elements.

    out must already hold beta·C's input (the caller copies c into it when beta != 0); beta_read=False
    says the kernel will not read it (beta = 0), so a temporary C need not start as out's copy; ragged_n,
    scalar_c and unaligned_c: the kernel takes any N, writes any C, or any C in its layout when rendered for it
    (Family.ragged_n, Family.scalar_c, Family.unaligned_c: the arrangement's unaligned_c says when)."""
    import cupy

    arr = arrange(geometry(a), geometry(b), geometry(out), layout, align, b_layout, max_rows, beta_read, ragged_n,
                  scalar_c, unaligned_c)
    orders = (layout, b_layout or layout)
    out_align = c_align(align, a.itemsize, out.itemsize)
    if arr.swapped:
        a, b, out = b.T, a.T, out.T
    C, copy_back, c_buffer, padder = out, None, None, None
    if arr.padded is None:
        A = laid_out(cupy, a, orders[0]) if arr.copy_a else a
        B = laid_out(cupy, b, orders[1]) if arr.copy_b else b
        if arr.temp_c:  # out is a view no kernel can write: compute into a fresh array, copy back
            c_buffer = _buffer_geometry(out.shape, layout, out_align)
            C = output_buffer(cupy, out.dtype, out.shape, c_buffer)
            if beta_read:
                C[...] = out
            copy_back = (out, C)
    else:  # zero-padded copies (a repeated call must pad again); C too unless only K is padded
        mp, _, np_ = arr.padded
        padder = padding.Padder(a, b, arr.padded, orders)
        A, B = padder(a, b)
        if arr.temp_c:  # the kernel writes all of the padded C; it reads C (out's copy) only when beta != 0
            c_buffer = _buffer_geometry((mp, np_), layout, out_align)
            C = output_buffer(cupy, out.dtype, (mp, np_), c_buffer)
            if beta_read:
                C[:out.shape[0], :out.shape[1]] = out
            copy_back = (out, C[:out.shape[0], :out.shape[1]])
    ld = lambda x, order: leading_dim(x.shape, x.strides, x.itemsize, order)
    # a C of our own keeps its padded stride even with one row (TMA wants 16-byte strides); a scalar_c kernel
    # takes C's own strides, and C may have no leading dimension in its layout (0 then)
    ldc = (ld(C, layout) or 0) if C is out else C.strides[0 if layout == "row" else 1] // C.itemsize
    return Operands(A, B, C, C.shape[0], C.shape[1], A.shape[1], ld(A, orders[0]), ld(B, orders[1]), ldc,
                    copy_back, c_buffer, copied=A is not a or B is not b, swapped=arr.swapped, arrangement=arr,
                    padder=padder)


def _buffer_geometry(shape, layout, align) -> tuple:
    """(shape, order) of a C of `shape` in `layout` whose leading dimension is a multiple of `align` (which the
    contiguous extent alone may not be when C's elements are smaller than the inputs')."""
    rows, cols = shape
    up = -(-(cols if layout == "row" else rows) // align) * align
    return ((rows, up) if layout == "row" else (up, cols)), ("C" if layout == "row" else "F")


def output_buffer(cupy, dtype, shape, buffer):
    """An uninitialised C of `shape`: the leading view of a new array of `buffer`'s (shape, order)."""
    full, order = buffer
    return cupy.empty(full, dtype=dtype, order=order)[:shape[0], :shape[1]]


def laid_out(cupy, x, layout):
    """A new array of x in `layout`, never x itself (a contiguous x may be the view off its alignment being
    copied). ascontiguousarray and asfortranarray transpose a 2-D float32 matrix with cuBLAS (geam): several
    times faster than the element-wise copy of cupy.array(x, order=…, copy=True)."""
    order = "C" if layout == "row" else "F"
    y = cupy.ascontiguousarray(x) if layout == "row" else cupy.asfortranarray(x)
    return y.copy(order=order) if y.data.ptr == x.data.ptr else y



"""Checking operands and reducing any call to what a kernel takes.

A kernel computes C = alpha·A·B + beta·C with all three matrices in its family's layout (row- or
column-major with a leading dimension). This module decides, before anything launches, how to get there:
which operands can be used in place (zero-copy, also strided views), when swapping A and B gives the
transposed problem for free (Cᵀ = Bᵀ·Aᵀ turns a column-major problem into a row-major one), and what must
be copied or zero-padded so that a kernel's alignment assumptions hold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DeviceError, DTypeError, InputError
from .families.base import OUT_DTYPES  # what a family that converts stores C as

INDEX_LIMIT = 2**31 - 1  # M, N, K are 32-bit in every kernel; offsets are 64-bit


def require_cupy(x, name: str):
    import cupy
    if not isinstance(x, cupy.ndarray):
        kind = "a NumPy array" if isinstance(x, np.ndarray) else f"a {type(x).__name__}"
        raise DTypeError(f"{name} is {kind}; cupy-gemm works on CuPy arrays on the GPU: "
                         f"convert it with cupy.asarray({name})")
    return x


def leading_dim(shape, strides, itemsize, order: str) -> int | None:
    """The leading dimension (elements) that lets a kernel of `order` ('row' or 'col') use the array as is,
    or None. A row-major view needs unit stride along columns, a column-major one along rows; a
    dimension of extent 1 takes any stride."""
    rows, cols = shape
    if order == "col":  # the transpose, seen row-major
        rows, cols = cols, rows
        strides = strides[::-1]
    s_outer, s_inner = strides
    if cols > 1 and s_inner != itemsize:
        return None
    if rows == 1:
        return max(cols, 1)
    if s_outer <= 0 or s_outer % itemsize or s_outer // itemsize < cols:
        return None
    return s_outer // itemsize


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
    """A checked call: C(M×N) = alpha·A(M×K)·B(K×N) + beta·C."""
    m: int
    n: int
    k: int
    dtype: np.dtype  # of A and B
    device_id: int
    out_dtype: str | None = None  # C's dtype name where it is not `dtype` (a family that converts stores it)




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
    for dim, value in (("M", m), ("N", n), ("K", k)):
        if value > INDEX_LIMIT:
            raise InputError(f"{dim}={value} exceeds {INDEX_LIMIT}, the largest dimension the kernels index")
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
    return Problem(m, n, k, a.dtype, a.device.id, None if want == a.dtype.name else want)


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
    copied: bool = False  # some operand is a copy: a repeated call must copy again
    swapped: bool = False  # the kernel computes Cᵀ = Bᵀ·Aᵀ: its rows are the caller's columns

    @property
    def zero_copy(self) -> bool:
        return not self.copied and self.copy_back is None


def c_align(align: int, in_itemsize: int, out_itemsize: int) -> int:
    """C's alignment in its own elements for a family needing `align` input elements: the same bytes (a
    16-byte rule stays 16 bytes whether C holds 2- or 4-byte elements)."""
    return max(1, align * in_itemsize // out_itemsize)


def _fits(x, order: str, align: int) -> int | None:
    ld = leading_dim(x.shape, x.strides, x.itemsize, order)
    if ld is None or ld % align or x.data.ptr % (align * x.itemsize):
        return None
    return ld


def swap_for_rows(m: int, n: int, max_rows: int | None, where: str = "") -> bool:
    """For a kernel serving at most max_rows rows of C (None: any): whether A and B must swap (Cᵀ = Bᵀ·Aᵀ)
    to put the product's small side in M. Raises InputError when neither side is small enough."""
    if max_rows is None or m <= max_rows:
        return False
    if n <= max_rows:
        return True
    raise InputError(f"{where + ' ' if where else ''}serves products with at most {max_rows} rows or "
                     f"columns; got {m}×{n} (use a general variant, or variant=None)")


def resolve(a, b, out, layout: str, align: int, b_layout: str | None = None,
            max_rows: int | None = None, beta_read: bool = True) -> Operands:
    """Arrange a, b and out (all checked, out allocated) for a kernel of `layout` needing `align`;
    `b_layout` is B's own layout where it differs (a "row" kernel reading B K-major takes "col");
    `max_rows` fixes the orientation for a kernel serving few rows of C (see swap_for_rows). An out of
    another dtype than a and b (a converting family) is aligned to as many bytes in its own elements.

    out must already hold beta·C's input (the caller copies c into it when beta != 0); beta_read=False
    says the kernel will not read it (beta = 0), so a temporary C need not start as out's copy."""
    import cupy

    orders = (layout, b_layout or layout)
    aligns = (align, c_align(align, a.itemsize, out.itemsize))
    if max_rows is not None:
        swapped = swap_for_rows(a.shape[0], b.shape[1], max_rows)
        if swapped:
            a, b, out = b.T, a.T, out.T
        ops = _oriented(cupy, a, b, out, layout, aligns, orders, False, beta_read)
        ops.swapped = swapped
        return ops
    return _oriented(cupy, a, b, out, layout, aligns, orders, True, beta_read)


def _oriented(cupy, a, b, out, layout, aligns, orders, swap: bool, beta_read: bool) -> Operands:
    """The product as given, or (swap=True) its transpose where only that one is zero-copy. aligns: the
    family's alignment in A's and B's elements, and the same bytes in C's."""

    align, out_align = aligns
    other = "col" if layout == "row" else "row"
    m, k = a.shape
    n = b.shape[1]

    def aligned(rows, cols):  # row kernels read K and N contiguously, column kernels M and K
        return k % align == 0 and (cols if layout == "row" else rows) % align == 0

    if aligned(m, n) and _fits(out, layout, out_align) is not None:
        return _direct(a, b, out, orders, align, None)
    if swap and aligned(n, m) and _fits(out, other, out_align) is not None:  # Cᵀ = Bᵀ·Aᵀ: same kernel, transposes
        ops = _direct(b.T, a.T, out.T, orders, align, None)
        ops.swapped = True
        return ops
    if aligned(m, n):  # out is a view no kernel can write: compute into a fresh array, copy back
        tmp = _output_buffer(cupy, out, (m, n), layout, out_align)
        if beta_read:
            tmp[...] = out
        return _direct(a, b, tmp, orders, align, (out, tmp))
    # pad with zeros: exact, since padded columns of A meet padded rows of B
    up = lambda x: -(-x // align) * align
    mp, kp, np_ = (up(m) if layout == "col" else m), up(k), (up(n) if layout == "row" else n)
    if (mp, np_) == (m, n) and _fits(out, layout, out_align) is not None:
        C, copy_back = out, None  # only K is padded: C is written in place (three launches fewer)
    else:  # the kernel writes all of the padded C; it reads C (out's copy) only when beta != 0
        C = _output_buffer(cupy, out, (mp, np_), layout, out_align)
        if beta_read:
            C[:m, :n] = out
        copy_back = (out, C[:m, :n])
    ops = _direct(_padded(cupy, a, (mp, kp), orders[0]), _padded(cupy, b, (kp, np_), orders[1]), C,
                  orders, align, copy_back)
    ops.copied = True  # A and B are this call's padded copies: a repeated call must pad again
    return ops


def _direct(a, b, c, orders, align, copy_back) -> Operands:
    import cupy
    a_order, b_order = orders
    A = a if _fits(a, a_order, align) is not None else _copy(cupy, a, a_order)
    B = b if _fits(b, b_order, align) is not None else _copy(cupy, b, b_order)
    ld = lambda x, order: leading_dim(x.shape, x.strides, x.itemsize, order)
    return Operands(A, B, c, c.shape[0], c.shape[1], a.shape[1], ld(A, a_order), ld(B, b_order), ld(c, a_order),
                    copy_back, copied=A is not a or B is not b)


def _output_buffer(cupy, out, shape, layout, align):
    """An uninitialised C of `shape` in `layout`, its leading dimension a multiple of `align` (which the
    contiguous extent alone may not be when C's elements are smaller than the inputs')."""
    rows, cols = shape
    up = -(-(cols if layout == "row" else rows) // align) * align
    full = (rows, up) if layout == "row" else (up, cols)
    return cupy.empty(full, dtype=out.dtype, order="C" if layout == "row" else "F")[:rows, :cols]


def _copy(cupy, x, layout):
    return cupy.ascontiguousarray(x) if layout == "row" else cupy.asfortranarray(x)


def _padded(cupy, x, shape, layout):
    """x in a buffer of `shape` whose extra rows and columns are zero."""
    buf = cupy.empty(shape, dtype=x.dtype, order="C" if layout == "row" else "F")
    rows, cols = x.shape
    buf[:rows, :cols] = x
    if cols < shape[1]:
        buf[:, cols:] = 0
    if rows < shape[0]:
        buf[rows:, :cols] = 0
    return buf

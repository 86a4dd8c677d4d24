"""How a call's operands reach a kernel's layout and alignment, decided from where they lie alone.

A kernel computes C = alpha·A·B + beta·C with all three matrices in its family's layout (row- or column-major
with a leading dimension) and alignment (Family.align). From the geometry of a, b and the C it writes (shape,
byte strides, item size, address modulo ALIGN_MODULUS) `arrange` decides what operands.resolve then does: use
them in place (also strided views), swap A and B where only the transposed problem is zero-copy (Cᵀ = Bᵀ·Aᵀ
turns a column-major problem into a row-major one), copy an operand into the kernel's layout, compute into a
temporary C and copy it back (also where N does not meet the alignment of a kernel that reads B K-major and
takes any N, Family.ragged_n), or zero-pad K (and N, or M) so that the alignment holds — and what those copies
cost: the bytes they read and write, and how many kernels they launch. No CuPy and no device: dispatch prices
the copies with it before it chooses a variant.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import InputError

INDEX_LIMIT = 2**31 - 1  # M, N, K and a batch's count are 32-bit in every kernel; offsets are 64-bit
ALIGN_MODULUS = 256  # addresses are kept modulo this: no kernel needs coarser alignment (prepared.py keys on it)
COPY_LAUNCH_BYTES = 6 << 20  # a small copy kernel's launch and tail (about 2 µs) as bytes, at about 3 TB/s


def check_sizes(where: str = "", **sizes: int) -> None:
    """Raise InputError for a size (M=…, N=…, K=…, batch=…) that the kernels' 32-bit indices cannot reach;
    `where` starts the message (a group of a grouped call)."""
    for dim, value in sizes.items():
        if value > INDEX_LIMIT:
            raise InputError(f"{where}{dim}={value} exceeds {INDEX_LIMIT}, the largest size the kernels index")


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


@dataclass(frozen=True)
class Geometry:
    """What an arrangement reads of a matrix: shape, byte strides, item size, address modulo ALIGN_MODULUS."""
    shape: tuple[int, int]
    strides: tuple[int, int]
    itemsize: int
    address: int = 0

    @property
    def T(self) -> Geometry:
        return Geometry(self.shape[::-1], self.strides[::-1], self.itemsize, self.address)

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.itemsize


def geometry(x) -> Geometry:
    """The geometry of a 2-D CuPy array."""
    return Geometry(tuple(x.shape), tuple(x.strides), x.itemsize, x.data.ptr % ALIGN_MODULUS)


def fresh(shape, itemsize: int) -> Geometry:
    """A new C-contiguous array's geometry (CuPy's allocations start 256-byte aligned)."""
    rows, cols = shape
    return Geometry((rows, cols), (cols * itemsize, itemsize), itemsize, 0)


# how a caller's B may lie: "row", K×N C-contiguous (x @ W with W stored K×N), or "col", the transpose of an
# N×K C-contiguous array (x @ W.T, as linear layers keep W); the benchmark and `explain` take either
B_LAYOUTS = ("row", "col")


def fits(x: Geometry, order: str, align: int) -> int | None:
    """x's leading dimension when a kernel of `order` needing `align` can use it in place, else None."""
    ld = leading_dim(x.shape, x.strides, x.itemsize, order)
    if ld is None or ld % align or x.address % (align * x.itemsize):
        return None
    return ld


def c_align(align: int, in_itemsize: int, out_itemsize: int) -> int:
    """C's alignment in its own elements for a family needing `align` input elements: the same bytes (a
    16-byte rule stays 16 bytes whether C holds 2- or 4-byte elements)."""
    return max(1, align * in_itemsize // out_itemsize)


def c_placement(c: Geometry, order: str, align: int, ragged: bool = False, scalar_c: bool = False,
                unaligned_c: bool = False) -> str | None:
    """How a kernel of `order` writes C in place: "aligned" as every kernel of its family stores it (`align`
    in C's elements; a ragged N's vector stores would pass its end), "unaligned" only when rendered for any
    leading dimension, address and N (Family.unaligned_c), or None: not at all. scalar_c: a family that
    stores C at its own strides, whatever they are (Family.scalar_c)."""
    if scalar_c:
        return "aligned" if all(s % c.itemsize == 0 for s in c.strides) else None
    if not ragged and fits(c, order, align) is not None:
        return "aligned"
    if unaligned_c and leading_dim(c.shape, c.strides, c.itemsize, order) is not None:
        return "unaligned"
    return None


def swap_for_rows(m: int, n: int, max_rows: int | None, where: str = "") -> bool:
    """For a kernel serving at most max_rows rows of C (None: any): whether A and B must swap (Cᵀ = Bᵀ·Aᵀ)
    to put the product's small side in M. Raises InputError when neither side is small enough."""
    if max_rows is None or m <= max_rows:
        return False
    if n <= max_rows:
        return True
    raise InputError(f"{where + ' ' if where else ''}serves products with at most {max_rows} rows or "
                     f"columns; got {m}×{n} (use a general variant, or variant=None)")


@dataclass(frozen=True)
class Arrangement:
    """What resolve does to a call's operands for one kernel, and what its copies cost."""
    swapped: bool = False  # the kernel computes Cᵀ = Bᵀ·Aᵀ: its rows are the caller's columns
    padded: tuple[int, int, int] | None = None  # (M, K, N) of the zero-padded problem, or None
    copy_a: bool = False  # A is copied into the kernel's layout (always, when padded)
    copy_b: bool = False
    temp_c: bool = False  # the kernel writes a temporary C that is copied back into the output
    copy_bytes: int = 0  # bytes the copies read and write
    copy_launches: int = 0  # kernels they launch (zero-padding: as priced, _padding)
    unaligned_c: bool = False  # C in place at a leading dimension, address or N only Family.unaligned_c stores

    @property
    def copies(self) -> bool:
        return self.copy_launches > 0

    @property
    def traffic(self) -> int:
        """The copies in bytes of memory traffic: what they move, plus COPY_LAUNCH_BYTES per launch."""
        return self.copy_bytes + self.copy_launches * COPY_LAUNCH_BYTES


@dataclass(frozen=True)
class Placement:
    """Where a call's operands lie: a, b, the C the kernel writes (the caller's out, or a fresh array), and
    whether the kernel reads C (beta != 0 with c given)."""
    a: Geometry
    b: Geometry
    c: Geometry
    beta_read: bool = False

    @property
    def b_layout(self) -> str:
        """"col" where B lies column-major (K contiguous: x @ W.T with W stored N×K) and not also row-major
        (a single row or column is both), else "row": which of a dispatch table's entries answer the call."""
        b = self.b
        col = leading_dim(b.shape, b.strides, b.itemsize, "col") is not None
        return "col" if col and leading_dim(b.shape, b.strides, b.itemsize, "row") is None else "row"

    def for_variant(self, variant, align: int | None = None) -> Arrangement:
        """The arrangement for a registry Variant: its family's layout, and its alignment unless `align` is
        given (align=1: the copies its layout alone would need)."""
        fam = variant.family
        align = fam.align(variant.params, variant.dtype) if align is None else align
        return arrange(self.a, self.b, self.c, fam.layout, align, fam.b_layout, variant.max_rows(), self.beta_read,
                       fam.ragged_n, fam.scalar_c, fam.unaligned_c)


def arrange(a: Geometry, b: Geometry, c: Geometry, layout: str, align: int, b_layout: str | None = None,
            max_rows: int | None = None, beta_read: bool = True, ragged_n: bool = False,
            scalar_c: bool = False, unaligned_c: bool = False) -> Arrangement:
    """How a kernel of `layout` needing `align` gets a, b and c (`b_layout`: B's own layout where it differs;
    `max_rows`: a kernel serving few rows of C, oriented by swap_for_rows). beta_read=False: the kernel will
    not read C (beta = 0), so a temporary C need not start as the output's copy. ragged_n: a row kernel that
    takes any N (Family.ragged_n), whose C is then its own buffer where N does not meet `align`; scalar_c: a
    kernel that writes any C in place (Family.scalar_c); unaligned_c: one that writes C in its layout at any
    leading dimension, address and N when rendered for it (Family.unaligned_c)."""
    orders = (layout, b_layout or layout)
    if max_rows is not None:
        swapped = swap_for_rows(a.shape[0], b.shape[1], max_rows)
        if swapped:
            a, b, c = b.T, a.T, c.T
        return _oriented(a, b, c, layout, align, orders, swapped, False, beta_read, ragged_n, scalar_c, unaligned_c)
    return _oriented(a, b, c, layout, align, orders, False, True, beta_read, ragged_n, scalar_c, unaligned_c)


def _oriented(a, b, c, layout, align, orders, swapped: bool, may_swap: bool, beta_read: bool,
              ragged_n: bool, scalar_c: bool, unaligned_c: bool) -> Arrangement:
    """The product as given, or (may_swap) its transpose where only that one is zero-copy, or where both
    copy an operand and the transpose's copies move fewer bytes (x @ W.T with a small x and a kernel that
    reads B row-major: copying x and C beats copying W). A C of another dtype than A and B (a family that
    converts) is aligned to as many bytes in its own elements."""
    other = "col" if layout == "row" else "row"
    out_align = c_align(align, a.itemsize, c.itemsize)
    m, k = a.shape
    n = b.shape[1]
    ragged = lambda cols: ragged_n and cols % align != 0

    def aligned(rows, cols):  # row kernels read K and N contiguously, column kernels M and K
        return k % align == 0 and (ragged(cols) or (cols if layout == "row" else rows) % align == 0)

    def c_fits(order, cols):  # C written in place
        return c_placement(c, order, out_align, ragged(cols), scalar_c, unaligned_c) is not None

    def in_place(arr, order, cols):  # arr, with C in place: rendered for an unaligned C where it needs that
        where = c_placement(c, order, out_align, ragged(cols), scalar_c, unaligned_c)
        return replace(arr, unaligned_c=where == "unaligned")

    if aligned(m, n) and c_fits(layout, n):
        given = in_place(_in_place(a, b, orders, align, swapped), layout, n)
        if not (may_swap and given.copies and aligned(n, m)):
            return given
        turned = _in_place(b.T, a.T, orders, align, True)
        if c_fits(other, m):
            turned = in_place(turned, other, m)
        else:  # Cᵀ through a fresh array, copied back
            turned = _plus(replace(turned, temp_c=True), (2 + 2 * beta_read) * c.nbytes, 1 + beta_read)
        return turned if turned.traffic < given.traffic else given
    if may_swap and aligned(n, m) and c_fits(other, m):  # same kernel, transposes
        return in_place(_in_place(b.T, a.T, orders, align, True), other, m)
    if aligned(m, n):  # c is a view no kernel can write: compute into a fresh array, copy back
        moved, launches = (2 + 2 * beta_read) * c.nbytes, 1 + beta_read
        return _plus(replace(_in_place(a, b, orders, align, swapped), temp_c=True), moved, launches)
    # pad with zeros: exact, since padded columns of A meet padded rows of B
    up = lambda x: -(-x // align) * align
    mp, kp, np_ = (up(m) if layout == "col" else m), up(k), (up(n) if layout == "row" else n)
    arr = _plus(Arrangement(swapped, (mp, kp, np_), True, True), *_padding(a, (mp, kp)))
    arr = _plus(arr, *_padding(b, (kp, np_)))
    if (mp, np_) == (m, n) and c_fits(layout, n):
        return in_place(arr, layout, n)  # only K is padded: C is written in place (three launches fewer)
    arr = replace(arr, temp_c=True)  # the kernel writes all of the padded C; reads it only when beta != 0
    if beta_read:
        arr = _plus(arr, *_padding(c, (mp, np_)))
    return _plus(arr, 2 * c.nbytes, 1)  # the copy back


def _in_place(a, b, orders, align, swapped: bool) -> Arrangement:
    """A and B as they are, each copied into the kernel's layout where it cannot be used in place."""
    copy_a, copy_b = fits(a, orders[0], align) is None, fits(b, orders[1], align) is None
    return Arrangement(swapped, None, copy_a, copy_b, False, 2 * (a.nbytes * copy_a + b.nbytes * copy_b),
                       copy_a + copy_b)


def _padding(x: Geometry, shape) -> tuple[int, int]:
    """(bytes, launches) of x copied into a zero-padded buffer of `shape`, priced as one copy and one fill per
    padded side. One launch fills both operands now (cupy_gemm/padding.py), but its buffers' allocations keep
    a small padded call host-bound, and the unaligned rule's choices were measured at this price: counting the
    pair as one launch moved 99 of 6016 decisions on an H200, and timed, the 52 float32 ones among them ran
    0.42 times as fast in geomean (docs/NOTES-hopper.md)."""
    rows, cols = shape
    return x.nbytes + rows * cols * x.itemsize, 1 + (rows > x.shape[0]) + (cols > x.shape[1])


def _plus(arr: Arrangement, moved: int, launches: int) -> Arrangement:
    return replace(arr, copy_bytes=arr.copy_bytes + moved, copy_launches=arr.copy_launches + launches)

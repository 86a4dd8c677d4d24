"""Batched and broadcast products with `cupy.matmul`'s (NumPy's) semantics, as one launch's index plan.

matmul(a, b) on N-D operands multiplies the last two dimensions and broadcasts the ones before them:
a[..., M, K] @ b[..., K, N] -> out[broadcast(a's batch, b's batch), M, N]. A 1-D a is a row (1, K) whose
row dimension leaves the result; a 1-D b is a column (K, 1) whose column dimension leaves it.

A kernel runs the whole batch in one launch when each operand's batch can be addressed as
    element offset = sum over batch dims d of index_d * stride_d
with at most MAX_BATCH_DIMS dimensions: the batch index in the grid (or the persistent scheduler) is
unravelled over `shape` and each operand's offset taken from its own strides (0 where it is broadcast, so a
weight shared by the batch is read in place). Adjacent batch dimensions merge when every operand steps
over them uniformly, so a contiguous 5-D batch is one dimension. A batch that still needs more dimensions
is a copy the plan says it needs (`fits` is False), never a wrong stride.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .errors import InputError

MAX_BATCH_DIMS = 3  # batch dimensions a kernel unravels (the grid's z index, or the scheduler's)
# templates/common/batch.cuh's BatchArgs, byte for byte: passed to the kernel by value
BATCH_ARGS_DTYPE = np.dtype({"names": ["count", "shape", "a", "b", "c"],
                             "formats": ["<i4", ("<i4", 3), ("<i8", 3), ("<i8", 3), ("<i8", 3)],
                             "offsets": [0, 4, 16, 40, 64], "itemsize": 88})


@dataclass(frozen=True)
class BatchPlan:
    out_shape: tuple[int, ...]  # what matmul returns, 1-D squeezes applied
    m: int
    n: int
    k: int
    shape: tuple[int, ...]  # the merged batch dimensions (empty: no batch)
    a_strides: tuple[int, ...]  # elements, one per merged batch dimension; 0 where a is broadcast
    b_strides: tuple[int, ...]
    c_strides: tuple[int, ...]  # of the (unsqueezed) output, C-contiguous unless `out` says otherwise

    @property
    def count(self) -> int:
        total = 1
        for s in self.shape:
            total *= s
        return total

    @property
    def fits(self) -> bool:
        return len(self.shape) <= MAX_BATCH_DIMS

    def kernel_args(self, swapped: bool = False) -> np.ndarray:
        """The BatchArgs a batched kernel takes, as a (1,)-array of 88 bytes passed by value. swapped: the
        kernel computes Cᵀ = Bᵀ·Aᵀ, so its A is b and its B is a."""
        if not self.fits:
            raise InputError(f"a batch of {len(self.shape)} dimensions that do not merge (shape {self.shape}) "
                             f"is more than a kernel addresses ({MAX_BATCH_DIMS})")
        plan = self.transposed() if swapped else self
        pad = MAX_BATCH_DIMS - len(plan.shape)
        args = np.zeros(1, BATCH_ARGS_DTYPE)
        args["count"] = plan.count
        args["shape"] = (1,) * pad + plan.shape
        for field, strides in (("a", plan.a_strides), ("b", plan.b_strides), ("c", plan.c_strides)):
            args[field] = (0,) * pad + strides
        return args.view(np.dtype((np.void, BATCH_ARGS_DTYPE.itemsize)))

    def transposed(self) -> "BatchPlan":
        """The plan of the kernel that computes Cᵀ = Bᵀ·Aᵀ: its A is b and its B is a (C stays; its m and n
        trade places). out_shape stays the caller's."""
        return replace(self, m=self.n, n=self.m, a_strides=self.b_strides, b_strides=self.a_strides)

    def offsets(self, index: int) -> tuple[int, int, int]:
        """Element offsets of batch member `index` in a, b and C: what the kernel computes per member."""
        a_off = b_off = c_off = 0
        for d in reversed(range(len(self.shape))):
            index, i = divmod(index, self.shape[d])
            a_off += i * self.a_strides[d]
            b_off += i * self.b_strides[d]
            c_off += i * self.c_strides[d]
        return a_off, b_off, c_off


def plan(a_shape, a_strides, b_shape, b_strides, out_strides=None, itemsize: int = 1,
         out_itemsize: int | None = None) -> BatchPlan:
    """The plan for a @ b given shapes and strides (strides in bytes, as CuPy and NumPy give them;
    itemsize converts them to elements, out_itemsize those of out when its dtype differs). out_strides:
    those of a caller's `out` (of out_shape), or None for a fresh C-contiguous result."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    given = (a_shape, b_shape)
    if not a_shape or not b_shape:
        raise InputError("matmul needs arrays of at least one dimension; a scalar operand is multiplication "
                         "(use *)")
    a_st = tuple(s // itemsize for s in a_strides)
    b_st = tuple(s // itemsize for s in b_strides)
    squeeze_m, squeeze_n = len(a_shape) == 1, len(b_shape) == 1
    if squeeze_m:
        a_shape, a_st = (1,) + a_shape, (0,) + a_st
    if squeeze_n:
        b_shape, b_st = b_shape + (1,), b_st + (0,)
    m, k = a_shape[-2:]
    k_b, n = b_shape[-2:]
    if k != k_b:
        raise InputError(f"a's last dimension ({k}) must equal b's {'only' if squeeze_n else 'second to last'} "
                         f"dimension ({k_b}) for a @ b; got shapes {given[0]} and {given[1]}")
    batch = _broadcast(a_shape[:-2], b_shape[:-2])
    out_full = batch + (m, n)
    out_shape = batch + ((m,) if not squeeze_m else ()) + ((n,) if not squeeze_n else ())
    if out_strides is None:
        c_st = _contiguous(out_full)
    else:
        c_st = _unsqueeze(tuple(s // (out_itemsize or itemsize) for s in out_strides), squeeze_m, squeeze_n)
        if len(c_st) != len(out_full):
            raise InputError(f"out must have shape {out_shape}")
    a_b = _aligned(a_shape[:-2], a_st[:-2], len(batch))
    b_b = _aligned(b_shape[:-2], b_st[:-2], len(batch))
    shape, strides = _merge(batch, [a_b, b_b, c_st[:-2]])
    return BatchPlan(out_shape, m, n, k, shape, *strides)


def _broadcast(x: tuple[int, ...], y: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i in range(max(len(x), len(y))):
        p = x[len(x) - 1 - i] if i < len(x) else 1
        q = y[len(y) - 1 - i] if i < len(y) else 1
        if p != q and 1 not in (p, q):
            raise InputError(f"the batch dimensions {x} of a and {y} of b do not broadcast (dimension "
                             f"{-3 - i}: {p} against {q})")
        out.append(q if p == 1 else p)
    return tuple(reversed(out))


def _aligned(shape, strides, ndim: int) -> tuple[int, ...]:
    """An operand's batch strides over the broadcast batch: 0 where it has size 1 or lacks the dimension."""
    pad = ndim - len(shape)
    return (0,) * pad + tuple(0 if s == 1 else st for s, st in zip(shape, strides))


def _contiguous(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def _unsqueeze(strides, squeeze_m: bool, squeeze_n: bool) -> tuple[int, ...]:
    """An out's strides with the squeezed row / column dimension put back (stride 0: size 1)."""
    if squeeze_n:
        strides = strides + (0,)
    if squeeze_m:
        strides = strides[:-1] + (0,) + strides[-1:] if strides else (0,)
    return strides


def _merge(shape, stride_sets):
    """Drop size-1 dimensions and merge each pair that every operand steps over uniformly (the outer
    stride is the inner one times the inner size)."""
    dims = [(s, [st[d] for st in stride_sets]) for d, s in enumerate(shape) if s != 1]
    merged: list = []
    for size, strides in dims:
        if merged:
            outer_size, outer = merged[-1]
            if all(o == i * size for o, i in zip(outer, strides)):
                merged[-1] = (outer_size * size, strides)
                continue
        merged.append((size, strides))
    shape = tuple(s for s, _ in merged)
    return shape, [tuple(strides[j] for _, strides in merged) for j in range(len(stride_sets))]

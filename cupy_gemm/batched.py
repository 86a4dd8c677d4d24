"""N-D `matmul` and `gemm`: a batch of products of one shape in one launch, with cupy.matmul's semantics.

batching.py plans the batch (broadcast dimensions, 1-D operands, merged strides). This module decides how
it runs:
- fold: when b is shared by the whole batch and a's members lie one after another along its rows (a
  contiguous activation times a weight), the batch is one 2-D product of count·M rows — zero-copy, and
  it takes the 2-D path with its dispatch tables and prepared launches;
- batched kernel: otherwise a variant of a family that runs batches (Family.batched) takes the member in
  its grid or scheduler. Each operand is used in place when its members are in the family's layout and
  alignment; otherwise that operand alone is copied (or zero-padded along K or N, which is exact).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from . import arrange, batching, dispatch, launch, operands, placement_rules, prepared, registry
from .candidates import Decision
from .errors import DeviceError, DTypeError, InputError


def check(a, b, c, out, beta: float, out_dtype: str | None = None) -> tuple[batching.BatchPlan, str]:
    """The checks of operands.check for N-D operands; the plan of a @ b and the result's dtype name."""
    a, b = operands.require_cupy(a, "a"), operands.require_cupy(b, "b")
    if a.dtype != b.dtype:
        raise DTypeError(f"a and b must have the same dtype; got {a.dtype} and {b.dtype} (convert one with .astype)")
    if a.device.id != b.device.id:
        raise DeviceError(f"a is on GPU {a.device.id} and b on GPU {b.device.id}")
    plan = batching.plan(a.shape, a.strides, b.shape, b.strides, itemsize=a.itemsize)
    want = operands.output_dtype(a.dtype.name, c, out, out_dtype)
    operands.check_sizes(M=plan.m, N=plan.n, K=plan.k, batch=plan.count)
    for name, x in (("c", c), ("out", out)):
        if x is None:
            continue
        operands.require_cupy(x, name)
        if x.shape != plan.out_shape:
            raise InputError(f"{name} must have shape {plan.out_shape} for a {a.shape} @ {b.shape} product; "
                             f"got {x.shape}")
        if x.device.id != a.device.id:
            raise DeviceError(f"{name} is on GPU {x.device.id} but a and b are on GPU {a.device.id}")
    operands.check_addresses(a, b, c, out, beta)
    return plan, want


def call(a, b, c, out, alpha, beta, variant, decide, precision=None, epilogue=None, values=None, out_dtype=None,
         deterministic=True):
    """alpha·a@b + beta·c for operands of any dimension >= 1 (at least one not 2-D), into out, stored as
    out_dtype (as prepared.call takes it). A call is remembered by the key of prepared.py: repeating it with
    arrays of the same shapes, strides, dtypes and alignment only rebinds the addresses and launches (after
    copying an operand again where the first call copied it). deterministic=False lets split-K sum by atomics
    (prepared.call)."""
    import cupy
    key = prepared._key(a, b, c, out, alpha, beta, variant, precision, epilogue, out_dtype, deterministic)
    known = _entries.get(key) if key is not None else None
    if known is not None:
        return _again(known, a, b, c, out, alpha, beta, variant, decide, precision, epilogue, values, out_dtype,
                      deterministic)
    plan, want = check(a, b, c, out, beta, out_dtype)
    converts = None if want == a.dtype.name else want  # C's dtype where the kernel converts
    beta = beta if c is not None else 0.0
    device = prepared.device_of(a.device.id)
    with device:
        if out is None:
            out = cupy.empty(plan.out_shape, want)
        if beta != 0 and c is not out and not operands.same_view(c, out):
            out[...] = c
        a3, b3, full = _matrices(a, b, out)
        folded = _fold(a3, b3, full, plan, epilogue)
        if folded is not None:
            _run_folded(folded, alpha, beta, variant, decide, precision, epilogue, values, deterministic)
            _remember(key, ("fold", plan))
            return out
        if 0 in (plan.count, plan.m, plan.n) or plan.k == 0:
            if variant is not None:  # an unknown or unfit variant is still an error
                decide(variant, operands.Problem(1, 1, 1, a.dtype, device.id, converts), precision)
            _empty_batch(full, alpha, beta, plan, epilogue, values)
            return out
        needs = ("batched",) + (("epilogue",) if epilogue is not None else ()) + (("convert",) if converts else ())
        chosen = _choose(variant, decide, plan, a.dtype, device, precision, needs, converts, (a3, b3, full))
        ran = _run(chosen, a3, b3, full, plan, alpha, beta, device, epilogue, values, converts, deterministic)
        _remember(key, ("launch", plan, *ran, OrderedDict()))
    return out


ENTRIES = 256  # call geometries kept (least recently used dropped)
_entries: OrderedDict = OrderedDict()


def _remember(key, entry) -> None:
    if key is None:
        return
    with prepared._lock:
        prepared.keep(_entries, key, entry, ENTRIES)


def _again(known, a, b, c, out, alpha, beta, variant, decide, precision, epilogue, values, out_dtype, deterministic):
    """A call with a known key: the checks that look at addresses, then the remembered way."""
    import cupy
    kind, plan = known[0], known[1]
    if out is None:
        out = cupy.empty(plan.out_shape, out_dtype or a.dtype)
    else:
        operands.check_addresses(a, b, c, out, beta)
    beta = beta if c is not None else 0.0
    if beta != 0 and c is not out and not operands.same_view(c, out):
        out[...] = c
    a3, b3, full = _matrices(a, b, out)
    if kind == "fold":
        _run_folded(_fold(a3, b3, full, plan, epilogue), alpha, beta, variant, decide, precision, epilogue, values,
                    deterministic)
        return out
    run, buffer, layout, addresses = known[2:]
    C = full if buffer is None else cupy.empty(buffer, full.dtype)[..., :plan.n]  # as _run made it
    if C is not full and beta != 0:
        C[...] = full
    A, B = (a3, b3) if layout is None else _laid_out(cupy, a3, b3, layout)
    member = lambda x: x[(0,) * (x.ndim - 2)]
    if run.variant.family.make_args is None:  # the pointer ABI: member 0 starts where each array does
        args = (A, B, C) + run.args[launch.POINTER_SLOTS:]
    else:  # tensor maps embed the addresses: argument tuples kept per address triple, as prepared.py does
        where = (A.data.ptr, B.data.ptr, C.data.ptr)
        args = addresses.get(where)
        if args is None:
            args = prepared.keep(addresses, where, run.pack(run.rebind(member(A), member(B), member(C))),
                                 prepared.ADDRESSES)
    if epilogue is not None:
        args = run.with_epilogue(epilogue.pack(values, plan.m, plan.n), args)
    run.launch(args)
    if C is not full:
        full[...] = C
    return out


def _matrices(a, b, out):
    """a, b and out with NumPy's 1-D operands made matrices: (..., 1, K), (..., K, 1), (..., M, N)."""
    full = _unsqueezed(out, a.ndim == 1, b.ndim == 1)
    return (a[None, :] if a.ndim == 1 else a), (b[:, None] if b.ndim == 1 else b), full


def _run_folded(folded, alpha, beta, variant, decide, precision, epilogue, values, deterministic):
    a2, b2, out2 = folded
    prepared.call(a2, b2, out2 if beta else None, out2, alpha, beta, variant, decide, precision, epilogue, values,
                  deterministic=deterministic)


def _unsqueezed(out, squeeze_m: bool, squeeze_n: bool):
    if squeeze_n:
        out = out[..., None]
    if squeeze_m:
        out = out[..., None, :]
    return out


def _fold(a, b, out, plan, epilogue):
    """(a as count·M × K, b's matrix, out as count·M × N) when b is one matrix for the whole batch and a's and out's
    members follow each other along the rows; else None. An epilogue reading row or full operands
    indexes a member's rows, which the folded product would not: it does not fold."""
    import cupy
    if any(plan.b_strides) or len(plan.shape) > 1 or b.ndim < 2:
        return None
    if epilogue is not None and any(op.kind in ("row", "full") for op in epilogue.operands):
        return None
    rows = plan.count * plan.m
    views = []
    for x, cols, strides in ((a, plan.k, plan.a_strides), (out, plan.n, plan.c_strides)):
        row_stride, col_stride = x.strides[-2:]
        if plan.shape and strides[0] * x.itemsize != plan.m * row_stride:
            return None
        views.append(cupy.ndarray((rows, cols), x.dtype, x.data, strides=(row_stride, col_stride)))
    b2 = b[(0,) * (b.ndim - 2)]  # b's batch dimensions are broadcast (size 1 or stride 0)
    return views[0], b2, views[1]


def _empty_batch(out, alpha, beta, plan, epilogue, values):
    """No products to run (K = 0 or an empty batch): beta·C, then the epilogue per member."""
    if out.size == 0:
        return
    if beta == 0:
        out.fill(0)
    else:
        out *= out.dtype.type(beta)
    if epilogue is not None:
        for member in out.reshape((-1,) + out.shape[-2:]):
            prepared.epilogue_only(epilogue, member, values)


def _choose(variant, decide, plan, dtype, device, precision, needs, converts=None, matrices=None):
    """The variant for the batch: the caller's (it must run batches), or by default the batched entry of
    the dtype's big-tile and small-tile lists that pads a member's C least (the larger tile among equals):
    a member is often one tile or a few, where padding, not waves, decides; given B's members column-major
    (x @ W.T per expert or head) and the (a, b, out) `matrices`, its twin family's entry that reads them in
    place (placement_rules.b_layout), where the entry chosen would copy every member. converts: C's dtype
    name where it is not `dtype`'s."""
    if variant is not None:
        problem = operands.Problem(plan.m, plan.n, plan.k, np.dtype(dtype), device.id, converts)
        chosen = decide(variant, problem, precision)
        if isinstance(chosen, str):  # "cublas"
            raise InputError("variant='cublas' runs 2-D products here; for batches call cupy.matmul itself")
        if not chosen.family.batched:
            raise InputError(f"variant {chosen.name!r} (family {chosen.family.name}) runs no batches; families "
                             f"that do: {', '.join(sorted(n for n, f in registry.families().items() if f.batched))}")
        return chosen
    gpu = dispatch.gpu_of(device.id)
    key = dispatch.defaults_key(np.dtype(dtype).name, precision)
    lists = dispatch.candidates()
    usable = [registry.lookup(name) for role in ("default", "small_tile") for name in lists[role][key]
              if dispatch.why_not(name, key, gpu.cc, needs) is None]
    if not usable:
        raise InputError(f"no variant for {key} batches{' with an epilogue' if 'epilogue' in needs else ''}"
                         f"{f' stored as {converts}' if converts else ''} runs on this GPU")
    area = lambda v: v.family.tile(v.params)[0] * v.family.tile(v.params)[1]
    chosen = min(usable, key=lambda v: (dispatch.padded_area(v, plan.m, plan.n), -area(v)))
    if matrices is None:
        return chosen
    member = lambda x: arrange.geometry(x[(0,) * (x.ndim - 2)])
    placement = arrange.Placement(*(member(x) for x in matrices))
    return registry.lookup(placement_rules.b_layout(gpu, key, Decision(chosen.name, ""), placement, needs).variant)


def _run(variant, a, b, out, plan, alpha, beta, device, epilogue, values, converts=None, deterministic=True):
    """The batched launch: each operand in place where its members fit the family, else copied. Returns
    (the launch, the shape of the buffer of its own it wrote C into or None, and the Layout a repeat copies
    A and B by, or None where both were used in place)."""
    import cupy
    fam = variant.family
    align = fam.align(variant.params, variant.dtype)
    out_align = operands.c_align(align, a.itemsize, out.itemsize)  # the same bytes in C's elements
    up = lambda x: -(-x // align) * align
    # a family that takes any N (Family.ragged_n) reads B as it is; its C, whose vector stores may pass a
    # ragged N, is then a buffer of aligned stride, unless the family stores any C (Family.unaligned_c)
    ragged = fam.ragged_n and plan.n % align != 0
    k_pad, n_pad = up(plan.k), up(plan.n) if fam.layout == "row" and not ragged else plan.n
    if fam.layout != "row":
        raise InputError(f"variant {variant.name!r}: batches run on row-major families")
    layout = Layout(align, k_pad, n_pad, fam.b_layout or "row")
    A, B = _laid_out(cupy, a, b, layout)
    C, copy_back = out, None
    where = _c_placement(out, out_align, ragged, fam.unaligned_c) if n_pad == plan.n else None
    if where is None:
        C = _members_buffer(cupy, out, n_pad, out_align)  # the kernel writes all of it
        if beta != 0:
            C[..., :plan.n] = out
        copy_back = C[..., :plan.n]
    final = batching.plan(A.shape, A.strides, B.shape, B.strides, C.strides, itemsize=A.itemsize,
                          out_itemsize=C.itemsize)
    if not final.fits:  # more batch dimensions than a kernel unravels: make a and C contiguous
        layout = layout._replace(contiguous_a=True)
        A = cupy.ascontiguousarray(A)
        if copy_back is None:  # C is out itself (else this call's buffer, whose members follow each other)
            C = _members_buffer(cupy, out, n_pad, out_align)
            if beta != 0:
                C[..., :plan.n] = out
            copy_back = C[..., :plan.n]
        final = batching.plan(A.shape, A.strides, B.shape, B.strides, C.strides, itemsize=A.itemsize,
                              out_itemsize=C.itemsize)
    unaligned_c = C is out and where == "unaligned"  # rendered to store C at any leading dimension and address
    if epilogue is not None:
        variant = variant.with_extras(batched=True, epilogue=epilogue, out_dtype=converts, unaligned_c=unaligned_c)
        params = epilogue.pack(values, plan.m, plan.n)
    else:
        variant, params = variant.with_extras(batched=True, out_dtype=converts, unaligned_c=unaligned_c), None
    member = lambda x: x[(0,) * (x.ndim - 2)]
    A0, B0, C0 = member(A), member(B), member(C)
    ld = lambda x, order: operands.leading_dim(x.shape, x.strides, x.itemsize, order)
    run = launch.prepare(variant, device, A0, B0, C0, final.m, final.n, final.k, ld(A0, "row"),
                         ld(B0, fam.b_layout or "row"), ld(C0, "row"), alpha, beta, batch=final,
                         epilogue_params=params, deterministic=deterministic)
    run()
    if copy_back is not None:
        out[...] = copy_back
    # a repeated call reuses the launch: C is out or a buffer of the same shape, A and B are a and b or their
    # copies by the same layout
    return (run, None if copy_back is None else _members_shape(out, n_pad, out_align),
            None if A is a and B is b else layout)


class Layout(NamedTuple):
    """How a batch's A and B reach the family: its alignment, K and N padded to it, B's order, and whether A
    was then made contiguous (more batch dimensions than a kernel unravels)."""
    align: int
    k_pad: int
    n_pad: int
    b_order: str
    contiguous_a: bool = False


def _laid_out(cupy, a, b, layout: Layout):
    """A and B as the launch reads them: each itself where its members fit, else a (zero-padded) copy."""
    A = _member_layout(cupy, a, "row", layout.align, cols=layout.k_pad)
    if layout.contiguous_a:
        A = cupy.ascontiguousarray(A)
    return A, _member_layout(cupy, b, layout.b_order, layout.align, rows=layout.k_pad, cols=layout.n_pad)


def _fits(x, order: str, align: int) -> bool:
    """Every member of x (..., rows, cols) usable in place by a kernel needing `align`: the member's
    layout and leading dimension, and batch strides that keep each member's start aligned."""
    return arrange.fits(arrange.geometry(x[(0,) * (x.ndim - 2)]), order, align) is not None and _starts(x, align)


def _starts(x, align: int) -> bool:
    """Batch strides that keep every member's start as aligned as member 0's."""
    return all(s % (align * x.itemsize) == 0 for s, n in zip(x.strides[:-2], x.shape[:-2]) if n > 1)


def _c_placement(out, align: int, ragged: bool, unaligned_c: bool) -> str | None:
    """arrange.c_placement for every member of out: a member starting off the alignment rules out the
    aligned stores, as a ragged N does."""
    member = arrange.geometry(out[(0,) * (out.ndim - 2)])
    return arrange.c_placement(member, "row", align, ragged or not _starts(out, align), unaligned_c=unaligned_c)


def _members_shape(out, cols: int, align: int) -> tuple:
    """The shape of a C for out's members with `cols` columns, each row starting `align`-aligned (a 16-bit C
    of fp32 inputs needs more columns of padding than the inputs' alignment gives)."""
    return out.shape[:-1] + (-(-cols // align) * align,)


def _members_buffer(cupy, out, cols: int, align: int):
    """An uninitialised C of _members_shape, seen as its first `cols` columns."""
    return cupy.empty(_members_shape(out, cols, align), out.dtype)[..., :cols]


def _member_layout(cupy, x, order: str, align: int, rows: int | None = None, cols: int | None = None):
    """x itself when its members fit `order` and `align` at (rows, cols) (None: as they are), else a
    copy — zero-padded to (rows, cols) — that keeps x's broadcast (size-1) batch dimensions."""
    r, c = x.shape[-2:]
    rows, cols = rows or r, cols or c
    if (rows, cols) == (r, c) and _fits(x, order, align):
        return x
    shape = x.shape[:-2] + ((rows, cols) if order == "row" else (cols, rows))
    buf = cupy.zeros(shape, x.dtype)
    if order == "row":
        buf[..., :r, :c] = x
        return buf
    buf[..., :c, :r] = x.swapaxes(-1, -2)
    return buf.swapaxes(-1, -2)

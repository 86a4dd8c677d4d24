"""Prepared launches: what a call decided, kept so that repeating it with new arrays only launches.

A call's key holds everything its decisions depend on except the data: the type, shape, strides, dtype
and device of a, b, c and out (whether c and out were given), each base address modulo 256 (a view's
offset can break a kernel's vector or TMA alignment), the current device and stream (the split-K
workspace is per stream), the variant argument, CUPY_TF32, alpha, beta, the epilogue, out_dtype and
`deterministic`. Two
calls with equal keys pass the same shape, dtype and device checks of operands.check, get the same variant,
the same arrangement of the operands (in place, swapped to Cᵀ = Bᵀ·Aᵀ, or copied) and the same grid and
scalar arguments. What looks at addresses runs on every call: the overlap checks, and the tensor maps of
Hopper families, which embed the addresses (so their entry keeps an LRU of argument tuples by address, and
rotating weights still hit). A hit costs the key, a dictionary lookup, the output allocation and the launch;
where the kernel writes a C of its own (a ragged N, an output view no kernel can write), also that buffer
and the copy into out; where A or B is copied into the kernel's layout, or zero-padded to its alignment, also
those copies (of the same shapes each time, so the kept launch serves them).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from . import config, launch, operands, padding
from .errors import InputError
from .families.base import CUDA_TYPES

CUBLAS = "cublas"
ENTRIES = 256  # call geometries kept (least recently used dropped)
ADDRESSES = 256  # argument tuples kept per entry of a family whose arguments embed addresses

_lock = threading.Lock()
_entries: OrderedDict = OrderedDict()


def keep(cache: OrderedDict, key, value, most: int):
    """cache[key] = value, the oldest entries dropped beyond `most`; returns value. The caches of call
    geometries (here, batched.py, scaled.py) and of argument tuples by address share it (and `recall`)."""
    cache[key] = value
    while len(cache) > most:
        cache.popitem(last=False)
    return value


def recall(cache: OrderedDict, key):
    """cache[key], marked the newest, or None (also for key None: arguments that form no key). A thread may
    drop the entry meanwhile; the value found still serves this call."""
    value = cache.get(key) if key is not None else None
    if value is not None:
        try:
            cache.move_to_end(key)
        except KeyError:
            pass
    return value


class Buffer(NamedTuple):
    """C's buffer of a call's own (a ragged N, a view no kernel can write): made anew each call, copied into out."""
    geometry: tuple  # (shape, order) of the whole buffer, as operands.output_buffer takes it
    shape: tuple  # C: its leading view of that shape
    crop: object  # the padding.Cropper that copies it into an out dense in the kernel's layout, else None


class Direct(NamedTuple):
    """What the first run of a geometry resolved, for the calls after it."""
    run: object  # the prepared launch
    swapped: bool  # the kernel computes Cᵀ = Bᵀ·Aᵀ
    buffer: Buffer | None  # None where the kernel writes out itself
    copies: tuple | None  # None, or the layouts ("row", "col" or None: in place) A and B are copied into, in the
    # kernel's orientation
    padded: tuple | None  # (M, K, N) of the zero-padded problem both copies fill, or None; C is then the
    # buffer's leading view where the kernel writes one (the padded rows and columns are dropped)
    padder: object  # the padding.Padder that fills those copies, or None


class Prepared:
    """One call geometry with its variant decided. run() serves any arrays with the geometry's key; the
    first run records the launch, later ones reuse it with the new addresses (copying or zero-padding an
    operand into the kernel's layout again where the first run did)."""

    def __init__(self, variant, problem: operands.Problem, device, alpha: float, beta: float, c_given: bool,
                 epilogue=None, deterministic: bool = True):
        self.variant, self.device = variant, device
        self.deterministic = deterministic  # False: split-K sums by atomics where they win (launch.configure)
        self.epilogue = epilogue  # an epilogue.Epilogue fused into the kernel, or None
        self.out_dtype = problem.out_dtype  # C's dtype name where the kernel converts, else None
        self.result_dtype = problem.out_dtype or problem.dtype  # what a call without `out` allocates
        self.m, self.n, self.k = problem.m, problem.n, problem.k
        self.alpha = alpha
        self.beta = beta if c_given else 0.0  # BLAS: no C given means C = 0
        self.empty = 0 in (problem.m, problem.n, problem.k)
        self.is_cublas = isinstance(variant, str) and variant == CUBLAS
        self.by_address = not self.is_cublas and variant.family.make_args is not None
        self.direct: Direct | None = None  # after the first run
        self.addresses: OrderedDict = OrderedDict()

    def run(self, a, b, c, out, values=None):
        """Compute into `out` (allocated, checked) on the current device and stream. values: the
        epilogue's operands by name."""
        beta = self.beta
        if beta != 0 and c is not out and not operands.same_view(c, out):
            out[...] = c
        if self.empty:
            if beta == 0:
                out.fill(0)
            else:
                out *= out.dtype.type(beta)
            if self.epilogue is not None and out.size:  # no product to fuse into: the epilogue alone
                epilogue_only(self.epilogue, out, values)
            return out
        if self.is_cublas:
            return cublas(a, b, out, self.alpha, beta)
        direct = self.direct
        if direct is None:
            return self._resolve_and_run(a, b, out, values)
        known, swapped, buffer, copies, padded, padder = direct
        dest = out.T if swapped else out  # C as the kernel sees it
        C = dest if buffer is None else operands.output_buffer(_cupy or _cupy_module(), out.dtype, buffer.shape,
                                                               buffer.geometry)
        view = C if padded is None or C is dest else C[:dest.shape[0], :dest.shape[1]]  # what out receives
        if C is not dest and beta != 0:
            view[...] = dest
        if copies is not None:
            A, B = _laid_out(a, b, swapped, copies, padder)
        if not self.by_address:  # b.T has b's address: the swapped problem's A (the pointer ABI needs no view)
            if copies is None:
                A, B = (b, a) if swapped else (a, b)
            if self.epilogue is None:
                known.launch_pointers(A, B, C)
                return _copied_back(out, dest, view, buffer)
            args = (A, B, C) + known.args[launch.POINTER_SLOTS:]
        else:
            x, y = (a, b) if copies is None else (A, B)  # the caller's operands (views made only on a miss)
            where = (x.data.ptr, y.data.ptr, C.data.ptr)
            args = self.addresses.get(where)
            if args is None:
                args = known.pack(known.rebind(*((b.T, a.T) if swapped and copies is None else (x, y)), C))
                self._remember(where, args)
        if self.epilogue is not None:
            args = known.with_epilogue(self.epilogue.pack(values, self.m, self.n), args)
        known.launch(args)
        return _copied_back(out, dest, view, buffer)

    def _resolve_and_run(self, a, b, out, values=None):
        v = self.variant
        fam = v.family
        ops = operands.resolve(a, b, out, fam.layout, fam.align(v.params, v.dtype), fam.b_layout, v.max_rows(),
                               self.beta != 0, fam.ragged_n, fam.scalar_c, fam.unaligned_c)
        params, unaligned_c = None, ops.arrangement.unaligned_c
        if self.epilogue is not None:  # in the kernel's orientation; the operands as the caller gave them
            v = v.with_extras(epilogue=self.epilogue.transposed(ops.swapped), out_dtype=self.out_dtype,
                              unaligned_c=unaligned_c)
            params = self.epilogue.pack(values, self.m, self.n)
        else:
            v = v.with_extras(out_dtype=self.out_dtype, unaligned_c=unaligned_c)
        run = launch.prepare(v, self.device, ops.A, ops.B, ops.C, ops.m, ops.n, ops.k, ops.lda, ops.ldb, ops.ldc,
                             self.alpha, self.beta, epilogue_params=params, deterministic=self.deterministic)
        run()
        buffer = None
        if ops.copy_back is not None:  # with a buffer of C's own
            dest, src = ops.copy_back
            crop = padding.Cropper(src, dest, fam.layout) if padding.Cropper.fits(dest, fam.layout) else None
            buffer = Buffer(ops.c_buffer, ops.C.shape, crop)
            _copied_back(out, dest, src, buffer)
        # the same key always resolves the same way
        arr = ops.arrangement
        copies = None if not ops.copied else (fam.layout if arr.copy_a else None,
                                               (fam.b_layout or fam.layout) if arr.copy_b else None)
        self.direct = Direct(run, ops.swapped, buffer, copies, arr.padded, ops.padder)
        if self.by_address:  # keyed as run() looks up: the caller's a and b, or the kernel's copies
            A, B = (a, b) if copies is None else (ops.A, ops.B)
            self._remember((A.data.ptr, B.data.ptr, ops.C.data.ptr), run.pack(run.args))
        return out

    def _remember(self, where, args):
        keep(self.addresses, where, args, ADDRESSES)


def cublas(a, b, out, alpha, beta):
    """cupy.matmul (cuBLAS). An out of another dtype than a and b gets the product in a's dtype, then
    alpha·product + beta·out in fp32, converted: a second pass, and 16-bit inputs' product is rounded to
    their dtype first."""
    import cupy
    import numpy as np
    if out.dtype != a.dtype:
        y = cupy.matmul(a, b).astype(np.float32) * np.float32(alpha)
        if beta != 0:
            y += out.astype(np.float32) * np.float32(beta)
        out[...] = y.astype(out.dtype)
        return out
    if alpha == 1 and beta == 0:
        return cupy.matmul(a, b, out=out)
    prod = cupy.matmul(a, b)
    if beta == 0:
        cupy.multiply(prod, out.dtype.type(alpha), out=out)
    else:
        out[...] = (prod.astype(np.float32) * alpha + out.astype(np.float32) * beta).astype(out.dtype)
    return out


def call(a, b, c, out, alpha, beta, variant, decide, precision=None, epilogue=None, values=None, out_dtype=None,
         deterministic=True):
    """alpha·a·b + beta·c into out (allocated when None), then the epilogue (an epilogue.Epilogue, its
    operands in `values`) if any, stored as out_dtype (a name, operands.out_dtype_name's; None: out's
    dtype, else a's). variant: None, a name or a Variant; decide(variant, problem, precision) ->
    Variant or "cublas" runs on a miss only. deterministic=False lets split-K sum by atomics."""
    alpha, beta = float(alpha), float(beta)
    key = _key(a, b, c, out, alpha, beta, variant, precision, epilogue, out_dtype, deterministic)
    entry = recall(_entries, key)
    if entry is not None:
        if out is not None:
            operands.check_addresses(a, b, c, out, beta)
        else:
            out = allocate((entry.m, entry.n), entry.result_dtype)
        return entry.run(a, b, c, out, values)
    problem = operands.check(a, b, c, out, beta, out_dtype)
    entry = Prepared(decide(variant, problem, precision), problem, device_of(problem.device_id), alpha, beta,
                     c is not None, epilogue, deterministic)
    if epilogue is not None:
        if entry.is_cublas:
            raise InputError("variant='cublas' has no fused epilogue: pick a kernel of the catalogue, or None")
        # a family without epilogues says so before anything runs
        entry.variant.with_extras(epilogue=epilogue, out_dtype=problem.out_dtype)
        epilogue.pack(values, problem.m, problem.n)  # so do operands of the wrong shape or type
    with entry.device:
        if out is None:
            out = allocate((problem.m, problem.n), entry.result_dtype)
        if not entry.is_cublas and epilogue is None:  # compile and load before anything runs: errors surface here
            launch.load(entry.variant.with_extras(out_dtype=problem.out_dtype), entry.device)
        result = entry.run(a, b, c, out, values)
    if key is not None:
        with _lock:
            keep(_entries, key, entry, ENTRIES)
    return result


def _key(a, b, c, out, alpha, beta, variant, precision=None, epilogue=None, out_dtype=None, deterministic=True):
    """The call's key, or None when it is not cached: operands that are not plain CuPy arrays (the full
    check then raises the right error), or a current device other than the operands' (the launch
    switches devices, whose streams the key does not see)."""
    ndarray = _cupy.ndarray if _cupy is not None else _cupy_module().ndarray
    if type(a) is not ndarray or type(b) is not ndarray:
        return None
    a_data, b_data = a.data, b.data
    device_id = a_data.device_id
    if device_id != current_device():
        return None
    if variant is None or type(variant) is str:
        token = variant
    elif hasattr(variant, "family"):  # a Variant: by identity, which the entry keeps alive
        token = id(variant)
    else:
        return None
    if c is None and out is None:
        extra = None
    else:
        extra = []
        for x in (c, out):
            if x is not None and type(x) is not ndarray:
                return None
            extra.append(x if x is None else (x.shape, x.strides, x.dtype, x.data.device_id, x.data.ptr & 255))
        extra = tuple(extra)
    dtype = a.dtype
    # CUPY_TF32 only changes the default for float32; reading the environment costs a microsecond
    tf32 = token is None and dtype.char == "f" and config.allow_tf32()
    return (a.shape, a.strides, dtype, a_data.ptr & 255, b.shape, b.strides, b.dtype, b_data.device_id,
            b_data.ptr & 255, extra, device_id, launch.current_stream(), token, alpha, beta, tf32, precision, epilogue,
            out_dtype, deterministic)


def _laid_out(a, b, swapped, copies, padder=None):
    """The kernel's A and B (b.T and a.T when swapped), each copied into its layout where `copies` names one,
    or both zero-padded by `padder` (a padding.Padder) where that is given."""
    cupy = _cupy or _cupy_module()
    pair = (b.T, a.T) if swapped else (a, b)
    if padder is not None:
        return padder(*pair)
    return tuple(x if layout is None else operands.laid_out(cupy, x, layout) for x, layout in zip(pair, copies))


def _copied_back(out, dest, C, buffer):
    """out, once C (the leading view of the kernel's own buffer, where it wrote one) is copied into dest."""
    if C is not dest:
        if buffer.crop is not None:
            buffer.crop(C, dest)
        else:
            dest[...] = C
    return out


def epilogue_only_source(ep, dtype: str) -> str:
    """The fused epilogue alone as a kernel over a dtype matrix (templates/epilogue_only.cu.j2)."""
    from .render import render_file
    return render_file("epilogue_only.cu.j2", VARIANT="epilogue_only", FAMILY="-", DTYPE=dtype, ACC="float32",
                       LAYOUT="row", T_IN=CUDA_TYPES[dtype][0], T_OUT=CUDA_TYPES[dtype][0],
                       T_ACC="float", THREADS=256,
                       EPILOGUE=ep.render())


def epilogue_only(ep, out, values) -> None:
    """y = epilogue(x) over out in place (products with K = 0, where no GEMM kernel runs)."""
    source = epilogue_only_source(ep, out.dtype.name)
    kernel = launch.load_helper("epilogue_only", source, "epilogue_only", out.device)
    m, n = out.shape
    strides = [s // out.itemsize for s in out.strides]
    kernel(((m * n + 255) // 256,), (256,), (out, np.int32(m), np.int32(n), np.int64(strides[0]),
                                             np.int64(strides[1]), ep.pack(values, m, n)))


def clear() -> None:
    """Forget every prepared call (the tests use it; a process never needs to)."""
    with _lock:
        _entries.clear()


# The few CuPy calls a hit makes, named so that tests can run the fast path without a GPU. CuPy is
# imported on first use (the package imports without it), then kept: an import statement costs a lookup.
_cupy = None


def _cupy_module():
    global _cupy
    if _cupy is None:
        import cupy
        _cupy = cupy
    return _cupy


def current_device() -> int:
    return (_cupy or _cupy_module()).cuda.runtime.getDevice()


def allocate(shape, dtype):
    return (_cupy or _cupy_module()).ndarray(shape, dtype)


def device_of(device_id: int):
    return (_cupy or _cupy_module()).cuda.Device(device_id)

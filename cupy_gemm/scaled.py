"""FP8 products on CuPy arrays: scaled_mm and scaled_plan (quantize and dequantize are in fp8.py).

fp8 operands are uint8 arrays with a format name ("e4m3" or "e5m2"). scaled_mm follows torch._scaled_mm:
a (M×K) row-major, b (K×N) column-major (the transpose of an (N×K) C-contiguous array), float32 scales,
out = (scale_a ∘ a) · (scale_b ∘ b) in bfloat16, float16 or float32. Where it differs from torch:

- the scaling mode comes from the scale shapes alone: () or (1,) per tensor; (M, 1) and (1, N) per row of
  a and column of b; (M, ceil(K/128)) and (ceil(N/128), ceil(K/128)) in 1×128 and 128×128 blocks
  (torch 2.11 takes the block shapes only through its newer scaled_mm API);
- any M, N >= 1 and any K: K that is not a multiple of 16 (TMA's 16-byte rows) is padded with zeros on
  the way in, exactly; torch requires K % 16 == 0 and N % 16 == 0;
- no bias, no scale_result, no use_fast_accum argument: every 128-deep K-block is added into fp32
  registers (torch's default, use_fast_accum=False); a catalogue variant with PROMOTE = 0 is the fast mode,
  one with PROMOTE = 2 promotes every 256 of K;
- e5m2 is allowed for one operand, not both (as torch);
- scales must be float32 CuPy arrays on the operands' device; the wgmma kernels read block scales of a
  [K-block][M], so an (M, ceil(K/128)) scale_a that is the transpose of a C-contiguous array with M % 4 == 0
  (as quantize returns it) is used in place, any other is copied (the copy engine needs rows of 16-byte
  multiples); the decode kernel (at most 64 rows) reads any scale_a in place, by its strides.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from . import fp8, launch, operands, registry
from .errors import DTypeError, InputError
from .fp8 import BLOCK, check_format
from .operands import require_cupy
from .prepared import keep, recall
from .scaled_choice import DECODE_FAMILY, FAMILIES, SCALING_IDS, variant_for

OUT_DTYPES = ("bfloat16", "float16", "float32")
K_ALIGN = 16  # bytes: TMA's row stride rule, = elements for fp8

def scale_modes(scale_a_shape, scale_b_shape, m: int, n: int, k: int) -> list[str]:
    """The scaling modes ('tensor', 'rowcol', 'block', cheapest first) the two scale shapes fit together;
    InputError when none. Where two fit (one K-block and one column) they mean the same products."""
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)
    a_modes = {"tensor": tuple(scale_a_shape) in ((), (1,)), "rowcol": tuple(scale_a_shape) == (m, 1),
               "block": tuple(scale_a_shape) == (m, kb)}
    b_modes = {"tensor": tuple(scale_b_shape) in ((), (1,)), "rowcol": tuple(scale_b_shape) == (1, n),
               "block": tuple(scale_b_shape) == (nb, kb)}
    modes = [mode for mode in SCALING_IDS if a_modes[mode] and b_modes[mode]]
    if not modes:
        raise InputError(f"scale_a {tuple(scale_a_shape)} and scale_b {tuple(scale_b_shape)} fit no scaling mode "
                         f"for a {m}×{k} by {k}×{n} product; expected per tensor () or (1,) for both; per row/column "
                         f"({m}, 1) and (1, {n}); blocks ({m}, {kb}) and ({nb}, {kb}) (1×128 of a, 128×128 of b)")
    return modes


def check_operands(a, b, scale_a, scale_b, format_a: str, format_b: str, out_dtype: str):
    """Every check that needs no GPU, on anything with shape/strides/dtype. Returns (M, N, K, the scaling
    modes the scale shapes fit)."""
    check_format(format_a, "format_a")
    check_format(format_b, "format_b")
    if format_a == "e5m2" and format_b == "e5m2":
        raise InputError("e5m2 × e5m2 is not supported (as in torch._scaled_mm): make one operand e4m3")
    if out_dtype not in OUT_DTYPES:
        raise DTypeError(f"out_dtype must be one of {list(OUT_DTYPES)}; got {out_dtype!r}")
    for name, x in (("a", a), ("b", b)):
        if x.dtype != np.uint8:
            raise DTypeError(f"{name} must hold fp8 bytes as uint8 (a torch float8 tensor: t.view(torch.uint8), "
                             f"then cupy.from_dlpack); got {x.dtype}")
        if x.ndim != 2:
            raise InputError(f"{name} must be a 2-D matrix; got shape {tuple(x.shape)}")
    m, n, k = operands.matrix_sizes(a, b)
    if m > 1 and k > 1 and a.strides[1] != 1:
        raise InputError(f"a must be row-major (unit stride along K); got strides {a.strides}: "
                         f"pass cupy.ascontiguousarray(a)")
    if n > 1 and k > 1 and b.strides[0] != 1:
        raise InputError(f"b must be column-major (unit stride along K), the transpose of an (N, K) C-contiguous "
                         f"array as torch._scaled_mm wants; got strides {b.strides}: pass w.T for w of shape "
                         f"({n}, {k}), or cupy.asfortranarray(b)")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.dtype != np.float32:
            raise DTypeError(f"{name} must be float32; got {s.dtype}")
    return m, n, k, scale_modes(scale_a.shape, scale_b.shape, m, n, k)


def check_variant(variant, format_a: str, format_b: str, modes, out_dtype: str, m: int | None = None,
                  n: int | None = None, k: int | None = None, sm_count: int | None = None) -> tuple[registry.Variant, str]:
    """The variant to run and its scaling mode: the default for the cheapest mode (for an m×n×k product on
    sm_count SMs where given), or the one the caller named, which must be of this family and match the call."""
    if variant is None:
        return variant_for(format_a, format_b, modes[0], out_dtype, m, n, k, sm_count), modes[0]
    variant = getattr(variant, "variant", variant)  # a Kernel
    if isinstance(variant, str):
        variant = registry.lookup(variant)
    if not isinstance(variant, registry.Variant) or variant.family.name not in FAMILIES:
        raise InputError(f"scaled_mm runs {', '.join(FAMILIES)} variants; got {getattr(variant, 'name', variant)!r}")
    p = variant.params
    mode = list(SCALING_IDS)[p["SCALING"]]
    got = (fp8.FORMATS[p["FORMAT_A"]], fp8.FORMATS[p["FORMAT_B"]], variant.dtype)
    if got != (format_a, format_b, out_dtype) or mode not in modes:
        raise InputError(f"variant {variant.name!r} multiplies {got[0]} × {got[1]} with {mode} scales into "
                         f"{got[2]}; this call is {format_a} × {format_b}, {' or '.join(modes)} scales, {out_dtype} "
                         f"out (variant=None picks one)")
    return variant, mode


def _tma_ready(x, rows: int, cols: int, itemsize: int) -> int | None:
    """Row stride (elements) when x (rows×cols, unit inner stride) can be a tensor map's matrix as is."""
    ld = x.strides[0] // itemsize if rows > 1 else cols
    aligned = x.data.ptr % 16 == 0 and (ld * itemsize) % 16 == 0 and ld >= cols
    return ld if aligned and (cols == 1 or x.strides[1] == itemsize) else None


def _k_major(x, rows: int, k: int):
    """x (rows×k, unit stride along k) as a matrix the copy engine takes: (array, row stride), padding K to
    a multiple of 16 with zeros (exact: zero bytes are +0 in both formats) when it must be copied."""
    import cupy
    ld = _tma_ready(x, rows, k, 1) if k % K_ALIGN == 0 else None
    if ld is not None:
        return x, ld
    padded = cupy.zeros((rows, -(-k // K_ALIGN) * K_ALIGN), dtype=np.uint8)
    padded[:, :k] = x
    return padded, padded.shape[1]


def _kernel_scales(scale, mode: str, operand: str, strided: bool = False):
    """Scales in the kernel's layout: A's blocks as [K-block][M] rows of 16-byte multiples, so that a
    K-block's row scales are one box for the copy engine (zeros pad M to a multiple of 4); `strided`: as
    they are, for a kernel that reads A's blocks by their strides (decode_fp8)."""
    import cupy
    if mode == "block" and operand == "a":
        if strided:
            return scale
        rows = scale.T
        if _scales_in_place(scale, mode):
            return rows
        padded = cupy.zeros((rows.shape[0], -(-rows.shape[1] // 4) * 4), dtype=np.float32)
        padded[:, :rows.shape[1]] = rows
        return padded
    return cupy.ascontiguousarray(scale.reshape(-1) if mode != "block" else scale)


def _scales_in_place(scale_a, mode: str, strided: bool = False) -> bool:
    """Whether a's scales reach the kernel as they are, not copied into its layout (_kernel_scales)."""
    if mode == "block":
        if strided:
            return True
        return _tma_ready(scale_a.T, *scale_a.T.shape, 4) is not None
    return scale_a.flags.c_contiguous


def _output(out, m: int, n: int, out_dtype: str, device):
    """(array the kernel writes, its row stride, array to copy it into afterwards or None)."""
    import cupy
    size = np.dtype(out_dtype).itemsize
    if out is not None:
        require_cupy(out, "out")
        if out.shape != (m, n) or out.dtype != np.dtype(out_dtype):
            raise InputError(f"out must be a ({m}, {n}) {out_dtype} array; got {out.shape} {out.dtype}")
        if out.device.id != device.id:
            raise InputError(f"out is on GPU {out.device.id}, the operands on GPU {device.id}")
        ld = _tma_ready(out, m, n, size)
        if ld is not None:
            return out, ld, None
    width = -(-n * size // 16) * 16 // size  # rows of 16-byte multiples, as TMA stores need
    with device:
        target = out if out is not None else cupy.empty((m, n), dtype=out_dtype)
        if width == n and out is None:
            return target, n, None
        return cupy.empty((m, width), dtype=out_dtype), width, target


class _Plan:
    """Every check and choice of one call geometry: the shapes, strides, dtypes, devices and 16-byte
    alignment of the operands, the scales and `out`, the formats, the output type and the variant.
    run() multiplies any arrays of that geometry; where the kernel reads them in place, the packed
    arguments (whose tensor maps embed addresses) are kept by address."""

    def __init__(self, a, b, scale_a, scale_b, format_a, format_b, out_dtype, out, variant, deterministic=True):
        import cupy
        for name, x in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
            require_cupy(x, name)
        deterministic = operands.deterministic_flag(deterministic)
        try:
            out_dtype = np.dtype(out_dtype).name
        except TypeError:  # not a dtype NumPy knows: check_operands names the ones it takes
            out_dtype = str(out_dtype)
        self.out_dtype = out_dtype
        m, n, k, modes = check_operands(a, b, scale_a, scale_b, format_a, format_b, out_dtype)
        devices = {x.device.id for x in (a, b, scale_a, scale_b)}
        if len(devices) > 1:
            raise InputError(f"a, b and the scales must be on one GPU; they are on GPUs {sorted(devices)}")
        self.device = device = cupy.cuda.Device(a.device.id)
        self.variant, self.mode = check_variant(variant, format_a, format_b, modes, out_dtype, m, n, k,
                                                launch.sm_count(device))
        self.m, self.n, self.k = m, n, k
        self.strided_scales = self.variant.family.name == DECODE_FAMILY  # reads A's block scales where they lie
        self.product = None
        if m and n and k:
            with device:  # compile and load now: errors surface here
                self.variant, kernel, cfg = launch.configure(self.variant, device, m, n, k,
                                                             deterministic=deterministic)
            self.product = launch.Launch(kernel, cfg, (), self.variant, device, (m, n, k),
                                         pdl=launch.uses_pdl(self.variant, device))
        # operands the kernel reads where they lie give the same arguments for the same addresses
        self.in_place = (k % K_ALIGN == 0 and _tma_ready(a, m, k, 1) is not None
                         and _tma_ready(b.T, n, k, 1) is not None
                         and _scales_in_place(scale_a, self.mode, self.strided_scales)
                         and scale_b.flags.c_contiguous)
        self.packed: OrderedDict = OrderedDict()

    def output(self, out):
        """(array the kernel writes, its row stride, array to copy it into afterwards or None)."""
        return _output(out, self.m, self.n, self.out_dtype, self.device)

    def _arguments(self, a, b, scale_a, scale_b, target, ldc):
        """The kernel's arguments for the operands as they are now (copied where the kernel needs it)."""
        v, m, n, k = self.variant, self.m, self.n, self.k
        a_k, lda = _k_major(a, m, k)
        b_k, ldb = _k_major(b.T, n, k)
        args = v.family.make_args(v, a_k, b_k, target, _kernel_scales(scale_a, self.mode, "a", self.strided_scales),
                                  _kernel_scales(scale_b, self.mode, "b"), m, n, a_k.shape[1], lda, ldb, ldc)
        return self.product.pack((*args, *launch.split_k_args(v, self.product.config)))

    def run(self, a, b, scale_a, scale_b, target, ldc, copy_into) -> None:
        if not (self.m and self.n):
            return
        with self.device:
            if self.product is None:  # K = 0
                target.fill(0)
            elif self.in_place:
                where = (a.data.ptr, b.data.ptr, scale_a.data.ptr, scale_b.data.ptr, target.data.ptr)
                packed = self.packed.get(where)
                if packed is None:
                    packed = keep(self.packed, where, self._arguments(a, b, scale_a, scale_b, target, ldc), ADDRESSES)
                self.product.launch(packed)
            else:
                self.product.launch(self._arguments(a, b, scale_a, scale_b, target, ldc))
            if copy_into is not None:
                copy_into[...] = target[:, :self.n]


PLANS = 64  # call geometries scaled_mm keeps (least recently used dropped)
ADDRESSES = 64  # packed argument tuples a plan keeps by address (the oldest dropped)
_plans: OrderedDict = OrderedDict()
_lock = threading.Lock()


def _geometry(a, b, scale_a, scale_b, format_a, format_b, out_dtype, out, variant, deterministic=True):
    """What _Plan's checks and choices depend on, or None where a call must take the whole path, whose
    checks say what is wrong (an argument that is not a CuPy array, a variant given as an object, a format
    or out_dtype that cannot be a key)."""
    import cupy
    arrays = (a, b, scale_a, scale_b) if out is None else (a, b, scale_a, scale_b, out)
    if any(type(x) is not cupy.ndarray for x in arrays) or not isinstance(variant, (str, type(None))):
        return None
    key = (format_a, format_b, out_dtype, variant, deterministic, out is None,
           *[(x.shape, x.strides, x.dtype, x.device.id, x.data.ptr % 16) for x in arrays])
    try:
        hash(key)
    except TypeError:
        return None
    return key


def scaled_mm(a, b, scale_a, scale_b, *, format_a="e4m3", format_b="e4m3", out_dtype="bfloat16", out=None,
              variant=None, deterministic=True):
    """(scale_a ∘ a) · (scale_b ∘ b) for fp8 a (M×K uint8, row-major) and b (K×N uint8, column-major),
    fp32 accumulation, as out_dtype. See the module docstring for the scale shapes and where this
    differs from torch._scaled_mm. variant: a wgmma_fp8 or decode_fp8 catalogue name or Kernel, or None.
    deterministic: as for matmul (False: split-K partials added by atomics, not bitwise repeatable).
    A repeated geometry reuses its plan: checked and chosen once (scaled_plan holds one explicitly)."""
    key = _geometry(a, b, scale_a, scale_b, format_a, format_b, out_dtype, out, variant, deterministic)
    plan = recall(_plans, key)
    if plan is None:
        plan = _Plan(a, b, scale_a, scale_b, format_a, format_b, out_dtype, out, variant, deterministic)
        if key is not None:
            with _lock:
                keep(_plans, key, plan, PLANS)
    target, ldc, copy_into = plan.output(out)
    plan.run(a, b, scale_a, scale_b, target, ldc, copy_into)
    return copy_into if copy_into is not None else target


def scaled_plan(a, b, scale_a, scale_b, *, format_a="e4m3", format_b="e4m3", out_dtype="bfloat16", out=None,
                variant=None, deterministic=True):
    """scaled_mm with every check and choice made now: calling the result runs the product (reading the
    operands and scales as they are then) and returns the output array, the same one every call."""
    plan = _Plan(a, b, scale_a, scale_b, format_a, format_b, out_dtype, out, variant, deterministic)
    target, ldc, copy_into = plan.output(out)
    result = copy_into if copy_into is not None else target

    def run():
        plan.run(a, b, scale_a, scale_b, target, ldc, copy_into)
        return result
    return run


def clear() -> None:
    """Forget scaled_mm's plans (the tests use it; a process never needs to)."""
    with _lock:
        _plans.clear()

"""FP8 formats and quantisation: what the bytes mean, how groups share a scale, the quantise kernel.

CuPy has no float8 dtype, so fp8 data travels as uint8 with a format name beside it. Two formats, as on
Hopper's tensor cores (and torch.float8_e4m3fn / float8_e5m2):

    e4m3  4 exponent bits (bias 7), 3 mantissa bits, no infinities, 0x7F/0xFF NaN, largest 448
    e5m2  5 exponent bits (bias 15), 2 mantissa bits, IEEE-like infinities and NaNs, largest 57344

Quantising divides each element by its group's scale, scale = amax / FORMAT_MAX (1 where a group is all
zeros), and rounds to the nearest fp8 value, ties to even, saturating at ±FORMAT_MAX. The layout of the
result is the one cupy_gemm.scaled_mm wants for the operand the scaling implies: per-row and 1×128 scales
belong to A (M×K, row-major), per-column and 128×128 scales to B (K×N, column-major: the transpose of an
(N×K) C-contiguous array). Everything here but `load_quantize_kernels`, `quantize` and `dequantize`
runs without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import DTypeError, InputError
from .operands import require_cupy

FORMATS = ("e4m3", "e5m2")
FORMAT_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
BLOCK = 128  # the K (and N) extent of a scale block
INPUT_DTYPES = ("float32", "float16", "bfloat16")
SCALINGS = ("tensor", "row", "col", (1, BLOCK), (BLOCK, BLOCK))
_CUDA_INPUT = {"float32": "float", "float16": "half", "bfloat16": "__nv_bfloat16"}


def check_format(fmt, name: str = "format") -> str:
    if fmt not in FORMATS:
        raise InputError(f"{name} must be one of {list(FORMATS)} (fp8 bytes carry no format of their own); "
                         f"got {fmt!r}")
    return fmt


def decode_table(fmt: str) -> np.ndarray:
    """float32 value of each of the 256 byte patterns of an fp8 format, decoded bit by bit."""
    check_format(fmt)
    exp_bits, man_bits = (4, 3) if fmt == "e4m3" else (5, 2)
    bias = (1 << (exp_bits - 1)) - 1
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes >> 7, -1.0, 1.0)
    exponent = (codes >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = codes & ((1 << man_bits) - 1)
    fraction = mantissa / float(1 << man_bits)
    normal = (1.0 + fraction) * np.exp2(exponent - bias)
    subnormal = fraction * 2.0 ** (1 - bias)
    value = sign * np.where(exponent == 0, subnormal, normal)
    top = exponent == (1 << exp_bits) - 1
    if fmt == "e4m3":  # only S.1111.111 is NaN; the rest of the top exponent holds finite values
        value = np.where(top & (mantissa == 7), np.nan, value)
    else:
        value = np.where(top, np.where(mantissa == 0, sign * np.inf, np.nan), value)
    return value.astype(np.float32)


@dataclass(frozen=True)
class QuantizeLayout:
    """How quantize() works on an (R0×C0) input: on the C-contiguous matrix `rows`×`cols` (x itself, or
    xᵀ for B's layouts), groups of group_rows×group_cols share a scale; the result is transposed back
    when `transpose`; the scales come out in `scale_shape`."""
    transpose: bool
    rows: int
    cols: int
    group_rows: int
    group_cols: int
    scale_shape: tuple

    @property
    def groups(self) -> tuple[int, int]:
        return -(-self.rows // self.group_rows), -(-self.cols // self.group_cols)


def quantize_layout(shape, scaling, column_major: bool = False) -> QuantizeLayout:
    """The layout for an input of `shape` (R0, C0); `column_major`: the input is F-ordered (kept so by
    per-tensor scaling, which suits either operand)."""
    if len(shape) != 2:
        raise InputError(f"quantize takes a 2-D matrix; got shape {tuple(shape)}")
    r0, c0 = shape
    key = tuple(scaling) if isinstance(scaling, (tuple, list)) else scaling
    if key == "tensor":
        rows, cols = (c0, r0) if column_major else (r0, c0)
        return QuantizeLayout(column_major, rows, cols, max(rows, 1), max(cols, 1), (1,))
    if key == "row":  # A (M×K): one scale per row
        return QuantizeLayout(False, r0, c0, 1, max(c0, 1), (r0, 1))
    if key == (1, BLOCK):  # A (M×K): 1×128 blocks along K
        return QuantizeLayout(False, r0, c0, 1, BLOCK, (r0, -(-c0 // BLOCK)))
    if key == "col":  # B (K×N): one scale per column, worked on as Bᵀ (N×K) rows
        return QuantizeLayout(True, c0, r0, 1, max(r0, 1), (1, c0))
    if key == (BLOCK, BLOCK):  # B (K×N): 128×128 blocks, scales [N-block][K-block]
        return QuantizeLayout(True, c0, r0, BLOCK, BLOCK, (-(-c0 // BLOCK), -(-r0 // BLOCK)))
    raise InputError(f"scaling must be one of 'tensor', 'row', 'col', (1, {BLOCK}) or ({BLOCK}, {BLOCK}); "
                     f"got {scaling!r}")


def input_dtype_name(dtype) -> str:
    # a name is taken as it is: NumPy knows "bfloat16" only once ml_dtypes (which CuPy uses) is imported
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in INPUT_DTYPES:
        raise DTypeError(f"quantize takes {', '.join(INPUT_DTYPES)} input; got {name}")
    return name


def quantize_source(fmt: str, dtype: str) -> str:
    """templates/fp8_quantize.cu.j2 rendered for one format and input dtype."""
    from .render import render_file
    check_format(fmt)
    return render_file("fp8_quantize.cu.j2", T_X=_CUDA_INPUT[input_dtype_name(dtype)],
                       FORMAT="__NV_E4M3" if fmt == "e4m3" else "__NV_E5M2", FORMAT_MAX=FORMAT_MAX[fmt])


def compile_options() -> tuple[str, ...]:
    from . import toolkit
    return ("-std=c++17", *(f"-I{d}" for d in toolkit.header_set(False).dirs))


@lru_cache(maxsize=None)
def load_quantize_kernels(fmt: str, dtype: str, device_id: int):
    """(group_amax, quantize) RawKernels for the current device, compiled by NVRTC through CuPy."""
    import cupy
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=quantize_source(fmt, dtype), options=compile_options(), backend="nvrtc")
        return module.get_function("group_amax"), module.get_function("quantize_groups")


def quantize(x, format="e4m3", scaling="tensor"):
    """(q, scales): x (fp32, fp16 or bf16, 2-D) as fp8 bytes in `format` with float32 scales, so that
    dequantize(q, scales) ≈ x. scaling: "tensor", "row" (of an A), "col" (of a B), (1, 128) (A's blocks
    along K) or (128, 128) (B's blocks); q comes in the layout scaled_mm wants for that operand."""
    import cupy
    require_cupy(x, "x")
    fmt = check_format(format)
    dtype = input_dtype_name(x.dtype)
    column_major = x.ndim == 2 and x.flags.f_contiguous and not x.flags.c_contiguous
    layout = quantize_layout(x.shape, scaling, column_major)
    with cupy.cuda.Device(x.device.id):
        work = cupy.ascontiguousarray(x.T if layout.transpose else x)
        q = cupy.empty((layout.rows, layout.cols), dtype=np.uint8)
        scales = cupy.ones(layout.groups, dtype=np.float32)
        if q.size:
            amax_kernel, quantize_kernel = load_quantize_kernels(fmt, dtype, x.device.id)
            amax = cupy.zeros(layout.groups, dtype=np.uint32)
            dims = (np.int32(layout.rows), np.int32(layout.cols), np.int32(layout.group_rows),
                    np.int32(layout.group_cols))
            segments = layout.rows * layout.groups[1]
            amax_kernel((-(-segments * 32 // 256),), (256,), (work, amax, *dims))
            blocks = min(-(-q.size // 256), 65535)
            quantize_kernel((blocks,), (256,), (work, amax, scales, q, *dims))
        scales = scales.reshape(layout.scale_shape)
        if scaling in ((1, BLOCK), [1, BLOCK]):  # stored [K-block][M], the layout the kernel reads: no copy then
            scales = cupy.asfortranarray(scales)
    return (q.T if layout.transpose else q), scales


def dequantize(q, scales, format="e4m3"):
    """float32 values of fp8 bytes q times their scales (any shape quantize or scaled_mm takes: one per
    tensor, per row (M, 1), per column (1, N), A's (M, ceil(K/128)) or B's (ceil(N/128), ceil(K/128)),
    the last told apart from A's by q's column-major layout)."""
    import cupy
    require_cupy(q, "q")
    require_cupy(scales, "scales")
    if q.dtype != np.uint8 or q.ndim != 2:
        raise DTypeError(f"q must be a 2-D uint8 array of fp8 bytes; got {q.ndim}-D {q.dtype}")
    with cupy.cuda.Device(q.device.id):
        values = cupy.asarray(decode_table(check_format(format)))[q]
        return values * expand_scales(scales, q.shape, q.flags.f_contiguous and not q.flags.c_contiguous)


def expand_scales(scales, shape, column_major: bool):
    """scales broadcast (or repeated over their blocks) to a (R, C) matrix's shape."""
    r, c = shape
    s = scales.astype(np.float32)
    if s.size == 1:
        return s.reshape(1, 1)
    if s.shape in ((r, 1), (1, c)):
        return s
    blocks_a, blocks_b = (r, -(-c // BLOCK)), (-(-c // BLOCK), -(-r // BLOCK))
    if s.shape == blocks_b and (column_major or s.shape != blocks_a):
        return s.T.repeat(BLOCK, axis=0).repeat(BLOCK, axis=1)[:r, :c]
    if s.shape == blocks_a:
        return s.repeat(BLOCK, axis=1)[:, :c]
    raise InputError(f"scales of shape {tuple(s.shape)} do not fit a {r}×{c} matrix: expected one value, ({r}, 1), "
                     f"(1, {c}), ({r}, {blocks_a[1]}) or, column-major, {blocks_b}")

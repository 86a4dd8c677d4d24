"""C stored in another dtype than A and B (out_dtype, or an out of that dtype) on a GPU, and matmul's
row_scale / col_scale / clamp keywords: every converting family by a forced variant (and a split-K entry
of each family that splits K), the default path, beta·C in the output dtype, batches with broadcast,
fused epilogues. Against float64 references on fresh random normal inputs, outputs poisoned with NaN and
every element checked, ragged shapes. The bound is the arithmetic's own (fp32 accumulation growing with
sqrt(K), plus tf32's input rounding) carried through the epilogue, plus half an ulp of the output format
(the one rounding the conversion may add)."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import config, launch, registry, verify

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
    HAVE_BF16 = True
except ImportError:
    HAVE_BF16 = False

pytestmark = pytest.mark.skipif(not cupy.cuda.is_available(), reason="needs a GPU")

OUT_DTYPES = ("float32", "float16", "bfloat16")
FORCED = [  # one entry of each converting family and input dtype, a split-K entry of each family that splits
    "hgemm_wgmma_m64n256k16_stages4_ws2", "bgemm_wgmma_m64n256k16_stages4_ws2",
    "bgemm_wgmma_m64n224k16_tile128x224_stages4_ws2_cluster2",  # C in 64-byte boxes: 32 16-bit, 16 fp32 columns
    "bgemm_wgmma_m64n128k16_tile64x128_stages8_ws1_splitk", "hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk",
    "sgemm_wgmma_m64n256k8_tf32_stages4_ws2", "sgemm_wgmma_m64n256k8_tf32_stages4_ws2_regstore",
    "sgemm_wgmma_m64n64k8_tf32_tile64x64_stages8_ws1_splitk", "sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2",
    "sgemm_wgmma_3xtf32_swap_m64n128k8_tile128x128_stages4_ws2",
    "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32", "bgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32",
    "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x2_stages3_swizzle",
    "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf_async", "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk",
]
# a tf32 tile of 96 columns holds 1.5 boxes of a 16-bit C: its TMA store is compiled out (registers store)
TF32_BN96 = registry.make_variant(registry.family("wgmma_tf32"), "sgemm_wgmma_tf32_tile128x96_splitk", "float32",
                                  {"BM": 128, "BN": 96, "BK": 32, "STAGES": 4, "CONSUMERS": 2, "SPLIT_K": 0}, "tf32")
VARIANTS = {name: registry.lookup(name) for name in FORCED} | {TF32_BN96.name: TF32_BN96}
CONVERSIONS = [(name, out) for name, v in VARIANTS.items() for out in OUT_DTYPES if out != v.dtype]
SIZES = (1, 17, 127, 1000)
# every M with every N; K off the tile (1000 is no multiple of 64 or 128, 33 pads), both with each M and N
SHAPES = [(m, n, 1000 if (i + j) % 2 == 0 else 33) for i, m in enumerate(SIZES) for j, n in enumerate(SIZES)]
FUNCTIONS = {"relu": (lambda z: np.maximum(z, 0), 1.0), "gelu": (lambda z: 0.5 * z * (1 + _erf(z / np.sqrt(2))), 1.13)}


def _erf(x):
    from math import erf
    return np.vectorize(erf)(x)


def _cc() -> int:
    return launch.compute_capability(cupy.cuda.Device())


def _skip_unless_runs(v, *dtypes):
    if not v.runs_on(_cc()):
        pytest.skip(f"{v.name} does not run on sm_{_cc()}")
    if "bfloat16" in dtypes and not HAVE_BF16:
        pytest.skip("bfloat16 arrays need ml_dtypes")


def _normal(shape, dtype, seed, scale=1.0):
    rng = cupy.random.default_rng(seed)
    return (rng.standard_normal(shape, dtype=cupy.float32) * scale).astype(dtype)


def _f64(x):
    return cupy.asnumpy(x.astype(cupy.float64))


def _poisoned(shape, dtype, order="C"):
    return cupy.full(shape, cupy.nan, dtype, order=order)


def _product(a, b, acc, c=None, alpha=1.0, beta=0.0, rounded=0.0):
    """alpha·a@b + beta·c in float64 (matmul's broadcasting), and the bound of its fp32 arithmetic:
    SAFETY × (tf32's input rounding + fp32 accumulation growing with sqrt(K) + `rounded`, a rounding of
    the product on the way) × the size of the terms."""
    a64, b64 = a.astype(cupy.float64), b.astype(cupy.float64)  # on the GPU: DGEMM
    y = cupy.asnumpy(alpha * cupy.matmul(a64, b64))
    size = abs(alpha) * np.sqrt(cupy.asnumpy(cupy.matmul(a64 * a64, b64 * b64)))
    if c is not None and beta:
        c64 = _f64(c)
        y, size = y + beta * c64, size + abs(beta) * np.abs(c64)
    k = a.shape[-1]
    unit = verify.INPUT_ROUNDOFF.get(acc, 0.0) + verify.UNIT_ROUNDOFF["float32"] * np.sqrt(k) + rounded
    return y, verify.SAFETY * unit * size


def _check(out, y, err, out_dtype, shape=None):
    """Every element of out against y within err (the arithmetic's) plus half an ulp of out's format at
    the computed value, plus half its smallest subnormal."""
    assert out.dtype == np.dtype(out_dtype), f"stored as {out.dtype}, not {out_dtype}"
    assert out.shape == (shape or y.shape)
    got = _f64(out).reshape(y.shape)
    unwritten = int(np.isnan(got).sum())
    assert unwritten == 0, f"{unwritten} of {got.size} elements unwritten (NaN)"
    half_ulp = verify.UNIT_ROUNDOFF[out_dtype] * (np.abs(y) + err)
    bound = err + half_ulp + verify.SMALLEST_SUBNORMAL[out_dtype] / 2
    ratio = np.abs(got - y) / bound
    if ratio.size:
        at = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        assert ratio[at] <= 1.0, (f"worst error/bound {ratio[at]:.3g} at {at}: got {got[at]!r}, want {y[at]!r} "
                                  f"± {bound[at]:.3g}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name,out_dtype", CONVERSIONS)
def test_forced_variants_convert_in_the_store(name, out_dtype, shape):
    v = VARIANTS[name]
    _skip_unless_runs(v, v.dtype, out_dtype)
    m, n, k = shape
    a, b = _normal((m, k), v.dtype, 1), _normal((k, n), v.dtype, 2)
    out = _poisoned((m, n), out_dtype)
    assert cupy_gemm.matmul(a, b, variant=v, out=out, out_dtype=out_dtype) is out
    y, err = _product(a, b, v.acc)
    _check(out, y, err, out_dtype)


@pytest.mark.parametrize("name,out_dtype", CONVERSIONS)
def test_beta_reads_c_in_the_output_dtype(name, out_dtype):
    """alpha·acc + beta·C in fp32, C read as the output dtype, one rounding; in place (out=c) and into a
    new array (c untouched)."""
    v = VARIANTS[name]
    _skip_unless_runs(v, v.dtype, out_dtype)
    for m, n, k in ((127, 1000, 33), (17, 129, 1000)):
        a, b = _normal((m, k), v.dtype, 3), _normal((k, n), v.dtype, 4)
        c = _normal((m, n), out_dtype, 5)
        kept = c.copy()
        y, err = _product(a, b, v.acc, c, alpha=0.5, beta=-1.5)
        result = cupy_gemm.gemm(a, b, c, alpha=0.5, beta=-1.5, variant=v, out_dtype=out_dtype)
        _check(result, y, err, out_dtype)
        assert bool((c == kept).all()), "c was written"
        cupy_gemm.gemm(a, b, c, alpha=0.5, beta=-1.5, variant=v, out=c)
        _check(c, y, err, out_dtype)


@pytest.mark.parametrize("name", ["hgemm_wgmma_m64n256k16_stages4_ws2", "sgemm_wgmma_m64n256k8_tf32_stages4_ws2",
                                  "bgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32",
                                  "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"])
def test_column_major_and_strided_outputs(name):
    """A Fortran-ordered out runs the transposed product (Cᵀ = Bᵀ·Aᵀ) in place; a strided view of a
    wider array whose leading dimension is no multiple of 16 bytes of C goes through an aligned buffer."""
    v = VARIANTS[name]
    out_dtype = "float32" if v.dtype != "float32" else "float16"
    _skip_unless_runs(v, v.dtype)
    m, n, k = 128, 200, 1000
    a, b = _normal((m, k), v.dtype, 6), _normal((k, n), v.dtype, 7)
    y, err = _product(a, b, v.acc)
    fortran = _poisoned((m, n), out_dtype, "F")
    cupy_gemm.matmul(a, b, variant=v, out=fortran)
    _check(fortran, y, err, out_dtype)
    wide = _poisoned((m, n + 3), out_dtype)
    cupy_gemm.matmul(a, b, variant=v, out=wide[:, :n])
    _check(wide[:, :n], y, err, out_dtype)
    assert bool(cupy.isnan(wide[:, n:]).all()), "wrote past the view"


DEFAULTS = [("float16", None, "float32"), ("float16", None, "bfloat16"), ("bfloat16", None, "float32"),
            ("bfloat16", None, "float16"), ("float32", "fp32", "float16"), ("float32", "fp32", "bfloat16"),
            ("float32", "tf32", "bfloat16"), ("float32", "tf32", "float16"), ("float32", "3xtf32", "bfloat16"),
            ("float32", "3xtf32", "float16")]


@pytest.mark.parametrize("shape", [(1, 4096, 1000), (17, 1000, 4096), (1000, 17, 33), (1000, 1000, 1000),
                                   (4, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype,precision,out_dtype", DEFAULTS)
def test_the_default_converts(dtype, precision, out_dtype, shape):
    """variant=None: the dispatch skips the families that cannot convert (the skinny kernels of few rows),
    split-K entries serve the deep small products."""
    if precision == "3xtf32" and _cc() != 90:
        pytest.skip("3xtf32 needs a Hopper GPU")
    if "bfloat16" in (dtype, out_dtype) and not HAVE_BF16:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    m, n, k = shape
    a, b = _normal((m, k), dtype, 8), _normal((k, n), dtype, 9)
    result = cupy_gemm.matmul(a, b, precision=precision, out_dtype=out_dtype)
    acc = cupy_gemm.api.PRECISIONS[precision] if precision else "float32"
    y, err = _product(a, b, acc)
    _check(result, y, err, out_dtype)
    out = _poisoned((m, n), out_dtype)
    cupy_gemm.matmul(a, b, precision=precision, out=out)  # out's dtype alone asks for the conversion
    _check(out, y, err, out_dtype)


BATCHES = [((3, 127, 33), (33, 200)),  # a shared b: folds into one 2-D product
           ((127, 1000), (3, 1000, 17)),  # a shared a: a batched launch
           ((2, 1, 17, 1000), (3, 1000, 127))]  # broadcast both ways


@pytest.mark.parametrize("shapes", BATCHES, ids=lambda s: f"{s[0]}@{s[1]}")
@pytest.mark.parametrize("name,out_dtype", [("bgemm_wgmma_m64n256k16_stages4_ws2", "float32"),
                                            ("sgemm_wgmma_m64n64k8_tf32_tile64x64_stages8_ws1_splitk", "bfloat16"),
                                            ("hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32", "bfloat16"),
                                            ("sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk", "float16"),
                                            (None, "float32"), (None, "bfloat16")])
def test_batches_with_broadcast(name, out_dtype, shapes):
    v = VARIANTS[name] if name else None
    dtype = v.dtype if v else "float16"
    if v:
        _skip_unless_runs(v, dtype, out_dtype)
    elif out_dtype == "bfloat16" and not HAVE_BF16:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    a, b = _normal(shapes[0], dtype, 10), _normal(shapes[1], dtype, 11)
    want = np.matmul(np.zeros(shapes[0], np.int8), np.zeros(shapes[1], np.int8)).shape
    out = _poisoned(want, out_dtype)
    cupy_gemm.matmul(a, b, variant=v, out=out)
    y, err = _product(a, b, v.acc if v else "float32")
    _check(out, y, err, out_dtype)
    again = cupy_gemm.matmul(a, b, variant=v, out_dtype=out_dtype)  # a new array, the remembered call
    _check(again, y, err, out_dtype)
    c = _normal(want, out_dtype, 12)
    y, err = _product(a, b, v.acc if v else "float32", c, alpha=2.0, beta=0.5)
    _check(cupy_gemm.gemm(a, b, c, alpha=2.0, beta=0.5, variant=v, out_dtype=out_dtype), y, err, out_dtype)


def _fused(y, err, bias=None, activation=None, rows=None, cols=None, clamp=None):
    """The keywords' steps in float64 in matmul's order, carrying the bound: scales multiply it, an
    activation by its largest slope; fp32 evaluation of the steps adds 2^-20 of the values."""
    values = np.abs(y)
    if rows is not None:
        y, err = y * rows[:, None], err * np.abs(rows)[:, None]
    if cols is not None:
        y, err = y * cols[None, :], err * np.abs(cols)[None, :]
    if bias is not None:
        y = y + bias[None, :]
    values = values + np.abs(y)
    if activation is not None:
        f, slope = FUNCTIONS[activation]
        y, err = f(y), err * slope
    if clamp is not None:
        y = np.clip(y, -np.inf if clamp[0] is None else clamp[0], np.inf if clamp[1] is None else clamp[1])
    return y, err + 2.0**-20 * (values + np.abs(y))


@pytest.mark.parametrize("name,out_dtype", [(name, out) for name, out in CONVERSIONS if VARIANTS[name].family.epilogue])
def test_bias_and_gelu_with_a_conversion(name, out_dtype):
    v = VARIANTS[name]
    _skip_unless_runs(v, v.dtype, out_dtype)
    for m, n, k in ((1000, 127, 1000), (17, 1000, 33)):
        a, b = _normal((m, k), v.dtype, 13), _normal((k, n), v.dtype, 14)
        bias = _normal((n,), out_dtype, 15)
        out = _poisoned((m, n), out_dtype)
        cupy_gemm.matmul(a, b, variant=v, out=out, bias=bias, activation="gelu")
        y, err = _fused(*_product(a, b, v.acc), bias=_f64(bias), activation="gelu")
        _check(out, y, err, out_dtype)


KEYWORD_VARIANTS = ["bgemm_wgmma_m64n256k16_stages4_ws2", "hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk",
                    "sgemm_wgmma_m64n256k8_tf32_stages4_ws2", "bgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32",
                    "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk", None]


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("name", KEYWORD_VARIANTS)
def test_scales_bias_activation_and_clamp(name, out_dtype):
    """row_scale, col_scale, bias, relu and clamp in that order; other clamp bounds reuse the kernel."""
    v = VARIANTS[name] if name else None
    dtype = v.dtype if v else "bfloat16"
    if v:
        _skip_unless_runs(v, dtype, out_dtype)
    elif not HAVE_BF16:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    m, n, k = 127, 1000, 1000
    a, b = _normal((m, k), dtype, 16), _normal((k, n), dtype, 17)
    rows, cols = _normal((m,), "float32", 18, 1 / np.sqrt(k)), _normal((n,), dtype, 19)
    bias = _normal((n,), "float32", 20, 0.5)
    acc = v.acc if v else "float32"
    for clamp in ((-0.25, 1.0), (None, 0.5), (0.1, None)):
        out = _poisoned((m, n), out_dtype)
        cupy_gemm.matmul(a, b, variant=v, out=out, row_scale=rows, col_scale=cols, bias=bias, activation="relu",
                         clamp=clamp)
        y, err = _fused(*_product(a, b, acc), bias=_f64(bias), activation="relu", rows=_f64(rows),
                        cols=_f64(cols), clamp=clamp)
        _check(out, y, err, out_dtype)
    out = _poisoned((m, n), out_dtype)  # the first text with other bounds: the first call's kernel
    loaded = len(launch._loaded)
    cupy_gemm.matmul(a, b, variant=v, out=out, row_scale=rows, col_scale=cols, bias=bias, activation="relu",
                     clamp=(-3.0, 0.0))
    assert len(launch._loaded) == loaded, "other clamp bounds compiled another kernel"
    y, err = _fused(*_product(a, b, acc), bias=_f64(bias), activation="relu", rows=_f64(rows), cols=_f64(cols),
                    clamp=(-3.0, 0.0))
    _check(out, y, err, out_dtype)


@pytest.mark.parametrize("dtype,out_dtype", [("float16", "float32"), ("bfloat16", "float16"), ("float32", "bfloat16")])
def test_cublas_computes_then_converts(dtype, out_dtype):
    """variant="cublas" rounds the product to the inputs' dtype, then converts (matmul's docstring)."""
    if "bfloat16" in (dtype, out_dtype) and not HAVE_BF16:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    m, n, k = 127, 1000, 1000
    a, b = _normal((m, k), dtype, 21), _normal((k, n), dtype, 22)
    out = _poisoned((m, n), out_dtype)
    cupy_gemm.matmul(a, b, variant="cublas", out=out)
    # the product in a's dtype first (cuBLAS multiplies float32 as TF32 under CUPY_TF32=1)
    tf32 = dtype == "float32" and config.allow_tf32()
    y, err = _product(a, b, "tf32" if tf32 else "float32", rounded=verify.UNIT_ROUNDOFF[dtype])
    _check(out, y, err, out_dtype)

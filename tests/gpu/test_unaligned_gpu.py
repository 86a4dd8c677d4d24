"""Variants that read unaligned operands in place (UNALIGNED = 1, align 1) on a GPU, through the public API:
ragged M, N and K, tall and skinny products, views whose rows and base addresses lie off 16-byte
boundaries, Fortran order, batches, beta != 0 and a fused epilogue, every element checked against a
float64 reference on random normal inputs with the output poisoned with NaN (bounds per arithmetic, growing
with sqrt(K): cupy_gemm.verify). Also: no padded copy on the way (a repeated call with `out` allocates no
device memory, and the operands reach the kernel unchanged), and the default taking an unaligned entry for
a small ragged product. The catalogue's entries and one variant per template path they do not take
(tests/unaligned_paths.py: one- and two-stage pipelines, swizzled shared memory, float16 accumulation, a
partial loader pass, cp.async with 4-byte copies, a single buffer, forced split-K, the few-rows kernels'
layouts). A few-rows entry (max_rows) takes the shapes whose smaller side it covers, and the extra shapes of
few rows below; batches and epilogues only where its family has them."""
import contextlib

import cupy
import pytest

import cupy_gemm
from cupy_gemm import dispatch, launch, operands, prepared, registry, verify
from cupy_gemm.errors import InputError
from unaligned_paths import CATALOGUE, path_variants

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None

PATHS = path_variants()
NAMES = CATALOGUE + sorted(PATHS)
# M, N, K drawn from 1, 17, 33, 63, 127, 301, 1000, 1001, then tall, skinny and deep ones
SHAPES = [(1, 1, 1), (1, 17, 33), (17, 1, 63), (33, 33, 33), (63, 127, 17), (127, 63, 301), (301, 1001, 1),
          (1000, 1001, 33), (1001, 1000, 63), (33, 1000, 1001), (1001, 17, 127), (127, 301, 1000),
          (301, 301, 301), (1001, 1001, 17), (129, 1000, 33), (64, 64, 63), (17, 4096, 4095), (4095, 17, 301),
          (3, 2000, 127), (2000, 3, 1001), (5, 4095, 4095), (4095, 9, 1001), (32, 1001, 127), (16, 32001, 33)]
# an aligned variant per (dtype, accumulate): it copies the same operands into padded buffers
ALIGNED = {("float16", "float32"): "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32",
           ("float16", "float16"): "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3",
           ("bfloat16", "float32"): "bgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32",
           ("float32", "tf32"): "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x2_stages3",
           ("float32", "float32"): "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"}


def _variant(name):
    """(what to pass as variant=, the Variant): a catalogue name, or a path's Variant object."""
    v = PATHS.get(name) or registry.lookup(name)
    if v.dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    if not v.runs_on(launch.compute_capability(cupy.cuda.Device())):
        pytest.skip(f"{name} needs a newer GPU")
    return (v if name in PATHS else name), v


def _fits(v, m, n) -> bool:
    """Whether v serves an m×n product (a few-rows kernel: its smaller side within the kernel's rows)."""
    return v.max_rows() is None or min(m, n) <= v.max_rows()


def _shapes(v, shapes):
    fitting = [(m, n, k) for m, n, k in shapes if _fits(v, m, n)]
    assert fitting, f"{v.name}: none of {shapes} fits"
    return fitting


def _needs(v, flag):
    if not getattr(v.family, flag):
        pytest.skip(f"family {v.family.name} has no {flag} support")


def _normal(shape, dtype, seed, order="C"):
    x = cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32).astype(dtype)
    return cupy.asfortranarray(x) if order == "F" else x


def _nan(shape, dtype, order="C"):
    return cupy.full(shape, cupy.nan, dtype=dtype, order=order)


def _check(v, out, a, b, c=None, *, alpha=1.0, beta=0.0, bias=None, relu=False, what=""):
    """out against float64: alpha·a@b + beta·c (+ bias, then relu), batched over leading dimensions."""
    ref, scale = verify.reference(a, b, c, alpha, beta)
    if bias is not None:  # the sum's own fp32 rounding: terms of size |bias| and |ref|
        bias64 = bias.astype(cupy.float64)
        ref = ref + bias64
        scale = scale + cupy.abs(bias64) + cupy.abs(ref)
    if relu:
        ref = cupy.maximum(ref, 0)
    n = out.shape[-1]
    verdict = verify.check(out.reshape(-1, n), ref.reshape(-1, n), scale.reshape(-1, n), v.dtype, v.acc,
                           a.shape[-1])
    assert verdict.ok, f"{v.name} {what}: {verdict}"


def _untouched(base, out) -> int:
    """NaNs of base outside the view out (a NaN-filled base around an output view)."""
    return int(cupy.isnan(base).sum() - cupy.isnan(out).sum())


@contextlib.contextmanager
def _allocations():
    """The sizes of the device allocations made inside the block (every CuPy allocation goes through here)."""
    pool = cupy.get_default_memory_pool()
    sizes = []

    def counting(size):
        sizes.append(size)
        return pool.malloc(size)
    cupy.cuda.set_allocator(counting)
    try:
        yield sizes
    finally:
        cupy.cuda.set_allocator(pool.malloc)


@pytest.mark.parametrize("name", NAMES)
def test_ragged_shapes(name):
    arg, v = _variant(name)
    for i, (m, n, k) in enumerate(SHAPES):
        if not _fits(v, m, n):
            continue
        a, b = _normal((m, k), v.dtype, 2 * i), _normal((k, n), v.dtype, 2 * i + 1)
        out = _nan((m, n), v.dtype)
        assert cupy_gemm.matmul(a, b, variant=arg, out=out) is out
        _check(v, out, a, b, what=f"{m}x{n}x{k}")


def _views(m, n, k, dtype, seed):
    """(what, a, b, out, out's base): operands whose base addresses and leading dimensions lie off 16 bytes."""
    big_a, big_b = _normal((m + 1, k + 3), dtype, seed), _normal((k + 1, n + 5), dtype, seed + 1)
    base = _nan((m + 2, n + 3), dtype)
    yield "column slices", big_a[:m, 1:k + 1], big_b[1:, 2:n + 2], base[1:m + 1, 1:n + 1], base
    odd_a, odd_b = _normal((m + 1, k), dtype, seed + 2), _normal((k + 1, n), dtype, seed + 3)
    base = _nan((m + 1, n), dtype)
    # rows of odd length, from the second row: bases an odd number of elements in (when K and N are odd)
    yield "row slices", odd_a[1:], odd_b[1:], base[1:], base
    base = _nan((m, 2 * n + 1), dtype)
    yield "every other row of A", _normal((2 * m, k), dtype, seed + 4)[::2], odd_b[:k], base[:, 1:n + 1], base


@pytest.mark.parametrize("name", NAMES)
def test_views_off_every_boundary(name):
    arg, v = _variant(name)
    for m, n, k in _shapes(v, [(127, 301, 63), (33, 1000, 1001), (1, 17, 33), (1001, 1, 127), (64, 64, 63),
                               (13, 4095, 1001), (1001, 7, 255)]):
        for what, a, b, out, base in _views(m, n, k, v.dtype, m + n + k):
            outside = _untouched(base, out)
            cupy_gemm.matmul(a, b, variant=arg, out=out)
            _check(v, out, a, b, what=f"{what}, {m}x{n}x{k}")
            assert _untouched(base, out) == outside, f"{v.name} {what}: wrote outside the output"


@pytest.mark.parametrize("name", NAMES)
def test_fortran_order(name):
    arg, v = _variant(name)
    for m, n, k in _shapes(v, [(127, 301, 63), (1001, 33, 17), (17, 1001, 1000), (3, 1001, 127), (1001, 5, 63),
                               (1, 1001, 1000), (1001, 1, 63)]):
        a, b = _normal((m, k), v.dtype, 1, "F"), _normal((k, n), v.dtype, 2, "F")
        out = _nan((m, n), v.dtype, "F")  # all column-major: the kernel computes Cᵀ = Bᵀ·Aᵀ in place
        cupy_gemm.matmul(a, b, variant=arg, out=out)
        _check(v, out, a, b, what=f"Fortran {m}x{n}x{k}")
        _check(v, cupy_gemm.matmul(a, b, variant=arg), a, b, what=f"Fortran in, C out {m}x{n}x{k}")


@pytest.mark.parametrize("name", NAMES)
def test_batches(name):
    arg, v = _variant(name)
    _needs(v, "batched")
    m, n, k = (63, 301, 33) if _fits(v, 63, 301) else (5, 301, 33)  # 6 members of 5 rows fold into 30
    if v.max_rows() is not None:  # batches are not swapped: members of more rows are refused before launch
        with pytest.raises(InputError, match="serves at most"):
            cupy_gemm.matmul(_normal((2, 301, k), v.dtype, 3), _normal((2, k, 17), v.dtype, 4), variant=arg)
    a, b = _normal((3, m, k), v.dtype, 3), _normal((3, k, n), v.dtype, 4)  # members at odd offsets
    out = _nan((3, m, n), v.dtype)
    cupy_gemm.matmul(a, b, variant=arg, out=out)
    _check(v, out, a, b, what="3 members")
    a4 = _normal((2, 3, m, k + 1), v.dtype, 5)[..., 1:]  # 2×3 members, each a view off 16 bytes
    shared = _normal((k, n), v.dtype, 6)
    _check(v, cupy_gemm.matmul(a4, shared, variant=arg), a4, shared, what="2x3 members, B shared")
    _check(v, cupy_gemm.matmul(a4, b, variant=arg), a4, b, what="2x3 members, B broadcast along the outer")


@pytest.mark.parametrize("name", NAMES)
def test_gemm_with_beta(name):
    arg, v = _variant(name)
    for m, n, k in _shapes(v, [(127, 1001, 33), (1001, 63, 301), (17, 17, 17), (3, 1001, 301), (1001, 5, 33),
                               (1, 1001, 301), (1001, 1, 33)]):
        a, b, c = _normal((m, k), v.dtype, 7), _normal((k, n), v.dtype, 8), _normal((m, n), v.dtype, 9)
        result = cupy_gemm.gemm(a, b, c, alpha=0.5, beta=-1.5, variant=arg)
        _check(v, result, a, b, c, alpha=0.5, beta=-1.5, what=f"beta, {m}x{n}x{k}")
        base = _normal((m, n + 2), v.dtype, 10)
        view = base[:, 1:n + 1]  # updated in place, rows one element in
        before = view.copy()
        cupy_gemm.gemm(a, b, view, alpha=1.0, beta=2.0, out=view, variant=arg)
        _check(v, view, a, b, before, beta=2.0, what=f"in place, {m}x{n}x{k}")


@pytest.mark.parametrize("name", NAMES)
def test_bias_and_relu(name):
    arg, v = _variant(name)
    _needs(v, "epilogue")
    for m, n, k in _shapes(v, [(127, 1001, 33), (300, 300, 301), (1001, 17, 33)]):
        a = _normal((m, k + 1), v.dtype, 11)[:, 1:]
        b, bias = _normal((k, n), v.dtype, 12), _normal((n,), v.dtype, 13)
        out = cupy_gemm.matmul(a, b, variant=arg, bias=bias, activation="relu")
        _check(v, out, a, b, bias=bias, relu=True, what=f"bias + relu, {m}x{n}x{k}")
    m, n = (63, 1001) if _fits(v, 63, 1001) else (17, 1001)
    a3, b3 = _normal((2, m, 33), v.dtype, 14), _normal((2, 33, n), v.dtype, 15)
    bias = _normal((n,), v.dtype, 16)
    out = cupy_gemm.matmul(a3, b3, variant=arg, bias=bias, activation="relu")
    _check(v, out, a3, b3, bias=bias, relu=True, what="batched bias + relu")


@pytest.mark.parametrize("name", CATALOGUE)
def test_no_padded_copy(name, monkeypatch):
    """The operands reach the kernel as they are, and a repeated call with `out` allocates nothing; the
    aligned variant of the same arithmetic allocates its padded copies (so the count sees copies)."""
    arg, v = _variant(name)
    m, n, k = (129 if _fits(v, 129, 1000) else v.max_rows()), 1000, 33
    a = _normal((m, k + 2), v.dtype, 17)[:, 1:k + 1]
    if v.family.b_layout == "col":  # a K-major family's B: W.T of a view of W off 16 bytes
        b = _normal((n, k + 1), v.dtype, 18)[:, 1:].T
    else:
        b = _normal((k, n + 1), v.dtype, 18)[:, 1:]
    out = _nan((m, n + 1), v.dtype)[:, 1:]
    prepared.clear()  # a miss, which resolves the operands
    seen = []
    resolve = operands.resolve
    monkeypatch.setattr(operands, "resolve", lambda *args, **kw: seen.append(resolve(*args, **kw)) or seen[-1])
    cupy_gemm.matmul(a, b, variant=arg, out=out)  # compiles, and allocates a split-K workspace once
    (ops,) = seen
    assert ops.zero_copy and not ops.arrangement.copies
    assert (ops.A.data.ptr, ops.B.data.ptr, ops.C.data.ptr) == (a.data.ptr, b.data.ptr, out.data.ptr)
    out[...] = cupy.nan
    with _allocations() as sizes:
        cupy_gemm.matmul(a, b, variant=arg, out=out)
    assert sizes == [], f"{v.name}: a repeated call allocated {sizes}"
    _check(v, out, a, b, what="repeated")
    aligned = ALIGNED[(v.dtype, v.acc)]
    cupy_gemm.matmul(a, b, variant=aligned, out=out)
    with _allocations() as sizes:
        cupy_gemm.matmul(a, b, variant=aligned, out=out)
    assert sizes, f"{aligned} pads these operands: it should allocate"


@pytest.mark.parametrize("dtype,precision", [("float16", None), ("bfloat16", None), ("float32", None),
                                             ("float32", "tf32")])
def test_the_default_reads_small_ragged_products_in_place(dtype, precision):
    if dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    m, n, k = 129, 1000, 33
    text = dispatch.explain(dtype, m, n, k, precision=precision)
    chosen = registry.lookup(text.splitlines()[1].removeprefix("variant: "))
    # the unaligned rule picks it, or the GPU's dispatch table, which timed the unaligned entries at this shape
    assert chosen.params.get("UNALIGNED") and ("unaligned operands" in text or "dispatch table" in text), text
    a, b = _normal((m, k), dtype, 19), _normal((k, n), dtype, 20)
    out = _nan((m, n), dtype)
    cupy_gemm.matmul(a, b, out=out, precision=precision)
    _check(chosen, out, a, b, what="default")
    with _allocations() as sizes:
        cupy_gemm.matmul(a, b, out=out, precision=precision)
    assert sizes == [], f"the default ({chosen.name}) allocated {sizes}"


@pytest.mark.parametrize("dtype,precision", [("float16", None), ("bfloat16", None), ("float32", None),
                                             ("float32", "tf32")])
def test_the_default_reads_a_linear_weight_of_odd_k_in_place(dtype, precision):
    """x @ W.T, W stored N×K with K odd (a column-major B off its vectors), few rows: a K-major unaligned
    entry reads W where it lies, nothing is padded or copied on a repeated call, every element is right."""
    if dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    for m, n, k in [(1, 4096, 4095), (2, 3001, 1001), (4, 11008, 4095)]:
        x, w = _normal((m, k), dtype, 21 + m), _normal((n, k), dtype, 22 + m)
        text = dispatch.explain(dtype, m, n, k, precision=precision, b_layout="col")
        chosen = registry.lookup(text.splitlines()[1].removeprefix("variant: "))
        assert chosen.params.get("UNALIGNED"), text
        out = _nan((m, n), dtype)
        cupy_gemm.matmul(x, w.T, out=out, precision=precision)
        _check(chosen, out, x, w.T, what=f"x @ W.T, {m}x{n}x{k}")
        with _allocations() as sizes:
            cupy_gemm.matmul(x, w.T, out=out, precision=precision)
        assert sizes == [], f"the default ({chosen.name}) allocated {sizes} at {m}x{n}x{k}"


@pytest.mark.parametrize("dtype,precision", [("float16", None), ("bfloat16", None), ("float32", None),
                                             ("float32", "tf32")])
def test_the_default_swaps_a_ragged_product_of_few_columns(dtype, precision):
    """A @ x, x of 1 to 17 columns and K or M odd: a few-rows entry computes xᵀ·Aᵀ, reading A where it
    lies, wherever one covers the columns and the swap's copies (x, C) cost less than the product (an
    unaligned one, or with K aligned one that takes any N: Family.ragged_n); every element is right, and with
    one column nothing is copied."""
    if dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    few = 4 if precision == "tf32" else 32  # tf32 swaps for its exact few-rows entries only
    for m, n, k in [(4095, 1, 4095), (4096, 2, 4095), (4095, 8, 4095), (11008, 17, 4095), (50257, 1, 768)]:
        a, x = _normal((m, k), dtype, 31 + n), _normal((k, n), dtype, 32 + n)
        text = dispatch.explain(dtype, m, n, k, precision=precision)
        chosen = registry.lookup(text.splitlines()[1].removeprefix("variant: "))
        assert chosen.params.get("UNALIGNED") or (k % 8 == 0 and chosen.family.ragged_n), text
        assert (chosen.max_rows() is not None) == (n <= few), text
        out = _nan((m, n), dtype)
        cupy_gemm.matmul(a, x, out=out, precision=precision)
        _check(chosen, out, a, x, what=f"A @ x, {m}x{n}x{k}")
        if n == 1:
            with _allocations() as sizes:
                cupy_gemm.matmul(a, x, out=out, precision=precision)
            assert sizes == [], f"the default ({chosen.name}) allocated {sizes} at {m}x{n}x{k}"

"""Families that take any N (Family.ragged_n: B read K-major through TMA) on a GPU: x @ W.T with W of an odd
number of rows (a vocabulary of 32001 or 50257) reads W where it lies, and C goes through a buffer of its
own, copied back, whose padding takes the columns past an odd N that vector stores write (or, for a family
storing C element by element or rendered for any C, Family.scalar_c and unaligned_c, into the caller's C
wherever it lies). Every catalogue entry of those families at ragged N, beta != 0, a fused epilogue, an
output view whose neighbour columns must stay as they were, and the default path for x @ W.T and A @ x
(the latter swapped). Against float64 references on random normal inputs, outputs poisoned with NaN
(bounds: cupy_gemm.verify)."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import batched, launch, prepared, registry, verify
from gpu_variants import ml_dtypes, resolutions, runnable

NAMES = sorted(n for n, v in registry.catalogue().items() if v.family.ragged_n)
# K a multiple of 8 (16 bytes of 16-bit elements), N odd or not a multiple of 8
GENERAL_SHAPES = ((129, 1001, 136), (64, 1, 64), (17, 33, 8), (300, 4095, 1000), (1000, 12, 520))
FEW_ROWS_SHAPES = ((1, 17, 64), (-1, 1001, 1000), (-5, 4095, 136), (-1, 3, 8))


def _shapes(v):
    """The general shapes, or for a few-rows entry its rows (-r: min(r, the entry's rows))."""
    rows = v.max_rows()
    if rows is None:
        return GENERAL_SHAPES
    return tuple((m if m > 0 else min(-m, rows), n, k) for m, n, k in FEW_ROWS_SHAPES)


def _normal(shape, dtype, seed):
    return cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32).astype(dtype)


def _dtype_of(key, monkeypatch):
    """The dtype of a precision key (tf32: float32 under CUPY_TF32=1); bfloat16 needs ml_dtypes."""
    if key == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    monkeypatch.setenv("CUPY_TF32", "1" if key == "tf32" else "0")
    return "float32" if key == "tf32" else key


def _check(v, out, ref, scale, k, what):
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    assert verdict.ok, f"{v.name} {what}: {verdict}"


@pytest.mark.parametrize("name", NAMES)
def test_a_weight_of_ragged_rows_is_read_in_place(name, monkeypatch):
    v = runnable(name)
    seen = resolutions(monkeypatch)
    for m, n, k in _shapes(v):
        x, w = _normal((m, k), v.dtype, m + n), _normal((n, k), v.dtype, k + 1)
        # the output a view of a wider buffer whose leading dimension meets the alignment: column pairs past an
        # odd N would land in the neighbour columns, so the kernel writes a buffer of its own, or the view
        # itself element by element (Family.scalar_c) or rendered to check each pair (Family.unaligned_c)
        base = cupy.full((m, n + 7 + (-(n + 7) % 8)), 7.0, dtype=x.dtype)
        out = base[:, :n]
        out[...] = cupy.nan
        prepared.clear()
        seen.clear()
        cupy_gemm.matmul(x, w.T, variant=name, out=out)
        (ops,) = seen
        assert ops.arrangement.padded is None and not ops.arrangement.copy_b, (name, m, n, k, ops.arrangement)
        ragged = n % v.family.align(v.params, v.dtype) != 0
        buffered = ragged and not (v.family.scalar_c or v.family.unaligned_c)
        assert ops.B.data.ptr == w.data.ptr and ops.arrangement.temp_c == buffered, (name, m, n, k)
        assert ops.arrangement.unaligned_c == (ragged and v.family.unaligned_c), (name, m, n, k)
        ref, scale = verify.reference(x, w.T)
        _check(v, out, ref, scale, k, f"{m}x{n}x{k}")
        assert bool((base[:, n:] == 7.0).all()), f"{name} {m}x{n}x{k}: wrote past the output view"
        # again with new data: the prepared launch, C through a new buffer of its own where it took one
        x = _normal((m, k), v.dtype, m + n + 7)
        out[...] = cupy.nan
        cupy_gemm.matmul(x, w.T, variant=name, out=out)
        assert len(seen) == 1, f"{name} {m}x{n}x{k}: a repeated call resolved its operands again"
        ref, scale = verify.reference(x, w.T)
        _check(v, out, ref, scale, k, f"repeated, {m}x{n}x{k}")
        assert bool((base[:, n:] == 7.0).all()), f"{name} {m}x{n}x{k}: a repeat wrote past the output view"


@pytest.mark.parametrize("name", NAMES)
def test_beta_and_the_epilogue_at_a_ragged_n(name):
    v = runnable(name)
    m, n, k = _shapes(v)[1]
    x, w, c = _normal((m, k), v.dtype, 1), _normal((n, k), v.dtype, 2), _normal((m, n), v.dtype, 3)
    for seed in (6, 7):  # the second call takes the prepared launch, C's buffer filled from c again
        c = _normal((m, n), v.dtype, seed)
        out = cupy_gemm.gemm(x, w.T, c, alpha=0.5, beta=-1.5, variant=name)
        ref, scale = verify.reference(x, w.T, c, 0.5, -1.5)
        _check(v, out, ref, scale, k, f"beta, {m}x{n}x{k}, seed {seed}")
    # x contiguous but one element off its alignment: copied into a new array, not taken as it is
    off = _normal((m * k + 1,), v.dtype, 5)[1:].reshape(m, k)
    out = cupy_gemm.matmul(off, w.T, variant=name)
    ref, scale = verify.reference(off, w.T)
    _check(v, out, ref, scale, k, f"misaligned x, {m}x{n}x{k}")
    if not v.family.epilogue:
        return
    bias = _normal((n,), v.dtype, 4)
    out = cupy_gemm.matmul(x, w.T, variant=name, bias=bias, activation="relu")
    ref, scale = verify.reference(x, w.T)
    bias64 = bias.astype(cupy.float64)
    scale = scale + cupy.abs(bias64) + cupy.abs(ref + bias64)  # the sum's own fp32 rounding
    _check(v, out, cupy.maximum(ref + bias64, 0), scale, k, f"bias + relu, {m}x{n}x{k}")


@pytest.mark.parametrize("key", ["float16", "bfloat16", "tf32", "float32"])
def test_the_default_reads_a_vocabulary_of_odd_size_in_place(key, monkeypatch):
    """x @ W.T with W of 32001 rows (decode and prefill), and A @ x with A of 50257 rows (the product
    swapped, A read as a K-major B): the 16-bit and tf32 products run on a family that takes any N and pad
    nothing (exact fp32 takes CUDA-core kernels, which align N by padding)."""
    dtype = _dtype_of(key, monkeypatch)
    seen = resolutions(monkeypatch)
    for m, n, k, col in ((16, 32001, 1024, True), (300, 32001, 512, True), (50257, 8, 768, False)):
        a = _normal((m, k), dtype, m)
        b = _normal((n, k), dtype, n).T if col else _normal((k, n), dtype, n)
        plan = cupy_gemm.plan(a, b)
        seen.clear()
        out = cupy_gemm.matmul(a, b)
        (ops,) = seen
        if key != "float32":
            assert plan.variant.family.ragged_n and ops.arrangement.padded is None, (key, m, n, k, plan.variant.name)
        ref, scale = verify.reference(a, b)
        _check(plan.variant, out, ref, scale, k, f"default {m}x{n}x{k}")


@pytest.mark.parametrize("key", ["float16", "bfloat16", "tf32", "float32"])
@pytest.mark.parametrize("n", [136, 1001])
def test_a_batch_of_weights_stored_n_by_k_is_read_in_place(key, n, monkeypatch):
    """x @ W.T per member (each expert's or head's own weight, stored N×K): the default batch runs a family
    that reads B K-major, on the members where they lie, an odd N included, beta != 0 too; a family rendered
    for any C (Family.unaligned_c) writes the members of an odd N where they lie."""
    dtype = _dtype_of(key, monkeypatch)
    seen = []
    prepare = launch.prepare
    monkeypatch.setattr(launch, "prepare", lambda v, device, A, B, C, *args, **kw:
                        seen.append((v, B, C)) or prepare(v, device, A, B, C, *args, **kw))
    batched._entries.clear()
    x, w, c = _normal((3, 70, 264), dtype, n), _normal((3, n, 264), dtype, n + 1), _normal((3, 70, n), dtype, n + 2)
    out = cupy.full((3, 70, n), cupy.nan, dtype=dtype)
    cupy_gemm.gemm(x, w.transpose(0, 2, 1), c, alpha=1.5, beta=-0.5, out=out)
    ((v, B, C),) = seen
    assert v.family.b_layout == "col" and B.data.ptr == w.data.ptr, (key, n, v.name)
    in_place = v.family.unaligned_c or n % v.family.align(v.params, v.dtype) == 0
    assert (C.data.ptr == out.data.ptr) == in_place, (key, n, v.name)
    for i in range(3):
        ref, scale = verify.reference(x[i], w[i].T, c[i], 1.5, -0.5)
        _check(v, out[i], ref, scale, 264, f"batch member {i}, N={n}")
    # again with new x and c: the remembered launch; then beta = 0 into a C poisoned with NaN
    for beta in (-0.5, 0.0):
        x, c = _normal((3, 70, 264), dtype, n + 3), _normal((3, 70, n), dtype, n + 4)
        out.fill(cupy.nan)
        cupy_gemm.gemm(x, w.transpose(0, 2, 1), c, alpha=1.5, beta=beta, out=out)
        assert len(seen) == (1 if beta else 2), f"{key} N={n}: a repeated batch was prepared again"
        for i in range(3):
            ref, scale = verify.reference(x[i], w[i].T, c[i], 1.5, beta)
            _check(v, out[i], ref, scale, 264, f"batch member {i}, beta {beta}, N={n}")

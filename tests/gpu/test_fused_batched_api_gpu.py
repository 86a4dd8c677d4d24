"""The public API's batched products and fused epilogues on a GPU, through the default path and named
variants: against float64 references on fresh random inputs, outputs poisoned with NaN, ragged shapes,
broadcast batches, 1-D operands, beta != 0, K = 0, typed errors before launch."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import api, launch, prepared, registry, verify
from cupy_gemm.errors import ConfigError, InputError

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
    DTYPES = ["float16", "bfloat16", "float32"]
except ImportError:
    DTYPES = ["float16", "float32"]

pytestmark = pytest.mark.skipif(not cupy.cuda.is_available(), reason="needs a GPU")

FUNCS = {  # the float64 meaning of each built-in step, and the most it magnifies an error in x
    "relu": (lambda x: np.maximum(x, 0), 1.0),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), 1.13),
    "gelu_tanh": (lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3))), 1.13),
    "silu": (lambda x: x / (1 + np.exp(-x)), 1.1),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), 0.25),
}


def _erf(x):
    from math import erf
    return np.vectorize(erf)(x)


def _rand(shape, dtype, seed):
    return verify.random_operand(shape, dtype, seed)


def _check_fused(out, ref, scale, y_ref, dtype, k, gain=1.0):
    """out against y_ref = f(ref): the product's bound times f's largest slope, plus the output's own
    rounding of y and fp32 evaluation of f."""
    out64 = cupy.asnumpy(out.astype(cupy.float64))
    y = np.asarray(y_ref)
    assert not np.isnan(out64).any(), f"{int(np.isnan(out64).sum())} elements unwritten (NaN)"
    bound = (verify.bound_factor(dtype, "float32", k) * gain * cupy.asnumpy(scale)
             + verify.SAFETY * (verify.UNIT_ROUNDOFF[dtype] + 2.0**-22) * np.abs(y) + 1e-6)
    worst = float(np.max(np.abs(out64 - y) / bound)) if y.size else 0.0
    assert worst <= 1.0, f"worst error/bound {worst:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step", list(FUNCS))
@pytest.mark.parametrize("shape", [(1, 17, 40), (127, 1000, 136), (1000, 127, 1000), (4, 4096, 512)])
def test_builtin_activation_with_bias(dtype, step, shape):
    m, n, k = shape
    a, b = _rand((m, k), dtype, 1), _rand((k, n), dtype, 2)
    bias = _rand((n,), dtype, 3)
    out = cupy.full((m, n), cupy.nan, dtype)
    cupy_gemm.matmul(a, b, bias=bias, activation=step, out=out)
    ref, scale = verify.reference(a, b)
    f, gain = FUNCS[step]
    _check_fused(out, ref, scale, f(cupy.asnumpy(ref) + cupy.asnumpy(bias.astype(cupy.float64))), dtype, k, gain)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(17, 1000, 136), (1000, 17, 40), (2, 300, 64), (300, 2, 64)])
def test_custom_expression_with_every_kind_of_operand(dtype, shape):
    """Row, column, full and scalar operands, also where the default swaps the product (few rows)."""
    m, n, k = shape
    a, b = _rand((m, k), dtype, 4), _rand((k, n), dtype, 5)
    scale_j = _rand((n,), "float32", 6)
    shift_i = _rand((m,), dtype, 7)
    res = _rand((m, n), dtype, 8)
    out = cupy.full((m, n), cupy.nan, dtype)
    cupy_gemm.matmul(a, b, epilogue="y = x * scale[j] + shift[i] - 0.5f * res[i, j] + t",
                     operands={"scale": scale_j, "shift": shift_i, "res": res, "t": 0.25}, out=out)
    ref, scale = verify.reference(a, b)
    f64 = lambda x: cupy.asnumpy(x.astype(cupy.float64))
    y = cupy.asnumpy(ref) * f64(scale_j)[None, :] + f64(shift_i)[:, None] - 0.5 * f64(res) + 0.25
    _check_fused(out, ref, scale, y, dtype, k, gain=1.0)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_epilogue_after_beta_and_with_padding(dtype):
    """K = 33 pads (the kernel's tile covers padded rows and columns: the epilogue must not read past
    its operands), beta != 0 adds C before the epilogue."""
    m, n, k = 129, 1001, 33
    a, b, c = _rand((m, k), dtype, 9), _rand((k, n), dtype, 10), _rand((m, n), dtype, 11)
    rows = _rand((m,), dtype, 12)
    out = cupy.full((m, n), cupy.nan, dtype)
    cupy_gemm.gemm(a, b, c, alpha=0.5, beta=2.0, out=out, epilogue="y = fmaxf(x, rows[i])",
                   operands={"rows": rows})
    ref, scale = verify.reference(a, b, c, 0.5, 2.0)
    y = np.maximum(cupy.asnumpy(ref), cupy.asnumpy(rows.astype(cupy.float64))[:, None])
    _check_fused(out, ref, scale, y, dtype, k)


def test_empty_k_runs_the_epilogue_alone():
    a, b = cupy.empty((5, 0), cupy.float32), cupy.empty((0, 7), cupy.float32)
    bias = _rand((7,), "float32", 13)
    out = cupy_gemm.matmul(a, b, bias=bias, activation="sigmoid")
    expect = 1 / (1 + np.exp(-cupy.asnumpy(bias)))
    np.testing.assert_allclose(cupy.asnumpy(out), np.broadcast_to(expect, (5, 7)), rtol=1e-6)


def test_repeated_calls_read_the_operands_of_each_call():
    """The prepared launch is reused; the epilogue's operands are this call's, not the first's."""
    a, b = _rand((64, 256), "float16", 14), _rand((256, 128), "float16", 15)
    for seed in range(3):
        bias = _rand((128,), "float16", 20 + seed)
        out = cupy_gemm.matmul(a, b, bias=bias)
        ref, scale = verify.reference(a, b)
        _check_fused(out, ref, scale, cupy.asnumpy(ref) + cupy.asnumpy(bias.astype(cupy.float64)), "float16", 256)


def test_epilogue_errors_before_launch():
    a, b = _rand((8, 16), "float32", 1), _rand((16, 4), "float32", 2)
    with pytest.raises(ConfigError, match="unknown name"):
        cupy_gemm.matmul(a, b, epilogue="y = x + nope")
    with pytest.raises(ConfigError, match="shape"):
        cupy_gemm.matmul(a, b, bias=cupy.ones(5, cupy.float32))
    with pytest.raises(ConfigError, match="not allowed"):
        cupy_gemm.matmul(a, b, epilogue="y = x; }")
    with pytest.raises(ConfigError, match="has none|no fused"):
        cupy_gemm.matmul(a, b, variant="sgemv_skinny_r8", bias=cupy.ones(4, cupy.float32))
    with pytest.raises(InputError, match="cublas"):
        cupy_gemm.matmul(a, b, variant="cublas", activation="relu")


# ---- batches --------------------------------------------------------------------------------------

def _batched_ref(a, b):
    return np.matmul(cupy.asnumpy(a.astype(cupy.float64)), cupy.asnumpy(b.astype(cupy.float64)))


def _check_batched(out, a, b, dtype, c=None, alpha=1.0, beta=0.0):
    a64, b64 = cupy.asnumpy(a.astype(cupy.float64)), cupy.asnumpy(b.astype(cupy.float64))
    ref = alpha * np.matmul(a64, b64)
    scale = abs(alpha) * np.sqrt(np.matmul(a64 * a64, b64 * b64))
    if c is not None and beta:
        c64 = cupy.asnumpy(c.astype(cupy.float64))
        ref = ref + beta * c64
        scale = scale + abs(beta) * np.abs(c64)
    got = cupy.asnumpy(out.astype(cupy.float64))
    assert got.shape == ref.shape
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements unwritten"
    k = a.shape[-1]
    acc = "tf32" if dtype == "float32" and api.defaults_key(dtype, None) == "tf32" else "float32"
    bound = verify.bound_factor(dtype, acc, k) * scale + 1e-6
    worst = float(np.max(np.abs(got - ref) / bound)) if ref.size else 0.0
    assert worst <= 1.0, f"worst error/bound {worst:.3g}"


BATCH_CASES = [  # (a shape, b shape): cupy.matmul's broadcasting
    ((32, 32, 128, 64), (32, 32, 64, 128)),  # attention-like
    ((3, 127, 40), (3, 40, 17)),  # ragged members
    ((5, 1, 127, 40), (4, 40, 72)),  # broadcast both ways
    ((16, 129, 64), (64, 200)),  # a shared weight: folds into one 2-D product
    ((200, 64), (6, 64, 130)),  # a shared a
    ((7, 64), (64,)),  # 1-D b
    ((64,), (3, 64, 9)),  # 1-D a
    ((2, 3, 4, 17, 24), (4, 24, 33)),  # more batch dimensions than merge... they merge: contiguous
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", BATCH_CASES, ids=lambda s: f"{s[0]}@{s[1]}")
def test_batched_matmul_matches_numpy(dtype, shapes):
    a, b = _rand(shapes[0], dtype, 31), _rand(shapes[1], dtype, 32)
    want = np.matmul(np.zeros(shapes[0], np.int8), np.zeros(shapes[1], np.int8)).shape
    out = cupy.full(want, cupy.nan, dtype)
    cupy_gemm.matmul(a, b, out=out)
    _check_batched(out, a, b, dtype)
    again = cupy_gemm.matmul(a, b)
    assert again.shape == want


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_strided_views_and_beta(dtype):
    """Members that are slices of bigger arrays (non-contiguous batch strides), a transposed b, and
    gemm's beta·C per member."""
    big_a = _rand((6, 150, 80), dtype, 41)
    a = big_a[::2, 3:130, 8:72]  # (3, 127, 64)
    b = _rand((3, 72, 64), dtype, 42).swapaxes(-1, -2)  # (3, 64, 72), column-major members
    c = _rand((3, 127, 72), dtype, 43)
    out = c.copy()
    cupy_gemm.gemm(a, b, out, alpha=0.75, beta=-1.5, out=out)
    _check_batched(out, a, b, dtype, c, 0.75, -1.5)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_batched_with_epilogue(dtype):
    a, b = _rand((4, 100, 64), dtype, 51), _rand((4, 64, 136), dtype, 52)
    bias = _rand((136,), dtype, 53)
    out = cupy_gemm.matmul(a, b, bias=bias, activation="relu")
    ref = np.maximum(_batched_ref(a, b) + cupy.asnumpy(bias.astype(cupy.float64)), 0)
    got = cupy.asnumpy(out.astype(cupy.float64))
    tol = 8 * verify.UNIT_ROUNDOFF[dtype] * np.sqrt(64) * (np.abs(ref) + 8)
    assert np.all(np.abs(got - ref) <= tol)


def _representatives(per_kind=2):
    """The first entries of each batched family per dtype and accumulation."""
    seen = {}
    for n, v in registry.catalogue().items():
        kind = (v.family.name, v.dtype, v.acc)
        if v.family.batched and v.dtype in DTYPES and len(seen.setdefault(kind, [])) < per_kind:
            seen[kind].append(n)
    return [n for names in seen.values() for n in names]


# and a tile of 32·odd columns, whose B stage takes a half-used box and whose C moves in 64-byte boxes
@pytest.mark.parametrize("name", _representatives() + ["hgemm_wgmma_m64n224k16_tile128x224_stages4_ws2_cluster2"])
def test_every_batched_family_entry(name):
    v = registry.lookup(name)
    if not v.runs_on(launch.compute_capability(cupy.cuda.Device())):
        pytest.skip("not for this GPU")
    a, b3 = _rand((3, 70, 72), v.dtype, 61), _rand((3, 72, 136), v.dtype, 62)  # a member each: no fold
    out = cupy.full((3, 70, 136), cupy.nan, v.dtype)
    cupy_gemm.matmul(a, b3, variant=name, out=out)
    got = cupy.asnumpy(out.astype(cupy.float64))
    ref = _batched_ref(a, b3)
    assert not np.isnan(got).any()
    tol = verify.bound_factor(v.dtype, v.acc, 72) * np.sqrt(np.matmul(
        cupy.asnumpy(a.astype(cupy.float64)) ** 2, cupy.asnumpy(b3.astype(cupy.float64)) ** 2)) + 1e-6
    assert np.all(np.abs(got - ref) <= tol), name


def test_batched_errors():
    a, b = _rand((3, 8, 16), "float32", 1), _rand((2, 16, 4), "float32", 2)
    with pytest.raises(InputError, match="broadcast"):
        cupy_gemm.matmul(a, b)
    with pytest.raises(InputError, match="shape"):
        cupy_gemm.matmul(a, b[:1], out=cupy.empty((3, 8, 5), cupy.float32))
    with pytest.raises(InputError, match="runs no batches"):
        cupy_gemm.matmul(a[:, :1], b[:1], variant="sgemv_skinny_r1")
    prepared.clear()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((4, 100, 64), (4, 64, 136)), ((6, 129, 64), (64, 72))], ids=["batched", "fold"])
def test_repeated_batched_calls_use_each_calls_arrays(dtype, shapes):
    """The remembered launch rebinds every call's own operands, output and epilogue operands."""
    for seed in range(3):
        a, b = _rand(shapes[0], dtype, 70 + seed), _rand(shapes[1], dtype, 80 + seed)
        bias = _rand((shapes[1][-1],), dtype, 90 + seed)
        out = cupy.full(shapes[0][:-1] + (shapes[1][-1],), cupy.nan, dtype)
        cupy_gemm.matmul(a, b, bias=bias, out=out)
        ref = _batched_ref(a, b) + cupy.asnumpy(bias.astype(cupy.float64))
        got = cupy.asnumpy(out.astype(cupy.float64))
        acc = "tf32" if dtype == "float32" and api.defaults_key(dtype, None) == "tf32" else "float32"
        tol = verify.bound_factor(dtype, acc, 64) * 16 * (np.abs(ref) + 8)
        assert np.all(np.abs(got - ref) <= tol), f"call {seed}"


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "float32"])
@pytest.mark.parametrize("case", ["odd_k", "a_misaligned"])
def test_repeated_batched_calls_copy_their_operands_again(dtype, case):
    """A batch whose operands the family cannot read in place (K of 63 padded to 64; members one element off
    their alignment) is remembered too: each later call copies them again by the same layout and rebinds the
    copies. Every result is its own product, every element written."""
    from cupy_gemm import batched
    batched._entries.clear()
    k = 63 if case == "odd_k" else 64
    for seed in range(3):
        a = _rand((4, 100, k), dtype, 170 + seed)
        if case == "a_misaligned":
            a = cupy.concatenate([cupy.zeros(1, a.dtype), a.ravel()])[1:].reshape(a.shape)
        b = _rand((4, k, 136), dtype, 180 + seed)
        out = cupy.full((4, 100, 136), cupy.nan, dtype)
        assert cupy_gemm.matmul(a, b, out=out) is out
        ref = _batched_ref(a, b)
        got = cupy.asnumpy(out.astype(cupy.float64))
        tol = verify.bound_factor(dtype, "float32", k) * 16 * (np.abs(ref) + 8)
        assert np.all(np.abs(got - ref) <= tol), (case, seed)
    (entry,) = batched._entries.values()
    assert entry[0] == "launch" and entry[4] is not None  # the copies' layout is kept

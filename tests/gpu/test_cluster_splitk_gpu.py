"""Split-K inside a cluster on a GPU (the `_clusterk` entries: a cluster's blocks share one tile along K and
sum their partials through distributed shared memory): every entry against float64 references on ragged,
tall and skinny shapes, K slices left empty where K is shorter than the cluster, beta != 0, Fortran order,
batches, a fused epilogue, NaN-poisoned outputs, and bitwise repeatable results."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import launch, registry, verify

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None


def _runnable():
    if not cupy.cuda.is_available():
        return []
    cc = launch.compute_capability(cupy.cuda.Device())
    return [n for n, v in registry.catalogue().items() if v.params.get("KCLUSTER", 1) > 1 and v.runs_on(cc)]


NEW = _runnable()
# (127, 127, 127): two K blocks of 64 for clusters of up to four, so some blocks sum an empty slice
SHAPES = [(1, 1, 1), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (512, 576, 7168), (16, 4096, 4096),
          (129, 1000, 33), (70, 260, 3), (300, 4095, 2500)]


def _variant(name):
    v = registry.lookup(name)
    if v.dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    return v


def _operands(v, m, n, k, seed, order="C"):
    # a column-major B for the K-major family, which reads it in place (it would copy a row-major one)
    b_order = "F" if v.family.b_layout == "col" else order
    return (verify.random_operand((m, k), v.dtype, seed, order), verify.random_operand((k, n), v.dtype, seed + 1, b_order))


def _check(v, a, b, *, c=None, alpha=1.0, beta=0.0, out=None):
    m, k = a.shape
    n = b.shape[1]
    if out is None:  # poisoned: an element no block stored stays NaN
        out = c.copy() if beta != 0 else cupy.full((m, n), cupy.nan, dtype=a.dtype)
    ref, scale = verify.reference(a, b, c, alpha, beta)  # before the call: out may be c itself
    cupy_gemm.gemm(a, b, c, alpha=alpha, beta=beta, variant=v, out=out)
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    assert verdict.ok, f"{v.name} {m}x{n}x{k} alpha={alpha} beta={beta}: {verdict}"
    return out


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", NEW)
def test_entries(name, m, n, k):
    v = _variant(name)
    _check(v, *_operands(v, m, n, k, seed=m + 3 * n + 7 * k))


@pytest.mark.parametrize("name", NEW)
def test_alpha_beta(name):
    v = _variant(name)
    m, n, k = 200, 520, 4000
    a, b = _operands(v, m, n, k, seed=21)
    c = verify.random_operand((m, n), v.dtype, 23)
    _check(v, a, b, c=c, alpha=0.75, beta=-1.25)
    _check(v, a, b, c=c, alpha=-0.5)
    inplace = c.copy()
    _check(v, a, b, c=inplace, alpha=2.0, beta=0.5, out=inplace)


@pytest.mark.parametrize("name", NEW)
def test_fortran_order(name):
    """Fortran-ordered operands and output: the API computes Cᵀ = Bᵀ·Aᵀ."""
    v = _variant(name)
    m, n, k = 16, 1000, 4095
    a, b = (verify.random_operand(s, v.dtype, 31 + i, "F") for i, s in enumerate(((m, k), (k, n))))
    out = cupy.asfortranarray(cupy.full((m, n), cupy.nan, dtype=a.dtype))
    _check(v, a, b, out=out)
    c = verify.random_operand((m, n), v.dtype, 33, order="F")
    _check(v, a, b, c=c, alpha=1.5, beta=0.25)


@pytest.mark.parametrize("name", NEW)
def test_bitwise_repeatable(name):
    """Every block sums its share in rank order, whichever block finishes its slice first."""
    v = _variant(name)
    a, b = _operands(v, 256, 1024, 8192, seed=41)
    first = _check(v, a, b)
    for _ in range(5):
        again = cupy_gemm.matmul(a, b, variant=v)
        assert bool((again.view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{v.name}: results differ"


@pytest.mark.parametrize("name", [n for n in NEW if "kmajor" not in n])
def test_batch_and_epilogue(name):
    """A batch walks every member's tiles cluster by cluster; a fused epilogue runs on the summed tile."""
    v = _variant(name)
    a = verify.random_operand((3, 70, 1000), v.dtype, 51)
    b = verify.random_operand((3, 1000, 136), v.dtype, 52)
    out = cupy.full((3, 70, 136), cupy.nan, v.dtype)
    cupy_gemm.matmul(a, b, variant=name, out=out)
    a64, b64 = (cupy.asnumpy(x.astype(cupy.float64)) for x in (a, b))
    ref, scale = np.matmul(a64, b64), np.sqrt(np.matmul(a64 ** 2, b64 ** 2))
    got = cupy.asnumpy(out.astype(cupy.float64))
    assert not np.isnan(got).any()
    assert np.all(np.abs(got - ref) <= verify.bound_factor(v.dtype, v.acc, 1000) * scale + 1e-6), name
    bias = verify.random_operand((136,), v.dtype, 53)
    fused = cupy_gemm.matmul(a[0], b[0], variant=name, bias=bias, activation="relu")
    want = np.maximum(ref[0] + cupy.asnumpy(bias.astype(cupy.float64)), 0)
    tol = verify.bound_factor(v.dtype, v.acc, 1000) * scale[0] + 2 * verify.UNIT_ROUNDOFF[v.dtype] * np.abs(want) + 1e-6
    assert np.all(np.abs(cupy.asnumpy(fused.astype(cupy.float64)) - want) <= tol), name

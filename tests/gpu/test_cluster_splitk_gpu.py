"""Split-K inside a cluster on a GPU (the `_clusterk` entries: a cluster's blocks share one tile along K and
sum their partials through distributed shared memory): every entry against float64 references on ragged,
tall and skinny shapes, K slices left empty where K is shorter than the cluster, beta != 0, Fortran order,
batches, a fused epilogue, NaN-poisoned outputs, and bitwise repeatable results."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import launch, registry, verify
# poisoned outputs checked against float64 (_check); bfloat16 skipped without ml_dtypes (_variant)
from test_splitk_gpu import _check, _variant, check_alpha_beta, check_fortran_order


def _runnable():
    if not cupy.cuda.is_available():
        return []
    cc = launch.compute_capability(cupy.cuda.Device())
    return [n for n, v in registry.catalogue().items() if v.params.get("KCLUSTER", 1) > 1 and v.runs_on(cc)]


NEW = _runnable()
# (127, 127, 127): two K blocks of 64 for clusters of up to four, so some blocks sum an empty slice
SHAPES = [(1, 1, 1), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (512, 576, 7168), (16, 4096, 4096),
          (129, 1000, 33), (70, 260, 3), (300, 4095, 2500)]


def operands(v, m, n, k, seed, order="C"):
    # a column-major B for the K-major family, which reads it in place (it would copy a row-major one)
    b_order = "F" if v.family.b_layout == "col" else order
    return (verify.random_operand((m, k), v.dtype, seed, order), verify.random_operand((k, n), v.dtype, seed + 1, b_order))


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", NEW)
def test_entries(name, m, n, k):
    v = _variant(name)
    _check(v, *operands(v, m, n, k, seed=m + 3 * n + 7 * k))


@pytest.mark.parametrize("name", NEW)
def test_alpha_beta(name):
    """beta != 0 reads C in the owning block's store; beta = 0 leaves it unread; C may be the output."""
    check_alpha_beta(_variant(name))


@pytest.mark.parametrize("name", NEW)
def test_fortran_order(name):
    """Fortran-ordered operands and output: the API computes Cᵀ = Bᵀ·Aᵀ."""
    check_fortran_order(_variant(name))


@pytest.mark.parametrize("name", NEW)
def test_bitwise_repeatable(name):
    """Every block sums its share in rank order, whichever block finishes its slice first."""
    v = _variant(name)
    a, b = operands(v, 256, 1024, 8192, seed=41)
    first = _check(v, a, b)
    for _ in range(5):
        again = cupy_gemm.matmul(a, b, variant=v)
        assert bool((again.view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{v.name}: results differ"


@pytest.mark.parametrize("name", [n for n in NEW if "kmajor" not in n])
def test_batch_and_epilogue(name):
    """A batch walks every member's tiles cluster by cluster; a fused epilogue runs on the summed tile."""
    check_batch_and_epilogue(_variant(name))


def check_batch_and_epilogue(v):
    name = v.name
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

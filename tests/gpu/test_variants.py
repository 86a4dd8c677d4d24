"""Every catalogue variant against a float64 reference, on ragged shapes, with NaN-poisoned outputs."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import registry, verify
from cupy_gemm.launch import compute_capability

SHAPES = [  # M, N, K: not multiples of any tile, plus tall/skinny and K not a multiple of 8
    (1, 1, 1), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (4095, 4095, 4095),
    (4095, 17, 1000), (17, 4095, 1000), (1000, 127, 4095), (129, 1000, 33),
]


def _runnable():
    if not cupy.cuda.is_available():
        return []
    cc = compute_capability(cupy.cuda.Device())
    return [n for n, v in _general().items() if v.runs_on(cc)]


def _general():
    """Variants serving every shape through matmul: few-rows ones are in test_skinny_gpu.py (the `_rows32`
    tiles in test_unaligned_gpu.py), fp8 ones (abi "scaled": they take scales and run through scaled_mm) in
    test_fp8_gpu.py, grouped ones in test_grouped_gpu.py."""
    return {n: v for n, v in registry.catalogue().items()
            if v.max_rows() is None and v.family.abi not in ("scaled", "grouped")}


VARIANTS = _runnable() if cupy.cuda.is_available() else list(_general())


def run_and_check(name, m, n, k, *, alpha=1.0, beta=0.0, seed=0, a=None, b=None, c=None, out=None):
    v = registry.lookup(name)
    a = verify.random_operand((m, k), v.dtype, seed) if a is None else a
    b = verify.random_operand((k, n), v.dtype, seed + 1) if b is None else b
    if out is None:
        out = cupy.full((m, n), cupy.nan, dtype=v.dtype)
    ref, scale = verify.reference(a, b, c, alpha, beta)
    result = cupy_gemm.gemm(a, b, c, alpha=alpha, beta=beta, variant=name, out=out)
    assert result is out
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    assert verdict.ok, f"{name} at {m}x{n}x{k}: {verdict}"
    return verdict


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", VARIANTS)
def test_matmul(name, m, n, k):
    run_and_check(name, m, n, k, seed=m * 7 + n * 3 + k)


@pytest.mark.parametrize("name", VARIANTS)
def test_alpha_beta(name):
    v = registry.lookup(name)
    m, n, k = 131, 257, 97
    c = verify.random_operand((m, n), v.dtype, 5)
    run_and_check(name, m, n, k, alpha=0.75, beta=-1.25, c=c)
    # in place: out=c updates c
    c2 = c.copy()
    a, b = verify.random_operand((m, k), v.dtype, 6), verify.random_operand((k, n), v.dtype, 7)
    ref, scale = verify.reference(a, b, c2, 2.0, 0.5)
    cupy_gemm.gemm(a, b, c2, alpha=2.0, beta=0.5, variant=name, out=c2)
    assert verify.check(c2, ref, scale, v.dtype, v.acc, k).ok


@pytest.mark.parametrize("name", VARIANTS)
def test_layouts(name):
    """Fortran-ordered, transposed and strided operands and outputs give the same answer."""
    v = registry.lookup(name)
    m, n, k = 100, 75, 130
    big_a = verify.random_operand((2 * m, 3 * k), v.dtype, 11)
    a_strided = big_a[::2, 1::3]  # neither C- nor F-contiguous
    b_fortran = verify.random_operand((k, n), v.dtype, 12, order="F")
    out_f = cupy.asfortranarray(cupy.full((m, n), cupy.nan, dtype=v.dtype))
    run_and_check(name, m, n, k, a=a_strided, b=b_fortran, out=out_f)
    a_t = verify.random_operand((k, m), v.dtype, 13).T  # a transposed view
    out_view = cupy.full((m, 2 * n), cupy.nan, dtype=v.dtype)[:, ::2]
    run_and_check(name, m, n, k, a=a_t, b=verify.random_operand((k, n), v.dtype, 14), out=out_view)
    assert cupy.isnan(out_view.base[:, 1::2]).all(), "wrote outside the output view"

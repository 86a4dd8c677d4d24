"""Kernels that store C element by element at its own strides (Family.scalar_c: the decode families) on a GPU.
`A @ x` with x of a few columns runs swapped (Cᵀ = xᵀ·Aᵀ, the kernel's rows the caller's columns), so the
kernel's C is the column-major transpose of a row-major output: it is written where it lies, as are a
Fortran-order output and views with neighbour columns that must stay as they were, or a stride of two
columns. Every catalogue entry of those families, beta != 0, and a repeat through the prepared launch.
Against float64 references on random normal inputs, outputs poisoned with NaN (bounds: cupy_gemm.verify)."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import prepared, registry, verify
from gpu_variants import resolutions, runnable

NAMES = sorted(n for n, v in registry.catalogue().items() if v.family.scalar_c)
K = 136  # whole 16-byte vectors


def _normal(shape, dtype, seed, order="C"):
    x = cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32).astype(dtype)
    return cupy.asfortranarray(x) if order == "F" else x


def _outputs(M, cols, dtype):
    """(name, out, the view beside it that must stay unchanged, or None) for C of M×cols."""
    wide = cupy.full((M, 2 * cols + 3), 7.0, dtype=dtype)
    fortran = cupy.full((M + 5, cols), 7.0, dtype=dtype, order="F")
    yield "row-major", cupy.empty((M, cols), dtype=dtype), None
    yield "view of wider rows", wide[:, 1:cols + 1], wide[:, cols + 1:]
    yield "every other column", wide[:, 0:2 * cols:2], wide[:, 1:2 * cols:2]
    yield "Fortran view", fortran[2:M + 2], fortran[M + 2:]


@pytest.mark.parametrize("name", NAMES)
def test_a_swapped_product_writes_c_where_it_lies(name, monkeypatch):
    v, seen = runnable(name), resolutions(monkeypatch)
    # A read in place as the kernel's B: row-major (M, the kernel's N, odd) for a family reading B K-major,
    # else column-major (M aligned, as that family's N must be)
    kmajor = v.family.b_layout == "col"
    M = 1001 if kmajor else 1000
    a = _normal((M, K), v.dtype, 1, "C" if kmajor else "F")
    for cols in sorted({min(3, v.max_rows()), v.max_rows()}):
        for what, out, rest in _outputs(M, cols, v.dtype):
            kept = None if rest is None else rest.copy()
            prepared.clear()
            for beta in (0.0, -1.5):  # beta = 0: C poisoned with NaN, every element must be written
                c = _normal((M, cols), v.dtype, cols + 2) if beta else cupy.full((M, cols), cupy.nan, v.dtype)
                for call in (1, 2):  # the second call takes the prepared launch
                    x = _normal((cols, K), v.dtype, cols + call).T  # xᵀ row-major: the kernel's A in place too
                    out[...] = c
                    seen.clear()
                    cupy_gemm.gemm(a, x, out, alpha=0.5, beta=beta, out=out, variant=name)
                    if call == 1:
                        (ops,) = seen
                        arr = ops.arrangement
                        assert arr.swapped and not arr.copies and ops.C.data.ptr == out.data.ptr, (name, what, arr)
                    else:
                        assert not seen, f"{name} {what}: a repeated call resolved its operands again"
                    ref, scale = verify.reference(a, x, c, 0.5, beta)
                    verdict = verify.check(out, ref, scale, v.dtype, v.acc, K)
                    assert verdict.ok, f"{name} {M}x{cols}x{K} {what}, beta {beta}, call {call}: {verdict}"
                    if rest is not None:
                        assert bool((rest == kept).all()), f"{name} {what}: wrote outside the output view"


ANY_C = sorted(n for n, v in registry.catalogue().items() if v.family.unaligned_c)


@pytest.mark.parametrize("name", ANY_C)
def test_an_output_view_off_its_alignment_is_written_where_it_lies(name, monkeypatch):
    """A family rendered for any C (Family.unaligned_c) writes a view of a wider buffer whose rows start off
    16 bytes (an odd leading dimension, a base one element in) where it lies: pairs of columns where aligned,
    else elements, and nothing beside it. Every entry, a ragged M, beta = 0 into NaN and beta != 0, repeated."""
    v, seen = runnable(name), resolutions(monkeypatch)
    m, n, k = 129, 136, 72
    a = _normal((m, k), v.dtype, 1)
    b = _normal((n, k), v.dtype, 2).T if v.family.b_layout == "col" else _normal((k, n), v.dtype, 2)
    wide = cupy.full((m, n + 5), 7.0, dtype=v.dtype)
    out, beside = wide[:, 1:n + 1], (wide[:, :1], wide[:, n + 1:])
    prepared.clear()
    for beta in (0.0, -1.5):
        c = _normal((m, n), v.dtype, 3) if beta else cupy.full((m, n), cupy.nan, v.dtype)
        for call in (1, 2):  # the second call takes the prepared launch
            a = _normal((m, k), v.dtype, call)
            out[...] = c
            seen.clear()
            cupy_gemm.gemm(a, b, out, alpha=0.5, beta=beta, out=out, variant=name)
            if call == 1:
                (ops,) = seen
                assert ops.arrangement.unaligned_c and ops.C.data.ptr == out.data.ptr, (name, ops.arrangement)
            ref, scale = verify.reference(a, b, c, 0.5, beta)
            verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
            assert verdict.ok, f"{name} beta {beta}, call {call}: {verdict}"
            assert all(bool((x == 7.0).all()) for x in beside), f"{name}: wrote outside the output view"

"""x @ W.T with W stored N×K, as linear layers keep it: a K-major family's entry reads W (and a view of a
wider W) in place and matches a float64 reference, beta != 0 included. Shared by the GPU tests of the
K-major twins."""
import cupy

import cupy_gemm
from cupy_gemm import operands, registry, verify


def check_reads_w_in_place(name, shapes, seeds):
    """seeds(m, n, k): the seeds of x, of the wider W and of W. The wider W has 24 more columns: a 16-byte
    multiple in 2- and 4-byte elements, so its view still fits the family's alignment."""
    v = registry.lookup(name)
    fam = v.family
    for m, n, k in shapes:
        x_seed, wide_seed, w_seed = seeds(m, n, k)
        x = verify.random_operand((m, k), v.dtype, x_seed)
        w_wide = verify.random_operand((n, k + 24), v.dtype, wide_seed)
        for w in (verify.random_operand((n, k), v.dtype, w_seed), w_wide[:, :k]):
            out, wt = cupy.full((m, n), cupy.nan, dtype=x.dtype), w.T
            ops = operands.resolve(x, wt, out, fam.layout, fam.align(v.params, v.dtype), fam.b_layout)
            assert ops.B is wt and ops.zero_copy, (name, m, n, k)
            cupy_gemm.matmul(x, wt, variant=name, out=out)
            ref, scale = verify.reference(x, wt)
            verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
            assert verdict.ok, f"{name} {m}x{n}x{k}: {verdict}"
    c = verify.random_operand((300, 264), v.dtype, 7)
    x, w = verify.random_operand((300, 512), v.dtype, 8), verify.random_operand((264, 512), v.dtype, 9)
    out = cupy_gemm.gemm(x, w.T, c, alpha=0.5, beta=-2.0, variant=name)
    ref, scale = verify.reference(x, w.T, c, 0.5, -2.0)
    assert verify.check(out, ref, scale, v.dtype, v.acc, 512).ok, f"{name} beta"

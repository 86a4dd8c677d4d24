"""sgemm_simt_kmajor on a GPU: exact fp32 x @ W.T with W stored N×K (and a view of a wider W) read in place
by every entry, ragged shapes for the unaligned ones, beta != 0, split-K bitwise repeatable, a batch, and
the default path choosing the twin. Against float64 references, outputs poisoned with NaN."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import operands, registry, verify

NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "sgemm_simt_kmajor"]
# aligned entries: K and N multiples of 4 (else the API pads, which is not in place); unaligned: anything
ALIGNED_SHAPES = ((1, 4, 4), (200, 520, 136), (129, 264, 4168), (1000, 1000, 1000), (17, 4092, 1000))
RAGGED_SHAPES = ((1, 1, 1), (17, 17, 17), (129, 1000, 33), (127, 4095, 1001), (1000, 127, 4095))


def _in_place(name, x, wt, out):
    v = registry.lookup(name)
    fam = v.family
    ops = operands.resolve(x, wt, out, fam.layout, fam.align(v.params, v.dtype), fam.b_layout)
    return ops.B is wt and ops.zero_copy


@pytest.mark.parametrize("name", NAMES)
def test_reads_a_linear_layers_weight_in_place(name):
    v = registry.lookup(name)
    shapes = RAGGED_SHAPES if v.params["UNALIGNED"] else ALIGNED_SHAPES
    for m, n, k in shapes:
        # three seeds per shape: with one seed x's rows would repeat W's, and x·xᵀ sums positive terms,
        # whose rounding the bound (made for random signs) does not describe
        seed = 3 * ((m * 31 + n) * 31 + k)
        x = verify.random_operand((m, k), "float32", seed)
        w_wide = verify.random_operand((n, k + 12), "float32", seed + 1)
        for w in (verify.random_operand((n, k), "float32", seed + 2), w_wide[:, :k]):
            out, wt = cupy.full((m, n), cupy.nan, dtype=cupy.float32), w.T
            assert _in_place(name, x, wt, out), (name, m, n, k)
            cupy_gemm.matmul(x, wt, variant=name, out=out)
            ref, scale = verify.reference(x, wt)
            verdict = verify.check(out, ref, scale, "float32", "float32", k)
            assert verdict.ok, f"{name} {m}x{n}x{k}: {verdict}"
    c = verify.random_operand((300, 264), "float32", 7)
    x, w = verify.random_operand((300, 512), "float32", 8), verify.random_operand((264, 512), "float32", 9)
    out = cupy_gemm.gemm(x, w.T, c, alpha=0.5, beta=-2.0, variant=name)
    ref, scale = verify.reference(x, w.T, c, 0.5, -2.0)
    assert verify.check(out, ref, scale, "float32", "float32", 512).ok, f"{name} beta"


@pytest.mark.parametrize("name", [n for n in NAMES if n.endswith("_splitk")])
def test_split_k_is_repeatable(name):
    m, n, k = 128, 4096, 8192 + 4
    x = verify.random_operand((m, k), "float32", 1)
    w = verify.random_operand((n, k), "float32", 2)
    first = cupy_gemm.matmul(x, w.T, variant=name)
    ref, scale = verify.reference(x, w.T)
    assert verify.check(first, ref, scale, "float32", "float32", k).ok
    for _ in range(3):
        assert cupy.array_equal(cupy_gemm.matmul(x, w.T, variant=name), first)


def test_a_batch_of_weights_read_in_place():
    name = "sgemm_t_kmajor_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"
    x = verify.random_operand((3, 70, 260), "float32", 3)
    w = verify.random_operand((3, 132, 260), "float32", 4)
    wt = w.transpose(0, 2, 1)
    out = cupy_gemm.matmul(x, wt, variant=name)
    for i in range(3):
        ref, scale = verify.reference(x[i], wt[i])
        assert verify.check(out[i], ref, scale, "float32", "float32", 260).ok, i


@pytest.mark.parametrize("tf32", [False, True])
def test_the_default_reads_a_column_major_b_in_place(tf32, monkeypatch):
    """From 64 rows up, exact fp32 x @ W.T runs on the twin; so does tf32's ragged 129×1000×33."""
    if tf32:
        monkeypatch.setenv("CUPY_TF32", "1")
    shapes = ((129, 1000, 33),) if tf32 else ((64, 14336, 4096), (128, 576, 7168), (2048, 4096, 4096),
                                             (5000, 3000, 1000), (129, 1000, 33))
    for m, n, k in shapes:
        x = verify.random_operand((m, k), "float32", m)
        w = verify.random_operand((n, k), "float32", n)
        plan = cupy_gemm.plan(x, w.T)
        assert plan.variant.family.name == "sgemm_simt_kmajor", (tf32, m, n, k, plan.variant.name)
        out = plan()
        ref, scale = verify.reference(x, w.T)
        assert verify.check(out, ref, scale, "float32", "float32", k).ok, (m, n, k, plan.variant.name)

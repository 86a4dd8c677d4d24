"""sgemm_simt_kmajor and mma_kmajor on a GPU: x @ W.T with W stored N×K (and a view of a wider W) read in
place by every entry, ragged shapes for the unaligned ones, beta != 0, split-K bitwise repeatable, a batch,
and the default path choosing the twins. Against float64 references, outputs poisoned with NaN."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import registry, verify
from linear_weights import check_reads_w_in_place

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None

NAMES = [n for n, v in registry.catalogue().items()  # (the `_rows32` twins: tests/gpu/test_unaligned_gpu.py)
         if v.family.name in ("sgemm_simt_kmajor", "mma_kmajor") and v.max_rows() is None]
# aligned entries: K and N multiples of 8 (else the API pads, which is not in place); unaligned: anything
ALIGNED_SHAPES = ((1, 8, 8), (200, 520, 136), (129, 264, 4168), (1000, 1000, 1000), (17, 4088, 1000))
RAGGED_SHAPES = ((1, 1, 1), (17, 17, 17), (129, 1000, 33), (127, 4095, 1001), (1000, 127, 4095))


def _variant(name):
    v = registry.lookup(name)
    if v.dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    return v


@pytest.mark.parametrize("name", NAMES)
def test_reads_a_linear_layers_weight_in_place(name):
    v = _variant(name)
    # three seeds per shape: with one seed x's rows would repeat W's, and x·xᵀ sums positive terms, whose
    # rounding the bound (made for random signs) does not describe
    seeds = lambda m, n, k: tuple(3 * ((m * 31 + n) * 31 + k) + i for i in range(3))
    check_reads_w_in_place(name, RAGGED_SHAPES if v.params["UNALIGNED"] else ALIGNED_SHAPES, seeds)


@pytest.mark.parametrize("name", [n for n in NAMES if n.endswith("_splitk")])
def test_split_k_is_repeatable(name):
    v = _variant(name)
    m, n, k = 128, 4096, 8192 + 8
    x = verify.random_operand((m, k), v.dtype, 1)
    w = verify.random_operand((n, k), v.dtype, 2)
    first = cupy_gemm.matmul(x, w.T, variant=name)
    ref, scale = verify.reference(x, w.T)
    assert verify.check(first, ref, scale, v.dtype, v.acc, k).ok
    for _ in range(3):
        assert cupy.array_equal(cupy_gemm.matmul(x, w.T, variant=name), first)


@pytest.mark.parametrize("name", ["sgemm_t_kmajor_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk",
                                  "hgemm_mma_kmajor_m16n8k16_mma2x2_warp2x4x2_stages3_unaligned_acc32"])
def test_a_batch_of_weights_read_in_place(name):
    v = _variant(name)
    x = verify.random_operand((3, 70, 264), v.dtype, 3)
    w = verify.random_operand((3, 136, 264), v.dtype, 4)
    wt = w.transpose(0, 2, 1)
    out = cupy_gemm.matmul(x, wt, variant=name)
    for i in range(3):
        ref, scale = verify.reference(x[i], wt[i])
        assert verify.check(out[i], ref, scale, v.dtype, v.acc, 264).ok, i


@pytest.mark.parametrize("key", ["float32", "tf32", "float16", "bfloat16"])
def test_the_default_reads_a_column_major_b_in_place(key, monkeypatch):
    """From 64 rows up, exact fp32 x @ W.T runs on sgemm_simt_kmajor; so does tf32's ragged 129×1000×33, and
    the 16-bit one on mma_kmajor."""
    if key == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    monkeypatch.setenv("CUPY_TF32", "1" if key == "tf32" else "0")
    dtype = "float32" if key == "tf32" else key
    family = "sgemm_simt_kmajor" if dtype == "float32" else "mma_kmajor"
    shapes = ((64, 14336, 4096), (128, 576, 7168), (2048, 4096, 4096), (5000, 3000, 1000), (129, 1000, 33)) \
        if key == "float32" else ((129, 1000, 33),)
    for m, n, k in shapes:
        x = verify.random_operand((m, k), dtype, m)
        w = verify.random_operand((n, k), dtype, n)
        plan = cupy_gemm.plan(x, w.T)
        assert plan.variant.family.name == family, (key, m, n, k, plan.variant.name)
        out = plan()
        ref, scale = verify.reference(x, w.T)
        assert verify.check(out, ref, scale, dtype, plan.variant.acc, k).ok, (m, n, k, plan.variant.name)

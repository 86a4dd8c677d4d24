"""grouped_matmul on a Hopper GPU: every layout (experts, masked, list), both B layouts, fp16 and bf16,
against a float64 product per group. Fresh standard-normal inputs; outputs poisoned with NaN first, so a
row the contract says is written (every row: products, or zeros past the last offset and past a masked
count) and was not shows up. Ragged groups (0, 1, 17, 127, 300, 1000 rows), K that is not a multiple of
BK (40, 136, 1000), N that is not a multiple of BN (72, 1000), 8 and 64 groups."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import registry, verify
from cupy_gemm.launch import compute_capability

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None

HOPPER = cupy.cuda.is_available() and compute_capability(cupy.cuda.Device()) == 90
pytestmark = pytest.mark.skipif(not HOPPER, reason="needs a compute capability 9.0 GPU (sm_90a)")

NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "grouped"]
DTYPES = ["float16", "bfloat16"]
LAYOUTS = ["kn", "nk"]
SIZES_8 = [0, 1, 17, 127, 300, 1000, 0, 64]
KN = [(40, 72), (136, 1000), (1000, 264)]  # (K, N): K tails past BK = 64, N tails past BN = 128 and 256


def _dtype(dtype):
    if dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    return dtype


def normal(shape, dtype, seed):
    rng = cupy.random.default_rng(seed)
    return rng.standard_normal(shape, dtype=cupy.float32).astype(dtype)


def weights(g, k, n, dtype, b_layout, seed):
    return normal((g, n, k) if b_layout == "nk" else (g, k, n), dtype, seed)


def expert(b, g, b_layout):
    """Expert g's weight as a (K, N) matrix."""
    return b[g].T if b_layout == "nk" else b[g]


def check_product(out, a, b, dtype, what):
    ref, scale = verify.reference(a, b)
    verdict = verify.check(out, ref, scale, dtype, "float32", a.shape[1])
    assert verdict.ok, f"{what}: {verdict}"


def assert_zeros(x, what):
    x = x.astype(cupy.float32)  # NaN (unwritten) compares unequal to zero too
    assert int(cupy.count_nonzero(x != 0)) == 0, f"{what}: not all zeros"


def run_experts(sizes, k, n, dtype, b_layout, *, tail=5, variant=None, seed=0):
    g = len(sizes)
    ends = np.cumsum(sizes).astype(np.int32)
    rows = int(ends[-1]) + tail
    a = normal((rows, k), dtype, seed)
    b = weights(g, k, n, dtype, b_layout, seed + 1)
    out = cupy.full((rows, n), cupy.nan, dtype=dtype)
    got = cupy_gemm.grouped_matmul(a, b, offsets=cupy.asarray(ends), out=out, variant=variant, b_layout=b_layout)
    assert got is out
    starts = [0, *ends[:-1].tolist()]
    for i, (s, e) in enumerate(zip(starts, ends.tolist())):
        if e > s:
            check_product(out[s:e], a[s:e], expert(b, i, b_layout), dtype, f"group {i} rows {s}..{e} K={k} N={n}")
    assert_zeros(out[int(ends[-1]):], "rows past offsets[-1]")
    return out


@pytest.mark.parametrize("k,n", KN, ids=[f"k{k}n{n}" for k, n in KN])
@pytest.mark.parametrize("b_layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_experts_8_groups(dtype, b_layout, k, n):
    run_experts(SIZES_8, k, n, _dtype(dtype), b_layout, seed=k + n)


@pytest.mark.parametrize("b_layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_experts_64_groups(dtype, b_layout):
    sizes = np.random.default_rng(64).choice([0, 1, 17, 127, 300], size=64).tolist()
    run_experts(sizes, 136, 264, _dtype(dtype), b_layout, seed=64)


@pytest.mark.parametrize("b_layout", LAYOUTS)
@pytest.mark.parametrize("name", NAMES)
def test_every_variant(name, b_layout):
    v = registry.lookup(name)
    run_experts(SIZES_8, 1000, 264, _dtype(v.dtype), b_layout, variant=name, seed=3)


def test_large_groups_take_the_wide_tile():
    """1000 rows per expert and N = 4096: the 128×256 default, whole tiles and tails of both."""
    run_experts([1000, 1024, 0, 999], 1024, 4096, "float16", "kn", tail=0, seed=9)


def test_offsets_are_clamped_to_a():
    """offsets[-1] past a's rows (no host check: they are on the device): groups end at a's last row."""
    k, n, rows = 64, 128, 200
    a, b = normal((rows, k), "float16", 1), normal((3, k, n), "float16", 2)
    out = cupy.full((rows, n), cupy.nan, dtype="float16")
    cupy_gemm.grouped_matmul(a, b, offsets=cupy.asarray([50, 150, 900], dtype=cupy.int32), out=out)
    for i, (s, e) in enumerate([(0, 50), (50, 150), (150, 200)]):
        check_product(out[s:e], a[s:e], b[i], "float16", f"group {i}")


def test_all_groups_empty_writes_zeros():
    a, b = normal((40, 64), "float16", 1), normal((4, 64, 72), "float16", 2)
    out = cupy.full((40, 72), cupy.nan, dtype="float16")
    cupy_gemm.grouped_matmul(a, b, offsets=cupy.zeros(4, dtype=cupy.int32), out=out)
    assert_zeros(out, "every row")


@pytest.mark.parametrize("m_max", [1, 17, 130])
@pytest.mark.parametrize("b_layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_masked(dtype, b_layout, m_max):
    dtype = _dtype(dtype)
    g, k, n = 8, 136, 1000
    counts = np.array([0, 1, m_max, m_max // 2, 3, m_max + 5, -2, 17], dtype=np.int32)  # clamped to 0..m_max
    a = normal((g, m_max, k), dtype, m_max)
    b = weights(g, k, n, dtype, b_layout, m_max + 1)
    out = cupy.full((g, m_max, n), cupy.nan, dtype=dtype)
    cupy_gemm.grouped_matmul(a, b, masked_m=cupy.asarray(counts), out=out, b_layout=b_layout)
    for i, c in enumerate(np.clip(counts, 0, m_max).tolist()):
        if c:
            check_product(out[i, :c], a[i, :c], expert(b, i, b_layout), dtype, f"group {i} count {c}")
        assert_zeros(out[i, c:], f"group {i} rows past its count {c}")


LIST_SHAPES = [(0, 64, 64), (1, 8, 8), (17, 72, 40), (127, 1000, 136), (300, 264, 1000), (5, 16, 0), (1000, 128, 64)]


@pytest.mark.parametrize("b_layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_list(dtype, b_layout):
    dtype = _dtype(dtype)
    as_ = [normal((m, k), dtype, 10 + i) for i, (m, n, k) in enumerate(LIST_SHAPES)]
    bs = [normal((n, k) if b_layout == "nk" else (k, n), dtype, 20 + i) for i, (m, n, k) in enumerate(LIST_SHAPES)]
    outs = [cupy.full((m, n), cupy.nan, dtype=dtype) for m, n, k in LIST_SHAPES]
    got = cupy_gemm.grouped_matmul(as_, bs, out=outs, b_layout=b_layout)
    assert all(x is y for x, y in zip(got, outs))
    for i, ((m, n, k), a, b, out) in enumerate(zip(LIST_SHAPES, as_, bs, outs)):
        if k == 0:
            assert_zeros(out, f"group {i} (K = 0)")
        elif m:
            check_product(out, a, b.T if b_layout == "nk" else b, dtype, f"group {i} {m}x{n}x{k}")


def test_list_allocates_outputs_and_copies_strided_operands():
    a = normal((300, 256), "float16", 1)[:, :128]  # rows 512 bytes apart: copied for the tensor map
    b = normal((128, 96), "float16", 2)
    a2, b2 = normal((64, 64), "float16", 3), normal((64, 1000), "float16", 4)
    c, c2 = cupy_gemm.grouped_matmul([a, a2], [b, b2])
    check_product(c, a, b, "float16", "strided a")
    check_product(c2, a2, b2, "float16", "second group")


def test_64_groups_bf16_weights_as_linear_layers_keep_them():
    _dtype("bfloat16")
    sizes = np.random.default_rng(7).integers(0, 300, size=64)
    out = run_experts(sizes.tolist(), 1000, 1000, "bfloat16", "nk", tail=0, seed=77)
    assert not bool(cupy.isnan(out.astype(cupy.float32)).any())

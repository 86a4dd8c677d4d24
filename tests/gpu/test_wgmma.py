"""The Hopper families on a Hopper GPU, beyond the generic variant suite: box edges of the copy engine,
both epilogues, strided operands the tensor maps take in place, persistent tile walks, tensor maps; for
TF32, B read in place when column-major and copied when not, and the inputs' tf32 rounding; for TF32 with
a row-major B (wgmma_tf32_rowb), the transpose in shared memory; for 16-bit inputs with a column-major B
(wgmma_kmajor, x @ W.T), B read in place by every entry, clusters included, and by the default path."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import operands, registry, tma, verify
from cupy_gemm.errors import InputError
from cupy_gemm.launch import compute_capability
from linear_weights import check_reads_w_in_place

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None

HOPPER = cupy.cuda.is_available() and compute_capability(cupy.cuda.Device()) == 90
pytestmark = pytest.mark.skipif(not HOPPER, reason="needs a compute capability 9.0 GPU (sm_90a)")

NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "wgmma"]
FLAGSHIP = "hgemm_wgmma_m64n256k16_stages4_ws2"
BF16 = "bgemm_wgmma_m64n256k16_stages4_ws2"

# M, N, K around the 128×256 tile, the 64-element boxes and the 64-deep stages: K tails of 1 and 63,
# N narrower than one box (boxes wholly outside the matrix), a single row, more tiles than SMs
EDGES = [(1, 8, 1), (1, 264, 65), (129, 8, 64), (200, 520, 127), (64, 64, 4159), (2000, 2056, 200)]


def _check(name, m, n, k, *, alpha=1.0, beta=0.0, a=None, b=None, c=None, seed=0):
    v = registry.lookup(name)
    a = verify.random_operand((m, k), v.dtype, seed) if a is None else a
    b = verify.random_operand((k, n), v.dtype, seed + 1) if b is None else b
    # poisoned unless C is an input: then the result must be the update of C
    out = c.copy() if beta != 0 else cupy.full((m, n), cupy.nan, dtype=a.dtype)
    cupy_gemm.gemm(a, b, c, alpha=alpha, beta=beta, variant=name, out=out)
    ref, scale = verify.reference(a, b, c, alpha, beta)
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    assert verdict.ok, f"{name} {m}x{n}x{k} alpha={alpha} beta={beta}: {verdict}"


def _needs_bf16(name):
    if registry.lookup(name).dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")


@pytest.mark.parametrize("m,n,k", EDGES, ids=[f"{m}x{n}x{k}" for m, n, k in EDGES])
@pytest.mark.parametrize("name", NAMES)
def test_box_edges(name, m, n, k):
    _needs_bf16(name)
    _check(name, m, n, k, seed=m + n + k)


CLUSTERED = [n for n in NAMES if registry.lookup(n).params["CLUSTER"] > 1]


@pytest.mark.parametrize("name", CLUSTERED)
def test_clusters_with_a_half_below_m_and_many_tiles_per_cluster(name):
    """Clusters of two or four blocks share B stages (whole boxes, or with four blocks and three boxes 16
    rows of k each): with 3 row tiles and a bit the last cluster's blocks lie partly or wholly below M (load
    zeros, store nothing); 4100×3000 gives each cluster several tiles; beta takes the register epilogue;
    repeats are bitwise identical."""
    _needs_bf16(name)
    bm = registry.lookup(name).params["BM"]
    for m, n, k in ((3 * bm + 5, 520, 200), (4100, 3000, 1000), (bm + 1, 4096, 64)):
        _check(name, m, n, k)
    _check(name, 3 * bm + 5, 300, 130, alpha=0.5, beta=-1.5, c=verify.random_operand((3 * bm + 5, 300), registry.lookup(name).dtype, 7))
    a = verify.random_operand((4100, 1000), registry.lookup(name).dtype, 1)
    b = verify.random_operand((1000, 3000), registry.lookup(name).dtype, 2)
    first = cupy_gemm.matmul(a, b, variant=name)
    assert all(bool((cupy_gemm.matmul(a, b, variant=name) == first).all()) for _ in range(3))


@pytest.mark.parametrize("name", [FLAGSHIP, BF16, "hgemm_wgmma_m64n256k16_stages4_ws2_regstore"])
def test_both_epilogues(name):
    """beta = 0 takes the TMA-store epilogue where the variant has one; beta != 0 stores from registers."""
    _needs_bf16(name)
    v = registry.lookup(name)
    m, n, k = 333, 520, 190
    c = verify.random_operand((m, n), v.dtype, 4)
    _check(name, m, n, k, alpha=-0.5, c=c)              # beta = 0: c is not read (and not passed on)
    _check(name, m, n, k, alpha=0.5, beta=2.0, c=c)
    _check(name, m, n, k, alpha=0.0, beta=1.0, c=c)     # alpha = 0: C scaled by beta only


@pytest.mark.parametrize("name", [FLAGSHIP, BF16])
def test_strided_operands_used_in_place(name):
    """Row strides that are multiples of 8 elements go to the copy engine as they are."""
    _needs_bf16(name)
    v = registry.lookup(name)
    m, n, k = 300, 264, 136
    a_big = verify.random_operand((m, k + 24), v.dtype, 1)
    b_big = verify.random_operand((k, n + 40), v.dtype, 2)
    out_big = cupy.full((m, n + 56), cupy.nan, dtype=a_big.dtype)
    a, b, out = a_big[:, 8:8 + k], b_big[:, :n], out_big[:, 16:16 + n]
    cupy_gemm.matmul(a, b, variant=name, out=out)
    ref, scale = verify.reference(a, b)
    assert verify.check(out, ref, scale, v.dtype, v.acc, k).ok
    assert cupy.isnan(out_big[:, :16]).all() and cupy.isnan(out_big[:, 16 + n:]).all(), "wrote outside out"


def test_unaligned_leading_dimensions_are_padded():
    """ld = 1001 elements is no multiple of 16 bytes: the API pads instead of handing TMA a bad map."""
    v = registry.lookup(FLAGSHIP)
    a = verify.random_operand((257, 1001), v.dtype, 3)[:, :999]
    b = verify.random_operand((999, 1001), v.dtype, 4)
    out = cupy.full((257, 1001), cupy.nan, dtype=a.dtype)
    cupy_gemm.matmul(a, b, variant=FLAGSHIP, out=out)
    ref, scale = verify.reference(a, b)
    assert verify.check(out, ref, scale, v.dtype, v.acc, 999).ok


def test_many_tiles_per_block():
    """8192×4096 is 1024 tiles of 128×256: every persistent block walks several, across tile borders."""
    _check(FLAGSHIP, 8192, 4096, 320, seed=9)


def test_tensor_maps_are_cached_and_checked():
    x = cupy.zeros((64, 128), dtype=cupy.float16)
    first = tma.tensor_map_2d(x.data.ptr, "float16", rows=64, cols=128, ld=128, box_rows=64, box_cols=64)
    again = tma.tensor_map_2d(x.data.ptr, "float16", rows=64, cols=128, ld=128, box_rows=64, box_cols=64)
    other = tma.tensor_map_2d(x.data.ptr, "float16", rows=64, cols=128, ld=128, box_rows=128, box_cols=64)
    assert first is again and other is not first
    assert first.shape == (1,) and first.nbytes == 128 and bytes(first.tobytes()) != bytes(128)
    with pytest.raises(InputError, match="16-byte aligned"):
        tma.tensor_map_2d(x.data.ptr + 2, "float16", rows=64, cols=120, ld=128, box_rows=64, box_cols=64)


# ---- TF32 (family wgmma_tf32): fp32 inputs, B read K-major ---------------------------------------------
TF32_NAMES = [n for n, v in registry.catalogue().items() if v.family.name in ("wgmma_tf32", "wgmma_tf32_rowb")]
TF32_FLAGSHIP = "sgemm_wgmma_m64n256k8_tf32_stages4_ws2"
# around the 32-element (128-byte) boxes of fp32: K tails of 1 and 31, N narrower than one 32-column C
# box, a single row, more tiles than SMs
TF32_EDGES = [(1, 4, 1), (1, 260, 33), (129, 4, 32), (200, 520, 95), (64, 64, 4127), (2000, 2056, 200)]


@pytest.mark.parametrize("m,n,k", TF32_EDGES, ids=[f"{m}x{n}x{k}" for m, n, k in TF32_EDGES])
@pytest.mark.parametrize("name", TF32_NAMES)
def test_tf32_box_edges(name, m, n, k):
    _check(name, m, n, k, seed=m + n + k)


@pytest.mark.parametrize("name", [TF32_FLAGSHIP, "sgemm_wgmma_m64n256k8_tf32_stages4_ws2_regstore"])
def test_tf32_both_epilogues(name):
    m, n, k = 333, 520, 190
    c = verify.random_operand((m, n), "float32", 4)
    _check(name, m, n, k, alpha=-0.5, c=c)
    _check(name, m, n, k, alpha=0.5, beta=2.0, c=c)
    _check(name, m, n, k, alpha=0.0, beta=1.0, c=c)


KMAJOR_NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "wgmma_kmajor"]


@pytest.mark.parametrize("name", KMAJOR_NAMES)
def test_kmajor_reads_a_linear_layers_weight_in_place(name):
    """x @ W.T with W stored N×K (and a view of a wider W): the copy engine reads W as it lies; box edges,
    a ragged K tail, beta != 0, and more tiles than SMs (clusters: tiles below M in a cluster)."""
    _needs_bf16(name)
    check_reads_w_in_place(name, ((1, 8, 8), (200, 520, 136), (129, 264, 4168), (2000, 2056, 200), (4096, 1000, 1000)),
                           lambda m, n, k: (m + k, n + k, n))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_default_reads_a_column_major_b_in_place(dtype):
    if dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    for m, n, k in ((2048, 4096, 4096), (128, 4096, 4096), (64, 14336, 4096), (5000, 3000, 1000)):
        x = verify.random_operand((m, k), dtype, m)
        w = verify.random_operand((n, k), dtype, n)
        plan = cupy_gemm.plan(x, w.T)
        # a K-major twin: the wgmma tiles, or the decode kernel (64 rows: the H200 table's pick at 64×14336×4096)
        assert plan.variant.family.name in ("wgmma_kmajor", "decode_kmajor"), (m, n, k, plan.variant.name)
        out = plan()
        ref, scale = verify.reference(x, w.T)
        assert verify.check(out, ref, scale, dtype, "float32", k).ok, (m, n, k, plan.variant.name)


@pytest.mark.parametrize("b_layout", ["row", "col"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_default_takes_one_wave_of_clustered_tiles(dtype, b_layout):
    """Off the tables, the one-wave rule: 64×192 tiles in clusters of four (256 rows, B shared as 16 rows of
    k of each box), 64×128 in pairs (200 rows: the second cluster's lower block holds 8 of them) and 128×128
    in pairs (1000 rows: the last pair's lower block holds 104), or their K-major twins for x @ W.T; ragged
    N and K, the product checked against float64."""
    if dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    for (m, n, k), tile in (((256, 5000, 2000), "tile64x192_stages6_ws1_cluster4"),
                            ((200, 3520, 2504), "tile64x128_stages8_ws1_cluster2"),
                            ((1000, 2040, 1000), "tile128x128_stages6_ws2_cluster2")):
        x = verify.random_operand((m, k), dtype, m)
        w = verify.random_operand((n, k) if b_layout == "col" else (k, n), dtype, n)
        b = w.T if b_layout == "col" else w
        out = cupy.full((m, n), cupy.nan, dtype=x.dtype)  # every element must be written
        plan = cupy_gemm.plan(x, b, out=out)
        family = "wgmma_kmajor" if b_layout == "col" else "wgmma"
        assert plan.variant.family.name == family and plan.variant.name.endswith(tile), (m, n, k, plan.variant.name)
        plan()
        ref, scale = verify.reference(x, b)
        assert verify.check(out, ref, scale, dtype, "float32", k).ok, (m, n, k, plan.variant.name)


def test_tf32_column_major_b_is_used_in_place():
    """A column-major B (also a view with a padded column stride) goes to the copy engine as it is."""
    v = registry.lookup(TF32_FLAGSHIP)
    fam = v.family
    m, n, k = 300, 264, 136
    a = verify.random_operand((m, k), "float32", 1)
    b_big = verify.random_operand((k + 12, n), "float32", 2, order="F")
    for b in (verify.random_operand((k, n), "float32", 3, order="F"), b_big[:k]):
        out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
        ops = operands.resolve(a, b, out, fam.layout, fam.align(v.params, v.dtype), fam.b_layout)
        assert ops.B is b and ops.ldb == b.strides[1] // 4 and ops.zero_copy
        cupy_gemm.matmul(a, b, variant=TF32_FLAGSHIP, out=out)
        ref, scale = verify.reference(a, b)
        assert verify.check(out, ref, scale, v.dtype, v.acc, k).ok


def test_tf32_row_major_b_is_copied_column_major():
    v = registry.lookup(TF32_FLAGSHIP)
    fam = v.family
    m, n, k = 257, 300, 1000  # aligned: B is copied, not padded
    a = verify.random_operand((m, k), "float32", 5)
    b = verify.random_operand((k, n), "float32", 6)
    out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    ops = operands.resolve(a, b, out, fam.layout, fam.align(v.params, v.dtype), fam.b_layout)
    assert ops.B is not b and ops.B.flags.f_contiguous and ops.copied
    _check(TF32_FLAGSHIP, m, n, k, a=a, b=b)


def test_tf32_many_tiles_per_block():
    _check(TF32_FLAGSHIP, 8192, 4096, 320, seed=9)


def test_tf32_inputs_are_rounded_to_nearest_even():
    """A and B reach the tensor cores rounded to tf32 by the copy engine (tf32 tensor maps): to nearest,
    ties to even, as cuBLAS's TF32 mode; not truncated, as fp32 maps would leave them."""
    k = 32
    x = cupy.array([1 + 2**-11 + 2**-12, -(1 + 2**-11 + 2**-12), 1 + 2**-11, 1 + 2**-10 + 2**-11, 1 + 2**-12],
                   dtype=cupy.float32)
    expected = cupy.array([1 + 2**-10, -(1 + 2**-10), 1.0, 1 + 2**-9, 1.0], dtype=cupy.float32) * k
    a = cupy.repeat(x[:, None], k, axis=1)
    out = cupy_gemm.matmul(a, cupy.ones((k, 8), dtype=cupy.float32), variant=TF32_FLAGSHIP)
    assert cupy.array_equal(out, cupy.repeat(expected[:, None], 8, axis=1)), out[:, 0] / k
    b = cupy.asfortranarray(cupy.repeat(x[None, :], k, axis=0))
    out = cupy_gemm.matmul(cupy.ones((8, k), dtype=cupy.float32), b, variant=TF32_FLAGSHIP)
    assert cupy.array_equal(out, cupy.repeat(expected[None, :], 8, axis=0)), out[0] / k


# ---- TF32 with a row-major B read in place (family wgmma_tf32_rowb) ------------------------------------
ROWB_NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "wgmma_tf32_rowb"]
ROWB = "sgemm_wgmma_m64n128k8_tf32_rowb_tile128x128_stages4_ws2"


def test_rowb_reads_a_row_major_b_in_place():
    v = registry.lookup(ROWB)
    fam = v.family
    m, n, k = 257, 300, 1000
    a = verify.random_operand((m, k), "float32", 5)
    b = verify.random_operand((k, n), "float32", 6)
    out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    ops = operands.resolve(a, b, out, fam.layout, fam.align(v.params, v.dtype), fam.b_layout)
    assert ops.B is b and ops.zero_copy
    _check(ROWB, m, n, k, a=a, b=b)
    # a column-major B is copied row-major for it, and the product is the same
    _check(ROWB, m, n, k, a=a, b=cupy.asfortranarray(b))


@pytest.mark.parametrize("name", ROWB_NAMES)
def test_rowb_equals_the_column_major_kernel_bitwise(name):
    """The transposed stages hold the very tf32 values the copy engine gives the K-major kernel, and the
    MMAs run in the same order: the same tile from wgmma_tf32 on Bᵀ's copy gives the same bits."""
    v = registry.lookup(name)
    twin = registry.make_variant(registry.family("wgmma_tf32"), name.replace("_rowb", "_kmajor"), "float32",
                                 dict(v.params), "tf32")
    m, n, k = 700, 1000, 1531
    a = verify.random_operand((m, k), "float32", 11)
    b = verify.random_operand((k, n), "float32", 12)
    out = cupy_gemm.matmul(a, b, variant=v)
    ref = cupy_gemm.matmul(a, b, variant=twin)
    assert cupy.array_equal(out, ref)


@pytest.mark.parametrize("name", [n for n in ROWB_NAMES if n.endswith("_splitk")])
def test_rowb_split_k_is_repeatable(name):
    m, n, k = 128, 4096, 8192 + 77  # M = 128 with deep K: the shape the split-K entries are for
    a = verify.random_operand((m, k), "float32", 13)
    b = verify.random_operand((k, n), "float32", 14)
    first = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    cupy_gemm.matmul(a, b, variant=name, out=first)
    ref, scale = verify.reference(a, b)
    assert verify.check(first, ref, scale, "float32", "tf32", k).ok
    for _ in range(3):
        assert cupy.array_equal(cupy_gemm.matmul(a, b, variant=name), first)

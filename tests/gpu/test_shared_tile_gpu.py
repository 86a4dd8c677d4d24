"""Blocks that share a C tile beyond plain split-K, on a GPU:
- split-K inside a cluster (the `_clusterk` entries): a cluster's blocks share one tile along K and sum
  their partials through distributed shared memory; K slices are left empty where K is shorter than the
  cluster;
- stream-K: whole tiles first, then shares of the rest's K blocks, the blocks sharing a tile summing their
  partials as split-K does; classic (the `_streamk` entries: the last one to two waves' K blocks shared
  equally by every block) and the last wave split (`_tailsplit`: each tile of the last wave in up to 8
  equal shares). The shapes give partitions that differ (one tile split many ways, a last wave between one
  and two waves of tiles, whole waves before the shared ones, a last wave of one tile, K blocks of one).
Every entry against float64 references on ragged, tall and skinny shapes, beta != 0, Fortran order, batches,
a fused epilogue, NaN-poisoned outputs, and bitwise repeatable results."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import launch, registry, verify
# poisoned outputs checked against float64 (_check); bfloat16 skipped without ml_dtypes (_variant)
from test_splitk_gpu import _check, _variant, assert_repeats, check_alpha_beta, check_fortran_order


def _runnable(kind):
    if not cupy.cuda.is_available():
        return []
    cc = launch.compute_capability(cupy.cuda.Device())
    return [n for n, v in registry.catalogue().items() if kind(v) and v.runs_on(cc)]


CLUSTER = _runnable(lambda v: v.params.get("KCLUSTER", 1) > 1)
STREAM_K = _runnable(lambda v: v.family.stream_k(v.params))
NEW = CLUSTER + STREAM_K
# (127, 127, 127): two K blocks of 64 for clusters of up to four, so some blocks sum an empty slice
CLUSTER_SHAPES = [(1, 1, 1), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (512, 576, 7168), (16, 4096, 4096),
                  (129, 1000, 33), (70, 260, 3), (300, 4095, 2500)]
# with 128×256 tiles on 132 SMs: 1000³ 32 tiles of 16 K blocks (each shared by ~5 blocks); 512×10240×8192
# 160 tiles (between one and two waves: all shared); 4095³ 512 tiles (264 whole, 248 shared);
# 4096×4096×64 the same tiles of one K block each; 129×1000×33 one K block, fewer blocks than SMs. Split
# last waves: 512×10240×8192 one whole wave, then 28 tiles in 4 shares; 896×4864×1024 (133 tiles) one
# whole wave, then one tile in 8 shares of 2 K blocks (182 tiles of 128×192: 50 tiles in 2 shares)
STREAM_K_SHAPES = [(1, 1, 1), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (512, 10240, 8192),
                   (4095, 4095, 4095), (2000, 3000, 1000), (4096, 4096, 64), (16, 4096, 4096), (129, 1000, 33),
                   (70, 260, 3), (896, 4864, 1024)]
CASES = [(n, s) for n in CLUSTER for s in CLUSTER_SHAPES] + [(n, s) for n in STREAM_K for s in STREAM_K_SHAPES]


def operands(v, m, n, k, seed, order="C"):
    # a column-major B for the K-major family, which reads it in place (it would copy a row-major one)
    b_order = "F" if v.family.b_layout == "col" else order
    return (verify.random_operand((m, k), v.dtype, seed, order), verify.random_operand((k, n), v.dtype, seed + 1, b_order))


@pytest.mark.parametrize("name,shape", CASES, ids=[f"{name}-{m}x{n}x{k}" for name, (m, n, k) in CASES])
def test_entries(name, shape):
    v, (m, n, k) = _variant(name), shape
    _check(v, *operands(v, m, n, k, seed=m + 3 * n + 7 * k))


@pytest.mark.parametrize("name", NEW)
def test_alpha_beta(name):
    """beta != 0 reads C in the store of the block(s) that sum the tile; beta = 0 leaves it unread; C may be
    the output."""
    check_alpha_beta(_variant(name))


@pytest.mark.parametrize("name", NEW)
def test_fortran_order(name):
    """Fortran-ordered operands and output: the API computes Cᵀ = Bᵀ·Aᵀ."""
    check_fortran_order(_variant(name))


@pytest.mark.parametrize("name", NEW)
def test_bitwise_repeatable(name):
    """Partials are added in a fixed order (cluster rank, or K order for stream-K) whichever block finishes
    first: the same bytes every time, also after a product of another partition has used the workspace."""
    v = _variant(name)
    a, b = operands(v, 512, 2048, 8192, seed=41)
    first = _check(v, a, b)
    _check(v, *operands(v, 100, 300, 2000, seed=43))
    assert_repeats(v, a, b, first)


@pytest.mark.parametrize("name", STREAM_K)
def test_more_shared_tiles_after_fewer(name):
    """A stream-K product sharing few tiles leaves partials where a later one sharing more keeps its
    counters: the later product must still be right (the launcher zeroes those counters first)."""
    v = _variant(name)
    for m, n, k in ((1000, 1000, 1000), (4095, 4095, 4095), (64, 256, 3000), (2000, 3000, 1000)):
        _check(v, *operands(v, m, n, k, seed=m + n + k))


@pytest.mark.parametrize("name", [n for n in NEW if "kmajor" not in n and registry.catalogue()[n].family.batched
                                  and registry.catalogue()[n].family.epilogue])
def test_batch_and_epilogue(name):
    """A batch's tiles are walked as one problem's (three members of one tile: in clusters, or shared by many
    stream-K blocks); a fused epilogue runs on the summed tile."""
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

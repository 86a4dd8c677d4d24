"""Stream-K on a GPU (the `_streamk` entries: whole tiles for every wave but the last, then the last tiles'
K blocks shared equally by every block, the blocks sharing a tile summing their partials as split-K does):
every entry against float64 references on shapes whose partitions differ (one tile split many ways, a
last wave between one and two waves of tiles, whole waves before the shared ones, K blocks of one), beta != 0,
Fortran order, batches, a fused epilogue, NaN-poisoned outputs, and bitwise repeatable results."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import launch, registry
# poisoned outputs checked against float64 (_check); bfloat16 skipped without ml_dtypes (_variant)
from test_cluster_splitk_gpu import check_batch_and_epilogue, operands
from test_splitk_gpu import _check, _variant, check_alpha_beta, check_fortran_order


def _runnable():
    if not cupy.cuda.is_available():
        return []
    cc = launch.compute_capability(cupy.cuda.Device())
    return [n for n, v in registry.catalogue().items() if v.family.stream_k(v.params) and v.runs_on(cc)]


NEW = _runnable()
# with 128×256 tiles on 132 SMs: 1000³ 32 tiles of 16 K blocks (each shared by ~5 blocks); 512×10240×8192
# 160 tiles (between one and two waves: all shared); 4095³ 512 tiles (264 whole, 248 shared);
# 4096×4096×64 the same tiles of one K block each; 129×1000×33 one K block, fewer blocks than SMs
SHAPES = [(1, 1, 1), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (512, 10240, 8192),
          (4095, 4095, 4095), (2000, 3000, 1000), (4096, 4096, 64), (16, 4096, 4096), (129, 1000, 33), (70, 260, 3)]


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", NEW)
def test_entries(name, m, n, k):
    v = _variant(name)
    _check(v, *operands(v, m, n, k, seed=m + 3 * n + 7 * k))


@pytest.mark.parametrize("name", NEW)
def test_alpha_beta(name):
    """beta != 0 reads C once, in the epilogue of the block that sums the tile; C may be the output."""
    check_alpha_beta(_variant(name))


@pytest.mark.parametrize("name", NEW)
def test_fortran_order(name):
    """Fortran-ordered operands and output: the API computes Cᵀ = Bᵀ·Aᵀ."""
    check_fortran_order(_variant(name))


@pytest.mark.parametrize("name", NEW)
def test_bitwise_repeatable(name):
    """The last block to arrive at a shared tile adds the partials in K order, whichever it is: the same
    bytes every time, also after a product with another partition has used the workspace."""
    v = _variant(name)
    a, b = operands(v, 512, 2048, 8192, seed=41)
    first = _check(v, a, b)
    _check(v, *operands(v, 100, 300, 2000, seed=43))
    for _ in range(3):
        again = cupy_gemm.matmul(a, b, variant=v)
        assert bool((again.view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{v.name}: results differ"


@pytest.mark.parametrize("name", NEW)
def test_more_shared_tiles_after_fewer(name):
    """A product sharing few tiles leaves partials where a later one sharing more keeps its counters: the
    later product must still be right (the launcher zeroes those counters first)."""
    v = _variant(name)
    for m, n, k in ((1000, 1000, 1000), (4095, 4095, 4095), (64, 256, 3000), (2000, 3000, 1000)):
        _check(v, *operands(v, m, n, k, seed=m + n + k))


@pytest.mark.parametrize("name", [n for n in NEW if "kmajor" not in n])
def test_batch_and_epilogue(name):
    """A batch's tiles are one problem's (three members of one tile: each shared by many blocks); a fused
    epilogue runs on the summed tile."""
    check_batch_and_epilogue(_variant(name))

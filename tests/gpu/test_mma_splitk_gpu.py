"""Split-K in the mma family on a GPU: every `_splitk` entry of kernels/mma.toml (TF32, float16, bfloat16
with float32 accumulation), with the splits the launcher picks and forced ones, against float64 references
on fresh random normal inputs, outputs poisoned with NaN and every element checked.

Ragged M and N (through the public API, which pads N to the family's alignment, and through launch.prepare
with N rounded up), deep K (4096, 11008, and K that is not a multiple of BK·splits), forced splits 2, 3, 7
and more splits than K tiles, beta != 0 and in place, Fortran order, a fused bias + gelu applied once after
the reduction, batches (members in blockIdx.z with split-K), bitwise repeatable results.
(tests/gpu/test_splitk_gpu.py runs these entries too, with the other split-K families: two streams at
once, a product with more tiles after one with fewer.)"""
import dataclasses

import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import batching, epilogue, launch, registry, verify
from forced_variants import align as _align, up as _up, variant as _variant


# (the `_rows32` entries run the same kernels for few rows or columns: tests/gpu/test_unaligned_gpu.py)
NEW = [n for n, v in registry.catalogue().items()
       if v.family.name == "mma" and v.params["SPLIT_K"] != 1 and v.max_rows() is None]
ROWS = [1, 17, 127, 1000]
COLS = [1, 17, 127, 1000]
DEEP = [4096, 11008, 4100]  # 4100: a multiple of 4 (TF32's align) but of no BK · splits
GELU_SLOPE = 1.13  # |gelu'| at most: the error of x grows by this much through it


def _normal(shape, dtype, seed, order="C"):
    x = cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32).astype(dtype)
    return cupy.asfortranarray(x) if order == "F" else x


def _nan(shape, dtype, order="C"):
    return cupy.full(shape, cupy.nan, dtype=dtype, order=order)


def _check(v, out, a, b, c=None, *, alpha=1.0, beta=0.0, what=""):
    """Every element of out against alpha·a@b + beta·c in float64 (verify's bound for the kernel's
    arithmetic: TF32 inputs, or 16-bit inputs, accumulated in fp32 over K)."""
    ref, scale = verify.reference(a, b, c, alpha, beta)
    n = out.shape[-1]
    verdict = verify.check(out.reshape(-1, n), ref.reshape(-1, n), scale.reshape(-1, n), v.dtype, v.acc,
                           a.shape[-1])
    assert verdict.ok, f"{v.name} {what}: {verdict}"


def _prepare(v, a, b, out, *, alpha=1.0, beta=0.0, ep=None, values=None, batched=False):
    """The launch of out = ep(alpha·a@b + beta·out), operands row-major in the kernel's alignment; batched
    over their leading dimensions."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    lda, ldb, ldc = (x.strides[-2] // x.itemsize for x in (a, b, out))
    plan = batching.plan(a.shape, a.strides, b.shape, b.strides, out.strides, a.itemsize) if batched else None
    params = ep.pack(values or {}, m, n) if ep is not None else None
    return launch.prepare(v.with_extras(batched=batched, epilogue=ep), cupy.cuda.Device(), a, b, out,
                          m, n, k, lda, ldb, ldc, alpha, beta, batch=plan, epilogue_params=params)


def _k_tiles(v, k: int) -> int:
    return -(-k // v.params["BK"])


@pytest.mark.parametrize("k", DEEP)
@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("name", NEW)
def test_ragged_deep_products_through_the_api(name, m, k):
    """The launcher's splits; N of every size (the API pads it to the family's alignment)."""
    v = _variant(name)
    for n in COLS:
        a, b = _normal((m, k), v.dtype, m + 7 * n + k), _normal((k, n), v.dtype, m + n + k + 1)
        out = _nan((m, n), v.dtype)
        cupy_gemm.matmul(a, b, variant=name, out=out)
        _check(v, out, a, b, what=f"{m}x{n}x{k}")


def test_small_m_deep_k_splits():
    """The shapes split-K is for do split on this GPU (with ptxas's registers), else this suite tests the
    plain path only: two rows of tiles over a deep K, and few rows."""
    device = cupy.cuda.Device()
    for name in NEW:
        v = _variant(name)
        registers = launch.load(v, device)[1].resources.registers
        for shape in [(2 * v.family.tile(v.params)[0], 4096, 11008), (16, 4096, 4096), (64, 2048, 4096)]:
            cfg = launch.launch_config(v, *shape, device.attributes["MultiProcessorCount"], registers)
            assert cfg.splits > 1, (name, shape)


FORCED_SHAPES = [(127, 1000, 4100), (1, 17, 11008), (1000, 127, 1000), (17, 4096, 4096)]


@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("m,n,k", FORCED_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in FORCED_SHAPES])
@pytest.mark.parametrize("name", NEW)
def test_forced_splits(name, m, n, k, splits):
    """SPLIT_K fixed, through launch.prepare (N rounded up to the alignment, K as it is where the alignment
    allows): the grid holds exactly that many splits; uneven runs of K tiles and a partial last tile."""
    v = _variant(name, splits)
    n, k = _up(n, _align(v)), _up(k, _align(v))
    a, b = _normal((m, k), v.dtype, splits + m), _normal((k, n), v.dtype, splits + n)
    out = _nan((m, n), v.dtype)
    run = _prepare(v, a, b, out)
    assert run.config.splits == min(splits, _k_tiles(v, k)) and run.config.grid[1] == run.config.splits
    run()
    _check(v, out, a, b, what=f"{m}x{n}x{k} SPLIT_K={splits}")


@pytest.mark.parametrize("name", NEW)
def test_more_splits_than_k_tiles(name):
    """The launcher never asks for more splits than K tiles; the kernel also guards itself: given 9 splits
    for 2 K tiles, 2 blocks per tile multiply and arrive, the others return at once."""
    v = _variant(name, 7)
    m, n, k = 100, _up(300, _align(v)), 2 * v.params["BK"] - _align(v)  # two K tiles, the last partial
    a, b = _normal((m, k), v.dtype, 71), _normal((k, n), v.dtype, 72)
    out = _nan((m, n), v.dtype)
    run = _prepare(v, a, b, out)
    assert run.config.splits == 2
    bm, bn = v.family.tile(v.params)
    wide = dataclasses.replace(run.config, grid=(run.config.grid[0], 9, 1), splits=9,
                               workspace=launch.split_k_workspace(run.config.tiles, 9, bm * bn))
    args = run.args[:-2] + launch.launchable((np.int32(9), np.uintp(0)))  # `splits`; the workspace's slot
    launch.Launch(run.kernel, wide, args, run.variant, run.device, run.geometry).launch(args)
    _check(v, out, a, b, what="9 splits for 2 K tiles")
    for splits in (64, 3):  # more than the K tiles: the launcher clamps
        forced = _variant(name, splits)
        out = _nan((m, n), v.dtype)
        run = _prepare(forced, a, b, out)
        assert run.config.splits == 2
        run()
        _check(forced, out, a, b, what=f"SPLIT_K={splits} for 2 K tiles")


@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize("name", NEW)
def test_alpha_beta(name, splits):
    """beta != 0: C is read once, by the last split's epilogue (also in place, out = c)."""
    v = _variant(name, splits)
    for m, n, k in [(127, 1000, 4100), (17, 4095, 11008)]:
        a, b = _normal((m, k), v.dtype, 81 + m), _normal((k, n), v.dtype, 82 + n)
        c = _normal((m, n), v.dtype, 83)
        out = _nan((m, n), v.dtype)
        cupy_gemm.gemm(a, b, c, alpha=0.75, beta=-1.25, variant=v, out=out)
        _check(v, out, a, b, c, alpha=0.75, beta=-1.25, what=f"{m}x{n}x{k} beta")
        inplace = c.copy()
        cupy_gemm.gemm(a, b, inplace, alpha=2.0, beta=0.5, variant=v, out=inplace)
        _check(v, inplace, a, b, c, alpha=2.0, beta=0.5, what=f"{m}x{n}x{k} in place")


@pytest.mark.parametrize("name", NEW)
def test_fortran_order(name):
    """Fortran-ordered operands and output: the API computes Cᵀ = Bᵀ·Aᵀ, so the small M becomes the N."""
    v = _variant(name)
    for m, n, k in [(16, 1000, 4096), (127, 17, 11008)]:
        a, b = _normal((m, k), v.dtype, 91, "F"), _normal((k, n), v.dtype, 92, "F")
        out = _nan((m, n), v.dtype, "F")
        cupy_gemm.matmul(a, b, variant=name, out=out)
        _check(v, out, a, b, what=f"{m}x{n}x{k} Fortran order")
        c = _normal((m, n), v.dtype, 93, "F")
        out = cupy_gemm.gemm(a, b, c, alpha=1.5, beta=0.25, variant=name)
        _check(v, out, a, b, c, alpha=1.5, beta=0.25, what=f"{m}x{n}x{k} Fortran order, beta")


def _gelu64(x):
    import cupyx.scipy.special
    return 0.5 * x * (1 + cupyx.scipy.special.erf(x / np.sqrt(2)))


def _check_bias_gelu(v, out, a, b, bias, c=None, alpha=1.0, beta=0.0, what=""):
    """gelu(alpha·a@b + beta·c + bias) in float64; the bound grows through gelu's slope, plus the fp32
    rounding of the bias add and of gelu itself. A second application of gelu (an epilogue run per split)
    is far outside it."""
    x, scale = verify.reference(a, b, c, alpha, beta)
    bias64 = bias.astype(cupy.float64)
    x = x + bias64
    y = _gelu64(x)
    scale = GELU_SLOPE * (scale + cupy.abs(bias64)) + cupy.abs(x) + cupy.abs(y)
    verdict = verify.check(out, y, scale, v.dtype, v.acc, a.shape[1])
    assert verdict.ok, f"{v.name} {what}: {verdict}"


@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize("name", NEW)
def test_bias_gelu_after_the_reduction(name, splits):
    """matmul(bias=, activation="gelu"): the epilogue runs once, on the summed tile."""
    v = _variant(name, splits)
    for m, n, k in [(127, 1000, 4100), (16, 4096, 4096), (1, 17, 11008)]:
        a, b = _normal((m, k), v.dtype, 101 + m), _normal((k, n), v.dtype, 102 + n)
        bias = _normal((n,), v.dtype, 103)
        out = _nan((m, n), v.dtype)
        cupy_gemm.matmul(a, b, variant=v, out=out, bias=bias, activation="gelu")
        _check_bias_gelu(v, out, a, b, bias, what=f"{m}x{n}x{k} bias + gelu")
        c = _normal((m, n), v.dtype, 104)
        out = cupy_gemm.gemm(a, b, c, alpha=0.5, beta=-0.75, variant=v, bias=bias, activation="gelu")
        _check_bias_gelu(v, out, a, b, bias, c, 0.5, -0.75, what=f"{m}x{n}x{k} beta, bias + gelu")


@pytest.mark.parametrize("splits", [None, 7])
@pytest.mark.parametrize("name", NEW)
def test_bitwise_repeatable(name, splits):
    """The last split adds the partials in split order whichever arrives last: the same inputs give the
    same bytes, also after another split product has used (and reset) the workspace's counters."""
    v = _variant(name, splits)
    m, n, k = 64, 2048, 11008
    a, b = _normal((m, k), v.dtype, 111), _normal((k, n), v.dtype, 112)
    first = cupy_gemm.matmul(a, b, variant=v)
    _check(v, first, a, b, what="first call")
    other = _variant(name, 2)
    x, y = _normal((100, 304), other.dtype, 113), _normal((304, 512), other.dtype, 114)
    _check(other, cupy_gemm.matmul(x, y, variant=other), x, y, what="between")
    for _ in range(3):
        again = cupy_gemm.matmul(a, b, variant=v)
        assert bool((again.view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{v.name}: results differ"


@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize("name", NEW)
def test_batched_split_k(name, splits):
    """Members in blockIdx.z, splits in blockIdx.y: each member's counters and partials follow the previous
    members' in the workspace; with a fused epilogue and beta != 0, through launch.prepare and the API."""
    v = _variant(name, splits)
    al = _align(v)
    for m, n, k in [(16, _up(1000, al), 4096), (127, _up(17, al), _up(4100, al))]:  # direct: K aligned too
        a, b = _normal((2, 3, m, k), v.dtype, 121 + m), _normal((3, k, n), v.dtype, 122 + n)
        out = _nan((2, 3, m, n), v.dtype)
        run = _prepare(v, a, b, out, batched=True)
        assert run.config.grid[2] == 6 and (splits is None or run.config.splits == splits)
        assert splits is not None or run.config.splits > 1 or m > 16
        run()
        _check(v, out, a, b, what=f"{m}x{n}x{k} × 6 members")
        c = _normal((2, 3, m, n), v.dtype, 123)
        out = c.copy()
        _prepare(v, a, b, out, alpha=0.5, beta=-0.25, ep=epilogue.build("relu"), batched=True)()
        ref, scale = verify.reference(a, b, c, 0.5, -0.25)
        verdict = verify.check(out.reshape(-1, n), cupy.maximum(ref, 0).reshape(-1, n), scale.reshape(-1, n),
                               v.dtype, v.acc, k)
        assert verdict.ok, f"{v.name} {m}x{n}x{k} batched, beta, relu: {verdict}"
        api_out = cupy_gemm.matmul(a, b, variant=v)  # distinct B per member: one batched launch
        _check(v, api_out, a, b, what=f"{m}x{n}x{k} batched through the API")

"""The API on real CuPy arrays: bad input raises before launch, defaults, baselines, large indices."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import api, registry, selection_tables, verify
from cupy_gemm.errors import DeviceError, DTypeError, InputError, UnknownVariantError
from cupy_gemm.launch import compute_capability


def rand(*shape, dtype=cupy.float32, seed=0):
    return verify.random_operand(shape, dtype, seed)


@pytest.fixture
def ab():
    return rand(33, 20), rand(20, 17, seed=1)


def test_bad_inputs(ab):
    a, b = ab
    with pytest.raises(DTypeError, match="same dtype"):
        cupy_gemm.matmul(a, b.astype(cupy.float16))
    with pytest.raises(InputError, match="at least one dimension"):  # 1-D operands multiply as in NumPy
        cupy_gemm.matmul(a[0, 0], b)
    with pytest.raises(InputError, match="inner dimensions differ"):
        cupy_gemm.matmul(a, rand(21, 17))
    with pytest.raises(DTypeError, match="cupy.asarray"):
        cupy_gemm.matmul(cupy.asnumpy(a), b)
    with pytest.raises(InputError, match="shape"):
        cupy_gemm.matmul(a, b, out=cupy.empty((33, 18), cupy.float32))
    with pytest.raises(DTypeError, match="out is float64"):  # float16 and bfloat16 outs convert; float64 does not
        cupy_gemm.matmul(a, b, out=cupy.empty((33, 17), cupy.float64))
    with pytest.raises(InputError, match="out_dtype"):
        cupy_gemm.matmul(a, b, out=cupy.empty((33, 17), cupy.float16), out_dtype="float32")
    with pytest.raises(InputError, match="overlaps a"):
        big = rand(33, 40)
        cupy_gemm.matmul(big[:, :20], rand(20, 17), out=big[:, 20:37])
    with pytest.raises(InputError, match="c must have shape"):
        cupy_gemm.gemm(a, b, rand(33, 16), beta=1.0)
    with pytest.raises(DTypeError, match="takes float16 inputs"):
        cupy_gemm.matmul(a, b, variant="hgemm_naive_f16")
    with pytest.raises(UnknownVariantError, match="did you mean"):
        cupy_gemm.matmul(a, b, variant="sgemm_naive")
    with pytest.raises(DTypeError, match="no kernels for dtype"):
        cupy_gemm.matmul(a.astype(cupy.float64), b.astype(cupy.float64))


def test_variant_needing_newer_gpu(ab):
    cc = compute_capability(cupy.cuda.Device())
    too_new = [n for n, v in registry.catalogue().items()
               if v.dtype == "float32" and not v.runs_on(cc)]
    if not too_new:
        pytest.skip("every float32 variant runs on this GPU")
    with pytest.raises(DeviceError, match="compute capability"):
        cupy_gemm.matmul(*ab, variant=too_new[0])


def test_operands_on_different_gpus():
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    a = rand(8, 8)
    with cupy.cuda.Device(1):
        b = rand(8, 8)
    with pytest.raises(DeviceError, match="GPU"):
        cupy_gemm.matmul(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_default_and_cublas(dtype):
    a, b = rand(300, 200, dtype=dtype), rand(200, 100, dtype=dtype, seed=2)
    ref, scale = verify.reference(a, b)
    name = cupy_gemm.default_variant(dtype)
    v = registry.lookup(name)
    assert v.acc != "float16", "the default accumulates in float32"
    assert verify.check(cupy_gemm.matmul(a, b), ref, scale, dtype, v.acc, 200).ok
    assert verify.check(cupy_gemm.matmul(a, b, variant="cublas"), ref, scale, dtype, "float32", 200).ok
    c = rand(300, 100, dtype=dtype, seed=3)
    ref2, scale2 = verify.reference(a, b, c, 2.0, -1.0)
    out = cupy_gemm.gemm(a, b, c, alpha=2.0, beta=-1.0, variant="cublas")
    assert verify.check(out, ref2, scale2, dtype, "float32", 200).ok


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("b_layout", ["row", "col"])
@pytest.mark.parametrize("mnk, tile", [((1000, 5120, 1000), (128, 320)), ((999, 3000, 1000), (128, 192)),
                                       ((700, 2600, 1000), (128, 128))])
def test_the_big_tiles_off_the_tables(dtype, b_layout, mnk, tile, monkeypatch):
    """Off its tables the default weighs the big tiles by their expected time ([tile_cost]): each tile it
    takes writes every element of a ragged C right, with B either way round (x @ W.T: the K-major twin)."""
    if compute_capability(cupy.cuda.Device()) < 90:
        pytest.skip("the big tiles are Hopper's wgmma")
    monkeypatch.setattr(selection_tables, "tables", lambda: ())
    m, n, k = mnk
    a = rand(m, k, dtype=dtype)
    b = rand(k, n, dtype=dtype, seed=1) if b_layout == "row" else rand(n, k, dtype=dtype, seed=1).T
    out = cupy.full((m, n), cupy.nan, dtype=dtype)
    plan = api.Plan(a, b, out=out)
    v = plan.variant
    assert v.family.tile(v.params) == tile and v.family.name == ("wgmma" if b_layout == "row" else "wgmma_kmajor"), v.name
    plan()
    assert verify.check(out, *verify.reference(a, b), dtype, v.acc, k).ok


def test_empty_and_zero_k():
    a, b = rand(5, 0), rand(0, 7)
    assert (cupy_gemm.matmul(a, b) == 0).all()
    c = rand(5, 7)
    out = cupy_gemm.gemm(a, b, c, beta=2.0)
    assert cupy.allclose(out, 2 * c)
    assert cupy_gemm.matmul(rand(0, 3), rand(3, 4)).shape == (0, 4)


def test_runs_on_current_stream():
    a, b = rand(512, 512), rand(512, 512, seed=1)
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.Device().synchronize()  # a non-blocking stream does not wait for the default one
    with stream:
        out = cupy_gemm.matmul(a, b, variant="sgemm_sliced_k_f32")
        ref, scale = verify.reference(a, b)
    stream.synchronize()
    assert verify.check(out, ref, scale, "float32", "float32", 512).ok


def test_kernel_object_reports_resources():
    k = cupy_gemm.get("sgemm_sliced_k_f32")
    res = k.resources()  # compiled for this GPU
    assert res.registers > 0 and res.static_smem == 32 * 32 * 4 * 2
    assert k.launch_config(100, 100, 100).grid == (16, 1, 1)


def _families_first_variant(dtype, cc):
    seen = {}
    for n, v in registry.catalogue().items():
        if v.dtype == dtype and v.family.name not in seen and v.runs_on(cc) and v.family.abi not in ("scaled", "grouped"):
            seen[v.family.name] = n
    return list(seen.values())


@pytest.fixture(scope="module")
def large_a():
    """A with more than 2^31 elements: offsets past 2^31 must be 64-bit."""
    rows, k = (1 << 31) // 4096 + 129, 4096
    try:
        return verify.random_operand((rows, k), "float16", 21)
    except cupy.cuda.memory.OutOfMemoryError:
        pytest.skip("not enough GPU memory for a 2^31-element operand")


def test_large_index(large_a):
    cc = compute_capability(cupy.cuda.Device())
    b = verify.random_operand((large_a.shape[1], 24), "float16", 22)
    rows = cupy.asarray([0, large_a.shape[0] // 2, large_a.shape[0] - 3, large_a.shape[0] - 1])
    ref, scale = verify.reference(large_a[rows], b)
    for name in _families_first_variant("float16", cc):
        if registry.lookup(name).family.name == "naive":
            continue  # one thread per element: correct but minutes at this size
        if registry.lookup(name).max_rows() is not None:
            continue  # serves few rows or columns only: tests/gpu/test_skinny_gpu.py has its own
        out = cupy_gemm.matmul(large_a, b, variant=name)
        v = registry.lookup(name)
        verdict = verify.check(out[rows], ref, scale, "float16", v.acc, large_a.shape[1])
        assert verdict.ok, f"{name}: {verdict}"

"""Programmatic dependent launch on a GPU (cupy_gemm/driver.py): products launched back to back with no
synchronisation, each reading what the one before wrote (read after write), overwriting what the one before
reads (write after read) or writing where it wrote (write after write). A kernel that touched global memory
before pdl_wait() would read a NaN-poisoned or half-written operand, or be overwritten, here."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import launch, registry, verify
from test_fp8_gpu import check as check_fp8, random_fp8, random_scales

HOPPER = cupy.cuda.is_available() and launch.compute_capability(cupy.cuda.Device()) >= 90
pytestmark = pytest.mark.skipif(not HOPPER, reason="programmatic dependent launch needs sm_90 or later")

# one entry of every family and mode launched programmatically: wgmma (plain, split-K, ping-pong, clusters,
# tf32 with a row-major B), 3xTF32, skinny (CUDA cores and mma.sync), CUDA-core split-K, unaligned mma
VARIANTS = ["hgemm_wgmma_m64n256k16_stages3_ws2", "bgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk",
            "hgemm_wgmma_m64n64k16_tile128x64_stages8_ws2_pingpong", "hgemm_wgmma_m64n256k16_stages4_ws2_cluster2",
            "sgemm_wgmma_m64n64k8_tf32_rowb_tile64x64_stages8_ws1_splitk",
            "sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2", "hgemv_skinny_r1", "sgemv_skinny_r8",
            "hgemv_skinny_r16_mma", "sgemm_t_4x4_tile32x64_sliced_k16_f32x4_bcf_dbuf_offset_splitk",
            "hgemm_mma_m16n8k16_mma2x2_warp2x4x2_stages3_unaligned_acc32"]
ROUNDS = 6


def _setup(name):
    v = registry.lookup(name)
    assert launch.uses_pdl(v, cupy.cuda.Device()), f"{name} is not launched programmatically"
    if v.dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    rows = v.max_rows() or 200
    return v, rows


def _b(v, shape, seed):
    """A B operand in the layout the family reads, so that no copy runs between the products."""
    return verify.random_operand(shape, v.dtype, seed, "F" if v.family.b_layout == "col" else "C")


def _check(v, out, a, b):
    ref, scale = verify.reference(a, b)
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, a.shape[1])
    assert verdict.ok, f"{v.name}: {verdict}"


def _nan(shape, dtype):
    return cupy.full(shape, cupy.nan, dtype=dtype)


@pytest.mark.parametrize("name", VARIANTS)
def test_a_product_reads_what_the_previous_one_wrote(name):
    v, m = _setup(name)
    n, k = 520, 1000
    a, b, e = verify.random_operand((m, k), v.dtype, 1), _b(v, (k, n), 2), _b(v, (n, 304), 3)
    firsts = [_nan((m, n), v.dtype) for _ in range(ROUNDS)]
    seconds = [_nan((m, 304), v.dtype) for _ in range(ROUNDS)]
    cupy.cuda.Device().synchronize()
    for first, second in zip(firsts, seconds):  # queued at once: only the kernels order themselves
        cupy_gemm.matmul(a, b, out=first, variant=v)
        cupy_gemm.matmul(first, e, out=second, variant=v)
    for first, second in zip(firsts, seconds):
        _check(v, first, a, b)
        _check(v, second, first, e)


@pytest.mark.parametrize("name", VARIANTS)
def test_a_product_overwrites_what_the_previous_one_reads(name):
    v, m = _setup(name)
    n, k = 520, 1000
    b, p, q = _b(v, (k, n), 4), verify.random_operand((m, 64), v.dtype, 5), _b(v, (64, k), 6)
    victims = [verify.random_operand((m, k), v.dtype, 10 + i) for i in range(ROUNDS)]
    originals = [x.copy() for x in victims]
    outs = [_nan((m, n), v.dtype) for _ in range(ROUNDS)]
    cupy.cuda.Device().synchronize()
    for victim, out in zip(victims, outs):
        cupy_gemm.matmul(victim, b, out=out, variant=v)  # reads victim ...
        cupy_gemm.matmul(p, q, out=victim, variant=v)  # ... which the next launch overwrites
    for victim, original, out in zip(victims, originals, outs):
        _check(v, out, original, b)
        _check(v, victim, p, q)


@pytest.mark.parametrize("variant,out_dtype", [(None, "float32"),
                                               ("fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_block_bf16_cluster2", "bfloat16")])
def test_fp8_products_write_in_launch_order(variant, out_dtype):
    """Two scaled products into one output, back to back: the second's values must be the ones left."""
    dtype = pytest.importorskip("ml_dtypes").bfloat16 if out_dtype == "bfloat16" else out_dtype
    m, n, k = 1000, 1000, 1040
    out = _nan((m, n), dtype)
    cases = []
    for seed in (0, 10):
        a, b = random_fp8((m, k), "e4m3", seed), random_fp8((k, n), "e4m3", seed + 1, column_major=True)
        cases.append((a, b, *random_scales("block", m, n, k, seed + 2)))
    for _ in range(ROUNDS):
        for a, b, sa, sb in cases:
            cupy_gemm.scaled_mm(a, b, sa, sb, out=out, out_dtype=out_dtype, variant=variant)
    a, b, sa, sb = cases[-1]
    verdict = check_fp8(out, a, b, sa, sb, "e4m3", "e4m3", k, out_dtype)
    assert verdict.ok, verdict


def test_kernels_of_other_libraries_between_products():
    """cupy.matmul (cuBLAS) and a CuPy elementwise kernel between programmatic launches: each still
    starts after the one before it."""
    v = registry.lookup("hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk")
    a, b = verify.random_operand((16, 4096), v.dtype, 20), verify.random_operand((4096, 1024), v.dtype, 21)
    w = verify.random_operand((1024, 1024), v.dtype, 22)
    outs = []
    for _ in range(ROUNDS):
        x = cupy_gemm.matmul(a, b, variant=v)
        y = cupy.matmul(x, w)  # cuBLAS reads ours
        z = cupy_gemm.matmul(y * np.float16(0.5), w, variant=v)  # ours reads an elementwise kernel's output
        outs.append((x, y, z))
    for x, y, z in outs:
        _check(v, x, a, b)
        _check(v, z, y * np.float16(0.5), w)


def _chain_on_a_new_stream(v, m, seed, graph_rounds=2, stream_rounds=2):
    """On a new non-blocking stream: two products where the second reads the first's output, three times
    over, replayed from a captured CUDA graph and launched directly, outputs NaN-poisoned before each round
    and checked after it."""
    a, b, e = verify.random_operand((m, 1000), v.dtype, seed), _b(v, (1000, 520), seed + 1), _b(v, (520, 304), seed + 2)
    first, second = _nan((m, 520), v.dtype), _nan((m, 304), v.dtype)
    cupy.cuda.Device().synchronize()  # the operands were made on the legacy stream, which a non-blocking one ignores
    stream = cupy.cuda.Stream(non_blocking=True)

    def products():
        for _ in range(3):
            cupy_gemm.matmul(a, b, out=first, variant=v)
            cupy_gemm.matmul(first, e, out=second, variant=v)

    with stream:
        products()  # prepared (compiled, workspace sized) before capture
        stream.synchronize()
        stream.begin_capture()
        products()
        graph = stream.end_capture()
        for run in [graph.launch] * graph_rounds + [products] * stream_rounds:
            first.fill(cupy.nan)
            second.fill(cupy.nan)
            run()
            stream.synchronize()
            _check(v, first, a, b)
            _check(v, second, first, e)


@pytest.mark.parametrize("name", ["hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk", "sgemv_skinny_r8"])
def test_programmatic_launches_replay_in_a_cuda_graph(name):
    """A CUDA graph captured from a CuPy stream keeps the launches' order: products that read each other's
    outputs replay correctly, twice."""
    v, m = _setup(name)
    _chain_on_a_new_stream(v, m, 30)


@pytest.mark.parametrize("name", ["hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk",
                                  "hgemm_wgmma_m64n256k16_stages3_ws2", "sgemv_skinny_r8"])
def test_fresh_streams_keep_products_ordered(name):
    """Ten new streams in turn (whose handles, workspaces and prepared launches may be reused from
    destroyed ones), each with graph replays and direct launches: split-K counters and outputs stay right."""
    v, m = _setup(name)
    for trial in range(10):
        _chain_on_a_new_stream(v, m, 100 + 10 * trial)

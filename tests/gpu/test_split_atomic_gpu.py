"""Split-K summed by atomics (deterministic=False) on a GPU: every catalogue entry that splits K through the
workspace, with enough splits that the launcher takes the atomic twin (workspace.atomic_sum), against float64
references on ragged shapes; beta != 0, Fortran order, NaN-poisoned outputs; repeated calls (the last split
leaves the tile's slot zero), calls that alternate with the ordered sum on one stream, two streams, batches,
stream-K and FP8."""
import re

import cupy
import pytest

import cupy_gemm
from cupy_gemm import api, dispatch, launch, registry, scaled, scaled_choice, verify, workspace
from test_fp8_gpu import check as check_fp8, random_fp8, random_scales
from test_splitk_gpu import _operands, _splits, _variant

pytestmark = pytest.mark.skipif(not cupy.cuda.is_available() or
                                launch.compute_capability(cupy.cuda.Device()) < 90,
                                reason="atomic split-K sums need compute capability 9.0 (float4 atomics)")


def _atomic_capable():
    if not cupy.cuda.is_available():
        return []
    cc = launch.compute_capability(cupy.cuda.Device())
    return [n for n, v in registry.catalogue().items()  # (the `_rows32` twins: tests/gpu/test_unaligned_gpu.py)
            if v.sums_atomically and v.runs_on(cc) and not v.params.get("FEW_ROWS")]


ENTRIES = _atomic_capable()
FORCED = [n for n in ENTRIES if not registry.lookup(n).family.stream_k(registry.lookup(n).params)]  # own partition
FORCED_SHAPES = [(129, 1000, 33), (127, 4095, 1000), (16, 2048, 4095)]
ENOUGH = workspace.ATOMIC_MIN_SPLITS_LARGE  # splits that take the atomic twin on every tile


def _check(v, a, b, *, c=None, alpha=1.0, beta=0.0, out=None):
    """gemm with atomic sums into a NaN-poisoned (or C's) output, checked against float64."""
    m, k = a.shape
    n = b.shape[1]
    if out is None:
        out = c.copy() if beta != 0 else cupy.full((m, n), cupy.nan, dtype=a.dtype)
    ref, scale = verify.reference(a, b, c, alpha, beta)
    cupy_gemm.gemm(a, b, c, alpha=alpha, beta=beta, variant=v, out=out, deterministic=False)
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    assert verdict.ok, f"{v.name} (atomic sum) {m}x{n}x{k} alpha={alpha} beta={beta}: {verdict}"
    return out


@pytest.mark.parametrize("splits", [2, workspace.ATOMIC_MIN_SPLITS])
def test_atomic_twin_is_what_runs(splits):
    """deterministic=False launches the entry rendered with SPLIT_ATOMIC where enough splits share a tile (else
    these tests test nothing new), the entry itself below that and with deterministic=True."""
    v = _variant("hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk", splits)
    a, b = _operands(v, 64, 2048, 4096, seed=1)
    for deterministic in (False, True):
        p = api.plan(a, b, variant=v, deterministic=deterministic)
        p()
        run = p._prepared.direct.run
        assert run.config.splits == splits
        assert run.variant.split_atomic is (not deterministic and splits >= workspace.ATOMIC_MIN_SPLITS)


@pytest.mark.parametrize("splits", [ENOUGH, 9])
@pytest.mark.parametrize("m,n,k", FORCED_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in FORCED_SHAPES])
@pytest.mark.parametrize("name", FORCED)
def test_forced_splits(name, m, n, k, splits):
    v = _variant(name, splits)
    _check(v, *_operands(v, m, n, k, seed=splits + m + n + k))


@pytest.mark.parametrize("name", ENTRIES)
def test_launchers_splits_alpha_beta_and_fortran_order(name):
    """beta != 0 (C read once, by the last split), in place; Fortran order (Cᵀ = Bᵀ·Aᵀ); stream-K entries
    with the launcher's partition, the others with forced splits."""
    v = _variant(name, None if name not in FORCED else ENOUGH)
    a, b = _operands(v, 64, 1000, 4095, seed=11)
    assert _splits(v, 64, 1000, 4095) >= ENOUGH, "the shape must take the atomic twin"
    _check(v, a, b)
    c = verify.random_operand((64, 1000), v.dtype, 13)
    _check(v, a, b, c=c, alpha=0.75, beta=-1.25)
    inplace = c.copy()
    _check(v, a, b, c=inplace, alpha=2.0, beta=0.5, out=inplace)
    af, bf = _operands(v, 16, 1000, 4095, seed=17, order="F")
    _check(v, af, bf, out=cupy.asfortranarray(cupy.full((16, 1000), cupy.nan, dtype=a.dtype)))


@pytest.mark.parametrize("name", ENTRIES)
def test_slots_left_zero_between_calls(name):
    """Every call starts from zero slots: repeats are right (not doubled), and so are ordered sums and atomic
    ones that alternate on one stream with products of more tiles, whose partials cover the slots."""
    v = _variant(name, None if name not in FORCED else ENOUGH)
    a, b = _operands(v, 96, 768, 3000, seed=21)
    assert _splits(v, 96, 768, 3000) >= ENOUGH, "the shape must take the atomic twin"
    for _ in range(3):
        _check(v, a, b)
    big_a, big_b = _operands(v, 700, 2000, 3000, seed=23)
    cupy_gemm.matmul(big_a, big_b, variant=v)  # ordered: its partials fill the workspace past the counters
    _check(v, a, b)
    _check(v, big_a, big_b)
    _check(v, a, b)


def test_two_streams_at_once():
    """Each stream's workspace keeps its own zero slots: atomic products queued on two streams at once."""
    v = _variant("hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk", 6)
    problems = [_operands(v, 100 + s, 1500, 4000, seed=31 + s) for s in range(2)]
    outs = [cupy.full((a.shape[0], b.shape[1]), cupy.nan, dtype=a.dtype) for a, b in problems]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    cupy.cuda.Device().synchronize()  # the operands, made on the default stream, before either stream reads them
    for _ in range(3):
        for (a, b), out, stream in zip(problems, outs, streams):
            with stream:
                cupy_gemm.matmul(a, b, variant=v, out=out, deterministic=False)
    cupy.cuda.Device().synchronize()
    for s, ((a, b), out) in enumerate(zip(problems, outs)):
        ref, scale = verify.reference(a, b)
        verdict = verify.check(out, ref, scale, v.dtype, v.acc, a.shape[1])
        assert verdict.ok, f"stream {s}: {verdict}"


def test_batched():
    """A batch in one launch: every member's tiles have their own slots."""
    v = _variant("hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk", 4)
    a = verify.random_operand((3, 70, 2000), v.dtype, 41)
    b = verify.random_operand((3, 2000, 300), v.dtype, 42)
    for _ in range(2):
        out = cupy_gemm.matmul(a, b, variant=v, deterministic=False)
        for i in range(3):
            ref, scale = verify.reference(a[i], b[i])
            assert verify.check(out[i], ref, scale, v.dtype, v.acc, 2000).ok, f"member {i}"


@pytest.mark.parametrize("mode", ["tensor", "block"])
@pytest.mark.parametrize("tile", [(128, 192), (64, 64)], ids=lambda t: f"{t[0]}x{t[1]}")
def test_fp8(tile, mode):
    """scaled_mm with atomic sums: ragged M and N with a K tail, block scales per slice; repeats right."""
    v = scaled_choice._entry_with_split("e4m3", "e4m3", mode, "float16", tile, ENOUGH)
    m, n, k = tile[0] + 17, tile[1] + 8, 1040 + 16
    a, b = random_fp8((m, k), "e4m3", 51), random_fp8((k, n), "e4m3", 52, column_major=True)
    sa, sb = random_scales(mode, m, n, k, 53)
    assert scaled._Plan(a, b, sa, sb, "e4m3", "e4m3", "float16", None, v, False).variant.split_atomic
    for _ in range(2):
        out = cupy.full((m, n), cupy.nan, dtype=cupy.float16)
        cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float16", out=out, variant=v, deterministic=False)
        verdict = check_fp8(out, a, b, sa, sb, "e4m3", "e4m3", k, "float16")
        assert verdict.ok, f"{v.name} (atomic sum) {mode}: {verdict}"


def test_deterministic_must_be_a_bool():
    v = _variant("hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk")
    a, b = _operands(v, 16, 64, 64, seed=61)
    with pytest.raises(cupy_gemm.InputError, match="deterministic must be True"):
        cupy_gemm.matmul(a, b, deterministic="no")


@pytest.mark.parametrize("dtype,m,n,k", [("float16", 128, 576, 7168), ("float32", 64, 1024, 8192),
                                         ("float16", 512, 1024, 8192), ("bfloat16", 4096, 4096, 4096)])
def test_explain_on_the_gpu_says_what_the_launcher_does(dtype, m, n, k):
    """explain() on the present GPU: the grid and split count of launch.configure, and the sum
    deterministic=False takes; then the call itself runs and is right both ways."""
    text = dispatch.explain(dtype, m, n, k)
    v = registry.lookup(re.search(r"^variant: (\S+)$", text, re.M).group(1))
    device = cupy.cuda.Device()
    _, _, ordered = launch.configure(v, device, m, n, k)
    twin, _, _ = launch.configure(v, device, m, n, k, deterministic=False)
    assert f"launch: grid {'×'.join(map(str, ordered.grid))} of " in text and "may run fewer clusters" not in text
    if ordered.splits > 1 and v.params.get("KCLUSTER", 1) == 1:
        assert f"K split {ordered.splits} ways" in text or "stream-K" in text
    assert ("deterministic=False adds them by atomics" in text) == twin.split_atomic
    a = verify.random_operand((m, k), dtype, 71)
    b = verify.random_operand((k, n), dtype, 72)
    ref, scale = verify.reference(a, b)
    for deterministic in (True, False):
        out = cupy.full((m, n), cupy.nan, dtype=a.dtype)  # poisoned: an element nothing wrote stays NaN
        cupy_gemm.matmul(a, b, out=out, deterministic=deterministic)
        assert verify.check(out, ref, scale, v.dtype, v.acc, k).ok, f"{v.name} deterministic={deterministic}"

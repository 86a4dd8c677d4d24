"""FP8 on a Hopper GPU: every wgmma_fp8 variant and scaling mode against a float64 product of the
dequantized operands (ragged M and N, K tails past the 128-deep blocks, K padded to 16), outputs poisoned
with NaN, e5m2 operands, quantize bit for bit against ml_dtypes, and torch._scaled_mm on the same bytes."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import fp8, launch, registry, scaled, scaled_choice, tma, verify
from cupy_gemm.errors import DTypeError, InputError
from cupy_gemm.families.decode import MAX_WGMMA_ACCUMULATORS
from cupy_gemm.families.decode_fp8 import wgmma_accumulators
from cupy_gemm.launch import compute_capability

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

HOPPER = cupy.cuda.is_available() and compute_capability(cupy.cuda.Device()) == 90
pytestmark = pytest.mark.skipif(not HOPPER, reason="needs a compute capability 9.0 GPU (sm_90a)")

NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "wgmma_fp8"]
MODES = list(scaled.SCALING_IDS)
# ragged M and N around the 128×256 and 128×128 tiles; K = 128·j + 16 tails of the last K-block, K that is
# not a multiple of 16 (padded on the way in), one K-block, a single row and column
SHAPES = [(1, 1, 16), (17, 17, 144), (127, 127, 1040), (1000, 1000, 1000), (4095, 4095, 4112),
          (4095, 17, 1040), (17, 4095, 272), (1000, 127, 4095), (129, 1000, 33), (256, 512, 128)]


def random_fp8(shape, fmt, seed, *, column_major=False):
    """Random fp8 bytes of `fmt`, uniform over the codes of magnitude at most 4 (subnormals included; products
    stay far from fp16's range); column_major: a (K, N) matrix as the transpose of an (N, K) C-contiguous one."""
    rng = cupy.random.default_rng(seed)
    rows, cols = shape[::-1] if column_major else shape
    table = fp8.decode_table(fmt)
    codes = cupy.asarray(np.flatnonzero(np.isfinite(table) & (np.abs(table) <= 4)).astype(np.uint8))
    q = codes[rng.integers(0, codes.size, size=(rows, cols))]
    return q.T if column_major else q


def random_scales(mode, m, n, k, seed):
    """Scales in [0.25, 4) of the shapes each mode takes."""
    rng = cupy.random.default_rng(seed)
    kb, nb = -(-k // 128), -(-n // 128)
    shape_a, shape_b = {"tensor": ((), (1,)), "rowcol": ((m, 1), (1, n)), "block": ((m, kb), (nb, kb))}[mode]
    draw = lambda shape: cupy.exp2(rng.random(shape, dtype=cupy.float32) * 4 - 2).astype(cupy.float32)
    return draw(shape_a), draw(shape_b)


def check(out, a, b, sa, sb, fa, fb, k, out_dtype):
    a64 = cupy_gemm.dequantize(a, sa, fa)
    b64 = cupy_gemm.dequantize(b, sb, fb)
    ref, scale = verify.reference(a64, b64)
    verdict = verify.check(out, ref, scale, out_dtype, "fp8", k)
    return verdict


def run_case(m, n, k, *, fa="e4m3", fb="e4m3", mode="tensor", out_dtype="bfloat16", variant=None, seed=0):
    a = random_fp8((m, k), fa, seed)
    b = random_fp8((k, n), fb, seed + 1, column_major=True)
    sa, sb = random_scales(mode, m, n, k, seed + 2)
    out = cupy.full((m, n), cupy.nan, dtype=out_dtype)
    result = cupy_gemm.scaled_mm(a, b, sa, sb, format_a=fa, format_b=fb, out_dtype=out_dtype, out=out,
                                 variant=variant)
    assert result is out
    verdict = check(out, a, b, sa, sb, fa, fb, k, out_dtype)
    assert verdict.ok, f"{variant or 'default'} {fa}×{fb} {mode} → {out_dtype} at {m}x{n}x{k}: {verdict}"
    return verdict


def _params_of(name):
    v = registry.lookup(name)
    p = v.params
    return dict(fa=fp8.FORMATS[p["FORMAT_A"]], fb=fp8.FORMATS[p["FORMAT_B"]], mode=MODES[p["SCALING"]],
                out_dtype=v.dtype, variant=name)


def _skip_without_bf16(out_dtype):
    if out_dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", NAMES)
def test_catalogue_variant(name, m, n, k):
    case = _params_of(name)
    _skip_without_bf16(case["out_dtype"])
    if not registry.lookup(name).params["PROMOTE"] and k > 1040:
        pytest.skip("without promotion the tensor core's accumulation error grows faster than the fp8 bound")
    run_case(m, n, k, seed=m + 3 * n + 7 * k, **case)


@pytest.mark.parametrize("out_dtype", scaled.OUT_DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e4m3", "e5m2")])
def test_default_variant_for_every_mode(fa, fb, mode, out_dtype):
    """variant=None: a catalogue entry where one matches, else one derived from the per-tensor default."""
    _skip_without_bf16(out_dtype)
    run_case(333, 520, 1040 + 16, fa=fa, fb=fb, mode=mode, out_dtype=out_dtype, seed=5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fa,fb,out_dtype", [("e4m3", "e4m3", "bfloat16"), ("e5m2", "e4m3", "float16"),
                                             ("e4m3", "e5m2", "float32")])
@pytest.mark.parametrize("tile", list(scaled_choice.TILE_COSTS["tensor"]), ids=lambda t: f"{t[0]}x{t[1]}")
def test_every_tile_the_default_may_take(tile, fa, fb, out_dtype, mode):
    """Each tile of the default's cost table, from the catalogue or derived for this call, on a ragged shape."""
    _skip_without_bf16(out_dtype)
    v = scaled_choice._entry_with_tile(fa, fb, mode, out_dtype, tile)
    assert (v.params["BM"], v.params["BN"]) == tile and v.params["SCALING"] == scaled.SCALING_IDS[mode], v.name
    run_case(tile[0] + 17, 2 * tile[1] + 8, 1040 + 16, fa=fa, fb=fb, mode=mode, out_dtype=out_dtype, variant=v,
             seed=6)


@pytest.mark.parametrize("m,n,k,tile,splits", [(40, 1000, 1056, (64, 64), 1), (100, 5000, 1056, (64, 128), 1),
                                               (512, 4096, 4096, (128, 128), 1), (200, 2048, 16384, (128, 128), 4)])
def test_default_takes_the_tile_expected_first(m, n, k, tile, splits):
    """variant=None at these shapes on an H100's or H200's 132 SMs: the cost table's pick, correct."""
    sms = launch.sm_count(cupy.cuda.Device())
    v = scaled.variant_for("e4m3", "e4m3", "tensor", "bfloat16", m, n, k, sms)
    if sms == 132:
        assert (v.params["BM"], v.params["BN"], v.params["SPLIT_K"]) == (*tile, splits), v.name
    run_case(m, n, k, seed=7)


def _split(base, splits):
    return registry.make_variant(base.family, f"{base.name}_splitk{splits}", base.dtype, {**base.params, "SPLIT_K": splits})


@pytest.mark.parametrize("splits", [2, 3, 5])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tile", [(128, 256), (128, 192), (128, 128), (64, 64)], ids=lambda t: f"{t[0]}x{t[1]}")
def test_split_k(tile, mode, splits):
    """K sliced over SPLIT_K units per tile: ragged M and N, uneven slices with a K tail past the last 128-deep
    block (block scales per slice), more splits than K-blocks (capped by the kernel), and an output of each type."""
    base = scaled_choice._entry_with_tile("e4m3", "e4m3", mode, "bfloat16", tile)
    v = _split(base, splits)
    assert launch.launch_config(v, 333, 520, 2064, 132).splits == splits
    for (m, n, k), fa, out_dtype in [((tile[0] + 17, tile[1] + 8, 1040 + 16), "e4m3", "bfloat16"),
                                     ((3, 2 * tile[1] + 1, 128 * 7 + 16), "e5m2", "float16"),
                                     ((tile[0], tile[1], 256), "e4m3", "float32")]:
        _skip_without_bf16(out_dtype)
        derived = scaled_choice._derived(v, f"tile{tile[0]}x{tile[1]}_splitk{splits}_", fa, "e4m3", mode, out_dtype)
        run_case(m, n, k, fa=fa, mode=mode, out_dtype=out_dtype, variant=derived, seed=splits + k)


@pytest.mark.parametrize("mode", MODES)
def test_split_k_is_bitwise_repeatable(mode):
    """The last split adds the partials in split order, whichever unit finishes last: the same bits every run,
    also after a launch with more tiles has used the workspace."""
    v = _split(scaled_choice._entry_with_tile("e4m3", "e4m3", mode, "bfloat16", (128, 128)), 4)
    m, n, k = 200, 1000, 4096 + 16
    a, b = random_fp8((m, k), "e4m3", 1), random_fp8((k, n), "e4m3", 2, column_major=True)
    sa, sb = random_scales(mode, m, n, k, 3)
    first = cupy_gemm.scaled_mm(a, b, sa, sb, variant=v)
    big_a, big_b = random_fp8((1000, k), "e4m3", 4), random_fp8((k, 2000), "e4m3", 5, column_major=True)
    big_sa, big_sb = random_scales(mode, 1000, 2000, k, 6)
    cupy_gemm.scaled_mm(big_a, big_b, big_sa, big_sb, variant=v)  # more tiles: more counters and partials
    for _ in range(3):
        again = cupy_gemm.scaled_mm(a, b, sa, sb, variant=v)
        assert bool((again.view(cupy.uint16) == first.view(cupy.uint16)).all()), mode
    assert check(first, a, b, sa, sb, "e4m3", "e4m3", k, "bfloat16").ok


def _stream_k(base, mode):
    return registry.make_variant(base.family, f"{base.name}_streamk{mode}", base.dtype,
                                 {**base.params, "SPLIT_K": 0, "STREAM_K": mode})


@pytest.mark.parametrize("stream_k", [1, 2])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tile", [(128, 256), (128, 128)], ids=lambda t: f"{t[0]}x{t[1]}")
def test_stream_k(tile, mode, stream_k):
    """Stream-K's units (whole tiles, then shares of the rest's K-blocks that start and end inside tiles): ragged
    M and N with a K tail past the last 128-deep block (block scales per share), fewer tiles than SMs, more
    tiles than a wave, and an output of each type; then the same bits again."""
    base = scaled_choice._entry_with_tile("e4m3", "e4m3", mode, "bfloat16", tile)
    v = _stream_k(base, stream_k)
    for (m, n, k), fa, out_dtype in [((3 * tile[0] + 17, 5 * tile[1] + 8, 1040 + 16), "e4m3", "bfloat16"),
                                     ((1500, 3000, 128 * 9 + 16), "e5m2", "float16"),
                                     ((tile[0] + 1, 2 * tile[1], 4096), "e4m3", "float32")]:
        _skip_without_bf16(out_dtype)
        assert launch.launch_config(v, m, n, k, 132).splits > 1 or stream_k == 2
        derived = scaled_choice._derived(v, f"tile{tile[0]}x{tile[1]}_streamk{stream_k}_", fa, "e4m3", mode, out_dtype)
        run_case(m, n, k, fa=fa, mode=mode, out_dtype=out_dtype, variant=derived, seed=stream_k + k)
    m, n, k = 1000, 3000, 2048 + 16
    a, b = random_fp8((m, k), "e4m3", 1), random_fp8((k, n), "e4m3", 2, column_major=True)
    sa, sb = random_scales(mode, m, n, k, 3)
    first = cupy_gemm.scaled_mm(a, b, sa, sb, variant=v)
    for _ in range(2):
        again = cupy_gemm.scaled_mm(a, b, sa, sb, variant=v)
        assert bool((again.view(cupy.uint16) == first.view(cupy.uint16)).all()), mode
    assert check(first, a, b, sa, sb, "e4m3", "e4m3", k, "bfloat16").ok


def test_fast_accumulation_splits_too():
    """Without promotion each split starts its own tensor-core sum at its first K-block."""
    fast = registry.lookup("fp8gemm_wgmma_m64n256k32_e4m3_tensor_fastacc_bf16")
    run_case(100, 300, 1024 + 16, variant=_split(fast, 3), seed=11)


PROMOTE256 = "fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_tensor_promote256_bf16"


def test_promotion_every_256_splits_too():
    """PROMOTE = 2 over splits of 3 K-blocks each: every unit ends on a promotion of one K-block."""
    run_case(100, 300, 1024 + 16, variant=_split(registry.lookup(PROMOTE256), 3), seed=12)


def _positive_product_error(variant, k):
    """Relative error against float64 of a 256×256 product of positive e4m3 codes (sums that only grow, the
    tensor core's truncation at its worst), fp32 out."""
    a = random_fp8((256, k), "e4m3", k) & 0x7F  # the sign bit cleared
    b = (random_fp8((256, k), "e4m3", k + 1) & 0x7F).T  # column-major
    s = cupy.ones(1, cupy.float32)
    out = cupy_gemm.scaled_mm(a, b, s, s, out_dtype="float32", variant=variant)
    ref, _ = verify.reference(cupy_gemm.dequantize(a, s), cupy_gemm.dequantize(b, s))
    return float(cupy.linalg.norm(out - ref) / cupy.linalg.norm(ref))


def test_promotion_every_256_stays_bounded_in_k():
    """The error of promoting every 256 of K does not grow with K, where fast accumulation's does."""
    every256, fast = (scaled_choice.with_output(registry.lookup(name), "float32")
                      for name in (PROMOTE256, "fp8gemm_wgmma_m64n256k32_e4m3_tensor_fastacc_bf16"))
    short, long = (_positive_product_error(every256, k) for k in (1024, 32768))
    assert long < 2 * short and long < 2.0**-8, (short, long)
    assert _positive_product_error(fast, 32768) > 8 * long


def test_long_k_keeps_accuracy():
    """Promotion every 128 of K: at K = 16384 the error stays within the sqrt(K) bound, fp32 output."""
    verdict = run_case(256, 256, 16384, out_dtype="float32", seed=9)
    assert verdict.relative_error < 2.0**-10, verdict


def test_outputs_that_tma_cannot_store_in_place():
    """An out row of 17 bf16 (34 bytes) and a strided out view go through a staging copy."""
    _skip_without_bf16("bfloat16")
    m, n, k = 200, 17, 256
    a, b = random_fp8((m, k), "e4m3", 1), random_fp8((k, n), "e4m3", 2, column_major=True)
    sa, sb = random_scales("rowcol", m, n, k, 3)
    plain = cupy_gemm.scaled_mm(a, b, sa, sb)
    assert plain.shape == (m, n) and plain.flags.c_contiguous and plain.dtype == np.dtype("bfloat16")
    assert check(plain, a, b, sa, sb, "e4m3", "e4m3", k, "bfloat16").ok
    wide = cupy.full((m, 2 * n), cupy.nan, dtype="bfloat16")
    view = wide[:, ::2]
    assert cupy_gemm.scaled_mm(a, b, sa, sb, out=view) is view
    assert check(view, a, b, sa, sb, "e4m3", "e4m3", k, "bfloat16").ok
    assert cupy.isnan(wide[:, 1::2].astype(cupy.float32)).all(), "wrote outside the output view"


def test_operands_that_need_copies():
    """a off the 16-byte alignment the copy engine needs (copied), b sliced from a wider (N, K) array (in place)."""
    m, n, k = 70, 90, 48
    a = random_fp8((m, 2 * k + 3), "e4m3", 1)[:, 3:3 + k]  # base off 16 bytes, stride 83
    b = random_fp8((2 * k, n), "e4m3", 2, column_major=True)[:k]  # (N, 2K) rows, first K
    sa, sb = random_scales("tensor", m, n, k, 3)
    out = cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32")
    assert check(out, a, b, sa, sb, "e4m3", "e4m3", k, "float32").ok


@pytest.mark.parametrize("mode, k, m", [("tensor", 272, 130), ("rowcol", 272, 130), ("block", 272, 130),
                                        ("block", 272, 132), ("tensor", 200, 130)])
def test_plan_reads_the_operands_when_called(monkeypatch, mode, k, m):
    """A plan reads the operands' contents at each call. Where the kernel reads them in place (K a multiple
    of 16; block scales of A stored [K-block][M] with M a multiple of 4, as quantize returns them) it
    encodes its tensor maps once, when planned; a padded K or block scales copied into the kernel's layout
    make them anew each call."""
    encoded = []
    real = tma.tensor_map_2d
    monkeypatch.setattr(tma, "tensor_map_2d", lambda *args, **kw: encoded.append(1) or real(*args, **kw))
    n = 260
    a, b = random_fp8((m, k), "e4m3", 1), random_fp8((k, n), "e4m3", 2, column_major=True)
    sa, sb = random_scales(mode, m, n, k, 3)
    if mode == "block":
        sa = cupy.asfortranarray(sa)  # [K-block][M] in memory: read in place where M % 4 == 0
    run = cupy_gemm.scaled_plan(a, b, sa, sb, out_dtype="float32")
    first = run()
    a[...] = random_fp8((m, k), "e4m3", 4)
    sa[...] = sa * 2
    assert run() is first
    assert check(first, a, b, sa, sb, "e4m3", "e4m3", k, "float32").ok
    in_place = k % 16 == 0 and (mode != "block" or m % 4 == 0)
    maps = 4 if mode == "block" else 3  # block scales of A are read through a map of their own
    assert len(encoded) == (maps if in_place else 2 * maps)


@pytest.mark.parametrize("m", [256, 250, 3])
def test_block_scales_of_a_in_place_or_padded(m):
    """A's block scales as the kernel reads them, [K-block][M]: used in place where rows are 16-byte
    multiples (M % 4 == 0), copied with zero padding otherwise; both products right, rows past a tile's
    edge included (M = 250, 3)."""
    n, k = 300, 1040
    kb = -(-k // 128)
    a, b = random_fp8((m, k), "e4m3", 1), random_fp8((k, n), "e4m3", 2, column_major=True)
    _, sb = random_scales("block", m, n, k, 3)
    sa = cupy.exp2(cupy.random.default_rng(4).random((kb, m), dtype=cupy.float32) * 4 - 2).T  # (M, kb) view
    kernel_sa = scaled._kernel_scales(sa, "block", "a")
    assert (kernel_sa.data.ptr == sa.data.ptr) == (m % 4 == 0)
    assert kernel_sa.shape == (kb, -(-m // 4) * 4) and (kernel_sa[:, :m] == sa.T).all()
    out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32", out=out,
                        variant="fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_block_f32")
    assert check(out, a, b, sa, sb, "e4m3", "e4m3", k, "float32").ok


def test_scaled_mm_keeps_a_plan_per_geometry(monkeypatch):
    """scaled_mm plans a call geometry once: other arrays of that geometry are read, not the first ones;
    the same arrays again encode no tensor maps; a base off 16 bytes (same shape and strides, which the
    kernel cannot read in place) is another geometry, copied, and still right."""
    scaled.clear()
    encoded = []
    real = tma.tensor_map_2d
    monkeypatch.setattr(tma, "tensor_map_2d", lambda *args, **kw: encoded.append(1) or real(*args, **kw))
    m, n, k = 200, 136, 256
    sa, sb = random_scales("tensor", m, n, k, 9)
    for seed in (1, 2):
        a, b = random_fp8((m, k), "e4m3", seed), random_fp8((k, n), "e4m3", seed + 10, column_major=True)
        assert check(cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32"), a, b, sa, sb, "e4m3", "e4m3", k,
                     "float32").ok
    assert len(scaled._plans) == 1
    out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32", out=out)
    encoded.clear()
    a[...] = random_fp8((m, k), "e4m3", 5)
    out.fill(cupy.nan)
    assert cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32", out=out) is out
    assert not encoded and check(out, a, b, sa, sb, "e4m3", "e4m3", k, "float32").ok
    flat = random_fp8((1, m * k + 16), "e4m3", 6)[0]
    shifted = flat[8:8 + m * k].reshape(m, k)
    assert shifted.strides == a.strides and shifted.data.ptr % 16 == 8
    assert check(cupy_gemm.scaled_mm(shifted, b, sa, sb, out_dtype="float32"), shifted, b, sa, sb, "e4m3", "e4m3",
                 k, "float32").ok
    assert len(scaled._plans) == 3


def test_empty_k_gives_zeros():
    a, b = cupy.zeros((5, 0), cupy.uint8), cupy.zeros((0, 7), cupy.uint8)
    sa, sb = cupy.ones((), cupy.float32), cupy.ones((1,), cupy.float32)
    assert (cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32") == 0).all()


def test_matmul_refuses_fp8_variants():
    x = cupy.ones((4, 4), dtype=cupy.float32)
    with pytest.raises(DTypeError, match="scaled_mm"):
        cupy_gemm.matmul(x, x, variant="fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_tensor_f32")


# ---- quantize -------------------------------------------------------------------------------------------

SCALINGS = ["tensor", "row", "col", (1, 128), (128, 128)]


def _input(shape, dtype, seed, *, column_major=False):
    """Normal data with outliers (1% of the elements 100× larger), some groups all zero."""
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal(shape, dtype=cupy.float32)
    x = cupy.where(rng.random(shape) < 0.01, x * 100, x)
    x[: shape[0] // 7] = 0
    x = x.astype(dtype)
    return cupy.asfortranarray(x) if column_major else x


def _quantize_reference(x, fmt, scaling):
    """numpy + ml_dtypes: amax per group, scale = amax / max (1 for zero groups), RNE of x / scale."""
    layout = fp8.quantize_layout(x.shape, scaling, x.flags.f_contiguous and not x.flags.c_contiguous)
    work = cupy.asnumpy(x.T if layout.transpose else x).astype(np.float32)
    gr, gc = layout.group_rows, layout.group_cols
    rows, cols = work.shape
    scales = np.ones(layout.groups, np.float32)
    q = np.empty((rows, cols), np.uint8)
    target = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    limit = np.float32(fp8.FORMAT_MAX[fmt])
    for i in range(layout.groups[0]):
        for j in range(layout.groups[1]):
            block = work[i * gr:(i + 1) * gr, j * gc:(j + 1) * gc]
            amax = np.float32(np.abs(block).max())
            scale = amax / limit if amax > 0 else np.float32(1)
            scales[i, j] = scale
            q[i * gr:(i + 1) * gr, j * gc:(j + 1) * gc] = np.clip(block / scale, -limit, limit).astype(target).view(np.uint8)
    return (q.T if layout.transpose else q), scales.reshape(layout.scale_shape)


@pytest.mark.skipif(ml_dtypes is None, reason="the reference rounding is ml_dtypes'")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("fmt", fp8.FORMATS)
@pytest.mark.parametrize("scaling", SCALINGS, ids=str)
def test_quantize_is_bit_exact(scaling, fmt, dtype):
    x = _input((300, 520), dtype, seed=len(str(scaling)) + 7 * len(dtype))
    q, scales = cupy_gemm.quantize(x, fmt, scaling)
    q_ref, scales_ref = _quantize_reference(x, fmt, scaling)
    np.testing.assert_array_equal(cupy.asnumpy(scales), scales_ref)
    np.testing.assert_array_equal(cupy.asnumpy(q), q_ref)
    assert q.flags.f_contiguous == (scaling in ("col", (128, 128)))  # B's layouts are column-major
    if scaling == (1, 128):
        assert scales.flags.f_contiguous  # [K-block][M] in memory: scaled_mm reads it in place


@pytest.mark.skipif(ml_dtypes is None, reason="the reference rounding is ml_dtypes'")
def test_quantize_keeps_a_column_major_input_so_for_tensor_scaling():
    x = _input((130, 260), "float32", 3, column_major=True)
    q, scales = cupy_gemm.quantize(x, "e4m3", "tensor")
    q_ref, scales_ref = _quantize_reference(x, "e4m3", "tensor")
    assert q.flags.f_contiguous and not q.flags.c_contiguous
    np.testing.assert_array_equal(cupy.asnumpy(q), q_ref)
    np.testing.assert_array_equal(cupy.asnumpy(scales), scales_ref)


@pytest.mark.parametrize("scaling", SCALINGS, ids=str)
def test_quantize_round_trip_and_product(scaling):
    """dequantize(quantize(x)) is x to e4m3's precision, and scaled_mm of quantized operands is their product."""
    a_mode = scaling if scaling in ("tensor", "row", (1, 128)) else {"col": "row", (128, 128): (1, 128)}[scaling]
    b_mode = {"row": "col", (1, 128): (128, 128)}.get(scaling, scaling)
    m, n, k = 300, 260, 1040
    x, w = _input((m, k), "float32", 1), _input((k, n), "float32", 2, column_major=True)  # B kept column-major
    qa, sa = cupy_gemm.quantize(x, "e4m3", a_mode)
    qb, sb = cupy_gemm.quantize(w, "e4m3", b_mode)
    for orig, q, s in ((x, qa, sa), (w, qb, sb)):
        back = cupy_gemm.dequantize(q, s, "e4m3")
        assert float(cupy.abs(back - orig).max()) <= 2.0**-4 * float(cupy.abs(orig).max())
    out = cupy_gemm.scaled_mm(qa, qb, sa, sb, out_dtype="float32")
    assert check(out, qa, qb, sa, sb, "e4m3", "e4m3", k, "float32").ok


# ---- the decode kernel: at most 32 rows ------------------------------------------------------------------

DECODE_NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "decode_fp8"]
# one row, odd rows, a whole m16 tile and two; N off every tile (one column, 17, 1000, 4095); K of one
# 16-byte row, not a multiple of 16 (padded), 128·j + 16 tails, deep enough to split over eight blocks
DECODE_SHAPES = [(1, 1, 16), (5, 17, 144), (16, 1000, 1040), (1, 4095, 4112), (13, 127, 33), (3, 300, 128 * 24 + 16)]


def _decode(v, **params):
    """v with other parameters (a layout), named after them."""
    tag = "_".join(f"{p}{x}" for p, x in params.items())
    return registry.make_variant(v.family, f"{v.name}_{tag}", v.dtype, {**v.params, **params})


@pytest.mark.parametrize("m,n,k", DECODE_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in DECODE_SHAPES])
@pytest.mark.parametrize("name", DECODE_NAMES)
def test_decode_catalogue_variant(name, m, n, k):
    case = _params_of(name)
    _skip_without_bf16(case["out_dtype"])
    rows = registry.lookup(name).params["ROWS"]
    run_case(m + rows - 16, n, k, seed=m + 3 * n + 7 * k, **case)


# every width and cluster size; wgmma (MMA = 1) on the widths of whole 64-column slices, a warpgroup on each
# slice or one on all of them (where its accumulators fit), up to 64 rows
DECODE_LAYOUTS = ([(rows, bn, cs, 0, scaled_choice.decode_warps(bn, 0)) for rows in (16, 32)
                   for bn in scaled_choice.WIDENED_WIDTHS for cs in (1, 2, 4, 8) if bn % cs == 0]
                  + [(rows, bn, cs, 1, warps) for rows in (16, 32, 64) for bn in scaled_choice.DECODE_WIDTHS
                     for cs in (1, 2, 4, 8) for warps in sorted({4, bn // 16})
                     if wgmma_accumulators(rows, bn, warps) <= MAX_WGMMA_ACCUMULATORS])


@pytest.mark.parametrize("rows,bn,cs,mma,warps", DECODE_LAYOUTS,
                         ids=[f"r{r}_n{bn}_c{cs}_mma{m}_w{w}" for r, bn, cs, m, w in DECODE_LAYOUTS])
def test_decode_layouts(rows, bn, cs, mma, warps):
    """Every layout the default may take or a caller may name: widths of 3 to 16 warps, clusters of 1 to 8
    blocks, some holding no K-block (K of three blocks over eight), columns past N, block scales, a float32
    output; fp8 widened for mma.sync or the swapped product on wgmma."""
    layout = dict(ROWS=rows, BN=bn, CS=cs, MMA=mma, WARPS=warps, STAGES=scaled_choice.decode_stages(rows, bn, cs, 1))
    for (m, n, k), mode, out_dtype in [((rows, 2 * bn + 8, 128 * 3), "block", "float32"),
                                       ((rows - 3, bn - 16, 128 * 17 + 16), "tensor", "bfloat16"),
                                       ((1, 3 * bn, 1040), "rowcol", "float16")]:
        _skip_without_bf16(out_dtype)
        v = _decode(scaled_choice._decode_entry("e4m3", "e4m3", mode, out_dtype, (rows, 64, 2, 8)), **layout)
        run_case(m, n, k, mode=mode, out_dtype=out_dtype, variant=v, seed=rows + bn + cs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fa,fb,out_dtype", [("e5m2", "e4m3", "float16"), ("e4m3", "e5m2", "float32"),
                                             ("e4m3", "e4m3", "bfloat16")])
@pytest.mark.parametrize("m,n,k", [(1, 2056, 4112), (7, 2056, 4112), (16, 2056, 4112), (17, 2056, 4112),
                                   (32, 2056, 4080), (33, 2056, 4112), (33, 8200, 4112), (64, 8200, 4112),
                                   (64, 8200, 4080), (65, 8200, 4112)])
def test_decode_is_the_default_up_to_32_rows_and_64_over_wide_n_and_deep_k(m, n, k, fa, fb, out_dtype, mode):
    _skip_without_bf16(out_dtype)
    v = scaled.variant_for(fa, fb, mode, out_dtype, m, n, k, launch.sm_count(cupy.cuda.Device()))
    wide = m <= 64 and n == 8200 and k >= 4096 and mode != "block"  # K left whole over 129 column blocks
    assert (v.family.name == "decode_fp8") == (m <= 32 or wide), v.name
    run_case(m, n, k, fa=fa, fb=fb, mode=mode, out_dtype=out_dtype, seed=m)


@pytest.mark.parametrize("mode", MODES)
def test_decode_is_bitwise_repeatable(mode):
    """The cluster's partial tiles are summed in rank order: repeats give the same bits."""
    m, n, k = 9, 1000, 128 * 40 + 16
    v = scaled_choice._decode_entry("e4m3", "e4m3", mode, "float32", (16, 64, 8, 8))
    a, b = random_fp8((m, k), "e4m3", 1), random_fp8((k, n), "e4m3", 2, column_major=True)
    sa, sb = random_scales(mode, m, n, k, 3)
    first = cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32", variant=v)
    assert check(first, a, b, sa, sb, "e4m3", "e4m3", k, "float32").ok
    for _ in range(20):
        again = cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32", variant=v)
        assert (again.view(cupy.uint32) == first.view(cupy.uint32)).all()


@pytest.mark.parametrize("layout", ["C", "F", "sliced"])
def test_decode_reads_block_scales_of_a_where_they_lie(layout):
    """The decode kernel reads A's (M, K-blocks) block scales by their strides: no copy, any layout."""
    m, n, k = 3, 500, 1040
    kb = -(-k // 128)
    a, b = random_fp8((m, k), "e4m3", 1), random_fp8((k, n), "e4m3", 2, column_major=True)
    _, sb = random_scales("block", m, n, k, 3)
    wide = cupy.exp2(cupy.random.default_rng(4).random((m, 2 * kb), dtype=cupy.float32) * 4 - 2)
    sa = {"C": cupy.ascontiguousarray(wide[:, :kb]), "F": cupy.asfortranarray(wide[:, :kb]), "sliced": wide[:, ::2]}[layout]
    plan = scaled._Plan(a, b, sa, sb, "e4m3", "e4m3", "float32", None, None)
    assert plan.variant.family.name == "decode_fp8" and plan.in_place
    out = cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="float32")
    assert check(out, a, b, sa, sb, "e4m3", "e4m3", k, "float32").ok


def test_decode_refuses_more_rows_before_launch():
    a, b = random_fp8((17, 256), "e4m3", 1), random_fp8((256, 64), "e4m3", 2, column_major=True)
    sa, sb = random_scales("tensor", 17, 64, 256, 3)
    with pytest.raises(InputError, match="at most 16 rows"):
        cupy_gemm.scaled_mm(a, b, sa, sb, variant="fp8gemv_decode_n64_c2_stages8_e4m3_tensor_bf16")


# ---- torch._scaled_mm on the same bytes ------------------------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (1000, 2048, 1040), (16, 4096, 7168), (1, 7168, 2048),
                                   (32, 1024, 4096)])
def test_matches_torch_scaled_mm(m, n, k):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not hasattr(torch, "_scaled_mm"):
        pytest.skip("needs PyTorch with CUDA and torch._scaled_mm")
    _skip_without_bf16("bfloat16")
    a = random_fp8((m, k), "e4m3", 11)
    b = random_fp8((k, n), "e4m3", 12, column_major=True)
    sa, sb = cupy.asarray([0.5], cupy.float32), cupy.asarray([0.25], cupy.float32)
    ours = cupy_gemm.scaled_mm(a, b, sa, sb)
    a_t = torch.from_dlpack(a).view(torch.float8_e4m3fn)
    b_t = torch.from_dlpack(b.T).view(torch.float8_e4m3fn).t()  # (N, K) contiguous, seen as column-major (K, N)
    theirs_t = torch._scaled_mm(a_t, b_t, scale_a=torch.from_dlpack(sa).reshape(()),
                                scale_b=torch.from_dlpack(sb).reshape(()), out_dtype=torch.bfloat16)
    theirs = cupy.from_dlpack(theirs_t.contiguous())
    for result in (ours, theirs):
        assert check(result, a, b, sa, sb, "e4m3", "e4m3", k, "bfloat16").ok
    diff = cupy.abs(ours.astype(cupy.float32) - theirs.astype(cupy.float32))
    size = cupy.abs(theirs.astype(cupy.float32)) + 1e-30
    assert float(cupy.median(diff / size)) <= 2.0**-8  # most elements equal or one bf16 ulp apart

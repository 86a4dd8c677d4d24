"""scaled_mm, quantize and dequantize without a GPU: input checks, scaling modes, variant choice, the
quantise layouts, the fp8 decode, and the quantise kernel's NVRTC compile."""
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import fp8, scaled, scaled_choice, toolkit
from cupy_gemm.errors import DTypeError, InputError
from fake_gpu import gpu  # noqa: F401  (the fixture)

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None

M, N, K = 300, 200, 1040  # 9 K-blocks, 2 N-blocks


def operands(m=M, n=N, k=K, *, b_col_major=True, dtype=np.uint8):
    """NumPy stand-ins with the layouts scaled_mm checks (the checks read only shape, strides, dtype)."""
    a = np.zeros((m, k), dtype)
    b = np.zeros((n, k), dtype).T if b_col_major else np.zeros((k, n), dtype)
    return a, b


def scales(shape_a, shape_b, dtype=np.float32):
    return np.ones(shape_a, dtype), np.ones(shape_b, dtype)


@pytest.mark.parametrize("shape_a,shape_b,modes", [
    ((), (), ["tensor"]),
    ((1,), (), ["tensor"]),
    ((M, 1), (1, N), ["rowcol"]),
    ((M, 9), (2, 9), ["block"]),
    ((1, 1), (1, 1), ["rowcol", "block"]),  # M = N = 1, K <= 128: one scale per row, one per column
])
def test_scale_modes_from_shapes(shape_a, shape_b, modes):
    m, n, k = (1, 1, 100) if shape_a == (1, 1) else (M, N, K)
    assert scaled.scale_modes(shape_a, shape_b, m, n, k) == modes


@pytest.mark.parametrize("shape_a,shape_b", [((M, 1), ()), ((M, 8), (2, 9)), ((1, M), (N, 1)), ((M, 9), (9, 2))])
def test_mismatched_scale_shapes_say_what_fits(shape_a, shape_b):
    with pytest.raises(InputError, match=rf"blocks \({M}, 9\) and \(2, 9\)"):
        scaled.scale_modes(shape_a, shape_b, M, N, K)


def _check(a=None, b=None, sa=None, sb=None, fa="e4m3", fb="e4m3", out="bfloat16"):
    a0, b0 = operands()
    sa0, sb0 = scales((), ())
    return scaled.check_operands(a0 if a is None else a, b0 if b is None else b, sa0 if sa is None else sa,
                                 sb0 if sb is None else sb, fa, fb, out)


def test_valid_call_passes():
    assert _check() == (M, N, K, ["tensor"])


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(fa="e4m3fn"), InputError, "format_a must be one of"),
    (dict(fb="fp8"), InputError, "format_b must be one of"),
    (dict(fa="e5m2", fb="e5m2"), InputError, "e5m2 × e5m2 is not supported"),
    (dict(out="float64"), DTypeError, "out_dtype must be one of"),
    (dict(a=np.zeros((M, K), np.int8)), DTypeError, r"t.view\(torch.uint8\)"),
    (dict(b=operands(dtype=np.float16)[1]), DTypeError, "b must hold fp8 bytes as uint8"),
    (dict(a=np.zeros((2, M, K), np.uint8)), InputError, "a must be a 2-D matrix"),
    (dict(b=operands(k=K + 16)[1]), InputError, "inner dimensions differ"),
    (dict(a=np.zeros((K, M), np.uint8).T), InputError, "a must be row-major"),
    (dict(b=operands(b_col_major=False)[1]), InputError, "b must be column-major"),
    (dict(sa=np.ones((), np.float64)), DTypeError, "scale_a must be float32"),
    (dict(sb=np.ones((1,), np.float16)), DTypeError, "scale_b must be float32"),
    (dict(sa=np.ones((M, 1), np.float32)), InputError, "fit no scaling mode"),
])
def test_bad_input_is_refused_before_launch(kwargs, error, words):
    with pytest.raises(error, match=words):
        _check(**kwargs)


def test_single_rows_and_columns_take_any_stride():
    a = np.zeros((1, 2 * K), np.uint8)[:, ::2]  # one row with a stride of 2 along K: the API copies it
    b = np.zeros((1, K), np.uint8).T  # one column
    assert _check(a=a, b=b) == (1, 1, K, ["tensor"])


def test_numpy_operands_say_how_to_convert():
    a, b = operands()
    sa, sb = scales((), ())
    with pytest.raises(DTypeError, match=r"cupy.asarray\(a\)"):
        cupy_gemm.scaled_mm(a, b, sa, sb)
    with pytest.raises(DTypeError, match=r"cupy.asarray\(x\)"):
        cupy_gemm.quantize(np.zeros((4, 4), np.float32))


def test_named_variant_must_match_the_call():
    name = "fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_block_bf16"
    v, mode = scaled.check_variant(name, "e4m3", "e4m3", ["block"], "bfloat16")
    assert v.name == name and mode == "block"
    v, mode = scaled.check_variant(name, "e4m3", "e4m3", ["rowcol", "block"], "bfloat16")
    assert mode == "block"  # scales that fit both modes run in the named variant's
    for args in ((["tensor"], "bfloat16"), (["block"], "float32")):
        with pytest.raises(InputError, match="variant=None picks one"):
            scaled.check_variant(name, "e4m3", "e4m3", *args)
    with pytest.raises(InputError, match="e4m3 × e4m3"):
        scaled.check_variant(name, "e5m2", "e4m3", ["block"], "bfloat16")
    with pytest.raises(InputError, match="scaled_mm runs wgmma_fp8, decode_fp8 variants"):
        scaled.check_variant("hgemm_wgmma_m64n256k16_stages4_ws2", "e4m3", "e4m3", ["tensor"], "bfloat16")
    v, mode = scaled.check_variant(None, "e4m3", "e4m3", ["rowcol", "block"], "float32")
    assert mode == "rowcol" and v.params["SCALING"] == 1 and v.dtype == "float32"


@pytest.mark.parametrize("m,n,k,mode,out_dtype,tile", [
    # where the rules before the cost table ran another tile, H100 2026-11-28 (µs, that tile → this one)
    (192, 2048, 7168, "tensor", "bfloat16", (64, 64)),     # 128×192: 30.6 → 14.6
    (512, 4096, 4096, "tensor", "bfloat16", (128, 128)),   # 128×192: 20.5 → 16.6
    (800, 1024, 4096, "tensor", "bfloat16", (64, 128)),    # 128×192: 19.1 → 13.5
    (8192, 1024, 4096, "tensor", "bfloat16", (128, 256)),  # 128×192: 59.7 → 54.6
    (300, 2048, 7168, "block", "bfloat16", (64, 128)),     # 128×256: 43.9 → 21.9
    (3500, 1536, 4096, "block", "bfloat16", (128, 192)),   # 128×256: 55.5 → 42.9
    # and where they agree
    (8192, 8192, 8192, "tensor", "bfloat16", (128, 192)),
    (4096, 4096, 4096, "tensor", "bfloat16", (128, 256)),
    (8192, 8192, 8192, "block", "bfloat16", (128, 256)),
    (48, 7168, 2048, "tensor", "bfloat16", (64, 64)),     # past 32 rows, K under the decode kernel's 4096
    (128, 7168, 4096, "block", "bfloat16", (64, 128)),
    (33, 4096, 4096, "tensor", "float32", (64, 64)),       # derived for an output the catalogue lacks
    (8192, 8192, 8192, "tensor", "float16", (128, 192)),   # likewise
])
def test_default_tile_is_the_one_expected_first(m, n, k, mode, out_dtype, tile):
    """variant=None with the shape on 132 SMs: the tile of TILE_COSTS with the least expected time, from the
    catalogue or derived; without the shape, the first catalogue entry."""
    v = scaled.variant_for("e4m3", "e4m3", mode, out_dtype, m, n, k, 132)
    assert (v.params["BM"], v.params["BN"]) == tile and v.dtype == out_dtype and v.params["CLUSTER"] == 1
    assert v.params["SCALING"] == scaled.SCALING_IDS[mode] and v.params["SPLIT_K"] == 1
    assert scaled.variant_for("e4m3", "e4m3", mode, out_dtype) is scaled.variant_for("e4m3", "e4m3", mode, out_dtype, 1, 1)


@pytest.mark.parametrize("m,n,k,mode,tile,splits", [
    # H200 2026-11-28, µs: the best unsplit tile → this choice (torch._scaled_mm)
    (200, 2048, 16384, "tensor", (128, 128), 4),  # 64×64: 41.4 → 27.1 (33.1)
    (384, 2048, 14336, "tensor", (128, 192), 4),  # 64×128: 40.0 → 31.5 (34.2) as 128×128 ÷2; → 28.4 (11-29)
    (128, 2048, 7168, "tensor", (64, 64), 2),     # 64×64: 14.9 → 13.0 (31.8)
    (128, 4096, 14336, "block", (128, 128), 4),   # 64×128: 39.0 → 27.6 (33.3)
    (200, 2048, 16384, "block", (128, 128), 4),   # 64×128: 43.2 → 26.6
    (64, 4096, 14336, "rowcol", (64, 64), 2),     # row/column scales cost as per-tensor
    # 128×192 in splits, H200 2026-11-29, µs: the pick without it → this one
    (320, 4096, 14336, "tensor", (128, 192), 2),  # 128×128 whole: 46.3 → 41.8
    (448, 1536, 14336, "tensor", (128, 192), 4),  # 128×128 ÷2: 30.4 → 27.6
    (640, 2048, 14336, "tensor", (128, 192), 2),  # 128×128 whole: 49.3 → 41.0
    # its larger partials priced in: 128×192 ÷3 ran 43.0 µs against 40.6 here
    (128, 8192, 14336, "tensor", (128, 128), 2),
    # no split expected 10% sooner: one round of tiles
    (512, 4096, 4096, "tensor", (128, 128), 1),
    (300, 2048, 7168, "block", (64, 128), 1),     # 128×128 ÷2 expected 5% sooner only
])
def test_deep_k_over_few_tiles_splits(m, n, k, mode, tile, splits):
    """variant=None weighs split tiles too: K shared by SPLIT_K units, taken where 10% sooner than unsplit."""
    v = scaled.variant_for("e4m3", "e4m3", mode, "bfloat16", m, n, k, 132)
    assert (v.params["BM"], v.params["BN"]) == tile and v.params["SPLIT_K"] == splits, v.name
    assert v.name.endswith(f"_splitk{splits}") == (splits > 1)
    assert v is scaled.variant_for("e4m3", "e4m3", mode, "bfloat16", m, n, k, 132)  # derived once


def test_expected_time_of_a_split_tile():
    """Rounds of units (tiles × splits) × (a unit's K-blocks × ns + ns per tile + the split's cost)."""
    a, b = scaled_choice.TILE_COSTS["tensor"][(128, 128)]
    c0, c1 = scaled_choice.SPLIT_COST
    assert scaled_choice.expected_ns("tensor", (128, 128), 128, 128 * 66, 1024 * 3, 132, 2) == 12 * a + b + c0 + 2 * c1
    assert scaled_choice.expected_ns("tensor", (128, 128), 128, 128 * 66, 1024 * 3, 132, 3) == 2 * (8 * a + b + c0 + 3 * c1)
    assert ((128, 128), 4) not in scaled_choice.choices("tensor", 384)  # a split needs a K-block of its own
    assert ((128, 128), 3) in scaled_choice.choices("rowcol", 384)
    assert all(t != (64, 64) or s == 1 for t, s in scaled_choice.choices("block", 1 << 16))


def test_expected_time_counts_rounds_of_tiles():
    """Rounds × (K-blocks × ns per K-block + ns per tile): 129 rows of 128-row tiles make two rows of them."""
    a, b = scaled_choice.TILE_COSTS["tensor"][(128, 128)]
    assert scaled_choice.expected_ns("tensor", (128, 128), 128, 128 * 132, 1024, 132) == 8 * a + b
    assert scaled_choice.expected_ns("rowcol", (128, 128), 129, 128 * 132, 1025, 132) == 2 * (9 * a + b)
    a, b = scaled_choice.TILE_COSTS["block"][(64, 64)]
    assert scaled_choice.expected_ns("block", (64, 64), 1, 64, 128, 132) == a + b


# ---- quantize's host side ------------------------------------------------------------------------------

@pytest.mark.parametrize("scaling,column_major,expected", [
    ("tensor", False, (False, 300, 520, 300, 520, (1,))),
    ("tensor", True, (True, 520, 300, 520, 300, (1,))),         # a column-major input stays so
    ("row", False, (False, 300, 520, 1, 520, (300, 1))),
    ((1, 128), False, (False, 300, 520, 1, 128, (300, 5))),
    ([1, 128], True, (False, 300, 520, 1, 128, (300, 5))),      # A's layouts are row-major whatever came in
    ("col", False, (True, 520, 300, 1, 300, (1, 520))),         # B (K×N): per column n, worked on as Bᵀ
    ((128, 128), False, (True, 520, 300, 128, 128, (5, 3))),    # scales [N-block][K-block]
])
def test_quantize_layout(scaling, column_major, expected):
    layout = fp8.quantize_layout((300, 520), scaling, column_major)
    got = (layout.transpose, layout.rows, layout.cols, layout.group_rows, layout.group_cols, layout.scale_shape)
    assert got == expected
    assert layout.groups[0] * layout.groups[1] == int(np.prod(layout.scale_shape))


@pytest.mark.parametrize("bad", ["column", (128, 1), (1, 64), 128, None])
def test_quantize_refuses_unknown_scalings(bad):
    with pytest.raises(InputError, match="scaling must be one of"):
        fp8.quantize_layout((4, 4), bad)


def test_quantize_checks_dtype_and_format():
    with pytest.raises(DTypeError, match="quantize takes float32, float16, bfloat16"):
        fp8.input_dtype_name(np.float64)
    with pytest.raises(InputError, match="format must be one of"):
        fp8.quantize_source("e3m4", "float32")
    with pytest.raises(InputError, match="2-D"):
        fp8.quantize_layout((4, 4, 4), "tensor")


@pytest.mark.parametrize("dtype", fp8.INPUT_DTYPES)
@pytest.mark.parametrize("fmt", fp8.FORMATS)
def test_quantize_kernels_compile(fmt, dtype):
    lib = toolkit.nvrtc()
    source = fp8.quantize_source(fmt, dtype)
    assert f"FORMAT_MAX = {fp8.FORMAT_MAX[fmt]}f" in source
    prog = lib.createProgram(source, "fp8_quantize.cu", (), ())
    try:
        lib.compileProgram(prog, ["-arch=sm_90", *fp8.compile_options()])
        assert lib.getCUBIN(prog)
    finally:
        lib.destroyProgram(prog)


# ---- the formats ---------------------------------------------------------------------------------------

def test_decode_table_landmarks():
    e4m3, e5m2 = fp8.decode_table("e4m3"), fp8.decode_table("e5m2")
    assert e4m3[0x7E] == 448 and e4m3[0xFE] == -448 and np.isnan(e4m3[0x7F]) and np.isnan(e4m3[0xFF])
    assert e4m3[0x01] == 2.0**-9 and e4m3[0x08] == 2.0**-6 and e4m3[0x38] == 1 and e4m3[0x80] == 0
    assert np.isfinite(e4m3).sum() == 254  # no infinities in e4m3
    assert e5m2[0x7B] == 57344 and e5m2[0x7C] == np.inf and e5m2[0xFC] == -np.inf and np.isnan(e5m2[0x7D])
    assert e5m2[0x01] == 2.0**-16 and e5m2[0x3C] == 1 and np.isfinite(e5m2).sum() == 248


@pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes")
def test_decode_table_matches_ml_dtypes():
    for fmt, kind in (("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)):
        expected = np.arange(256, dtype=np.uint8).view(kind).astype(np.float32)
        np.testing.assert_array_equal(fp8.decode_table(fmt), expected)


def test_expand_scales_to_blocks():
    a_blocks = np.arange(6, dtype=np.float32).reshape(3, 2)  # A (3×200): 1×128 blocks
    full = fp8.expand_scales(a_blocks, (3, 200), column_major=False)
    assert full.shape == (3, 200) and full[2, 127] == 4 and full[2, 128] == 5
    b_blocks = np.arange(6, dtype=np.float32).reshape(3, 2)  # B (200×300), [N-block][K-block]
    full = fp8.expand_scales(b_blocks, (200, 300), column_major=True)
    assert full.shape == (200, 300) and full[127, 255] == 2 and full[128, 256] == 5 and full[0, 299] == 4
    assert fp8.expand_scales(np.ones((3, 1), np.float32), (3, 7), False).shape == (3, 1)
    with pytest.raises(InputError, match="do not fit a 3×200 matrix"):
        fp8.expand_scales(np.ones((2, 2), np.float32), (3, 200), False)


def test_scaled_mm_plans_are_keyed_by_geometry(gpu):
    """scaled_mm's plan key: equal for other arrays of the same shapes, strides, dtypes, devices and
    16-byte alignment, different where the alignment or `out` differs; no key (the checked path) for a
    NumPy operand or a format that cannot be hashed, whose checks then say what is wrong."""
    def call(offset=0, fmt="e4m3", out=None, a=None):
        a = gpu.array((64, 32), "uint8", offset=offset) if a is None else a
        b = gpu.array((48, 32), "uint8").T
        return scaled._geometry(a, b, gpu.array((), "float32"), gpu.array((1,), "float32"), fmt, "e4m3",
                                "bfloat16", out, None)
    key = call()
    assert key is not None and key == call()
    assert call(offset=8) != key and call(out=gpu.array((64, 48), "float16")) != key
    assert call(fmt=["e4m3"]) is None and call(a=np.zeros((64, 32), np.uint8)) is None
    a, b, sa, sb = gpu.array((64, 32), "uint8"), gpu.array((48, 32), "uint8").T, gpu.array((), "float32"), \
        gpu.array((1,), "float32")
    with pytest.raises(InputError, match="format"):
        cupy_gemm.scaled_mm(a, b, sa, sb, format_a=["e4m3"], out_dtype="float32")
    with pytest.raises(DTypeError, match="out_dtype must be one of"):
        cupy_gemm.scaled_mm(a, b, sa, sb, out_dtype="fp9")


# ---- explain ---------------------------------------------------------------------------------------------

H100 = ("NVIDIA H100 80GB HBM3", 90)


def test_explain_names_the_tile_and_ranks_the_estimates():
    text = scaled_choice.explain("e4m3", "e4m3", "tensor", "bfloat16", 192, 2048, 7168, H100)
    assert "variant: fp8gemm_wgmma_m64n64k32_tile64x64_e4m3_tensor_bf16\n" in text
    assert "(sm_90, 132 SMs)" in text and text.index("64×64 ~") < text.index("64×128 ~") < text.index("128×256 ~")
    text = scaled_choice.explain("e4m3", "e4m3", "tensor", "bfloat16", 200, 2048, 16384, H100)
    assert "variant: fp8gemm_wgmma_m64n128k32_tile128x128_e4m3_tensor_bf16_splitk4\n" in text
    assert text.index("128×128 ÷4 ~") < text.index("64×64 ~") and "10% sooner" in text
    text = scaled_choice.explain("e4m3", "e5m2", "block", "float32", 8192, 8192, 8192, ("NVIDIA A100-SXM4-80GB", 80))
    assert "tile128x256_e4m3e5m2_block" in text and "block scales, float32 out" in text
    assert "need an sm_90 GPU" in text


def test_explain_command_for_fp8(capsys):
    from cupy_gemm import cli
    gpu = ["--gpu", H100[0], "--cc", "90"]
    assert cli.main(["explain", "300x2048x7168", "--dtype", "e4m3", "--scaling", "block", *gpu]) == 0
    out = capsys.readouterr().out
    assert "block scales" in out and "tile64x128_e4m3_block" in out
    assert cli.main(["explain", "64", "--dtype", "e5m2", "--format-b", "e5m2", *gpu]) == 2
    assert "at most one e5m2" in capsys.readouterr().err
    assert cli.main(["explain", "64", "--dtype", "e4m3", "--b-layout", "col", *gpu]) == 2
    assert "scaled_mm reads B column-major" in capsys.readouterr().err

"""The FP8 decode family on the CPU: rules and their static_asserts, shared memory, the rendered mma.sync and
wgmma, the default's layout at up to 64 rows, and GPU-free sm_90a compiles of variants the default derives (the
catalogue's own are in test_compile)."""
import pytest

from cupy_gemm import scaled, scaled_choice
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import ConfigError, InputError
from cupy_gemm.launch import launch_config
from cupy_gemm.registry import catalogue, family, make_variant
from cupy_gemm.render import render
from family_rules import check_rule, check_template_refuses, template_text

DECODE = family("decode_fp8")
NAMES = [n for n, v in catalogue().items() if v.family is DECODE]
FIRST = catalogue()[NAMES[0]]
BASE = dict(FIRST.params)
TEMPLATE = template_text("decode_fp8.cu.j2")


def test_family_declares_hopper_clusters_and_scaled_abi():
    assert DECODE.needs_sm90a and DECODE.abi == "scaled" and DECODE.pdl and DECODE.make_args is not None
    assert set(DECODE.dtypes) == {"bfloat16", "float16", "float32"}  # the output dtype
    assert DECODE.threads(BASE) == 32 * (BASE["WARPS"] + 1) and DECODE.cluster(BASE) == BASE["CS"]
    assert DECODE.max_rows(BASE) == BASE["ROWS"] and DECODE.tile(BASE) == (BASE["ROWS"], BASE["BN"] // BASE["CS"])


def test_catalogue_covers_every_scaling_row_count_and_both_mmas():
    params = [catalogue()[n].params for n in NAMES]
    assert {p["SCALING"] for p in params} == {0, 1, 2} and {p["ROWS"] for p in params} == {16, 32, 64}
    assert {p["MMA"] for p in params} == {0, 1} and all(p["MMA"] for p in params if p["ROWS"] == 64)
    assert all((p["MMA"] == 1) == ("_wgmma_" in n) for n, p in zip(NAMES, params))


@pytest.mark.parametrize("params,param,words", [
    ({"BN": 96, "WARPS": 4}, "BN", "a multiple of 16 * WARPS"),
    ({"FORMAT_A": 1, "FORMAT_B": 1}, "FORMAT_B", "at most one e5m2 operand"),
    ({"MMA": 1, "BN": 96, "WARPS": 6}, "WARPS", "a multiple of 4 with MMA = 1"),
])
def test_rules_name_the_parameter_and_the_template_repeats_them(params, param, words):
    check_rule(DECODE, "bfloat16", {**BASE, **params}, param, words, TEMPLATE)


@pytest.mark.parametrize("params,words", [
    ({"BN": 96, "WARPS": 4}, "BN must be a multiple of 16 * WARPS"),
    ({"FORMAT_A": 1, "FORMAT_B": 1}, "at most one e5m2 operand"),
    ({"ROWS": 32, "BN": 256, "WARPS": 8, "STAGES": 7}, "at most 232448 bytes of shared memory"),
    ({"MMA": 1, "BN": 96, "WARPS": 6}, "a multiple of 4 with MMA = 1"),
    ({"ROWS": 64, "MMA": 0}, "ROWS: one or two m16 tiles, or wgmma's n64 (MMA = 1)"),
])
def test_template_refuses_what_the_rules_refuse(params, words):
    check_template_refuses(DECODE, "bfloat16", "float32", {**BASE, **params}, words, arch="sm_90a")


@pytest.mark.parametrize("params,param", [({"ROWS": 64, "MMA": 0}, "ROWS"), ({"ROWS": 48}, "ROWS"),
                                          ({"BN": 512}, "BN"), ({"CS": 16}, "CS"), ({"WARPS": 17}, "WARPS"),
                                          ({"MMA": 1, "ROWS": 64, "BN": 256, "WARPS": 4, "STAGES": 2}, "WARPS"),
                                          ({"SCALING": 3}, "SCALING"), ({"ROWS": 32, "BN": 256, "WARPS": 8,
                                                                         "STAGES": 7}, "smem")])
def test_parameter_limits(params, param):
    with pytest.raises(ConfigError) as e:
        make_variant(DECODE, "bad", "bfloat16", {**BASE, **params})
    assert e.value.param == param


def test_smem_is_the_ring_the_cluster_tile_and_alignment():
    p = {**BASE, "ROWS": 16, "BN": 128, "STAGES": 8, "CS": 2}
    assert DECODE.smem_bytes(p, "bfloat16", "float32") == 8 * (16 + 128) * 128 + 16 * 128 * 4 + 16 * 8 + 1024
    assert DECODE.smem_bytes({**p, "CS": 1}, "bfloat16", "float32") == 8 * (16 + 128) * 128 + 16 * 8 + 1024


@pytest.mark.parametrize("name", NAMES)
def test_renders_the_fp8_widened_to_f16_or_the_swapped_wgmma(name):
    v = catalogue()[name]
    fa, fb = ("e4m3", "e5m2")[v.params["FORMAT_A"]], ("e4m3", "e5m2")[v.params["FORMAT_B"]]
    src = render(v)
    assert "{{" not in src and "{%" not in src
    if v.params["MMA"]:  # B's rows are wgmma's M: B's format first, A's ROWS rows as its N
        body = src.split("void multiply_block_wgmma(")[1].split("gemm_kernel(")[0]
        assert f"wgmma.mma_async.sync.aligned.m64n{v.params['ROWS']}k32.f32.{fb}.{fa}" in src
        assert "smem_desc_sw128(b_stage" in body and "wgmma_wait<0>()" in body and "f16_pairs_" not in src
        return
    body = src.split("__device__ __forceinline__ void multiply_block(")[1].split("gemm_kernel(")[0]
    assert f"f16_pairs_{fa}(h[i], x[i])" in body and f"f16_pairs_{fb}(b[0], x[2 * t])" in body
    assert f"cvt.rn.f16x2.{fa}x2" in src and f"cvt.rn.f16x2.{fb}x2" in src and "mma_m16n8k16_f16(" in body
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src and ".trans" not in src.split("gemm_kernel(")[1]
    assert "wgmma.mma_async" not in src


@pytest.mark.parametrize("m,n,k,layout", [
    (1, 4096, 4096, (16, 64, 2, 8)),     # 64 column blocks: pairs fill 128 of 132 SMs, one block each
    (16, 1024, 8192, (16, 64, 8, 8)),
    (1, 2048, 7168, (16, 64, 4, 8)),
    (1, 7168, 16384, (16, 64, 1, 8)),    # 112 column blocks: no split
    (8, 10240, 8192, (16, 128, 1, 8)),   # 160 blocks of 64 columns: 80 of 128 (two warpgroups) instead
    (1, 14336, 4096, (16, 128, 1, 8)),
    (1, 24576, 1536, (16, 192, 1, 8)),
    (8, 28672, 8192, (16, 256, 1, 6)),   # 6 stages of 34 KB fit one block
    (1, 128256, 4096, (16, 64, 1, 4)),   # more 256-column clusters than SMs: several blocks an SM, 4 stages
    (1, 512, 256, (16, 64, 2, 8)),       # two K-blocks: no more blocks a cluster than K-blocks
    (3, 100, 100, (16, 64, 1, 8)),
    (17, 7168, 2048, (32, 64, 1, 8)),    # up to 32 rows at any K
    (32, 10240, 8192, (32, 128, 1, 8)),
    (64, 10240, 8192, (64, 128, 1, 8)),  # up to 64 rows where K stays whole, over a deep K
    (33, 7168, 16384, (64, 64, 1, 8)),
    (64, 2048, 7168, (64, 128, 4, 7)),   # K split: 128 columns in clusters of 4 filling half the SMs
    (48, 1024, 8192, (64, 128, 8, 7)),
    (64, 4096, 4096, None),              # 32 clusters of 128 columns: no split of 4 or 8 fits half the SMs
    (64, 7168, 2048, None),              # K under 4096
    (65, 10240, 8192, None),
])
def test_decode_layout_fills_the_sms(m, n, k, layout):
    assert scaled_choice.decode_layout(m, n, k, 132) == layout
    if layout is None:
        return
    v = scaled_choice._decode_entry("e4m3", "e4m3", "block", "float32", layout)  # the widest stage fits
    assert v.params["WARPS"] == scaled_choice.decode_warps(layout[1]) and v.family is DECODE


@pytest.mark.parametrize("rows,bn,cs,blocks,stages", [(16, 64, 1, 1, 8), (16, 224, 1, 1, 7), (32, 256, 1, 1, 6),
                                                      (16, 256, 8, 1, 6), (16, 64, 1, 4, 5), (16, 256, 1, 4, 2)])
def test_decode_stages_share_the_sm(rows, bn, cs, blocks, stages):
    """The deepest ring up to 8 with which `blocks` blocks fit an SM's 228 KB together (at least 2)."""
    assert scaled_choice.decode_stages(rows, bn, cs, blocks) == stages


@pytest.mark.parametrize("mma,bn,warps", [(1, 64, 4), (1, 128, 8), (1, 192, 12), (1, 256, 16), (0, 48, 3),
                                           (0, 64, 4), (0, 80, 5), (0, 128, 8), (0, 160, 5), (0, 224, 7), (0, 256, 8)])
def test_decode_warps_a_warpgroup_per_64_columns_or_a_warp_per_16_then_32(mma, bn, warps):
    assert scaled_choice.decode_warps(bn, mma) == warps
    make_variant(DECODE, "w", "bfloat16", {**BASE, "MMA": mma, "BN": bn, "WARPS": warps, "CS": 1, "STAGES": 4})


def test_default_takes_the_decode_kernel_up_to_32_rows_and_64_over_deep_k():
    for m, rows in ((1, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64)):
        v = scaled.variant_for("e4m3", "e4m3", "tensor", "bfloat16", m, 7168, 16384, 132)
        assert v.family is DECODE and v.params["ROWS"] == rows and v.params["MMA"] == 1, v.name
        assert launch_config(v, m, 7168, 16384, 132).grid[0] == 112
    for m, n, k, mode in ((65, 7168, 16384, "tensor"), (33, 7168, 2048, "tensor"), (64, 24576, 4095, "rowcol"),
                          (64, 7168, 16384, "block"), (48, 4096, 4096, "tensor")):
        assert scaled.variant_for("e4m3", "e4m3", mode, "bfloat16", m, n, k, 132).family.name == "wgmma_fp8"
    for m, n, k, mode in ((32, 7168, 2048, "block"), (64, 7168, 16384, "rowcol")):
        assert scaled.variant_for("e4m3", "e4m3", mode, "bfloat16", m, n, k, 132).family is DECODE
    v = scaled.variant_for("e4m3", "e4m3", "tensor", "bfloat16", 1, 4096, 4096, 132)
    assert v.name == "fp8gemv_decode_wgmma_n64_c2_stages8_e4m3_tensor_bf16"  # the catalogue's entry
    text = scaled_choice.explain("e4m3", "e4m3", "tensor", "bfloat16", 1, 4096, 4096, ("NVIDIA H200", 90))
    assert v.name in text and "decode kernel" in text and "128 blocks for 132 SMs" in text
    text = scaled_choice.explain("e4m3", "e4m3", "rowcol", "float32", 40, 10240, 8192, ("NVIDIA H200", 90))
    assert "at most 64 rows over a K of 4096 or more" in text and "fp8gemv_decode_wgmma_r64_" in text


@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e4m3", "e5m2")])
@pytest.mark.parametrize("mode", list(scaled.SCALING_IDS))
@pytest.mark.parametrize("out_dtype", scaled.OUT_DTYPES)
def test_every_call_gets_a_decode_variant(fa, fb, mode, out_dtype):
    v = scaled.variant_for(fa, fb, mode, out_dtype, 7, 3000, 1040, 132)
    assert v.family is DECODE and v.dtype == out_dtype and v.params["ROWS"] == 16
    assert (v.params["FORMAT_A"], v.params["FORMAT_B"]) == (fa == "e5m2", fb == "e5m2")
    assert v.params["SCALING"] == scaled.SCALING_IDS[mode]
    assert scaled.check_variant(v.name if v.name in catalogue() else v, fa, fb, [mode], out_dtype)[0] is v


def test_a_named_decode_variant_refuses_more_rows_before_launch():
    v = catalogue()["fp8gemv_decode_n64_c2_stages8_e4m3_tensor_bf16"]
    with pytest.raises(InputError, match="at most 16 rows"):
        launch_config(v, 17, 4096, 4096, 132)


@pytest.mark.parametrize("fa,fb,mode,out_dtype,m", [("e5m2", "e4m3", "block", "float16", 16),
                                                    ("e4m3", "e5m2", "rowcol", "float32", 3),
                                                    ("e4m3", "e5m2", "rowcol", "bfloat16", 64)])
def test_a_derived_variant_compiles_without_spills(fa, fb, mode, out_dtype, m):
    v = scaled.variant_for(fa, fb, mode, out_dtype, m, 10000, 4096, 132)
    assert v.family is DECODE and f".f32.{fb}.{fa}" in render(v)  # wgmma's A is B
    assert "0 bytes spill stores" in compile_variant(v, "sm_90a").log


@pytest.mark.parametrize("n,k", [(64, 2**31 - 128), (2**31 - 64, 128)])
def test_coordinates_past_32_bits_are_refused_before_any_map(n, k):
    v = catalogue()["fp8gemv_decode_n64_c2_stages8_e4m3_tensor_bf16"]
    with pytest.raises(InputError, match="below 2\\*\\*31"):
        DECODE.make_args(v, None, None, None, None, None, 1, n, k, k, k, n)

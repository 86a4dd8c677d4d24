"""The FP8 Hopper family on the CPU: rules and their static_asserts, shared memory, the rendered wgmma,
and GPU-free sm_90a compiles of variants the API derives (the catalogue's own are in test_compile)."""
import pytest

from cupy_gemm import scaled, scaled_choice, stream_k
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import ConfigError, DeviceError
from cupy_gemm.launch import launch_config, split_k_workspace
from cupy_gemm.registry import catalogue, family, make_variant
from cupy_gemm.render import render
from family_rules import check_rule, check_template_refuses, template_text

FP8 = family("wgmma_fp8")
NAMES = [n for n, v in catalogue().items() if v.family is FP8]
FLAGSHIP = "fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_tensor_bf16"
BASE = dict(catalogue()[FLAGSHIP].params)
TEMPLATE = template_text("wgmma_fp8.cu.j2")


def test_family_declares_hopper_and_scaled_abi():
    assert FP8.needs_sm90a and FP8.abi == "scaled" and FP8.persistent == 1 and FP8.make_args is not None
    assert set(FP8.dtypes) == {"bfloat16", "float16", "float32"}  # the output dtype
    assert FP8.threads(BASE) == 128 * (BASE["CONSUMERS"] + 1)


def test_catalogue_covers_every_scaling_and_output():
    params = [catalogue()[n].params for n in NAMES]
    assert {p["SCALING"] for p in params} == {0, 1, 2}
    assert {catalogue()[n].dtype for n in NAMES} == {"bfloat16", "float16", "float32"}
    assert {(p["BM"], p["BN"]) for p in params} >= {(128, 256), (128, 128)}
    assert any(p["FORMAT_B"] == 1 for p in params) and any(p["PROMOTE"] == 0 for p in params)


@pytest.mark.parametrize("params,param,words", [
    ({"BM": 64, "CONSUMERS": 2}, "BM", "a multiple of 64 * CONSUMERS"),
    ({"BN": 192, "INSTR_N": 128}, "BN", "a multiple of INSTR_N"),
    ({"PROMOTE": 0, "INSTR_N": 128}, "INSTR_N", "without PROMOTE"),
    ({"SCALING": 2, "PROMOTE": 0, "INSTR_N": 256}, "SCALING", "block scaling (SCALING = 2) needs PROMOTE = 1"),
    ({"INSTR_N": 256}, "BN", "at most 192 accumulator registers per consumer thread"),
    ({"BM": 192, "CONSUMERS": 3, "STAGES": 2}, "BN", "(128 with three consumers)"),  # 64 × (256 + 128) / 128
    ({"FORMAT_A": 1, "FORMAT_B": 1}, "FORMAT_B", "at most one e5m2 operand"),
    ({"CLUSTER": 2, "SPLIT_K": 2}, "SPLIT_K", "CLUSTER"),
    ({"SCALING": 2, "PROMOTE": 2}, "SCALING", "block scaling (SCALING = 2) needs PROMOTE = 1"),
    ({"PROMOTE": 2, "STAGES": 2}, "PROMOTE", "a consumer holds PROMOTE stages at once"),
    ({"STREAM_K": 1, "SPLIT_K": 2}, "SPLIT_K", "STREAM_K"),
])
def test_rules_name_the_parameter_and_the_template_repeats_them(params, param, words):
    check_rule(FP8, "bfloat16", {**BASE, **params}, param, words, TEMPLATE)


@pytest.mark.parametrize("params,param", [
    ({"STAGES": 5}, "smem"),             # 5 × 48 KB + staging > 227 KB
    ({"INSTR_N": 96}, "INSTR_N"),                  # not an instruction N the family offers
    ({"SCALING": 3}, "SCALING"),
    ({"FORMAT_A": 2}, "FORMAT_A"),
    ({"CONSUMERS": 4}, "CONSUMERS"),
    ({"SPLIT_K": 0}, "SPLIT_K"),                   # the count is fixed per variant: scaled_mm's default picks it
    ({"PROMOTE": 3}, "PROMOTE"),
])
def test_parameter_limits(params, param):
    with pytest.raises(ConfigError) as e:
        make_variant(FP8, "bad", "bfloat16", {**BASE, **params})
    assert e.value.param == param


@pytest.mark.parametrize("params,words", [
    ({"FORMAT_A": 1, "FORMAT_B": 1}, "at most one e5m2 operand"),
    ({"SCALING": 2, "PROMOTE": 0, "INSTR_N": 256}, "block scaling (SCALING = 2) needs PROMOTE = 1"),
    ({"SCALING": 2, "PROMOTE": 2}, "block scaling (SCALING = 2) needs PROMOTE = 1"),
    ({"PROMOTE": 2, "STAGES": 2}, "a consumer holds PROMOTE stages at once"),
])
def test_template_refuses_what_the_rules_refuse(params, words):
    check_template_refuses(FP8, "bfloat16", "float32", {**BASE, **params}, words, arch="sm_90a")


def test_smem_accounts_for_ring_staging_and_alignment():
    stage = (128 + 256) * 128
    # the barriers live in the 1024 bytes kept for aligning the tiles
    assert FP8.smem_bytes(BASE, "bfloat16", "float32") == 4 * stage + 2 * 2 * 64 * 128 + 1024
    assert FP8.smem_bytes(BASE, "float32", "float32") == FP8.smem_bytes(BASE, "bfloat16", "float32")
    # block scales: each stage carries its K-block's 128 row scales of A
    block = FP8.smem_bytes({**BASE, "SCALING": 2}, "bfloat16", "float32")
    assert block == FP8.smem_bytes(BASE, "bfloat16", "float32") + 4 * 128 * 4 == 227 * 1024


def test_shared_memory_limit_agrees_with_the_template():
    """The 128×256 block-scaled tile fills the opt-in limit exactly with 4 stages (the catalogue's entry,
    compiled in test_compile); 6 stages of the 128×128 one exceed it by 1024 bytes, in the family's rules
    and in the template's static_assert alike, where 5 fit."""
    make_variant(FP8, "block4", "bfloat16", {**BASE, "SCALING": 2})
    make_variant(FP8, "block5", "bfloat16", {**BASE, "BN": 128, "STAGES": 5, "SCALING": 2})
    six = {**BASE, "BN": 128, "STAGES": 6, "SCALING": 2}
    with pytest.raises(ConfigError):
        make_variant(FP8, "block6", "bfloat16", six)
    check_template_refuses(FP8, "bfloat16", "float32", six, "at most 232448 bytes of shared memory", arch="sm_90a")


def test_block_scales_take_tiles_that_straddle_scale_blocks():
    # 192-column tiles start on multiples of 64, so some straddle B's 128-column scale blocks: accepted
    # (each 64-column group picks its block at run time; tests/gpu/test_fp8_gpu.py checks the numbers)
    v = make_variant(FP8, "block192", "bfloat16", {**BASE, "BN": 192, "INSTR_N": 192, "SCALING": 2})
    assert v.params["BN"] == 192 and "tile.col0 % 128 / 64" in render(v)


@pytest.mark.parametrize("name", NAMES)
def test_renders_the_fp8_instruction(name):
    v = catalogue()[name]
    p = v.params
    src = render(v)
    fa, fb = ("e4m3", "e5m2")[p["FORMAT_A"]], ("e4m3", "e5m2")[p["FORMAT_B"]]
    assert f"wgmma.mma_async.sync.aligned.m64n{p['INSTR_N']}k32.f32.{fa}.{fb}" in src
    assert '"},\\n %' in src and "p, 1, 1;\\n}" in src  # no transpose immediates: both operands K-major
    assert "cp.async.bulk.tensor.2d" in src and "cp.async.bulk.tensor.2d.global.shared::cta" in src
    assert "__launch_bounds__(THREADS, 1)" in src and "{{" not in src and "{%" not in src


def test_default_variants_for_every_call_validate():
    """variant=None: every format pair, scaling and output gets a valid variant, from the catalogue
    where one matches."""
    for fa, fb in (("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e4m3", "e5m2")):
        for mode in scaled.SCALING_IDS:
            for out in scaled.OUT_DTYPES:
                v = scaled.variant_for(fa, fb, mode, out)
                assert v.family is FP8 and v.dtype == out and v.params["PROMOTE"] == 1
                assert (v.params["FORMAT_A"], v.params["FORMAT_B"]) == (fa == "e5m2", fb == "e5m2")
                assert v.params["SCALING"] == scaled.SCALING_IDS[mode]
                for tile in scaled_choice.TILE_COSTS["tensor"]:  # every tile a shape may pick, derived or not
                    t = scaled_choice._entry_with_tile(fa, fb, mode, out, tile)
                    assert (t.params["BM"], t.params["BN"], t.params["CLUSTER"]) == (*tile, 1) and t.dtype == out
                    assert t.params["SCALING"] == v.params["SCALING"] and t.params["PROMOTE"] == 1
                    assert (t.params["FORMAT_A"], t.params["FORMAT_B"]) == (v.params["FORMAT_A"], v.params["FORMAT_B"])
    assert scaled.variant_for("e4m3", "e4m3", "tensor", "bfloat16").name == FLAGSHIP
    assert scaled.variant_for("e4m3", "e4m3", "block", "bfloat16").name == \
        "fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_block_bf16"


@pytest.mark.parametrize("tile", [None, (128, 192), (128, 128)])
def test_a_derived_variant_compiles_without_spills(tile):
    v = scaled.variant_for("e5m2", "e4m3", "block", "float16") if tile is None else \
        scaled_choice._entry_with_tile("e5m2", "e4m3", "block", "float32", tile)
    assert ".e5m2.e4m3" in render(v)
    res = compile_variant(v, "sm_90a").resources
    assert (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), res


@pytest.mark.parametrize("partition", [1, 2])
def test_stream_k_walks_its_own_units_and_compiles_without_spills(partition):
    """STREAM_K (with SPLIT_K = 0): the launcher's partition of 128-deep K-blocks (cupy_gemm/stream_k.py) sets
    the grid, the most blocks a tile has and a workspace for the shared tiles alone."""
    base = scaled_choice._entry_with_tile("e4m3", "e4m3", "block", "bfloat16", (128, 192))
    v = make_variant(FP8, "sk", "bfloat16", {**base.params, "SPLIT_K": 0, "STREAM_K": partition})
    assert '{% include "common/stream_k.cuh" %}' in TEMPLATE and "stream_k_plan<STREAM_K>" in render(v)
    m, n, k = 1500, 3000, 128 * 9 + 16
    tiles = -(-m // 128) * -(-n // 192)
    blocks, splits, shared = stream_k.launch(tiles, 10, 132, partition)
    cfg = launch_config(v, m, n, k, 132)
    assert (cfg.grid[0], cfg.splits, cfg.split_tiles) == (blocks, splits, shared) and splits > 1
    assert cfg.workspace == split_k_workspace(shared, splits, 128 * 192)
    res = compile_variant(v, "sm_90a").resources
    assert (res.local, res.spill_stores, res.spill_loads, res.static_smem) == (0, 0, 0, 0), res


@pytest.mark.parametrize("mode,tile,splits", [("tensor", (128, 128), 4), ("block", (64, 128), 2),
                                             ("rowcol", (64, 64), 3)])
def test_split_k_takes_its_arguments_and_compiles_without_spills(mode, tile, splits):
    """SPLIT_K > 1 compiles the split steps in: `int splits, void* workspace` last, the launcher's workspace
    sized for the tiles' fp32 partials; SPLIT_K = 1 keeps the plain kernel's arguments."""
    base = scaled_choice._entry_with_tile("e4m3", "e4m3", mode, "bfloat16", tile)
    v = scaled_choice._entry_with_split("e4m3", "e4m3", mode, "bfloat16", tile, splits)
    assert v.params["SPLIT_K"] == splits and FP8.takes_split_k_args(v.params) and not FP8.takes_split_k_args(base.params)
    src = render(v)
    assert "int K, int splits,\n            void* __restrict__ workspace)" in src and "int K) {" in render(base)
    cfg = launch_config(v, 300, 2000, 8192, 132)
    tiles = -(-300 // tile[0]) * -(-2000 // tile[1])
    assert cfg.splits == splits and cfg.grid == (min(tiles * splits, 132), 1, 1)
    assert cfg.workspace == split_k_workspace(tiles, splits, tile[0] * tile[1])
    res = compile_variant(v, "sm_90a").resources
    assert (res.local, res.spill_stores, res.spill_loads, res.static_smem) == (0, 0, 0, 0), res


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_refuses_targets_without_wgmma(arch):
    with pytest.raises(DeviceError, match="sm_90a|sm_90 or newer"):
        compile_variant(catalogue()[FLAGSHIP], arch)


def test_a_lands_in_copies_of_64_rows_and_none_wholly_below_m(monkeypatch):
    """As in the 16-bit template: A's map moves A_COPY_ROWS rows a copy, and the producer leaves out the
    copies of a tile wholly below M and expects that many fewer bytes (those rows of C are never stored)."""
    from cupy_gemm import tma
    from cupy_gemm.families import wgmma, wgmma_fp8
    src = render(catalogue()[FLAGSHIP])
    assert f"constexpr int A_COPY_ROWS = {wgmma.A_COPY_ROWS};" in src
    loop = src[src.index("const int a_rows = "):src.index("tma_load_2d(b_smem")]
    assert "mbar_arrive_expect_tx(full(stage), STAGE_BYTES - (BM - a_rows) * BK + SA_STAGE_BYTES);" in loop
    assert "for (int r = 0; r < a_rows; r += A_COPY_ROWS)" in loop and "tile.row0 + r" in loop
    seen = []
    monkeypatch.setattr(tma, "tensor_map_2d", lambda ptr, dtype, **kw: seen.append(kw) or b"\0" * 128)
    Fake = type("Fake", (), {"data": type("D", (), {"ptr": 0})()})
    for name in (FLAGSHIP, "fp8gemm_wgmma_m64n128k32_tile192x128_e4m3_tensor_bf16_ws3"):
        seen.clear()
        wgmma_fp8.make_args(catalogue()[name], Fake, Fake, Fake, Fake, Fake, 300, 1000, 4096, 4096, 4096, 1000)
        assert (seen[0]["rows"], seen[0]["box_rows"], seen[0]["box_cols"]) == (300, wgmma.A_COPY_ROWS, 128), name

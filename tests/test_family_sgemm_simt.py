"""The fp32 CUDA-core register-tile family without a GPU: its rules (mirrored by the template), NVRTC
compiles with no spills, and the instructions each flag is there to produce."""
import re

import pytest

from cupy_gemm import candidates, dispatch, placement_rules, registry
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import ConfigError
from cupy_gemm.registry import make_variant
from cupy_gemm.render import render
from family_rules import b_placement, check_rule, check_template_refuses, template_text

FAMILY = registry.family("sgemm_simt")
VARIANTS = {n: v for n, v in registry.catalogue().items() if v.family is FAMILY}
# the template's text with adjacent string literals joined, as the compiler joins them
TEMPLATE = template_text("sgemm_simt.cu.j2")

SEED = ["sgemm_t_8x8_sliced_k_f32x4", "sgemm_t_8x8_sliced_k_f32x4_bcf", "sgemm_t_8x8_sliced_k_f32x4_bcf_offset",
        "sgemm_t_8x8_sliced_k_f32x4_bcf_dbuf", "sgemm_t_8x8_sliced_k_f32x4_bcf_dbuf_offset",
        "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf", "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf_async",
        "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf", "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_async",
        "sgemm_t_8x16_sliced_k16_f32x4_bcf_dbuf", "sgemm_t_8x16_sliced_k16_f32x4_bcf_dbuf_async"]


def test_the_seed_kernels_are_all_there():
    assert not [n for n in SEED if n not in VARIANTS]
    assert len(VARIANTS) > len(SEED)  # and shapes tuned beyond the seed


@pytest.mark.parametrize("name,tile,threads,bk", [
    ("sgemm_t_8x8_sliced_k_f32x4", (128, 128), 256, 8),
    ("sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf", (128, 128), 256, 16),
    ("sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf", (64, 64), 128, 16),
    ("sgemm_t_8x16_sliced_k16_f32x4_bcf_dbuf", (128, 256), 256, 16),
])
def test_seed_shapes(name, tile, threads, bk):
    v = VARIANTS[name]
    assert FAMILY.tile(v.params) == tile and FAMILY.threads(v.params) == threads and v.params["BK"] == bk


def test_names_match_flags():
    for full_name, v in VARIANTS.items():
        p = v.params
        assert (p["STREAM_K"] == 1) == full_name.endswith("_streamk") and p["STREAM_K"] in (0, 1), full_name
        name = full_name.removesuffix("_streamk")
        assert (p["SPLIT_K"] != 1 and not p["STREAM_K"]) == name.endswith("_splitk"), full_name
        name = name.removesuffix("_splitk")
        assert (p["FEW_ROWS"] == 32) == name.endswith("_rows32") and p["FEW_ROWS"] in (0, 32), full_name
        name = name.removesuffix("_rows32")
        assert p["UNALIGNED"] == name.endswith("_unaligned"), full_name
        name = name.removesuffix("_unaligned")
        assert p["A_TRANSPOSED"] == ("_bcf" in name), name
        assert p["DBUF"] == ("_dbuf" in name), name
        assert p["ASYNC"] == name.endswith(("_async", "_async_swizzle")), name
        assert (p["PAD"] == 4) == ("_offset" in name), name
        assert (p["BLOCK_SWIZZLE"] > 0) == name.endswith("_swizzle"), name
        assert p["FMA_ORDER"] == (2 if "_colsnake" in name else 1 if "_snake" in name else 0), name
        tm, tn = re.search(r"_t_(\d+)x(\d+)_", name).groups()
        assert (p["TM"], p["TN"]) == (int(tm), int(tn)), name


def test_fp32_only_with_alignment_and_arch_from_the_flags():
    assert set(FAMILY.dtypes) == {"float32"} and FAMILY.layout == "row"
    for v in VARIANTS.values():
        assert v.acc == "float32"
        # float4 loads along K and N, float4 stores along N; or any alignment, checked group by group
        assert FAMILY.align(v.params, "float32") == (1 if v.params["UNALIGNED"] else 4)
        assert FAMILY.min_cc(v.params, "float32", "float32") == (80 if v.params["ASYNC"] else 70)


def test_smem_follows_the_layout():
    base = dict(BM=128, BN=128, BK=8, TM=8, TN=8, PAD=0, A_TRANSPOSED=1, DBUF=0, ASYNC=0)
    assert FAMILY.smem_bytes(base, "float32", "float32") == (8 * 128 + 8 * 128) * 4
    assert FAMILY.smem_bytes(dict(base, PAD=4, DBUF=1), "float32", "float32") == 2 * (8 * 132 + 8 * 132) * 4
    assert FAMILY.smem_bytes(dict(base, A_TRANSPOSED=0), "float32", "float32") == (128 * 8 + 8 * 128) * 4
    # the template's static_assert compares the same number with its own layout on every compile


# ---- constraints: each raises ConfigError naming the parameter, and the template says the same ----------
BASE = dict(BM=128, BN=128, BK=8, TM=8, TN=8, A_TRANSPOSED=1, DBUF=1)
RULES = [
    (dict(BASE, BM=96, TM=6), "TM", "(a thread's rows are read as float4 fragments)"),
    (dict(BASE, BN=96, TN=6), "TN", "(a thread's columns are read as float4 fragments)"),
    (dict(BASE, BN=256, TM=16, TN=16), "TN", "at most 128 accumulators per thread (255 registers)"),
    (dict(BASE, BM=80), "BM", "(a warp is 4 threads along M, each owning TM rows)"),
    (dict(BASE, BN=96), "BN", "(a warp is 8 threads along N, each owning TN columns)"),
    (dict(BASE, BK=6), "BK", "(A is loaded as float4 along K)"),
    (dict(BASE, PAD=2), "PAD", "(shared rows stay 16-byte aligned for float4)"),
    (dict(BASE, BM=64, BN=256, BK=4), "BK", "the A tile's BM*BK/4 float4 loads a multiple of"),
    (dict(BASE, BM=256, BN=64, BK=4), "BK", "the B tile's BK*BN/4 float4 loads a multiple of"),
    (dict(BASE, BN=256, BK=16, MIN_BLOCKS=8), "MIN_BLOCKS", "an SM holds 2048 threads"),
    (dict(BASE, DBUF=0, ASYNC=1), "ASYNC", "(the copy of the next slice overlaps the current one)"),
]


@pytest.mark.parametrize("params,param,words", RULES, ids=[f"{r[1]}-{i}" for i, r in enumerate(RULES)])
def test_constraint_errors(params, param, words):
    check_rule(FAMILY, "float32", params, param, words, TEMPLATE)


@pytest.mark.parametrize("params,param,words", [RULES[0], RULES[4], RULES[10]], ids=["TM", "BN", "ASYNC"])
def test_template_refuses_what_the_rules_refuse(params, param, words, tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    check_template_refuses(FAMILY, "float32", "float32", params, words)


def test_stream_k_walks_its_units_on_the_blocks_the_sms_hold(tmp_path, monkeypatch):
    """STREAM_K: as many blocks as the SMs hold (ptxas's registers decide: two 128-thread blocks of the 16×8
    tile an SM), whole tiles first, then equal shares of the last one to two waves' K slices; splits = the
    most blocks sharing a tile, and the workspace holds the shared tiles' counters and partials alone."""
    from cupy_gemm import launch, stream_k
    v = VARIANTS["sgemm_t_16x8_sliced_k8_f32x4_bcf_dbuf_offset_snake_swizzle_streamk"]
    assert FAMILY.stream_k(v.params) and FAMILY.takes_split_k_args(v.params)
    cfg = launch.launch_config(v, 4096, 4096, 4096, 132, registers=254)  # 1024 tiles: 528 whole, 496 shared
    assert (cfg.tiles, cfg.grid, cfg.split_tiles) == (1024, (264, 1, 1), 496)
    assert cfg.splits == stream_k.most_splits(1024, 512, 264, 1) > 1
    assert cfg.workspace == launch.split_k_workspace(496, cfg.splits, 128 * 128)
    assert launch.launch_config(v, 4096, 4096, 4096, 132, registers=128).grid == (528, 1, 1)  # four an SM
    assert launch.launch_config(v, 1, 1, 1, 132, registers=254).grid == (1, 1, 1)  # one K slice: one block
    source = render(v)
    assert "constexpr int STREAM_K = 1;" in source and "stream_k_unit(sk, i)" in source
    with pytest.raises(ConfigError, match="0 with STREAM_K = 1"):
        make_variant(FAMILY, "bad", "float32", {**v.params, "SPLIT_K": 2})
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    check_template_refuses(FAMILY, "float32", "float32", {**v.params, "SPLIT_K": 2}, "STREAM_K needs SPLIT_K = 0")


def test_flags_are_checked_like_every_parameter():
    for flag in ("A_TRANSPOSED", "DBUF", "ASYNC", "PAIRS", "UNALIGNED"):
        with pytest.raises(ConfigError) as info:
            make_variant(FAMILY, "bad", "float32", dict(BASE, **{flag: 2}))
        assert info.value.param == flag
    with pytest.raises(ConfigError) as info:
        make_variant(FAMILY, "bad", "float16", BASE)
    assert info.value.param == "dtype"


# ---- every variant compiles GPU-free, without spilling -------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_register_cap_for_two_blocks(name, arch):
    v = VARIANTS[name]
    res = compile_variant(v, arch).resources
    if v.params["MIN_BLOCKS"] == 2:  # two blocks an SM: 128 registers a thread of 256, 255 of 128
        assert res.registers * v.family.threads(v.params) * 2 <= 65536


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_flags_show_in_the_ptx(name):
    v = VARIANTS[name]
    ptx = compile_variant(v, "compute_80").image.decode()
    assert ("cp.async" in ptx) == bool(v.params["ASYNC"])
    assert "st.global.v4" in ptx  # the vectorised epilogue
    if v.params["UNALIGNED"]:  # float4 where a group is aligned and inside, single floats elsewhere
        assert "st.global.f32" in ptx and ("cp.async.ca.shared.global" in ptx if v.params["ASYNC"] else
                                           "ld.global.nc.v4.u32" in ptx and "ld.global.nc.u32" in ptx)
    elif not v.params["ASYNC"]:
        assert "ld.global.nc.v4.f32" in ptx  # float4 loads of A and B
    if v.params["A_TRANSPOSED"]:  # every fragment read is a float4: none is scalar
        assert "ld.shared.v4.f32" in ptx and "ld.shared.f32" not in ptx


# ---- the warp's lane layout, read from the template itself --------------------------------------------
def _lane_layout(pairs: int):
    """(lane_x, lane_y) of each of the 32 lanes, evaluating the template's own expressions (C's and
    Python's precedence agree on >>, & and |)."""
    m = re.search(r"const int lane_x = PAIRS \? (.+?) : (.+?);.*\n\s*const int lane_y = PAIRS \? (.+?) : (.+?);",
                  TEMPLATE)
    x_expr, y_expr = (m.group(1), m.group(3)) if pairs else (m.group(2), m.group(4))
    py = lambda e: e.replace("lane / 8", "lane // 8")
    return [(eval(py(x_expr), {"lane": lane}), eval(py(y_expr), {"lane": lane})) for lane in range(32)]


@pytest.mark.parametrize("pairs", [0, 1])
def test_lanes_tile_the_warp_8_by_4(pairs):
    assert sorted(_lane_layout(pairs)) == [(x, y) for x in range(8) for y in range(4)]


def test_paired_lanes_share_fragment_addresses():
    """A's fragment address depends on lane_y only, B's on lane_x only: with PAIRS, lanes i and i^1 read
    the same A float4 and lanes i and i^2 the same B float4 (two shared-memory wavefronts, not four)."""
    lanes = _lane_layout(1)
    assert all(lanes[i][1] == lanes[i ^ 1][1] for i in range(32))
    assert all(lanes[i][0] == lanes[i ^ 2][0] for i in range(32))
    plain = _lane_layout(0)  # 8 consecutive lanes along N: no pairing for B
    assert not all(plain[i][0] == plain[i ^ 1][0] for i in range(32))
    assert not all(plain[i][0] == plain[i ^ 2][0] for i in range(32))


# ---- sgemm_simt_kmajor: B column-major (x @ W.T), read in place ---------------------------------------
KMAJOR = registry.family("sgemm_simt_kmajor")
KMAJOR_VARIANTS = {n: v for n, v in registry.catalogue().items() if v.family is KMAJOR}


def test_every_kmajor_entry_twins_an_entry_of_the_same_parameters():
    assert FAMILY.b_layout is None and KMAJOR.b_layout == "col" and KMAJOR.template == FAMILY.template
    for name, v in KMAJOR_VARIANTS.items():
        row = VARIANTS[name.replace("sgemm_t_kmajor_", "sgemm_t_")]
        assert (v.params, v.dtype, v.acc) == (row.params, row.dtype, row.acc), name
    wanted = {n for r, lists in candidates.candidates().items() for key in ("float32", "tf32")
              for n in lists[key] if n.startswith("sgemm_t_")}
    assert {n.replace("sgemm_t_", "sgemm_t_kmajor_") for n in wanted} <= set(KMAJOR_VARIANTS)


@pytest.mark.parametrize("name", sorted(KMAJOR_VARIANTS))
def test_kmajor_loads_b_along_k(name):
    v = KMAJOR_VARIANTS[name]
    src = render(v)
    assert "constexpr bool B_KMAJOR = 1;" in src and "const long long b_step = BK;" in src
    assert "constexpr bool B_KMAJOR = 0;" in render(VARIANTS[name.replace("_kmajor", "")])
    ptx = compile_variant(v, "compute_80").image.decode()
    if not v.params["ASYNC"] and not v.params["UNALIGNED"]:
        assert "ld.global.nc.v4.f32" in ptx  # B's float4s along K, as A's
    # B's four k land in four rows of Bs: scalar shared stores (A_TRANSPOSED's are too), fragments still float4
    assert "ld.shared.v4.f32" in ptx and "ld.shared.f32" not in ptx


TWINNED = sorted(n for n in VARIANTS if n.replace("sgemm_t_", "sgemm_t_kmajor_") in KMAJOR_VARIANTS)


@pytest.mark.parametrize("name", TWINNED)
def test_a_column_major_b_goes_to_the_sgemm_twin(name):
    """x @ W.T in exact fp32: the entry would copy W row-major on every call; its twin reads it in place."""
    decision = candidates.Decision(name, "a table said so")
    gpu = dispatch.Gpu("unknown GPU", 90)
    shape = (17, 1000, 33) if VARIANTS[name].max_rows() else (512, 4096, 4096)
    col = b_placement(*shape, "col")
    chosen = placement_rules.b_layout(gpu, "float32", decision, col, ())
    assert chosen.variant == name.replace("sgemm_t_", "sgemm_t_kmajor_") and "B-layout rule" in chosen.reason
    assert col.for_variant(VARIANTS[name]).copies and not col.for_variant(KMAJOR_VARIANTS[chosen.variant]).copies
    assert placement_rules.b_layout(gpu, "float32", decision, b_placement(*shape, "row"), ()) is decision


def test_exact_fp32_x_at_w_t_copies_nothing_on_the_h100():
    """The whole choice, table included: from 64 rows up, exact fp32 x @ W.T reads every operand in place."""
    h100 = dispatch.Gpu("NVIDIA H100 80GB HBM3", 90, 132)
    for m, n, k in ((64, 14336, 4096), (128, 4096, 4096), (512, 6144, 4096), (2048, 4096, 4096), (4096, 4096, 4096),
                    (128, 576, 7168), (5000, 3000, 1000)):
        placement = b_placement(m, n, k, "col")
        v = registry.catalogue()[dispatch.choose(h100, "float32", m, n, k, placement=placement).variant]
        assert v.family is KMAJOR and not placement.for_variant(v).copies, (m, n, k, v.name)

"""CPU tests of the skinny families (decode-style products, M <= ROWS): rules mirrored by the template,
the catalogue, the split policy and the problems a variant refuses before anything launches.
Every entry's NVRTC compile for sm_80 and sm_90 without spills is tests/test_compile.py's."""
import pytest

import cupy_gemm
from cupy_gemm import launch, operands
from cupy_gemm.errors import ConfigError, InputError
from cupy_gemm.registry import catalogue, family, make_variant
from family_rules import check_rule, check_template_refuses, template_text

TEMPLATE = template_text("skinny.cu.j2")
NAMES = [n for n, v in catalogue().items() if v.family.name in ("skinny", "skinny_kmajor")]
ROWS_BASE = dict(ROWS=8, BN=256, VEC=8, WARPS=8, KU=4, BK=256)
KMAJOR_BASE = dict(ROWS=8, BN=8, NT=4, VEC=8, WARPS=8, KU=2, BK=512)


def test_catalogue_covers_every_dtype_rows_and_layout():
    cat = catalogue()
    got = {(cat[n].family.name, cat[n].dtype, cat[n].params["ROWS"]) for n in NAMES}
    assert got == {(f, d, r) for f in ("skinny", "skinny_kmajor") for d in ("float16", "bfloat16", "float32")
                   for r in (1, 2, 4, 8, 16)}
    assert all(cat[n].notes and cat[n].acc == "float32" for n in NAMES)
    # 16-byte loads of B in every entry
    assert all(cat[n].params["VEC"] * (4 if cat[n].dtype == "float32" else 2) == 16 for n in NAMES)


@pytest.mark.parametrize("fam, dtype, params, param, words", [
    ("skinny", "float32", dict(ROWS_BASE, VEC=8), "VEC", "VEC elements fit one 16-byte load"),
    ("skinny", "float16", dict(ROWS_BASE, BK=260, VEC=8), "BK", "BK must be a multiple of VEC"),
    ("skinny", "float16", dict(ROWS_BASE, BN=258, VEC=4), "BN", "BN must be a multiple of VEC"),
    ("skinny", "float16", dict(ROWS_BASE, BN=384), "BN",
     "BN / VEC must divide 32 or be a multiple of 32, and divide the threads"),
    ("skinny", "float16", dict(ROWS_BASE, BK=48, KU=4), "BK", "BK must be a multiple of KU times the k-groups"),
    ("skinny", "float16", dict(ROWS_BASE, VEC=2, BN=64, KU=4), "KU",
     "A's run of KU elements must be whole aligned vectors: min(KU, 16 bytes) must divide VEC"),
    ("skinny_kmajor", "float16", dict(KMAJOR_BASE, BN=10), "BN", "BN must be a multiple of NT"),
    ("skinny_kmajor", "float16", dict(KMAJOR_BASE, BN=12), "BN", "BN / NT must divide the warps"),
    ("skinny_kmajor", "float32", dict(KMAJOR_BASE, VEC=4, NT=8, BN=16, MMA=1), "MMA",
     "MMA=1 needs 16-bit inputs, VEC=8 and ROWS of 8 or 16"),
    ("skinny", "float16", dict(ROWS_BASE, ROWS=4, BN=128, MMA=1), "MMA",
     "MMA=1 needs 16-bit inputs, VEC=8 and ROWS of 8 or 16"),
    ("skinny_kmajor", "float16", dict(KMAJOR_BASE, MMA=1), "NT", "MMA=1 needs NT a multiple of 8"),
    ("skinny", "float16", dict(ROWS_BASE, VEC=4, BN=128, UNALIGNED=1), "UNALIGNED",
     "UNALIGNED=1 needs 16-byte vectors (VEC = 16 / element size"),
    ("skinny", "float16", dict(ROWS_BASE, BN=96, MMA=1), "BN",
     "MMA=1 needs BN a multiple of 64 (a warp's columns) and BN / 64 dividing the warps"),
])
def test_rules_match_static_asserts(fam, dtype, params, param, words):
    check_rule(family(fam), dtype, params, param, words, TEMPLATE)


@pytest.mark.parametrize("fam, params, words", [
    ("skinny", dict(ROWS_BASE, BK=48, KU=4), "BK must be a multiple of KU times the k-groups"),
    ("skinny_kmajor", dict(KMAJOR_BASE, BN=12), "BN / NT must divide the warps"),
    ("skinny_kmajor", dict(KMAJOR_BASE, MMA=1), "MMA=1 needs NT a multiple of 8"),
    ("skinny", dict(ROWS_BASE, BN=192, MMA=1), "BN / 64 dividing the warps"),
])
def test_template_refuses_what_the_rules_refuse(fam, params, words):
    check_template_refuses(family(fam), "float16", "float32", params, words)


def test_tensor_core_entries_need_sm80():
    cat = catalogue()
    mma = [n for n in NAMES if cat[n].params.get("MMA")]
    assert {(cat[n].family.name, cat[n].dtype, cat[n].params["ROWS"]) for n in mma} == {
        (f, d, r) for f in ("skinny", "skinny_kmajor") for d in ("float16", "bfloat16") for r in (8, 16)}
    assert all(cat[n].family.min_cc(cat[n].params, cat[n].dtype, cat[n].acc) == 80 for n in mma)


def test_rows_is_one_of_the_register_array_sizes():
    with pytest.raises(ConfigError, match=r"one of \[1, 2, 4, 8, 16\]"):
        make_variant(family("skinny"), "bad", "float16", dict(ROWS_BASE, ROWS=32))


@pytest.mark.parametrize("m, n, swap", [(1, 4096, False), (16, 17, False), (4096, 1, True), (17, 16, True)])
def test_orientation_puts_the_small_side_in_m(m, n, swap):
    assert operands.swap_for_rows(m, n, 16) is swap
    assert operands.swap_for_rows(m, n, None) is False


@pytest.mark.parametrize("name", ["hgemv_skinny_r8", "sgemv_skinny_kmajor_r1"])
def test_too_many_rows_and_columns_raise_before_launch(name):
    v = catalogue()[name]
    rows = v.params["ROWS"]
    with pytest.raises(InputError, match=f"at most {rows} rows or columns"):
        operands.swap_for_rows(rows + 1, rows + 1, rows, where=name)
    with pytest.raises(InputError, match=f"at most {rows} rows of C"):
        launch.launch_config(v, rows + 1, 4096, 4096)


def test_split_policy_fills_the_gpu_several_times():
    r1 = catalogue()["hgemv_skinny_r1"]  # the policy, on fixed tiles: 256 columns, K slices of 128
    v = make_variant(r1.family, "policy", "float16", {**r1.params, "BN": 256, "WARPS": 8, "KU": 8, "BK": 128})
    cfg = launch.launch_config(v, 1, 4096, 4096, sm_count=132)  # 16 column tiles of 256
    assert cfg.tiles == 16 and cfg.grid == (16, 32, 1)  # 4 x 132 blocks wanted; 32 splits is the most
    assert cfg.workspace >= 32 * 16 * 256 * 4
    wide = launch.launch_config(v, 1, 14336, 4096, sm_count=132)  # 56 tiles: 4 x 132 / 56 = 9 splits
    assert wide.grid == (56, 9, 1)
    assert launch.launch_config(v, 1, 4096, 100, sm_count=132).splits == 1  # less than one K block
    forced = make_variant(v.family, "forced", "float16", {**v.params, "SPLIT_K": 7})
    assert launch.launch_config(forced, 1, 4096, 4096).splits == 7
    assert launch.launch_config(forced, 1, 4096, 300).splits == 3  # never more splits than K blocks


def test_workspaces_with_different_counter_regions_are_apart():
    """Partials start where the counters end: a kernel with more tiles must not find another's partials
    on its counters."""
    assert launch.split_k_counter_bytes(7) == 256 and launch.split_k_counter_bytes(512) == 512 * 36
    assert launch.split_k_workspace(512, 2, 64) == 512 * 36 + 2 * 512 * 64 * 4


def test_kmajor_tile_and_smem():
    v = catalogue()["hgemv_skinny_kmajor_r16"]
    assert v.family.b_layout == "col" and v.family.tile(v.params) == (16, v.params["BN"])
    assert v.family.smem_bytes(v.params, "float16", "float32") == 4 * 16 * v.params["BN"]
    rows = catalogue()["hgemv_skinny_r16_mma"]  # A comes through L1: shared memory holds the tile only
    assert rows.family.smem_bytes(rows.params, "float16", "float32") == 4 * 16 * rows.params["BN"]


def test_render_states_the_layout():
    assert "constexpr bool B_KMAJOR = 1;" in cupy_gemm.render("hgemv_skinny_kmajor_r4")
    assert "constexpr bool B_KMAJOR = 0;" in cupy_gemm.render("hgemv_skinny_r4")

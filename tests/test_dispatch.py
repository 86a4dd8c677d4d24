"""Choosing the default variant per GPU and shape, without a GPU: tables, fall-through, every heuristic rule,
the explanation and the `explain` command."""
import dataclasses
from pathlib import Path

import pytest

from cupy_gemm import api, big_tiles, candidates, cli, dispatch, launch, registry, selection_tables
from cupy_gemm.dispatch import Gpu
from cupy_gemm.errors import CatalogueError, DTypeError, InputError
from fake_gpu import gpu  # noqa: F401  (the fixture)
from family_rules import b_placement

H100 = Gpu("NVIDIA H100 80GB HBM3", 90, 132)
A100 = Gpu("NVIDIA A100-SXM4-80GB", 80, 108)
WGMMA = "hgemm_wgmma_m64n128k16_tile128x128_stages3_ws1"
MMA = "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32"

TABLE = f"""
[generated]
command = "cupy-gemm bench --shapes llm"
date = "2026-11-23"
device = "NVIDIA H100 80GB HBM3"
cupy = "14.2.0"
nvrtc = "13.0"

[gpu]
name = "NVIDIA  H100 80GB HBM3"
cc = 90
sm_count = 132

[[entry]]
dtype = "float16"
m = 16
n = 4096
k = 4096
variant = "{WGMMA}"

[[entry]]
dtype = "float16"
m = 4096
n = 4096
k = 4096
variant = "{MMA}"
median_ms = 0.2

[[entry]]
dtype = "float16"
m = 128
n = 128
k = 128
variant = "no_such_kernel"

[[entry]]
dtype = "float16"
m = 128
n = 128
k = 160
variant = "hgemm_mma_m16n8k16_mma2x4_warp4x4_stages3"
"""


@pytest.fixture
def table(monkeypatch):
    parsed = selection_tables.parse_table(TABLE, "h100.toml")
    monkeypatch.setattr(selection_tables, "tables", lambda: (parsed,))
    monkeypatch.delenv("CUPY_TF32", raising=False)
    return parsed


def test_table_hit_nearest_in_log_space(table, monkeypatch):
    assert dispatch.choose(H100, "float16", 16, 4096, 4096).variant == WGMMA
    hit = dispatch.choose(H100, "float16", 20, 4000, 4096)  # within a factor √2: the nearest point answers
    assert hit.variant == WGMMA and "16×4096×4096" in hit.reason and "h100.toml" in hit.reason
    # a table reaches √2 per dimension; with a reach of 2 the entry 2× away answers
    assert dispatch.choose(H100, "float16", 4096, 4096, 8192).reason.startswith("heuristic")
    monkeypatch.setattr(dispatch, "TABLE_REACH", 1.0)
    assert dispatch.choose(H100, "float16", 4096, 4096, 8192).variant == MMA  # exactly 2× away: in reach


def test_table_is_per_gpu_name_and_cc(table):
    # the table says "NVIDIA  H100 80GB HBM3": spacing and case do not matter
    assert dispatch.choose(Gpu("nvidia h100 80gb hbm3", 90), "float16", 16, 4096, 4096).variant == WGMMA
    other = dispatch.choose(Gpu("NVIDIA H200", 90, 132), "float16", 16, 4096, 4096)
    assert "no dispatch table for NVIDIA H200" in " ".join(other.notes)
    assert dispatch.choose(Gpu("NVIDIA H100 80GB HBM3", 89), "float16", 16, 4096, 4096).variant != WGMMA


def test_table_out_of_reach_goes_to_the_heuristic(table):
    far = dispatch.choose(H100, "float16", 1024, 1024, 1024)
    assert far.reason.startswith("heuristic") and any("no usable float16 shape" in n for n in far.notes)
    assert dispatch.choose(H100, "bfloat16", 16, 4096, 4096).reason.startswith("heuristic")  # other dtype key


def test_table_entries_of_much_smaller_products_do_not_answer(table, monkeypatch):
    """A shape with at most 4× the work of the nearest entry takes it; with 8× (twice the size in every
    dimension) the heuristic decides, since an entry timed on a smaller product chose for that product."""
    monkeypatch.setattr(dispatch, "TABLE_REACH", 1.0)  # a factor 2 per dimension
    assert dispatch.choose(H100, "float16", 4096, 4096, 8192).variant == MMA  # 2× the work
    assert dispatch.choose(H100, "float16", 8192, 4096, 8192).variant == MMA  # 4×
    grown = dispatch.choose(H100, "float16", 8192, 8192, 8192)  # 8×
    assert grown.reason.startswith("heuristic") and any("8× less work" in n for n in grown.notes)
    assert dispatch.choose(H100, "float16", 2048, 2048, 2048).variant == MMA  # smaller products still take it


def test_split_k_takes_the_first_tile_unless_another_pads_far_less():
    """1000³ tf32: the 128×128 split-K tile pads C by 1.6% more than the 16×128 one, within PAD_TIE, so the
    list's first (larger) tile runs; 17 rows pad a 128-row tile 4× more, so the 16-row tile runs."""
    hopper = Gpu("unknown GPU", 90)
    first = dispatch.candidates()["split_k"]["tf32"][0]
    assert dispatch.choose(hopper, "tf32", 1000, 1000, 1000).variant == first
    seventeen = registry.lookup(dispatch.choose(hopper, "tf32", 17, 4096, 4096).variant)
    assert seventeen.family.tile(seventeen.params)[0] <= 32


def test_16_bit_split_k_follows_the_cost_model():
    """16-bit split-K: the tile the launcher's model expects first, among those padding C at most 1.25×
    the least, a split tile only where it beats an unsplit one by SPLIT_MARGIN (but for M within one row of
    tiles). 1024×1024×14336 takes the 128×256 tile in 4 splits; 1000×768×2048 64×128 whole (H100: 10.3 µs
    against 14.4 for 128×128 in 2 splits, within the margin of it in the model); 17 rows 64×128 in two
    splits (15.3 µs against 17.3 for 64×64 whole); 64 rows keep a 64-row tile (a 128-row one pads 2×)."""
    hopper = Gpu("unknown GPU", 90)
    for key, prefix in (("float16", "hgemm"), ("bfloat16", "bgemm")):
        big = dispatch.choose(hopper, key, 1024, 1024, 14336)
        assert big.variant == f"{prefix}_wgmma_m64n256k16_stages4_ws2_splitk" and "(4 splits" in big.reason
        short = dispatch.choose(hopper, key, 1000, 768, 2048)
        assert short.variant == f"{prefix}_wgmma_m64n128k16_tile64x128_stages8_ws1_splitk"
        assert "(1 splits" in short.reason
        few = dispatch.choose(hopper, key, 17, 3072, 4096)
        assert few.variant == f"{prefix}_wgmma_m64n128k16_tile64x128_stages8_ws1_splitk" and "(2 splits" in few.reason
        sixty_four = registry.lookup(dispatch.choose(hopper, key, 64, 8192, 8192).variant)
        assert sixty_four.family.split_k and sixty_four.family.tile(sixty_four.params)[0] == 64


def test_table_names_that_cannot_serve_fall_through(table):
    # 128³: the nearest entry names no catalogue kernel, the next accumulates in fp16: both are passed over
    decision = dispatch.choose(H100, "float16", 128, 128, 128)
    assert decision.reason.startswith("heuristic")
    notes = " ".join(decision.notes)
    assert "no_such_kernel (table, 128×128×128): not in the catalogue" in notes
    assert "not float16 with float32 accumulation" in notes



def test_table_names_that_do_not_run_here_fall_through(monkeypatch):
    parsed = selection_tables.parse_table(TABLE.replace("cc = 90", "cc = 80"), "a100.toml")
    monkeypatch.setattr(selection_tables, "tables", lambda: (parsed,))
    decision = dispatch.choose(Gpu(H100.name, 80, 108), "float16", 16, 4096, 4096)
    assert decision.variant != WGMMA and any("does not run on sm_80" in n for n in decision.notes)


def test_table_names_too_skinny_for_the_problem_fall_through(monkeypatch):
    """A table whose 16×4096×4096 point is a 16-row kernel answers 17×4096×4096 with the next entry."""
    text = ('[gpu]\nname = "NVIDIA H100 80GB HBM3"\ncc = 90\n[[entry]]\ndtype = "tf32"\nm = 16\nn = 4096\n'
            'k = 4096\nvariant = "sgemv_skinny_r16"\n')
    monkeypatch.setattr(selection_tables, "tables", lambda: (selection_tables.parse_table(text, "h100.toml"),))
    decision = dispatch.choose(H100, "tf32", 17, 4096, 4096)
    assert registry.lookup(decision.variant).max_rows() is None
    assert any("serves at most 16 rows or columns, not 17" in n for n in decision.notes)
    assert registry.lookup(dispatch.choose(H100, "tf32", 16, 4096, 4096).variant).max_rows() == 16


def test_bad_tables_are_refused():
    with pytest.raises(CatalogueError, match=r"needs \[gpu\]"):
        selection_tables.parse_table('[[entry]]\ndtype = "float16"\n')
    with pytest.raises(CatalogueError, match="needs dtype, m, n, k, variant"):
        selection_tables.parse_table('[gpu]\nname = "X"\ncc = 90\n[[entry]]\ndtype = "float16"\nm = 1\n')


# ---- the heuristic -------------------------------------------------------------------------------------

def _stand_in(name: str, new_name: str, family_changes=None, **params):
    base = registry.catalogue()[name]
    family = dataclasses.replace(base.family, **family_changes) if family_changes else base.family
    return dataclasses.replace(base, name=new_name, family=family, params={**base.params, **params})


@pytest.fixture
def roles(monkeypatch):
    """Candidate lists with stand-ins for kernels still to land: skinny entries of ROWS 1, 8 and 16, a
    split-K entry, and small tiles; no tables."""
    cat = dict(registry.catalogue())
    for rows in (16, 1, 8):  # skinny entries split K themselves: they always fill the GPU
        cat[f"skinny_r{rows}"] = _stand_in("sgemm_sliced_k_f32", f"skinny_r{rows}", {"split_k": True}, ROWS=rows)
    # a few-rows entry that does not split K, 2048 columns a block (so 2 blocks at N = 4096) and a 64 KB
    # ring of loads in flight each, as decode's
    cat["wide_r16"] = _stand_in("sgemm_sliced_k_f32", "wide_r16", {"tile": lambda p: (16, 2048),
                                "smem_bytes": lambda p, dtype, acc: 64 << 10}, ROWS=16)
    cat["split_k_stand_in"] = _stand_in("sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf", "split_k_stand_in",
                                        {"split_k": True})
    monkeypatch.setattr(registry, "catalogue", lambda: cat)
    monkeypatch.setattr(selection_tables, "tables", lambda: ())
    base = dispatch.candidates()
    lists = {role: dict(base[role]) for role in base}
    lists["skinny"]["float32"] = ("skinny_r1", "skinny_r8", "skinny_r16", "not_landed_yet")
    lists["split_k"]["float32"] = ("not_landed_yet", "sgemm_sliced_k_f32", "split_k_stand_in")
    lists["small_tile"]["float32"] = ("sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf", "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf")
    lists["split_k"]["tf32"] = ("sgemm_wgmma_m64n256k8_tf32_stages3_ws2",)  # Hopper only
    monkeypatch.setattr(dispatch, "candidates", lambda: lists)
    return lists


@pytest.mark.parametrize("m,n,expected", [(1, 4096, "skinny_r1"), (4096, 1, "skinny_r1"), (5, 4096, "skinny_r8"),
                                          (8, 4096, "skinny_r8"), (16, 4096, "skinny_r16"), (4096, 12, "skinny_r16")])
def test_skinny_takes_the_first_entry_that_covers(roles, m, n, expected):
    decision = dispatch.choose(H100, "float32", m, n, 4096)
    assert decision.variant == expected and "memory-bound" in decision.reason
    assert any("not_landed_yet (skinny): not in the catalogue" in note for note in decision.notes)


def test_skinny_passes_over_an_entry_whose_blocks_leave_the_gpu_idle(roles):
    """A few-rows entry that does not split K is taken only where its blocks keep IN_FLIGHT_BYTES of loads in
    flight: listed first, 2048 columns a block serve N = 200000 (98 blocks of 64 KB) but not N = 4096 (2),
    nor, alone, N = 64 (the covering entry with the most blocks then)."""
    roles["skinny"]["float32"] = ("wide_r16", "skinny_r1", "skinny_r8", "skinny_r16")
    assert dispatch.choose(H100, "float32", 4, 200_000, 4096).variant == "wide_r16"
    decision = dispatch.choose(H100, "float32", 4, 4096, 4096)
    assert decision.variant == "skinny_r8" and "keeps HBM busy" in decision.reason
    roles["skinny"]["float32"] = ("wide_r16",)
    decision = dispatch.choose(H100, "float32", 4, 64, 4096)
    assert decision.variant == "wide_r16" and "with the most blocks" in decision.reason


def test_deep_k_on_an_idle_gpu_splits_k(roles):
    decision = dispatch.choose(H100, "float32", 128, 256, 8192)
    assert decision.variant == "split_k_stand_in" and "split K" in decision.reason
    assert any("sgemm_sliced_k_f32 (split_k): its family does not split K" in note for note in decision.notes)


@pytest.mark.parametrize("m,n,chosen", [
    (256, 4096, "hgemm_wgmma_m64n128k16_tile64x128_stages8_ws1_cluster2"),  # 64 clusters of 2: 128 blocks
    (256, 5120, "hgemm_wgmma_m64n192k16_tile64x192_stages6_ws1_cluster4"),  # 27 clusters of 4 (80 of 2 > 66)
    (128, 8192, "hgemm_wgmma_m64n128k16_tile64x128_stages8_ws1_cluster2"),  # clusters of 4 stand taller than M
    (256, 2048, "hgemm_wgmma_m64n64k16_tile64x64_stages13_ws1"),  # 128 blocks alone; 64 in pairs
    (512, 1024, "hgemm_wgmma_m64n64k16_tile64x64_stages13_ws1"),
    # 64-row tiles: 32 clusters of 4 > the 30 that run at once, 96 of 2 > 66; 128×128 pairs: 48, 96 blocks
    (256, 6144, "hgemm_wgmma_m64n128k16_tile128x128_stages6_ws2_cluster2"),
    (1000, 2048, "hgemm_wgmma_m64n128k16_tile128x128_stages6_ws2_cluster2"),  # 8 rows of 128: 64 pairs
    (200, 5120, "hgemm_wgmma_m64n192k16_tile64x192_stages6_ws1_cluster4"),  # 4 rows of 64: every block has rows
    (300, 2048, "hgemm_wgmma_m64n128k16_tile64x128_stages8_ws1_cluster2"),  # 5 rows of 64: a half-empty pair
    (384, 4096, None),  # 3 rows of 128: a half-empty 128-row pair; 64-row tiles take two waves
    (256, 1024, None),  # 64 blocks at most: under ONE_WAVE_FILL of the SMs
    (64, 8192, None),  # 128 blocks of 64×64, but one row of them: split K
    (128, 5120, None),  # 80 blocks of 64×128 (clusters of 4 stand taller than M)
    (1024, 1024, None),  # 64 blocks of 128×128 in pairs; more than 8 rows of 64-row tiles
    (1100, 2048, None),  # more than 8 rows of 128
])
def test_one_wave_of_whole_k_tiles_in_clusters(m, n, chosen):
    """On an idle GPU, up to ONE_WAVE_TILE_ROWS rows of an entry's tiles, the one_wave entry whose whole-K
    tiles fill the most of one wave (two rows of tiles at least, no more than run at once; a cluster with a
    block below M only of 64-row tiles no taller than M), if at least ONE_WAVE_FILL of the SMs."""
    decision = dispatch.choose(Gpu("a Hopper without a table", 90, 132), "float16", m, n, 4096)
    if chosen:
        assert decision.variant == chosen and "one wave of" in decision.reason
    else:
        assert "one wave" not in decision.reason
        assert decision.variant not in candidates.candidates()["one_wave"]["float16"]


def test_shallow_k_on_an_idle_gpu_takes_a_smaller_tile(roles):
    # 1024×1024 in 128×128 tiles is 64 blocks for 132 SMs; K = 256 is too shallow to split
    decision = dispatch.choose(H100, "float32", 1024, 1024, 256)
    assert decision.variant == "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf" and "smaller tile (256 tiles)" in decision.reason
    # 256×256: no small tile fills 132 SMs; the one with the most tiles wins (the listed 128×128 tile
    # is no smaller than the default's and is passed over)
    assert dispatch.choose(H100, "float32", 256, 256, 128).variant == "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf"


def test_a_full_gpu_keeps_the_big_tile_default(roles):
    decision = dispatch.choose(H100, "float32", 4096, 4096, 4096)
    assert decision.variant == roles["default"]["float32"][0] and "big-tile default" in decision.reason
    # the same shape on a GPU with more SMs than tiles is no longer full
    assert dispatch.choose(Gpu("big", 90, 2000), "float32", 4096, 4096, 256).variant != decision.variant


def test_unrunnable_candidates_fall_through(roles):
    decision = dispatch.choose(A100, "tf32", 128, 256, 8192)  # the only split-K tf32 entry needs sm_90a
    assert decision.variant == dispatch.first_default("tf32", 80)
    assert any("does not run on sm_80" in note for note in decision.notes)


def test_a_plain_entry_of_a_split_k_family_is_no_split_k_candidate(roles):
    roles["split_k"]["tf32"] = ("sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x4_stages3_swizzle",
                                "sgemm_mma_m16n8k8_tf32_mma2x2_warp2x4x4_stages4_swizzle_splitk")
    decision = dispatch.choose(H100, "tf32", 128, 4096, 11008)
    assert decision.variant == "sgemm_mma_m16n8k8_tf32_mma2x2_warp2x4x4_stages4_swizzle_splitk"
    assert any("warp4x4x4_stages3_swizzle (split_k): SPLIT_K = 1 compiles its split-K steps out" in note
               for note in decision.notes)


def test_tf32_splits_k_reading_b_in_place():
    """Small-M, deep-K TF32 splits K on entries that read a row-major B in place (the wgmma_tf32 ones copy
    it K-major on every call): wgmma_tf32_swap on Hopper, mma.sync on Ampere; float16 and bfloat16 keep
    wgmma on Hopper and split K on mma.sync where wgmma does not run."""
    hopper, ampere = Gpu("unknown GPU", 90), Gpu("unknown GPU", 80, 108)
    for shape in [(128, 4096, 11008), (64, 7168, 2048), (32, 4096, 4096)]:
        for gpu_, family in ((hopper, "wgmma_tf32_swap"), (ampere, "mma")):
            v = registry.lookup(dispatch.choose(gpu_, "tf32", *shape).variant)
            assert v.family.name == family and v.acc == "tf32" and v.params["SPLIT_K"] == 0, (gpu_, shape)
    for key in ("float16", "bfloat16"):
        assert registry.lookup(dispatch.choose(hopper, key, 128, 4096, 11008).variant).family.name == "wgmma"
        v = registry.lookup(dispatch.choose(ampere, key, 128, 4096, 11008).variant)
        assert v.family.name == "mma" and v.params["SPLIT_K"] == 0


def test_the_table_script_times_the_split_k_candidates():
    """.ci/dispatch-tables benchmarks the default's candidates (candidates.toml's [timed]): they include every
    tf32 split-K entry, so a measured table can choose among them."""
    script = (Path(__file__).resolve().parent.parent / ".ci" / "dispatch-tables").read_text()  # the checkout's
    assert "--candidates" in script
    for name in dispatch.candidates()["split_k"]["tf32"]:
        assert name in candidates.timed(), name


def test_the_shipped_candidates_route_each_kind_of_shape():
    """With no table, a Hopper GPU's shapes go where the heuristic's rules say: decode-style products to a
    few-rows kernel (16-bit: the decode family, one block per 64 columns where that keeps HBM busy,
    clusters that split K where N is small; 32-bit: the skinny kernels up to 4 rows, then the decode
    family; on an Ampere GPU the skinny kernels up to 4 rows, split-K beyond), small M·N with deep K to
    split-K (16-bit: the tile the launcher's cost model expects first), big products to the big-tile
    default, which also keeps a single wave that fills at least half the GPU."""
    hopper, ampere = Gpu("unknown GPU", 90), Gpu("unknown GPU", 80)
    for key in ("float32", "tf32", "float16", "bfloat16"):
        few_rows = "decode" if key in ("float16", "bfloat16") else "skinny"  # one row: sgemv_skinny_r1 for 32-bit
        assert registry.lookup(dispatch.choose(hopper, key, 1, 4096, 4096).variant).family.name == few_rows
        assert registry.lookup(dispatch.choose(hopper, key, 4096, 4, 4096).variant).family.name == few_rows
        assert registry.lookup(dispatch.choose(hopper, key, 128, 4096, 11008).variant).family.split_k
        assert dispatch.choose(hopper, key, 8192, 8192, 8192).variant == dispatch.first_default(key, 90)
        assert dispatch.first_default(key, 90) == api.DEFAULTS[key][0]
    for key in ("float16", "bfloat16"):
        for n, cluster in ((4096, 1), (2048, 2), (1024, 8)):
            sixteen = registry.lookup(dispatch.choose(hopper, key, 16, n, 4096).variant)
            assert sixteen.family.name == "decode" and sixteen.params["CS"] == cluster
        assert registry.lookup(dispatch.choose(ampere, key, 1, 4096, 4096).variant).family.name == "skinny"
        sixteen = registry.lookup(dispatch.choose(ampere, key, 16, 4096, 4096).variant)
        assert sixteen.family.split_k and sixteen.max_rows() is None
        # one wave of 96 clustered 128×256 tiles: the big tiles, as 128 tiles of 128×192 (97% of a wave;
        # the H100 table's entry there too)
        wide = registry.lookup(dispatch.choose(hopper, key, 512, 6144, 4096).variant)
        assert wide.name in dispatch.candidates()["default"][key] and wide.family.tile(wide.params) == (128, 192)
    for key, acc in (("float32", "float32"), ("tf32", "tf32"), ("3xtf32", "float32")):
        for n, cluster in ((4096, 2), (2048, 2), (1024, 4)):
            sixteen = registry.lookup(dispatch.choose(hopper, key, 16, n, 4096).variant)
            assert sixteen.family.name == "decode" and sixteen.params["CS"] == cluster and sixteen.acc == acc
        assert registry.lookup(dispatch.choose(hopper, key, 4, 4096, 4096).variant).family.name == "skinny"
        if key != "3xtf32":  # Hopper only
            assert registry.lookup(dispatch.choose(ampere, key, 16, 4096, 4096).variant).family.name != "decode"
    sixteen = registry.lookup(dispatch.choose(ampere, "float32", 16, 4096, 4096).variant)
    assert sixteen.family.tile(sixteen.params) == (32, 64)  # the split-K tile that pads 16 rows least
    # 3xTF32 (precision="3xtf32" only) has no split-K kernel: its big-tile entry, or exact fp32 for decode
    assert registry.lookup(dispatch.choose(hopper, "3xtf32", 128, 4096, 11008).variant).acc == "3xtf32"
    assert registry.lookup(dispatch.choose(hopper, "3xtf32", 1, 4096, 4096).variant).family.name == "skinny"


def test_the_shipped_candidates_are_well_formed():
    roles = dispatch.candidates()
    assert set(roles) == set(dispatch.ROLES)
    for role, lists in roles.items():
        assert set(lists) == set(dispatch.DTYPE_KEYS)
        for key, names in lists.items():
            for name in names:
                v = registry.catalogue().get(name)
                assert v is None or dispatch.why_not(name, key, 90) is None or dispatch.why_not(name, key, 80) is None, \
                    f"{role}/{key} lists {name}, which cannot serve {key}"


def test_tf32_switch(monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "1")
    assert dispatch.dtype_key("float32") == "tf32"
    monkeypatch.setenv("CUPY_TF32", "0")
    assert dispatch.dtype_key("float32") == "float32"


# ---- tables from results, explanations, the command -------------------------------------------------------

def test_table_from_results_round_trips(monkeypatch):
    records = [{"dtype": "float16", "m": 16, "n": 4096, "k": 4096, "variant": MMA, "median_ms": 0.05},
               {"dtype": "float16", "M": 16, "N": 4096, "K": 4096, "variant": "wgmma_swept_point",
                "catalogue": WGMMA, "time_ms": 0.04},
               {"dtype": "float16", "M": 16, "N": 4096, "K": 4096, "variant": "other_swept_point", "time_ms": 0.03},
               {"dtype": "float16", "m": 16, "n": 4096, "k": 4096, "variant": "cublas", "median_ms": 0.01},
               {"dtype": "float16", "m": 16, "n": 4096, "k": 4096, "variant": MMA, "median_ms": 0.001,
                "status": "incorrect"},
               {"dtype": "float32", "acc": "tf32", "m": 64, "n": 64, "k": 64,
                "variant": "sgemm_wgmma_m64n256k8_tf32_stages3_ws2", "median_ms": 0.01}]
    table = dispatch.table_from_results(records, gpu_name=H100.name, cc=90, sm_count=132, command="bench.py",
                                        date="2026-11-23", cupy_version="14.2.0", nvrtc_version="13.0")
    assert [(e["dtype"], e["variant"]) for e in table["entries"]] == [
        ("float16", WGMMA), ("tf32", "sgemm_wgmma_m64n256k8_tf32_stages3_ws2")]
    parsed = selection_tables.parse_table(dispatch.format_table(table), "made.toml")
    assert parsed["generated"] == {"command": "bench.py", "date": "2026-11-23", "device": H100.name,
                                   "cupy": "14.2.0", "nvrtc": "13.0"}
    assert parsed["gpu"] == {"name": H100.name, "cc": 90, "sm_count": 132}
    monkeypatch.setattr(selection_tables, "tables", lambda: (parsed,))
    assert dispatch.choose(H100, "float16", 16, 4096, 4096).variant == WGMMA
    with pytest.raises(ValueError, match="GPU's name"):
        dispatch.table_from_results(records[:1])
    from_records = dispatch.table_from_results([{**records[1], "device_name": "NVIDIA H200", "arch": "sm_90a"}],
                                               cupy_version="14.2.0", nvrtc_version="13.0")
    assert from_records["gpu"] == {"name": "NVIDIA H200", "cc": 90}
    with_memory = dispatch.table_from_results(records[:1], gpu_name="NVIDIA H200", cc=90, memory_bytes_per_ns=4332.9,
                                              cupy_version="14.2.0", nvrtc_version="13.0")
    assert with_memory["gpu"] == {"name": "NVIDIA H200", "cc": 90, "memory_bytes_per_ns": 4333}


def test_a_gpu_named_off_the_device_takes_its_tables_memory():
    """explain for a GPU that is not here models split-K with the memory its table recorded (an H200's),
    as the launcher does on the device; a table without it leaves the model an H100's."""
    h200 = dispatch.describe_gpu("NVIDIA H200", 90)
    assert h200.sm_count == 132 and h200.memory_bytes_per_ns == 4333
    assert dispatch.describe_gpu("NVIDIA H100 80GB HBM3", 90).memory_bytes_per_ns is None
    v = registry.lookup("sgemm_wgmma_m64n128k8_tf32_swap_tile128x128_stages6_ws2_splitk")
    assert launch.launch_config(v, 128, 8192, 28672, h200.sm_count,
                                memory_bytes_per_ns=h200.memory_bytes_per_ns).splits == 2


def test_a_refined_table_keeps_what_it_did_not_retime_and_lists_its_history():
    """merged: the new run's entries replace the shipped ones at the same (B layout, dtype, shape), the rest
    stay; the shipped table's command heads `earlier`, one command a line, newest first, each once (an
    `earlier` joined by " | " in one string, as tables once kept it, is read as such a list)."""
    wg, mma = "hgemm_wgmma_m64n256k16_stages4_ws2", "hgemm_mma_m16n8k16_mma2x2_warp2x4x2_stages3_unaligned_acc32_splitk"
    def made(command, rows):
        records = [{"dtype": "float16", "m": m, "n": 4096, "k": 4096, "variant": v, "median_ms": 0.1} for m, v in rows]
        return selection_tables.parse_table(dispatch.format_table(dispatch.table_from_results(
            records, gpu_name=H100.name, cc=90, command=command, cupy_version="14.2.0", nvrtc_version="13.0")))
    shipped = made("run 2", [(16, wg), (64, wg)])
    shipped["generated"]["earlier"] = "run 1 | run 0 | run 1"
    table = selection_tables.merged(made("run 3", [(64, mma)]), shipped)
    assert [(e["m"], e["variant"]) for e in table["entries"]] == [(16, wg), (64, mma)]
    text = dispatch.format_table(table)
    assert 'earlier = [\n    "run 2",\n    "run 1",\n    "run 0",\n]\n' in text
    again = selection_tables.merged(made("run 4", []), selection_tables.parse_table(text))
    assert again["generated"]["earlier"] == ["run 3", "run 2", "run 1", "run 0"]
    assert [(e["m"], e["variant"]) for e in again["entries"]] == [(16, wg), (64, mma)]

def test_column_major_entries_answer_x_at_w_t(monkeypatch):
    """Entries timed with B column-major (--b-layout col) answer calls whose B lies so, before the row-major
    ones; their choice stands even where it copies B (the copy was timed), and a row-major B never sees them."""
    row_b, copying = "hgemm_wgmma_m64n256k16_stages4_ws2", "hgemm_wgmma_m64n128k16_tile128x128_stages6_ws2"
    shape = {"dtype": "float16", "m": 2048, "n": 4096}
    records = [{**shape, "k": k, "variant": row_b, "median_ms": 0.1} for k in (4096, 16384)]
    records += [{**shape, "k": 4096, "variant": name, "median_ms": ms, "b_layout": "col"}
                for name, ms in ((copying, 0.2), (row_b, 0.3))]
    table = dispatch.table_from_results(records, gpu_name=H100.name, cc=90, cupy_version="14.2.0", nvrtc_version="13.0")
    text = dispatch.format_table(table)
    assert text.count('b_layout = "col"') == 1
    parsed = selection_tables.parse_table(text, "h100.toml")
    assert sorted((e["variant"], e["b_layout"], e["k"]) for e in parsed["entries"]) == [
        (copying, "col", 4096), (row_b, "row", 4096), (row_b, "row", 16384)]
    monkeypatch.setattr(selection_tables, "tables", lambda: (parsed,))
    col, row = b_placement(2000, 4096, 4096, "col", 2), b_placement(2000, 4096, 4096, "row", 2)
    assert col.b_layout == "col" and row.b_layout == "row" and b_placement(1, 1, 4096, "col", 2).b_layout == "row"
    measured = dispatch.choose(H100, "float16", 2000, 4096, 4096, placement=col)
    assert measured.variant == copying and "with B column-major" in measured.reason and measured.b_layout == "col"
    assert dispatch.choose(H100, "float16", 2000, 4096, 4096, placement=row).variant == row_b
    # beyond the column-major entries' reach: the row-major entry, then the B-layout rule's twin
    far = dispatch.choose(H100, "float16", 2000, 4096, 12000, placement=b_placement(2000, 4096, 12000, "col", 2))
    assert far.variant == row_b.replace("wgmma_", "wgmma_kmajor_") and "B-layout rule" in far.reason
    assert any("no usable float16 shape with B column-major" in n for n in far.notes)
    with pytest.raises(CatalogueError, match="b_layout"):
        selection_tables.parse_table(text.replace('b_layout = "col"', 'b_layout = "nk"'), "h100.toml")


def test_a_few_row_tile_is_filed_only_where_m_fits_it():
    """A 16-row tile that wins at 512³ would answer 1024³ too, where its narrow wgmma loses to big tiles:
    the table files it only for shapes of at most its rows; skinny families (which swap operands) stay."""
    few, big = "sgemm_wgmma_m64n16k8_tf32_swap_tile16x128_stages10_ws2_splitk", "sgemm_wgmma_m64n256k8_tf32_stages3_ws2"
    records = [{"dtype": "float32", "acc": "tf32", "m": m, "n": 512, "k": 512, "variant": name, "median_ms": ms}
               for m in (16, 512) for name, ms in ((few, 0.005), (big, 0.008))]
    records.append({"dtype": "float32", "m": 512, "n": 8, "k": 4096, "variant": "sgemv_skinny_r8", "median_ms": 0.01})
    table = dispatch.table_from_results(records, gpu_name=H100.name, cc=90, cupy_version="14.2.0", nvrtc_version="13.0")
    assert [(e["m"], e["variant"]) for e in table["entries"]] == [(512, "sgemv_skinny_r8"), (16, few), (512, big)]


def test_explain_names_the_choice_and_the_reason(table):
    text = dispatch.explain("float16", 16, 4096, 4096, (H100.name, 90))
    assert f"variant: {WGMMA}" in text and "nearest measured shape 16×4096×4096" in text
    assert "132 SMs" in text  # from the table's [gpu]
    text = dispatch.explain("float32", 4096, 4096, 4096, ("Some GPU", 80))
    assert "big-tile default" in text and "SM count unknown" in text and "CUPY_TF32=1" in text


def test_explain_command(table, capsys):
    assert cli.main(["explain", "16x4096x4096", "--dtype", "float16", "--gpu", H100.name, "--cc", "90"]) == 0
    assert f"variant: {WGMMA}" in capsys.readouterr().out
    for alias, dtype in (("fp16", "float16"), ("half", "float16"), ("bf16", "bfloat16"), ("fp32", "float32")):
        assert cli.main(["explain", "64", "--dtype", alias, "--gpu", H100.name, "--cc", "90"]) == 0
        assert capsys.readouterr().out.startswith(f"{dtype} 64×64×64")
    assert cli.main(["explain", "16x4096", "--gpu", H100.name, "--cc", "90"]) == 2
    assert capsys.readouterr().err.startswith("error: shape")
    assert cli.main(["explain", "64", "--dtype", "float64", "--gpu", H100.name, "--cc", "90"]) == 2
    assert "error: no kernels for dtype float64" in capsys.readouterr().err
    assert cli.main(["explain", "64", "--gpu", H100.name]) == 2
    assert "--gpu and --cc go together" in capsys.readouterr().err
    # a size matmul refuses (32-bit indices) is refused here too, not explained
    assert cli.main(["explain", f"{2**31}x5x5", "--gpu", H100.name, "--cc", "90"]) == 2
    assert "error: M=2147483648 exceeds 2147483647" in capsys.readouterr().err
    assert cli.main(["explain", f"5x5x{2**31}", "--dtype", "e4m3", "--gpu", H100.name, "--cc", "90"]) == 2
    assert "error: K=2147483648 exceeds" in capsys.readouterr().err


def test_sizes_past_the_kernels_indices_are_refused_before_any_launch():
    from types import SimpleNamespace as Array  # matrix_sizes reads shapes only
    from cupy_gemm import operands
    assert operands.matrix_sizes(Array(shape=(2**31 - 1, 8)), Array(shape=(8, 3))) == (2**31 - 1, 3, 8)
    for a, b, dim in (((2**31, 8), (8, 3), "M"), ((3, 2**31), (2**31, 3), "K"), ((3, 8), (8, 2**31), "N")):
        with pytest.raises(InputError, match=f"{dim}={2**31} exceeds"):
            operands.matrix_sizes(Array(shape=a), Array(shape=b))
    with pytest.raises(InputError, match="batch=2147483648 exceeds"):
        operands.check_sizes(M=1, batch=2**31)


def test_explain_a_column_major_b():
    """x @ W.T: the B-layout rule's twin reads W in place, and the explanation says so."""
    text = dispatch.explain("float16", 16, 4096, 4096, ("NVIDIA H100 80GB HBM3", 90), b_layout="col")
    assert "variant: hgemv_decode_kmajor_" in text and "with B column-major" in text and "x @ W.T" in text
    # the H200's entries timed with B column-major are at other shapes: its row-major entry, then the twin
    text = dispatch.explain("float16", 16, 4096, 4096, ("NVIDIA H200", 90), b_layout="col")
    assert "variant: hgemv_decode_kmajor_" in text and "B-layout rule: hgemv_decode_wgmma_n" in text
    assert "no usable float16 shape with B column-major within a factor 1.41" in text
    text = dispatch.explain("bfloat16", 4096, 4096, 4096, ("NVIDIA H100 80GB HBM3", 90), b_layout="col")
    assert "variant: bgemm_wgmma_kmajor_" in text
    assert "kmajor" not in dispatch.explain("float16", 16, 4096, 4096, ("NVIDIA H100 80GB HBM3", 90))
    with pytest.raises(ValueError, match="b_layout must be one of row, col"):
        dispatch.explain("float16", 16, 4096, 4096, ("NVIDIA H100 80GB HBM3", 90), b_layout="nk")


def test_a_table_without_column_major_entries_says_so(table):
    text = dispatch.explain("float16", 16, 4096, 4096, ("NVIDIA H100 80GB HBM3", 90), b_layout="col")
    assert "no float16 entries timed with B column-major" in text and "variant: hgemv_decode_kmajor_" not in text


def test_matmul_default_follows_the_table(table, gpu):
    """variant=None on a fake H100: the table's choice is what launches."""
    gpu.info = H100
    api.matmul(gpu.array((16, 4096), "float16"), gpu.array((4096, 4096), "float16"))
    assert gpu.kernels.keys() == {WGMMA}
    api.matmul(gpu.array((4096, 4096), "float16"), gpu.array((4096, 4096), "float16"))
    assert gpu.kernels.keys() == {WGMMA, MMA}



def test_explain_takes_a_precision():
    h100 = ("NVIDIA H100 80GB HBM3", 90)
    text = dispatch.explain("float32", 4096, 4096, 4096, h100, precision="3xtf32")
    assert text.startswith("3xtf32 4096×4096×4096") and "variant: sgemm_wgmma_3xtf32_" in text
    with pytest.raises(DTypeError, match="float32 inputs only"):
        dispatch.explain("float16", 64, 64, 64, h100, precision="3xtf32")


@pytest.mark.parametrize("key", ["float16", "bfloat16", "float32", "tf32"])
@pytest.mark.parametrize("mnk", [(1, 4096, 4096), (4, 14336, 4096), (129, 1000, 33), (4096, 4096, 1024)])
@pytest.mark.parametrize("named", [("NVIDIA H100 80GB HBM3", 90), ("NVIDIA A100-SXM4-80GB", 80)])
def test_needs_skip_entries_whose_family_lacks_them(key, mnk, named):
    """A fused epilogue or a batch is served by a family that has it, table or heuristic alike."""
    g = dispatch.describe_gpu(*named)
    for needs in (("epilogue",), ("batched",), ("batched", "epilogue")):
        chosen = registry.lookup(dispatch.choose(g, key, *mnk, needs=needs).variant)
        assert all(getattr(chosen.family, need) for need in needs), (chosen.name, needs)
    assert "has no epilogue support" in (dispatch.why_not("hgemv_skinny_r1", "float16", 90, ("epilogue",)) or "")


def test_a_tiny_product_takes_the_tile_that_pads_least():
    """64³ is one tile for every entry: the smallest tile wastes least (for tf32 also the one that reads a
    row-major B in place, where the big default copies it)."""
    hopper = Gpu("unknown GPU", 90)
    for key, family in (("tf32", "wgmma_tf32_rowb"), ("float16", "wgmma")):
        decision = dispatch.choose(hopper, key, 64, 64, 64)
        v = registry.lookup(decision.variant)
        assert v.family.name == family and v.family.tile(v.params) == (64, 64), decision
        assert "pads C least" in decision.reason


def test_a_persistent_family_takes_its_larger_tile_where_the_waves_stay_full():
    """3xTF32 lists 128×128 and 128×192 tiles: 8192² fills 99% of 128×192's waves (take it), 4096² only
    89% against 128×128's 97% (keep the smaller)."""
    big = "sgemm_wgmma_3xtf32_m64n192k8_tile128x192_stages3_ws2"
    small = "sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2"
    assert dispatch.choose(H100, "3xtf32", 8192, 8192, 8192).variant == big
    assert dispatch.choose(H100, "3xtf32", 4096, 4096, 4096).variant == small
    v = registry.catalogue()[big]
    assert dispatch.wave_fill(v, 8192, 8192, 132) == 64 * 43 / (21 * 132)
    assert dispatch.wave_fill(v, 4096, 4096, 132) == 32 * 22 / (6 * 132)


@pytest.mark.parametrize("key", ["float16", "bfloat16"])
def test_the_big_tiles_go_by_their_expected_time(key):
    """Off the tables, the big-tile rule weighs the tiles [tile_cost] times: 1000×5120 is 160 clustered
    128×256 tiles (two rounds) but 128 of 128×320 (one); 4096³ fills the clustered tiles' waves; at
    5000×3000×1000 the estimate puts 128×192 ahead by less than COST_MARGIN, so the first default stays."""
    h800 = Gpu("NVIDIA H800", 90, 132)
    first = dispatch.first_default(key, 90)
    decision = dispatch.choose(h800, key, 1000, 5120, 14336)
    v = registry.lookup(decision.variant)
    assert v.family.tile(v.params) == (128, 320) and "expected ~" in decision.reason, decision
    assert dispatch.choose(h800, key, 4096, 4096, 4096).variant == first
    assert dispatch.choose(h800, key, 5000, 3000, 1000).variant == first
    costed = [registry.lookup(x) for x in dispatch.candidates()["default"][key] if x in dispatch.tile_costs()]
    near = {x.name: big_tiles.expected_ns(x, 5000, 3000, 1000, 132) for x in costed}
    assert min(near.values()) > (1 - dispatch.COST_MARGIN) * near[first] and min(near, key=near.get) != first
    assert dispatch.waves(registry.lookup(first), 1000, 5120, 132) == 2 and dispatch.waves(v, 1000, 5120, 132) == 1


def test_tile_costs_name_default_entries():
    for name in dispatch.tile_costs():
        v = registry.lookup(name)
        assert name in dispatch.candidates()["default"][v.dtype] and v.family.persistent, name


@pytest.mark.parametrize("value", [[701], [701, 0], "701", [701, "2391"]])
def test_bad_tile_costs_are_refused(value, monkeypatch):
    from cupy_gemm import candidates as lists
    monkeypatch.setattr(lists, "_file", lambda: ("candidates.toml", {"tile_cost": {"some_tile": value}}))
    lists.tile_costs.cache_clear()
    try:
        with pytest.raises(CatalogueError, match="tile_cost some_tile"):
            lists.tile_costs()
    finally:
        lists.tile_costs.cache_clear()


def test_clustered_waves_count_cluster_tiles():
    """Clusters of two take 256×256 cluster tiles of a 128×256 variant, 66 at once on 132 SMs: 5000×3000
    has 20 × 12 of them, 240 in 4 waves of 66."""
    v = registry.catalogue()["hgemm_wgmma_m64n256k16_stages4_ws2_cluster2"]
    assert dispatch.wave_fill(v, 5000, 3000, 132) == 240 / (4 * 66)
    assert dispatch.wave_fill(v, 5000, 3000, 133) == 240 / (4 * 66)  # an odd SM count leaves one idle
    # the heuristic's big-tile default for float16 lists it first (no table entry within a factor 2)
    decision = dispatch.choose(H100, "float16", 30000, 30000, 30000)
    assert decision.variant == v.name and "tiles of 128×256 in clusters of 2" in decision.reason

"""The Hopper family on the CPU: its rules, its rendered PTX, GPU-free sm_90a compiles, tensor-map checks."""
import numpy as np
import pytest

from cupy_gemm import launch, tma
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import CompileError, ConfigError, DeviceError, InputError
from cupy_gemm.registry import Variant, catalogue, family, make_variant
from cupy_gemm.render import render
from cupy_gemm.workspace import split_k_workspace

WGMMA = family("wgmma")
NAMES = [n for n, v in catalogue().items() if v.family is WGMMA]
FLAGSHIP = "hgemm_wgmma_m64n256k16_stages4_ws2"


def test_family_declares_hopper():
    assert WGMMA.needs_sm90a and WGMMA.abi == "tma" and WGMMA.persistent == 1
    assert WGMMA.make_args is not None
    p = catalogue()[FLAGSHIP].params
    assert WGMMA.min_cc(p, "float16", "float32") == 90
    assert WGMMA.align(p, "float16") == WGMMA.align(p, "bfloat16") == 8  # 16-byte TMA strides and bases
    assert WGMMA.threads(p) == 128 * (p["CONSUMERS"] + 1)
    assert set(WGMMA.dtypes) == {"float16", "bfloat16"}  # no TF32: wgmma transposes only 16-bit B


def test_catalogue_has_fp16_and_bf16_defaults():
    assert FLAGSHIP in NAMES and "bgemm_wgmma_m64n256k16_stages4_ws2" in NAMES
    assert {catalogue()[n].dtype for n in NAMES} == {"float16", "bfloat16"}


@pytest.mark.parametrize("params,param", [
    ({"BM": 64, "CONSUMERS": 2}, "BM"),                         # a consumer would get 32 rows
    ({"BM": 96, "CONSUMERS": 1, "BN": 128}, "BM"),
    ({"BN": 80}, "BN"),                                         # not whole halves of 64-column B boxes
    ({"BN": 448}, "BN"),                                        # above two wgmma's N (256 + 128)
    ({"BN": 320}, "smem"),                                      # 4 × 56 KB: 128×320 takes 3 stages
    ({"BK": 32}, "BK"),                                         # shorter than a 128-byte swizzle row
    ({"BM": 256, "CONSUMERS": 1, "BN": 256, "STAGES": 2}, "BN"),  # 512 accumulators per thread
    ({"CONSUMERS": 3}, "CONSUMERS"),
    ({"STAGES": 5}, "smem"),                                    # 5 × 48 KB + staging > 227 KB
    ({"STAGES": 1}, "STAGES"),
    ({"TMA_STORE": 2}, "TMA_STORE"),
    ({"BLOCK_SWIZZLE": -1}, "BLOCK_SWIZZLE"),
    ({"PINGPONG": 1, "CONSUMERS": 1, "BN": 128}, "PINGPONG"),     # turns need two consumers
    ({"PINGPONG": 1, "SPLIT_K": 0, "BN": 128}, "PINGPONG"),        # and whole tiles, not K slices
    ({"PINGPONG": 1, "BM": 96, "BN": 128, "STAGES": 3}, "BM"),
    ({"PINGPONG": 1}, "BN"),                                       # 128×256 per consumer: 256 accumulators
    ({"KCLUSTER": 2, "BN": 128}, "TMA_STORE"),                     # a cluster's blocks store from registers
    ({"KCLUSTER": 2, "BN": 128, "TMA_STORE": 0, "SPLIT_K": 0}, "SPLIT_K"),  # one split-K at a time
    ({"KCLUSTER": 2, "BN": 128, "TMA_STORE": 0, "CLUSTER": 2}, "CLUSTER"),
    ({"KCLUSTER": 9, "BN": 128, "TMA_STORE": 0}, "KCLUSTER"),      # at most 8 blocks a cluster
    ({"KCLUSTER": 2, "TMA_STORE": 0}, "smem"),                     # 4 × 48 KB + a 128 KB partial
    ({"STREAM_K": 1}, "SPLIT_K"),                                  # stream-K sums through split-K's steps
    ({"STREAM_K": 1, "SPLIT_K": 0, "CLUSTER": 2}, "CLUSTER"),
    ({"STREAM_K": 1, "SPLIT_K": 0, "BN": 128, "PINGPONG": 1}, "PINGPONG"),
    ({"STREAM_K": 2}, "SPLIT_K"),
    ({"STREAM_K": 3, "SPLIT_K": 0}, "STREAM_K"),
])
def test_rules_name_the_parameter(params, param):
    with pytest.raises(ConfigError) as e:
        make_variant(WGMMA, "bad", "float16", {**catalogue()[FLAGSHIP].params, **params})
    assert e.value.param == param


def test_float32_is_refused():
    with pytest.raises(ConfigError, match="dtype"):
        make_variant(WGMMA, "bad", "float32", {})


def test_smem_accounts_for_ring_staging_and_alignment():
    p = dict(catalogue()[FLAGSHIP].params)
    stage = (128 * 64 + 64 * 256) * 2
    assert WGMMA.smem_bytes(p, "float16", "float32") == 4 * stage + 2 * 2 * 64 * 64 * 2 + 1024 + 16 * 4
    p["TMA_STORE"] = 0
    assert WGMMA.smem_bytes(p, "float16", "float32") == 4 * stage + 1024 + 16 * 4


@pytest.mark.parametrize("name", NAMES)
def test_renders_the_intended_instructions(name):
    v = catalogue()[name]
    src = render(v)
    ab = "f16" if v.dtype == "float16" else "bf16"
    bn = v.params["BN"]  # wider than 256: two instructions, the second on the columns past 256
    # scale-d from a predicate, then the transpose bits: A's TRANS_A (0 by default: K-major), B's TRANS_B (1
    # by default: N-major), as "n" operands after the descriptors and the predicate's
    for n in ([bn] if bn <= 256 else [256, bn - 256]):
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}" in src
        assert f"p, 1, 1, %{n // 2 + 4}, %{n // 2 + 3};" in src
    assert "template <int TRANS_B = 1, int TRANS_A = 0>" in src and '"n"(TRANS_B), "n"(TRANS_A)' in src
    assert "wgmma_async<0>" not in src
    assert "cp.async.bulk.tensor.2d" in src and "__grid_constant__" in src
    assert "__launch_bounds__(THREADS, 1)" in src  # setmaxnreg needs a register cap at entry
    assert "wgmma.wait_group.sync.aligned %0" in src and "wgmma_wait<1>()" in src  # groups overlap
    assert "{{" not in src and "{%" not in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_refuses_targets_without_wgmma(arch):
    with pytest.raises(DeviceError, match="sm_90a|sm_90 or newer"):
        compile_variant(catalogue()[FLAGSHIP], arch)


def test_static_asserts_mirror_the_rules():
    """A parameter set that skipped the Python rules fails in NVRTC with the rule's words."""
    good = catalogue()[FLAGSHIP]
    bad = Variant(name="unchecked", family=WGMMA, dtype="float16", acc="float32",
                  params={**good.params, "BM": 64})
    with pytest.raises(CompileError, match="BM must be a multiple of 64 \\* CONSUMERS"):
        compile_variant(bad, "sm_90a")


def test_more_staging_boxes_cost_shared_memory_and_wait_less():
    """EPI_BOXES C staging boxes per consumer, used in turn: a box is refilled once the store that read it
    (EPI_BOXES boxes ago) is done. Each box costs 8 KB a consumer; a ring that no longer fits is refused."""
    base = {**catalogue()[FLAGSHIP].params, "STAGES": 3, "CLUSTER": 2}
    two, four = (make_variant(WGMMA, f"e{n}", "float16", {**base, "EPI_BOXES": n}) for n in (2, 4))
    assert WGMMA.smem_bytes(four.params, "float16", "float32") - WGMMA.smem_bytes(two.params, "float16", "float32") \
        == 2 * 2 * 64 * 128
    source = render(four)
    assert "EPI_BOXES = 4;" in source and "(epi_count % EPI_BOXES)" in source
    assert "tma_store_wait_read<EPI_BOXES - 1>()" in source
    with pytest.raises(ConfigError, match="shared memory"):
        make_variant(WGMMA, "e4s4", "float16", {**base, "STAGES": 4, "EPI_BOXES": 4})


def test_cluster_split_k_shares_a_tile_along_k():
    """KCLUSTER blocks of a cluster take one tile, a K slice each: the grid is whole clusters of one tile each,
    the launcher's splits 1; shared memory holds the fp32 partial tile and two exchange barriers."""
    from cupy_gemm import launch
    from cupy_gemm.tile_geometry import wave_fill
    v = catalogue()["hgemm_wgmma_m64n128k16_tile128x128_stages5_ws2_clusterk4"]
    assert WGMMA.cluster(v.params) == 4 and WGMMA.cluster_splits_k(v.params)
    assert WGMMA.smem_bytes(v.params, "float16", "float32") == 5 * 32768 + 128 * 128 * 4 + 16 + 1024 + 16 * 5
    cfg = launch.launch_config(v, 512, 576, 7168, 132, clusters=32)
    assert (cfg.tiles, cfg.cluster, cfg.grid, cfg.splits) == (20, 4, (80, 1, 1), 1)
    assert launch.launch_config(v, 4096, 4096, 512, 132, clusters=32).grid == (128, 1, 1)  # persistent
    assert wave_fill(v, 512, 576, 132) == 20 / 33  # 20 tiles in the 33 clusters of four 132 SMs hold
    source = render(v)
    assert "constexpr int KCLUSTER = 4, CLUSTER_SIZE = CLUSTER * KCLUSTER, STREAM_K = 0;" in source
    assert "cluster_split_k_sum<KCLUSTER, CONSUMER_THREADS>" in source and "mapa.u64" in source
    _compiles_and_asserts_its_rule(v, {"TMA_STORE": 1}, "KCLUSTER > 1 needs CLUSTER = 1")


def test_stream_k_shares_the_last_wave_along_k():
    """STREAM_K: a block per SM (no more than K blocks), splits = the most blocks sharing a tile, and the
    workspace holds counters and partials for the shared tiles only (those after the whole waves)."""
    from cupy_gemm import launch, stream_k
    v = catalogue()["hgemm_wgmma_m64n256k16_stages4_ws2_streamk"]
    assert WGMMA.stream_k(v.params) and WGMMA.takes_split_k_args(v.params)
    cfg = launch.launch_config(v, 512, 10240, 8192, 132)  # 160 tiles of 128 K blocks: all shared
    assert (cfg.tiles, cfg.grid, cfg.splits, cfg.split_tiles) == (160, (132, 1, 1), 2, 160)
    assert cfg.workspace == launch.split_k_workspace(160, 2, 128 * 256)
    cfg = launch.launch_config(v, 4096, 8192, 4096, 132)  # 1024 tiles: 792 whole (6 waves), 232 shared
    assert (cfg.grid, cfg.split_tiles, cfg.splits) == ((132, 1, 1), 232, stream_k.most_splits(1024, 64, 132, 1))
    assert launch.launch_config(v, 1, 1, 1, 132).grid == (1, 1, 1)  # one K block: one block
    source = render(v)
    assert "STREAM_K = 1;" in source and "stream_k_unit(sk, unit)" in source
    _compiles_and_asserts_its_rule(v, {"SPLIT_K": 2}, "STREAM_K needs SPLIT_K = 0")


@pytest.mark.parametrize("name", ["hgemm_wgmma_m64n256k16_tile128x320_stages3_ws2",
                                  "hgemm_wgmma_kmajor_m64n256k16_tile128x320_stages3_ws2"])
def test_tiles_wider_than_one_wgmma_issue_two_per_step(name):
    """BN = 320: m64n256k16 on columns 0..255 and m64n64k16 on the rest, B's descriptor moved to column 256
    (an N-major B's fifth box, a K-major B's row 256 of n); a K-major B's 320 rows of n land in two copies
    of 160 (at most 256 a copy, each of the map's box size); no clusters, whose B shares assume one
    instruction."""
    v = catalogue()[name]
    source = render(v)
    assert "wgmma.mma_async.sync.aligned.m64n256k16" in source and "wgmma.mma_async.sync.aligned.m64n64k16" in source
    assert "wgmma_async_lo<B_KMAJOR ? 0 : 1>" in source and "wgmma_async_hi<B_KMAJOR ? 0 : 1>" in source
    assert "constexpr int B_COPY_ROWS = BN > 256 ? BN / 2 : BN;" in source
    with pytest.raises(ConfigError) as e:
        make_variant(v.family, "bad", "float16", {**v.params, "CLUSTER": 2})
    assert e.value.param == "CLUSTER"
    _compiles_and_asserts_its_rule(v, {"CLUSTER": 2}, "BN > 256")


@pytest.mark.parametrize("name", ["hgemm_wgmma_m64n224k16_tile128x224_stages4_ws2_cluster2",
                                  "hgemm_wgmma_kmajor_m64n224k16_tile128x224_stages4_ws2_cluster2"])
def test_tiles_of_32_odd_columns_take_64_byte_b_boxes_and_c_rows(name):
    """BN = 224: an N-major B stage lands seven boxes of 32 columns in 64-byte swizzled rows (no copy brings
    columns past the tile), a K-major one 224 rows of n; the 16-bit C is staged in boxes of 64 rows × 64
    bytes (32 columns), its TMA map swizzled to match; m64n224k16 reads seven 64-byte swizzle atoms of an
    N-major B. smem_bytes says so, and the template's static_assert agrees."""
    from cupy_gemm.families.wgmma import b_swizzle, c_swizzle
    v = catalogue()[name]
    p = v.params
    staging = p["CONSUMERS"] * p["EPI_BOXES"] * 64 * 64
    assert v.family.smem_bytes(p, "float16", "float32") == 4 * (128 * 64 + 64 * 224) * 2 + staging + 1024 + 64
    assert b_swizzle(p, "float16", v.family.b_layout) == (64 if v.family is WGMMA else 128)
    assert b_swizzle({**p, "BN": 256}, "float16", None) == 128 and b_swizzle(p, "float32", None) == 128
    assert c_swizzle(p, "float16") == 64 and c_swizzle({**p, "BN": 256}, "float16") == 128
    assert c_swizzle({**p, "BN": 96}, "float32") == 128  # tf32 tiles of 32·odd columns keep 128-byte C rows
    source = render(v)
    assert "wgmma.mma_async.sync.aligned.m64n224k16" in source
    assert "constexpr int C_SW_BYTES = sizeof(T_IN) == 2 && BN % 64 ? 64 : 128;" in source
    assert "constexpr int B_SW_BYTES = sizeof(T_IN) == 2 && !B_KMAJOR && BN % SW_ELEMS ? 64 : 128;" in source
    _compiles_and_asserts_its_rule(v, {"BN": 240}, "BN must be a multiple of 32")


def test_the_last_wave_split_keeps_whole_waves_and_splits_the_rest():
    """STREAM_K = 2: the whole waves are no one's to share; each tile of the last one is cut into
    min(P / R, 8) shares, which is `splits`, and only those tiles have workspace."""
    from cupy_gemm import launch
    v = catalogue()["hgemm_wgmma_m64n256k16_stages4_ws2_tailsplit"]
    assert WGMMA.stream_k(v.params) == 2 and v.params["BLOCK_SWIZZLE"] == 2048
    cfg = launch.launch_config(v, 512, 10240, 8192, 132)  # 160 tiles: 132 whole, 28 in 4 shares
    assert (cfg.tiles, cfg.grid, cfg.splits, cfg.split_tiles) == (160, (132, 1, 1), 4, 28)
    assert cfg.workspace == launch.split_k_workspace(28, 4, 128 * 256)
    cfg = launch.launch_config(v, 896, 4864, 1024, 132)  # 133 tiles: the last alone, in 8 shares of 2 K blocks
    assert (cfg.splits, cfg.split_tiles) == (8, 1)
    cfg = launch.launch_config(v, 4096, 8448, 4096, 132)  # 1056 tiles, 8 whole waves: nothing shared
    assert (cfg.splits, cfg.split_tiles, cfg.workspace) == (1, 0, launch.split_k_workspace(0, 1, 128 * 256))
    source = render(v)
    assert "STREAM_K = 2;" in source and "stream_k_plan<STREAM_K>" in source
    _compiles_and_asserts_its_rule(v, {"STREAM_K": 3}, "STREAM_K is 0")


def _compiles_and_asserts_its_rule(v, breaking, message):
    """v compiles for sm_90a without spilling; with `breaking` (parameters its rule refuses, past the Python
    rules) NVRTC stops at the static_assert that mirrors the rule."""
    assert compile_variant(v, "sm_90a").resources.local == 0
    bad = Variant(name="unchecked", family=v.family, dtype="float16", acc="float32", params={**v.params, **breaking})
    with pytest.raises(CompileError, match=message):
        compile_variant(bad, "sm_90a")


def test_pingpong_consumers_own_whole_tiles():
    """With PINGPONG a consumer holds the whole BM-row tile (so BM = 64 is allowed with two consumers),
    only its own 4 warps release a stage, and the turns are named barriers of both consumers' 256 threads."""
    pp = make_variant(WGMMA, "pp", "float16", {**catalogue()[FLAGSHIP].params, "BM": 64, "BN": 192, "STAGES": 6,
                                               "PINGPONG": 1})
    source = render(pp)
    assert "constexpr int PINGPONG = 1, CLUSTER = 1, EPI_BOXES = 2;" in source
    assert "named_barrier_sync(ORDER + consumer, 256)" in source and "named_barrier_arrive(ORDER + (1 - consumer), 256)" in source
    assert compile_variant(pp, "sm_90a").resources.local == 0
    assert "constexpr int PINGPONG = 0, CLUSTER = 1, EPI_BOXES = 2;" in render(catalogue()[FLAGSHIP])


def test_pingpong_static_assert_mirrors_the_rule():
    good = catalogue()["hgemm_wgmma_m64n128k16_tile128x128_stages5_ws2_pingpong"]
    bad = Variant(name="unchecked", family=WGMMA, dtype="float16", acc="float32",
                  params={**good.params, "SPLIT_K": 0})
    with pytest.raises(CompileError, match="PINGPONG needs CONSUMERS = 2 and SPLIT_K = 1"):
        compile_variant(bad, "sm_90a")


def test_tensor_map_buffer_is_one_aligned_128_byte_value():
    m = tma.empty_map()
    assert m.shape == (1,) and m.dtype.itemsize == 128 and m.nbytes == 128
    assert m.ctypes.data % 64 == 0


@pytest.mark.parametrize("kwargs,error", [
    (dict(ptr=8), InputError),                          # base not 16-byte aligned
    (dict(ld=100), InputError),                         # 200-byte rows: stride not a multiple of 16
    (dict(ld=40), InputError),                          # ld < cols
    (dict(rows=0), InputError),
    (dict(box_cols=128), ValueError),                   # 256-byte box rows exceed the 128-byte swizzle
    (dict(box_rows=512), ValueError),
    (dict(dtype="float64"), InputError),
])
def test_tensor_map_rules_are_checked_before_the_driver(kwargs, error):
    args = dict(ptr=1 << 20, dtype="float16", rows=100, cols=64, ld=64, box_rows=64, box_cols=64)
    args.update(kwargs)
    with pytest.raises(error):
        tma.check_2d(**args)


def test_tensor_map_rules_accept_padded_operands():
    tma.check_2d(1 << 20, "bfloat16", 1, 8, 8, 128, 64)        # one row, box larger than the matrix
    tma.check_2d(1 << 20, "float16", 4095, 4096, 4104, 128, 64)
    assert np.dtype(tma.MAP_DTYPE).itemsize == tma.TENSOR_MAP_BYTES


KMAJOR = family("wgmma_kmajor")
KMAJOR_NAMES = [n for n, v in catalogue().items() if v.family is KMAJOR]


def test_every_entry_has_a_k_major_twin_of_the_same_parameters():
    """x @ W.T (W stored N×K) is a column-major B: wgmma_kmajor reads it in place, wgmma would copy it."""
    assert WGMMA.b_layout is None and KMAJOR.b_layout == "col" and KMAJOR.template == WGMMA.template
    twins = {n.replace("gemm_wgmma_", "gemm_wgmma_kmajor_"): catalogue()[n] for n in NAMES}
    assert sorted(twins) == sorted(KMAJOR_NAMES)
    for name, v in twins.items():
        assert (catalogue()[name].dtype, catalogue()[name].params) == (v.dtype, v.params)


@pytest.mark.parametrize("name", KMAJOR_NAMES[:4] + [n for n in KMAJOR_NAMES if "cluster2" in n][:2])
def test_kmajor_reads_b_without_the_transpose_bit(name):
    src = render(catalogue()[name])
    assert "constexpr bool B_KMAJOR = 1;" in src and "wgmma_async<B_KMAJOR ? 0 : 1>" in src
    assert "constexpr bool B_KMAJOR = 0;" in render(catalogue()[name.replace("_kmajor", "")])
    if "cluster2" in name:  # each block multicasts its rows of n of every box
        assert "tile.col0 + rank * B_SHARE_ROWS" in src


def test_kmajor_clusters_share_rows_of_b():
    p = {**catalogue()[FLAGSHIP].params, "CLUSTER": 2}
    make_variant(KMAJOR, "ok", "float16", p)  # one 64-wide k box: split by rows, not by boxes
    make_variant(KMAJOR, "ok_splitk", "float16", {**p, "SPLIT_K": 0})
    with pytest.raises(ConfigError, match="1 with PINGPONG") as e:
        make_variant(KMAJOR, "bad", "float16", {**p, "BN": 128, "PINGPONG": 1})
    assert e.value.param == "CLUSTER"


def _maps_of(monkeypatch, v, ldb):
    """The keyword arguments of the tensor maps (A, B, C) that make_args builds for v at 300×1000×4096."""
    from cupy_gemm.families import wgmma
    seen = []
    monkeypatch.setattr(tma, "tensor_map_2d", lambda ptr, dtype, **kw: seen.append(kw) or b"\0" * 128)
    Fake = type("Fake", (), {"data": type("D", (), {"ptr": 0})()})
    wgmma.make_args(v, Fake, Fake, Fake, 300, 1000, 4096, 4096, ldb, 1000, 1.0, 0.0)
    return seen


def test_clusters_of_four_share_rows_of_k_where_the_boxes_do_not_divide(monkeypatch):
    """An N-major B stage of 64×192 has three boxes: four blocks each multicast 16 rows of k of all three,
    and B's map boxes are that tall; where the boxes divide (128×256 in fours) each takes whole boxes."""
    v = catalogue()["hgemm_wgmma_m64n192k16_tile64x192_stages6_ws1_cluster4"]
    src = render(v)
    assert "constexpr int B_SHARE_K = B_KMAJOR || B_BOXES % CLUSTER == 0 ? BK : BK / CLUSTER;" in src
    assert "kb * BK + k_row, (1 << CLUSTER) - 1" in src
    for params, box_rows in ((v.params, 16), ({**catalogue()[FLAGSHIP].params, "CLUSTER": 4}, 64)):
        b = _maps_of(monkeypatch, make_variant(WGMMA, "c4", "float16", params), ldb=1000)[1]
        assert (b["rows"], b["box_rows"], b["box_cols"]) == (4096, box_rows, 64)


def test_clusters_that_split_k_keep_a_workspace_tile_per_block():
    """With split-K a cluster's blocks take one K slice of a cluster tile each; every block's part is its own
    workspace tile (cluster tile * CLUSTER + rank), so the launcher counts the cluster tiles' parts, which
    exceed the plain tiles where M ends inside a cluster tile (150 rows: 3 rows of 64×64 tiles, 2 of pairs)."""
    v = catalogue()["hgemm_wgmma_m64n64k16_tile64x64_bk128_stages6_ws1_cluster2_splitk"]
    assert "(tile_id - (tiles - split_tiles)) * CLUSTER + rank" in render(v)
    cfg = launch.launch_config(v, 150, 1024, 8192, 132)
    assert cfg.splits > 1 and cfg.cluster == 2 and cfg.tiles == 3 * 16 and cfg.split_tiles == 2 * 2 * 16
    assert cfg.grid[0] <= 132 and cfg.grid[0] % 2 == 0
    assert cfg.workspace == split_k_workspace(2 * 2 * 16, cfg.splits, 64 * 64)
    with pytest.raises(ConfigError, match="1 with PINGPONG") as e:
        make_variant(WGMMA, "cp", "float16", {**catalogue()[FLAGSHIP].params, "BN": 128, "CLUSTER": 2, "PINGPONG": 1})
    assert e.value.param == "CLUSTER"


def test_kmajor_tensor_map_is_over_b_transposed_in_cluster_shares(monkeypatch):
    for name, rows in (("hgemm_wgmma_kmajor_m64n256k16_stages4_ws2", 256),
                       ("hgemm_wgmma_kmajor_m64n256k16_stages4_ws2_cluster2", 128),
                       ("sgemm_wgmma_m64n256k8_tf32_stages3_ws2", 256),  # families that share make_args
                       ("sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2", 128)):
        b = _maps_of(monkeypatch, catalogue()[name], ldb=4096)[1]
        assert (b["rows"], b["cols"], b["ld"], b["box_rows"]) == (1000, 4096, 4096, rows)


def test_a_lands_in_copies_of_64_rows_and_none_wholly_below_m(monkeypatch):
    """A's map moves A_COPY_ROWS rows a copy, as the template loads them; the producer leaves out the copies
    of a tile wholly below M and expects that many fewer bytes (TMA's zero fill of rows past the edge cost
    the 128×128 tiles half their time again at 769 rows on an H100). The TF32-swap and 3xTF32 templates,
    which share the maps, keep BM-row copies."""
    from cupy_gemm.families import wgmma
    src = render(catalogue()[FLAGSHIP])
    assert f"constexpr int A_COPY_ROWS = {wgmma.A_COPY_ROWS};" in src
    loop = src[src.index("const int a_rows = "):src.index("if constexpr (B_KMAJOR && !CONVERTERS)")]
    assert "mbar_arrive_expect_tx(full(stage), STAGE_BYTES - (BM - a_rows) * 128 * (BK / SW_ELEMS));" in loop
    assert "for (int r = 0; r < a_rows; r += A_COPY_ROWS)" in loop and "tile.row0 + r" in loop
    for name, rows in ((FLAGSHIP, wgmma.A_COPY_ROWS), ("hgemm_wgmma_m64n128k16_tile256x128_stages4_ws2", 64),
                       ("sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2", 128),
                       ("sgemm_wgmma_m64n128k8_tf32_swap_tile128x128_stages6_ws2_splitk", 128)):
        assert _maps_of(monkeypatch, catalogue()[name], ldb=1000)[0]["box_rows"] == rows, name

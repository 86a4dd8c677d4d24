"""The Hopper decode families on the CPU (decode: B row-major; decode_kmajor: B column-major, x @ W.T): what
they declare and refuse, their grid of whole clusters, the layout claims of their template (fragment loads
from the swizzled boxes hit distinct banks; the blocks of a cluster store every column of C once), and the
dispatch's B-layout rule that hands a column-major B to the K-major twin."""
import pytest
from family_rules import b_placement, check_rule, check_template_refuses, template_text

from cupy_gemm import dispatch, launch, placement_rules
from cupy_gemm.families import decode
from cupy_gemm.errors import ConfigError, InputError
from cupy_gemm.registry import catalogue, family, make_variant
from cupy_gemm.render import render

DECODE, KMAJOR = family("decode"), family("decode_kmajor")
NAMES = [n for n, v in catalogue().items() if v.family is DECODE]
KMAJOR_NAMES = [n for n, v in catalogue().items() if v.family is KMAJOR]
TEMPLATE = template_text("decode.cu.j2")
BASE = {"BN": 64, "BK": 64, "STAGES": 8, "WARPS": 4, "CS": 8}


def test_family_declares_few_rows_clusters_and_tma():
    assert DECODE.needs_sm90a and DECODE.abi == "tma" and DECODE.pdl and not DECODE.split_k
    assert set(DECODE.dtypes) == {"float16", "bfloat16", "float32"} and DECODE.dtypes["float32"] == ("float32", "tf32")
    for name in NAMES:  # the name says the rows past 16, columns per cluster, blocks per cluster and stages
        v = catalogue()[name]
        p = v.params
        rows, bk = f"_r{p['ROWS']}" if p["ROWS"] != 16 else "", "_bk128" if p["BK"] == 128 else ""
        assert f"{rows}_n{p['BN']}_c{p['CS']}{bk}_stages{p['STAGES']}" in name and v.max_rows() == p["ROWS"]
        assert DECODE.cluster(p) == p["CS"] and DECODE.tile(p) == (p["ROWS"], p["BN"] // p["CS"])
    assert {catalogue()[n].params["ROWS"] for n in NAMES} == {8, 16, 32, 64}
    assert all(catalogue()[n].dtype == catalogue()[n].acc == "float32" for n in NAMES if "_r8_" in n)  # exact fp32
    assert DECODE.b_layout is None and KMAJOR.b_layout == "col"


def test_every_entry_has_a_k_major_twin_of_the_same_parameters():
    twins = {n.replace("gemv_decode_", "gemv_decode_kmajor_"): catalogue()[n] for n in NAMES}
    assert sorted(twins) == sorted(KMAJOR_NAMES)
    for name, v in twins.items():
        t = catalogue()[name]
        assert (t.dtype, t.acc, t.params) == (v.dtype, v.acc, v.params)


@pytest.mark.parametrize("dtype,acc,params,param,words", [
    ("float16", "float32", {"BN": 96}, "BN", "128-byte swizzle row"),
    ("float16", "float32", {"BN": 64, "WARPS": 8}, "BN", "each warp takes whole mma n tiles"),
    ("float32", "tf32", {"BN": 48}, "BN", "128-byte swizzle row"),
    ("float32", "tf32", {"BN": 32, "WARPS": 8}, "BN", "each warp takes whole mma n tiles"),
    ("float32", "float32", {"BN": 96, "STAGES": 4}, "BN", "BN / 4 must divide the consumer threads"),
    ("float32", "float32", {"BN": 32, "WARPS": 8}, "BK", "a multiple of 4 times the k-slices"),
    ("float32", "float32", {"BN": 64, "STAGES": 2, "WARPS": 8}, "STAGES", "for the k-slice sums, which reuse the ring"),
    ("float32", "float32", {"MMA": 1}, "MMA", "MMA = 1 (wgmma) takes float16 or bfloat16"),
    ("float32", "tf32", {"MMA": 1}, "MMA", "MMA = 1 (wgmma) takes float16 or bfloat16"),
    ("bfloat16", "float32", {"MMA": 1, "WARPS": 2}, "MMA", "and warpgroups: WARPS a multiple of 4"),
    ("float16", "float32", {"ROWS": 32}, "ROWS", "one m16 tile"),
    ("float16", "float32", {"ROWS": 8}, "ROWS", "one m16 tile"),  # 8 rows: exact float32 only
    ("float32", "tf32", {"ROWS": 8}, "ROWS", "one m16 tile"),
    ("float32", "tf32", {"ROWS": 64, "BN": 64, "STAGES": 4}, "ROWS", "one m16 tile"),
    ("float16", "float32", {"ROWS": 128, "BN": 256, "WARPS": 4, "MMA": 1, "CS": 1, "STAGES": 2}, "WARPS",
     "more warpgroups"),
])
def test_it_refuses_parameters_that_break_its_constraints(dtype, acc, params, param, words):
    check_rule(DECODE, dtype, {**BASE, **params}, param, words, TEMPLATE, acc=acc)


def test_a_k_major_b_moves_in_boxes_of_at_most_256_rows():
    check_rule(KMAJOR, "float16", {**BASE, "BN": 512, "STAGES": 2, "WARPS": 8}, "BN", "at most 256",
               TEMPLATE)


def test_it_refuses_rings_that_overflow_shared_memory():
    with pytest.raises(ConfigError) as e:
        make_variant(DECODE, "bad", "float16", {**BASE, "BN": 512, "STAGES": 16})
    assert e.value.param == "smem"


def test_smem_counts_stages_the_cluster_tile_and_barriers():
    base = {**BASE, "ROWS": 16}
    assert decode.smem_bytes(base, "float16", "float32") == 8 * (16 * 64 + 64 * 64) * 2 + 16 * 64 * 4 + 8 * 16 + 1024
    assert decode.smem_bytes({**base, "CS": 1}, "float16", "float32") == 8 * (16 * 64 + 64 * 64) * 2 + 8 * 16 + 1024
    rows64 = {**base, "ROWS": 64, "BN": 256, "STAGES": 4, "CS": 2}  # A's 64 rows in every stage and the tile
    assert decode.smem_bytes(rows64, "float16", "float32") == 4 * (64 * 64 + 64 * 256) * 2 + 64 * 256 * 4 + 4 * 16 + 1024


def test_wgmma_accumulators_are_rows_over_two_per_slice_of_a_warpgroup():
    assert decode.wgmma_accumulators(64, 256, 16) == 32
    assert decode.wgmma_accumulators(64, 256, 4) == 128
    assert decode.wgmma_accumulators(128, 128, 4) == 128
    assert decode.wgmma_accumulators(128, 256, 4) == 256  # refused (above)


def test_the_template_refuses_more_rows_on_mma_sync():
    check_template_refuses(DECODE, "float16", "float32", {**BASE, "ROWS": 32}, "one m16 tile", arch="sm_90a")


@pytest.mark.parametrize("m,n,k,blocks", [(16, 1024, 4096, 128), (1, 1000, 4096, 128), (16, 8, 64, 8),
                                          (3, 4095, 100, 64 * 8)])
def test_the_grid_is_whole_clusters_of_bn_columns(m, n, k, blocks):
    cfg = launch.launch_config(catalogue()["hgemv_decode_n64_c8_stages8"], m, n, k, sm_count=132)
    assert cfg.grid == (blocks, 1, 1) and cfg.cluster == 8 and cfg.splits == 1 and cfg.workspace == 0


def _swizzled(row, chunk):  # the template's swizzled(): byte offset of a 16-byte chunk in a box
    return row * 128 + ((chunk ^ (row & 7)) << 4)


def _element(box_bytes, row, col, size):  # the template's element(): byte offset of (row, col) in a stage
    box, epc = 128 // size, 16 // size
    return (col // box) * box_bytes + _swizzled(row, col % box // epc) + (col % epc) * size


def _tf32_column(tile, lane_col):  # the template's tf32_column()
    return (tile // 4) * 32 + 4 * (tile % 4) + lane_col % 4 + 16 * (lane_col // 4)


def test_the_rendered_kernel_holds_the_layout_tested_below():
    source = render(catalogue()[NAMES[0]])
    assert "return row * 128 + ((chunk ^ (row & 7)) << 4);" in source
    assert "return (col / BOX) * box_bytes + swizzled(row, col % BOX / EPC) + (col % EPC) * ELEM_BYTES;" in source
    assert "constexpr int ELEM_BYTES = sizeof(T_IN);" in source
    assert "return (tile / 4) * BOX + 4 * (tile % 4) + (l % 4) + 16 * (l / 4);" in source
    assert "element(A_BOX_BYTES, r + 8 * (j % 2), kk + 8 * (j / 2))" in source
    assert "element(A_BOX_BYTES, r + 8 * (j % 2), kk + 4 * (j / 2))" in source
    assert "return B_KMAJOR ? element(B_BOX_BYTES, n, k) : element(B_BOX_BYTES, k, n);" in source
    assert "ldmatrix_x4_trans(b[0], b[1], b[2], b[3], b_stage + b_element(k + r, n))" in source
    assert "ldmatrix_x4(b[0], b[1], b[2], b[3], b_stage + b_element(k, n + r))" in source
    assert "ldmatrix_x2(b[0], b[1], b_stage + b_element(kk + 4 * (j % 2), w * WN + 8 * t + r))" in source
    assert "lds_f32(b_stage + b_element(kk + q, n))" in source and "element(A_BOX_BYTES, row, k)" in source
    assert "lds_f32x4(b_stage + b_element(k, cg + CG * x))" in source
    assert "lds_f32x4(b_stage + b_element(k + x, 4 * cg))" in source
    assert "constexpr bool B_KMAJOR = 0;" in source
    assert "constexpr bool B_KMAJOR = 1;" in render(catalogue()[KMAJOR_NAMES[0]])


@pytest.mark.parametrize("name", [n for n in NAMES + KMAJOR_NAMES if "_wgmma_" in n])
def test_wgmma_entries_render_the_swapped_product(name):
    """B's 64-column slices as wgmma's A (M-major, the transpose bit, where B is row-major), A's ROWS rows as
    its N; an entry of 16 rows has an mma.sync twin of the same layout."""
    v = catalogue()[name]
    source = render(v)
    ab = {"float16": "f16", "bfloat16": "bf16"}[v.dtype]
    rows = v.params["ROWS"]
    assert f"wgmma.mma_async.sync.aligned.m64n{rows}k16.f32.{ab}.{ab}" in source and '"n"(TRANS_A)' in source
    assert "wgmma_async<0, B_KMAJOR ? 0 : 1>(acc[j], desc_w, desc_x, 1);" in source
    assert v.params["MMA"] == 1 and v.params["WARPS"] == v.params["BN"] // 16  # a warpgroup per 64 columns
    assert "ldmatrix" not in source.split("gemm_kernel(")[1]  # no fragment loads on the consumers
    if rows == 16:
        mma_twin = catalogue()[name.replace("_wgmma_", "_")]
        assert {**mma_twin.params, "MMA": 1, "WARPS": v.params["WARPS"]} == v.params


@pytest.mark.parametrize("bn,warps", [(64, 4), (256, 8), (128, 4)])
def test_ldmatrix_phases_hit_distinct_banks(bn, warps):
    """ldmatrix serves 8 lanes (one 8x8 matrix) at a time: their 8 row addresses must fall in 8 distinct
    16-byte bank groups, for A's fragment and for every B fragment of every warp and k step."""
    wn = bn // warps
    for kk in range(0, 128, 16):
        for j in range(4):
            rows = [r + 8 * (j % 2) for r in range(8)]
            a = {(_swizzled(row, (kk % 64 + 8 * (j // 2)) // 8) // 16) % 8 for row in rows}
            assert len(a) == 8
            for w in range(warps):
                for p in range(wn // 16):
                    n = w * wn + 16 * p + 8 * (j // 2)
                    b = {(_swizzled(kk + r + 8 * (j % 2), n % 64 // 8) // 16) % 8 for r in range(8)}
                    assert len(b) == 8, (bn, warps, kk, j, w, p)


@pytest.mark.parametrize("bn,warps", [(64, 4), (256, 8), (128, 4)])
def test_k_major_ldmatrix_phases_hit_distinct_banks(bn, warps):
    """B column-major: a box is BN rows of n, 128 bytes of k each. ldmatrix (no .trans) reads 8 consecutive
    rows of n at one k chunk: 16-bit (m16n8k16: chunks k 0-7 / 8-15) and tf32 (m16n8k8: k 0-3 / 4-7)."""
    wn = bn // warps
    for kk in range(0, 64, 16):
        for j in range(4):
            for w in range(warps):
                for p in range(wn // 16):
                    n = w * wn + 16 * p + 8 * (j // 2)
                    assert len({(_element(bn * 128, n + r, kk + 8 * (j % 2), 2) // 16) % 8 for r in range(8)}) == 8
    for kk in range(0, 32, 8):
        for j in range(2):
            for t in range(bn // 8):
                assert len({(_element(bn * 128, 8 * t + r, kk + 4 * j, 4) // 16) % 8 for r in range(8)}) == 8


@pytest.mark.parametrize("bn,warps", [(64, 4), (128, 4), (32, 4)])
def test_tf32_loads_hit_distinct_banks(bn, warps):
    """tf32: A's ldmatrix rows fall in 8 distinct chunks; every 32-bit load of B by a warp (lane g, q reads
    k row q or q + 4 of column tf32_column(tile, g)) hits 32 distinct banks."""
    wn = bn // warps
    for kk in range(0, 64, 8):
        for j in range(4):
            a = {(_element(16 * 128, r + 8 * (j % 2), kk + 4 * (j // 2), 4) // 16) % 8 for r in range(8)}
            assert len(a) == 8
        for w in range(warps):
            for t in range(wn // 8):
                for dk in (0, 4):
                    banks = {(_element(64 * 128, kk + q + dk, _tf32_column(w * (wn // 8) + t, g), 4) // 4) % 32
                             for g in range(8) for q in range(4)}
                    assert len(banks) == 32, (bn, warps, kk, w, t)


@pytest.mark.parametrize("bn,warps", [(64, 4), (128, 4), (64, 8)])
def test_float32_float4_loads_are_one_wavefront_a_phase(bn, warps):
    """float32 on CUDA cores: a 16-byte load is served 8 lanes at a time. Their B float4s (k row, columns
    4cg..) fill 8 distinct chunks, and their A float4 is one address (a broadcast)."""
    cgs, threads = bn // 4, 32 * warps
    ks = 64 // (threads // cgs)
    for phase in range(threads // 8):
        lanes = range(8 * phase, 8 * phase + 8)
        for k4 in range(0, ks, 4):
            for i in range(4):
                b = {(_element(64 * 128, (t // cgs) * ks + k4 + i, 4 * (t % cgs), 4) // 16) % 8 for t in lanes}
                assert len(b) == 8
                # K-major: lane t reads k .. k + 3 of column cg + CG·i, rows of n consecutive over the lanes
                kb = {(_element(bn * 128, t % cgs + cgs * i, (t // cgs) * ks + k4, 4) // 16) % 8 for t in lanes}
                assert len(kb) == 8
            assert len({_element(16 * 128, 3, (t // cgs) * ks + k4, 4) for t in lanes}) == 1


@pytest.mark.parametrize("bn,cs,warps", [(64, 8, 4), (256, 8, 8), (128, 4, 4), (64, 2, 4)])
def test_every_column_is_multiplied_by_one_warp_and_stored_by_one_block(bn, cs, warps):
    wn = bn // warps
    multiplied = sorted(w * wn + 8 * t + 2 * q + e % 2 for w in range(warps) for t in range(wn // 8)
                        for q in range(4) for e in range(2))
    assert multiplied == list(range(bn))
    tf32 = sorted(_tf32_column(w * (wn // 8) + t, 2 * q + e % 2) for w in range(warps) for t in range(wn // 8)
                  for q in range(4) for e in range(2))
    assert tf32 == list(range(bn))
    loaded = sorted(_tf32_column(tile, g) for tile in range(bn // 8) for g in range(8))  # B's columns, once each
    assert loaded == list(range(bn))
    stored = sorted(rank * (bn // cs) + i for rank in range(cs) for i in range(bn // cs))
    assert stored == list(range(bn))


@pytest.mark.parametrize("name", NAMES)
def test_a_column_major_b_goes_to_the_k_major_twin(name):
    """x @ W.T (W stored N×K): the decode entry would copy W row-major on every call; its twin reads it."""
    v = catalogue()[name]
    key = "tf32" if v.acc == "tf32" else v.dtype
    size = 4 if v.dtype == "float32" else 2
    decision = dispatch.Decision(name, "a table said so")
    gpu = dispatch.Gpu("unknown GPU", 90)
    m = min(16, v.max_rows())
    col = placement_rules.b_layout(gpu, key, decision, b_placement(m, 4096, 4096, "col", size), ())
    twin = catalogue()[col.variant]
    assert twin.family is KMAJOR and "B-layout rule" in col.reason
    assert (twin.params, twin.acc) == (v.params, v.acc)
    assert b_placement(m, 4096, 4096, "col", size).for_variant(v).copy_b
    assert not b_placement(m, 4096, 4096, "col", size).for_variant(twin).copies
    row = b_placement(m, 4096, 4096, "row", size)
    assert placement_rules.b_layout(gpu, key, decision, row, ()) is decision


def test_the_default_reads_a_linear_layers_weight_in_place():
    """The whole choice, table included, for x @ W.T on the H100: a K-major few-rows kernel at every row count."""
    h100 = dispatch.Gpu("NVIDIA H100 80GB HBM3", 90, 132)
    for key, size in (("float16", 2), ("bfloat16", 2), ("float32", 4), ("tf32", 4)):
        for m, n in ((1, 4096), (4, 4096), (16, 1024), (16, 4096), (8, 14336)):
            placement = b_placement(m, n, 4096, "col", size)
            v = catalogue()[dispatch.choose(h100, key, m, n, 4096, placement=placement).variant]
            assert v.family.b_layout == "col" and not placement.for_variant(v).copies, (key, m, n, v.name)


def test_coordinates_past_32_bits_are_refused_before_any_tensor_map():
    v = catalogue()["hgemv_decode_n64_c8_stages8"]
    with pytest.raises(InputError, match="below 2\\*\\*31"):
        decode.make_args(v, None, None, None, 16, 64, 2**31 - 10, 2**31, 64, 64, 1.0, 0.0)


def test_a_stage_read_by_ordinary_loads_is_fenced_before_the_copy_engine_refills_it():
    """The consumers read stages with ldmatrix (the generic proxy) and TMA refills them (the async proxy):
    the mbarrier orders only the first, so each consumer warp fences its reads before it releases a stage
    (without it about one launch in 400 of the 8-block clusters summed a half-refilled stage on an H100)."""
    ring = template_text("common/decode_ring.cuh")  # decode.cu.j2's and decode_fp8.cu.j2's ring
    consume = ring[ring.index("void consume("):]
    release = consume.index("release_read_stage(empty_bar(bars, s), lane);")
    assert consume.index("multiply(stages + s * STAGE_BYTES);") < release
    tma = template_text("common/tma.cuh")
    helper = tma[tma.index("void release_read_stage("):]
    fence, arrive = helper.index("fence_stage_reads();"), helper.index("mbar_arrive(empty_bar);")
    assert fence < helper.index("__syncwarp();") < arrive
    assert "fence.proxy.async.shared::cta" in tma

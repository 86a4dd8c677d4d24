"""Split-K launches as pure functions (no GPU): the grid, the splits the policy picks, the workspace bytes;
and the split-K families' catalogue entries and templates (SPLIT_K = 1 compiles the steps out)."""
import pytest

from cupy_gemm import launch, registry, split_policy
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import ConfigError
from cupy_gemm.registry import make_variant
from cupy_gemm.render import render

CATALOGUE = registry.catalogue()
SPLIT_FAMILIES = ("wgmma", "wgmma_tf32", "sgemm_simt", "mma")
# stream-K entries (SPLIT_K = 0 too) take their splits from their partition: tests/test_family_wgmma.py;
# the `_rows32` entries split as their plain twins for at most 32 rows: tests/test_family_mma.py
NEW = [n for n, v in CATALOGUE.items() if v.family.name in SPLIT_FAMILIES and v.params["SPLIT_K"] != 1
       and not v.family.stream_k(v.params) and v.max_rows() is None]
OLD = [n for n, v in CATALOGUE.items() if v.family.name in SPLIT_FAMILIES and v.params["SPLIT_K"] == 1]
SMS = 132


def _with_splits(name, splits):
    v = CATALOGUE[name]
    return make_variant(v.family, f"{name}_split{splits}", v.dtype, {**v.params, "SPLIT_K": splits}, v.acc)


def test_families_split_and_entries_say_so():
    for fam in SPLIT_FAMILIES:
        assert registry.family(fam).split_k
        assert registry.family(fam).param_index["SPLIT_K"].default == 1  # entries without it stay plain
    assert OLD and NEW
    for name in NEW:
        assert name.endswith("_splitk") and CATALOGUE[name].params["SPLIT_K"] == 0, name
    for name in OLD:
        assert "splitk" not in name


@pytest.mark.parametrize("family,dtype,acc,tiles", [
    ("wgmma", "float16", None, [(64, 64), (64, 128), (64, 256), (128, 128)]),
    ("wgmma", "bfloat16", None, [(64, 64), (64, 128), (64, 256), (128, 128)]),
    ("wgmma_tf32", "float32", "tf32", [(64, 64), (64, 128), (64, 256), (128, 128)]),
    ("sgemm_simt", "float32", None, [(64, 64), (32, 64), (64, 32), (128, 64)]),
    ("mma", "float32", "tf32", [(64, 64), (64, 128)]),
    ("mma", "float16", None, [(64, 128)]),
    ("mma", "bfloat16", None, [(64, 128)]),
])
def test_small_tiles_are_catalogued(family, dtype, acc, tiles):
    have = {registry.family(family).tile(CATALOGUE[n].params) for n in NEW
            if CATALOGUE[n].family.name == family and CATALOGUE[n].dtype == dtype}
    assert set(tiles) <= have
    if family.startswith("wgmma"):  # BM = 64 tiles run one consumer warpgroup
        assert all(CATALOGUE[n].params["CONSUMERS"] == 1 for n in NEW
                   if CATALOGUE[n].family.name == family and CATALOGUE[n].params["BM"] == 64)


def test_split_k_is_range_checked():
    v = CATALOGUE[NEW[0]]
    for bad in (-1, 65):
        with pytest.raises(ConfigError) as info:
            make_variant(v.family, "bad", v.dtype, {**v.params, "SPLIT_K": bad}, v.acc)
        assert info.value.param == "SPLIT_K"


@pytest.mark.parametrize("name", NEW)
def test_grid_and_workspace_follow_the_splits(name):
    v = CATALOGUE[name]
    bm, bn = v.family.tile(v.params)
    m, n, k = 100, 1000, 5000
    tiles = -(-m // bm) * -(-n // bn)
    for splits in (2, 3, 7):
        cfg = launch.launch_config(_with_splits(name, splits), m, n, k, SMS)
        assert cfg.tiles == tiles and cfg.splits == splits
        if v.family.persistent:  # persistent: one block per SM at most, walking tiles × splits units
            assert cfg.grid == (min(tiles * splits, SMS), 1, 1)
        else:  # one block per (tile, split): the split in blockIdx.y
            assert cfg.grid == (tiles, splits, 1)
        counters = -(-tiles * 36 // 256) * 256  # each tile's counter and 8 of its split groups'
        assert cfg.workspace == counters + splits * tiles * bm * bn * 4
        assert counters % 256 == 0 and cfg.workspace % 4 == 0


@pytest.mark.parametrize("name", NEW)
def test_splits_never_exceed_the_k_blocks(name):
    bk = CATALOGUE[name].params["BK"]
    for splits in (2, 7, 64):
        assert launch.launch_config(_with_splits(name, splits), 50, 50, bk - 1, SMS).splits == 1  # K < BK
        assert launch.launch_config(_with_splits(name, splits), 50, 50, 3 * bk + 1, SMS).splits == min(splits, 4)


@pytest.mark.parametrize("name", OLD)
def test_plain_entries_never_split(name):
    """Counters only; none where SPLIT_K = 1 drops the split-K arguments too (mma: the plain kernel)."""
    v = CATALOGUE[name]
    for m, n, k in [(16, 4096, 4096), (1, 1, 100000), (4096, 4096, 4096)]:
        cfg = launch.launch_config(v, m, n, k, SMS)
        counters = -(-cfg.tiles * 36 // 256) * 256 if v.family.takes_split_k_args(v.params) else 0
        assert cfg.splits == 1 and cfg.workspace == counters


@pytest.mark.parametrize("name", NEW)
def test_policy_fills_the_gpu_for_small_m(name):
    """A small M×N with a long K is split so that tiles × splits busy the SMs without a second wave,
    each split keeping at least MIN_K_PER_SPLIT of K (or its family's least)."""
    v = CATALOGUE[name]
    k = 4096
    cfg = launch.launch_config(v, 16, 1024, k, SMS)
    slots = SMS * launch.resident_blocks(v)
    min_k = split_policy.min_k_per_split(v)
    assert cfg.splits > 1 and cfg.tiles * cfg.splits <= slots
    assert cfg.splits * min_k <= k and cfg.splits <= launch.MAX_SPLITS


@pytest.mark.parametrize("name,shape,registers,splits", [
    # memory-bound on the tensor cores: 64 tiles already draw what HBM gives, splitting only adds partials
    ("hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk", (64, 4096, 4096), None, 1),
    ("hgemm_wgmma_m64n128k16_tile128x128_stages6_ws2_splitk", (128, 4096, 11008), None, 2),
    # CUDA cores: the multiply-adds are the limit, so every resident block slot is worth filling
    ("sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk", (64, 4096, 4096), 117, 8),
    ("sgemm_t_16x8_sliced_k8_f32x4_bcf_dbuf_offset_swizzle_splitk", (128, 4096, 11008), 255, 8),
    # no second wave: 48 tiles take 2 splits (59.9 µs; 74.3 at the 5 the model preferred before the cap) and
    # 72 tiles stay whole (20.3 µs; 26.0 at 2 splits)
    ("sgemm_wgmma_m64n128k8_tf32_swap_tile128x128_stages6_ws2_splitk", (1536, 512, 7168), None, 2),
    ("hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk", (512, 576, 7168), None, 1),
    # unaligned loaders fill the block slots their registers leave (5 of 32×64 at 95, 3 of tf32's 64×64 at
    # 148): 18.6 µs at 10 splits (22.5 at 12), tf32 17.5 at 6 (24.3 at 8)
    ("sgemm_t_4x4_tile32x64_sliced_k16_f32x4_bcf_dbuf_offset_unaligned_splitk", (17, 4095, 1000), 95, 10),
    ("sgemm_mma_m16n8k8_tf32_mma2x2_warp2x4x2_stages3_unaligned_splitk", (17, 4095, 1000), 148, 6),
])
def test_policy_picks_what_measured_fastest(name, shape, registers, splits):
    """Forced split counts on an H100 (examples/splitk_timing.py --splits, or a launch's split count
    overridden): these were the fastest."""
    assert launch.launch_config(CATALOGUE[name], *shape, SMS, registers).splits == splits


H200_MEMORY = 4333  # devices.memory_bytes_per_ns on an H200 (0.9 of its 4.8 TB/s)


@pytest.mark.parametrize("name,shape,h100,h200", [
    # H200, tf32: 64 tiles of 128×128 in 2 splits ran 251 µs against 407 whole (3 splits: 324), and 32 tiles
    # in 3 splits 85.5 against 95.8 at 2; with an H100's ~3 TB/s the model expects HBM to stop both sooner
    ("sgemm_wgmma_m64n128k8_tf32_swap_tile128x128_stages6_ws2_splitk", (128, 8192, 28672), 1, 2),
    ("sgemm_wgmma_m64n128k8_tf32_swap_tile128x128_stages6_ws2_splitk", (128, 4096, 14336), 2, 3),
])
def test_policy_weighs_the_gpus_own_memory(name, shape, h100, h200):
    """The HBM bound of the split model is the device's bandwidth where the launcher knows it
    (devices.memory_bytes_per_ns), an H100's where it does not."""
    v = CATALOGUE[name]
    assert launch.launch_config(v, *shape, SMS).splits == h100
    assert launch.launch_config(v, *shape, SMS, memory_bytes_per_ns=H200_MEMORY).splits == h200


def test_memory_bandwidth_comes_from_the_device(monkeypatch):
    cupy = pytest.importorskip("cupy")
    from cupy_gemm import devices
    props = {7: {"memoryClockRate": 2619000, "memoryBusWidth": 5120}, 8: {}}  # an H100 SXM; a runtime without them
    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceProperties", lambda i: props[i])
    monkeypatch.setattr(devices, "_properties", {})
    assert devices.memory_bytes_per_ns(7) == pytest.approx(0.9 * 3352.32)
    assert devices.memory_bytes_per_ns(8) is None


def test_only_persistent_splits_stay_in_one_round():
    """A persistent kernel's splits never outnumber its blocks; a CUDA-core kernel's may fill a second
    wave (H100, float32 128×10240×8192 on 160 tiles of 128×64, two blocks an SM: 0.85× cupy.matmul at the
    model's 4 splits, 0.54× unsplit, which one wave would have forced)."""
    cuda_cores = CATALOGUE["sgemm_t_8x4_tile128x64_sliced_k16_f32x4_bcf_dbuf_offset_splitk"]
    cfg = launch.launch_config(cuda_cores, 128, 10240, 8192, SMS, 123)
    assert cfg.splits == 4 and cfg.tiles * cfg.splits > SMS * launch.resident_blocks(cuda_cores, 123)
    for name in NEW:
        v = CATALOGUE[name]
        if v.family.persistent:
            for m, n, k in [(512, 1536, 7168), (512, 576, 7168), (1024, 1024, 8192), (64, 8192, 8192)]:
                cfg = launch.launch_config(v, m, n, k, SMS)
                assert cfg.splits == 1 or cfg.tiles * cfg.splits <= SMS * v.family.persistent, (name, m, n, k)


@pytest.mark.parametrize("name", NEW)
def test_policy_leaves_big_and_short_problems_alone(name):
    v = CATALOGUE[name]
    min_k = split_policy.min_k_per_split(v)
    assert launch.launch_config(v, 4096, 4096, 4096, SMS).splits == 1  # many waves of tiles already
    assert launch.launch_config(v, 8192, 8192, 8192, SMS).splits == 1
    assert launch.launch_config(v, 16, 4096, 2 * min_k - 1, SMS).splits == 1  # K too short
    assert launch.launch_config(v, 129, 1000, 33, SMS).splits == 1


def test_resident_blocks():
    persistent = CATALOGUE[next(n for n in NEW if CATALOGUE[n].family.persistent)]
    assert launch.resident_blocks(persistent) == 1
    small = CATALOGUE["sgemm_t_4x4_tile32x64_sliced_k16_f32x4_bcf_dbuf_offset_splitk"]  # 128 threads, 13 KB
    assert launch.resident_blocks(small) == 4  # 128 registers a thread assumed: 65536 / (128 * 128)
    assert launch.resident_blocks(small, registers=89) == 5  # 89 → 96 a thread, in 256-register warp steps
    big = CATALOGUE["sgemm_t_8x16_sliced_k16_f32x4_bcf_dbuf"]  # 256 threads
    assert launch.resident_blocks(big) == 2 and launch.resident_blocks(big, registers=255) == 1
    # ptxas's count changes the policy's slots, so the splits: the same shape splits more with fewer registers
    assert launch.k_splits(small, 16, 4096, 4096, 64, SMS, registers=40) >= launch.k_splits(
        small, 16, 4096, 4096, 64, SMS, registers=128)


@pytest.mark.parametrize("name", [n for n in NEW if CATALOGUE[n].family.name != "mma"][:1]
                         + [n for n in NEW if n.startswith("sgemm_t")][:1])
def test_split_steps_are_compiled_in_or_out(name):
    """SPLIT_K = 1 renders CAN_SPLIT false: the compiler drops the split-K steps, so a plain entry is
    the kernel it was before split-K existed; SPLIT_K = 0 or > 1 keeps them. (The mma family leaves
    them out of the source: tests/test_family_mma.py.)"""
    for splits, can_split in ((0, "true"), (1, "false"), (3, "true")):
        v = _with_splits(name, splits)
        src = render(v)
        assert f"constexpr int SPLIT_K = {splits};" in src and "split_k_arrive(" in src
        arch = "sm_90a" if v.family.needs_sm90a else "sm_80"
        ptx_has_atomics = "atom.global.add" in _ptx(v, arch)
        assert ptx_has_atomics == (can_split == "true"), (name, splits)


def _ptx(v, arch):
    from cupy_gemm import toolkit
    from cupy_gemm.compile import options_for
    lib = toolkit.nvrtc()
    prog = lib.createProgram(render(v), f"{v.name}.cu", (), ())
    try:
        target = arch.replace("sm_", "compute_")
        lib.compileProgram(prog, [o.replace(arch, target) for o in options_for(v, arch)])
        return lib.getPTX(prog).decode()
    finally:
        lib.destroyProgram(prog)


def test_compiled_entries_do_not_spill():
    """(tests/test_compile.py checks every entry; this names the split-K entries' targets.)"""
    for name in NEW:
        v = CATALOGUE[name]
        for arch in (["sm_90a"] if v.family.needs_sm90a else ["sm_80", "sm_90"]):
            res = compile_variant(v, arch).resources
            assert (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), (name, arch, res)

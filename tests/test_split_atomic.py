"""Split-K summed by atomics (templates/common/split_k.cuh's SPLIT_ATOMIC, the API's deterministic=False),
checked without a GPU: which variants take it, what it renders, the workspace it needs, and that every
catalogue entry that can take it compiles without spills."""
import re
from types import SimpleNamespace

import numpy as np
import pytest

from cupy_gemm import compile as compile_mod, launch, registry, scaled_choice
from cupy_gemm.errors import ConfigError, InputError
from cupy_gemm.operands import deterministic_flag
from cupy_gemm.render import render
from cupy_gemm.workspace import atomic_sum, split_k_counter_bytes, split_k_workspace

CATALOGUE = registry.catalogue()
ATOMIC = sorted(n for n, v in CATALOGUE.items() if v.sums_atomically)
SPLIT = "hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk"


def test_which_entries_can_sum_atomically():
    """Every entry that splits K through the workspace in the families whose sum is split_k_combine; none of the
    skinny kernels (their own sum), the on-chip cluster sums or the entries that never split."""
    families = {CATALOGUE[n].family.name for n in ATOMIC}
    assert families == {"wgmma", "wgmma_kmajor", "wgmma_tf32", "wgmma_tf32_rowb", "wgmma_tf32_swap", "mma",
                        "mma_kmajor", "sgemm_simt", "sgemm_simt_kmajor"}
    for name, v in CATALOGUE.items():
        splits = v.family.split_k and v.params.get("SPLIT_K", 1) != 1
        assert v.sums_atomically == (splits and v.family.name not in ("skinny", "skinny_kmajor")), name
    assert not CATALOGUE["hgemm_wgmma_m64n128k16_tile128x128_stages5_ws2_clusterk3"].sums_atomically


def test_the_twin_renders_the_atomic_sum():
    v = CATALOGUE[SPLIT]
    twin = v.with_extras(split_atomic=True)
    assert twin.split_atomic and twin.name == v.name and v.with_extras() is v
    assert "constexpr bool SPLIT_K_ATOMIC = 1;" in render(twin)
    assert "constexpr bool SPLIT_K_ATOMIC = 0;" in render(v)
    # the other extras keep it, and with_extras without it drops it
    both = v.with_extras(out_dtype="float32", split_atomic=True)
    assert both.split_atomic and both.out_dtype == "float32"
    assert not twin.with_extras(out_dtype="float32").split_atomic
    # extras name every one: a variant rebuilt from them is itself, and the compile cache tells the twins apart
    assert both.extras == {"batched": False, "epilogue": None, "out_dtype": "float32", "split_atomic": True,
                           "unaligned_c": False}
    assert both.with_extras(**both.extras) is both and v.with_extras(**v.extras) is v
    assert launch._identity(both, SimpleNamespace(id=0)) != launch._identity(both.with_extras(out_dtype="float32"),
                                                                             SimpleNamespace(id=0))


@pytest.mark.parametrize("name", ["hgemm_wgmma_m64n256k16_stages4_ws2", "hgemv_decode_n64_c1_stages8",
                                  "hgemm_wgmma_m64n128k16_tile128x128_stages5_ws2_clusterk3"])
def test_refused_where_nothing_splits_through_the_workspace(name):
    with pytest.raises(ConfigError, match="split_atomic"):
        CATALOGUE[name].with_extras(split_atomic=True)


def test_when_atomics_are_taken():
    """Allowed (deterministic False), on compute capability 9.0 (float4 reductions), with 4 or more splits of
    tiles up to 64×128, 6 or more of larger ones."""
    mma = CATALOGUE["hgemm_mma_m16n8k16_mma2x2_warp2x8x2_stages4_swizzle_acc32_splitk"]
    assert not mma.with_extras(split_atomic=True).runs_on(80) and mma.with_extras(split_atomic=True).runs_on(90)
    small, large = CATALOGUE[SPLIT], CATALOGUE["sgemm_t_16x8_sliced_k8_f32x4_bcf_dbuf_offset_swizzle_splitk"]
    assert large.family.tile(large.params) == (128, 128)
    splits = lambda s: SimpleNamespace(splits=s)
    assert atomic_sum(small, splits(4), 90, False) and not atomic_sum(small, splits(4), 90, True)
    assert not atomic_sum(small, splits(3), 90, False) and not atomic_sum(small, splits(4), 80, False)
    assert not atomic_sum(large, splits(5), 90, False) and atomic_sum(large, splits(6), 90, False)
    assert not atomic_sum(CATALOGUE["hgemm_wgmma_m64n256k16_stages4_ws2"], splits(8), 90, False)


def test_workspace_holds_one_slot_a_tile():
    v = CATALOGUE[SPLIT]
    m, n, k = 64, 1024, 8192
    ordered = launch.launch_config(v, m, n, k, 132)
    atomic = launch.launch_config(v.with_extras(split_atomic=True), m, n, k, 132)
    assert ordered.splits == atomic.splits > 1 and ordered.split_tiles == atomic.split_tiles == 16
    assert ordered.workspace == split_k_counter_bytes(16) + ordered.splits * 16 * 64 * 64 * 4
    assert atomic.workspace == split_k_workspace(16, atomic.splits, 64 * 64, True)
    assert atomic.workspace == split_k_counter_bytes(16) + 16 * 64 * 64 * 4  # one slot a tile


def test_deterministic_must_be_a_bool():
    assert deterministic_flag(True) is True and deterministic_flag(np.bool_(False)) is False
    for bad in ("no", 0, None, 1.0):
        with pytest.raises(InputError, match="deterministic must be True"):
            deterministic_flag(bad)


def _targets(v):
    return ["sm_90a"] if v.family.needs_sm90a else ["sm_90"]


CASES = [(n, a) for n in ATOMIC for a in _targets(CATALOGUE[n])]


@pytest.mark.parametrize("name,arch", CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_compiles_without_spills(name, arch):
    _assert_clean(compile_mod.compile_variant(CATALOGUE[name].with_extras(split_atomic=True), arch))


def _assert_clean(compiled):
    """No local memory, and none of the waits or fences ptxas adds around wgmma (as tests/test_compile.py)."""
    res = compiled.resources
    assert (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), res
    assert not {"C7514", "C7517", "C7519"} & set(re.findall(r"C75\d\d", compiled.log)), compiled.log


FP8_SPLITS = [(mode, tile) for mode in ("tensor", "block") for tile in ((128, 192), (128, 128), (64, 64))]


@pytest.mark.parametrize("mode,tile", FP8_SPLITS, ids=[f"{m}-{t[0]}x{t[1]}" for m, t in FP8_SPLITS])
def test_fp8_splits_compile_without_spills(mode, tile):
    """scaled_mm's split tiles (scaled_choice derives them; none is a catalogue entry)."""
    v = scaled_choice._entry_with_split("e4m3", "e4m3", mode, "bfloat16", tile, 3)
    _assert_clean(compile_mod.compile_variant(v.with_extras(split_atomic=True), "sm_90a"))


def test_the_corpus_bench_times_the_nondeterministic_path(monkeypatch, tmp_path):
    """`cupy-gemm bench --shapes llm:… --nondeterministic` times matmul(deterministic=False)."""
    from cupy_gemm import cli, cli_corpus, devices
    from cupy_gemm.measure import corpus_bench
    seen = {}

    def fake_run(shapes, dtypes, *, settings, **kw):
        seen["settings"] = settings
        return {"devices": [{"name": "GPU", "compute_capability": "90"}]}, []
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    monkeypatch.setattr(corpus_bench, "run", fake_run)
    monkeypatch.setattr(cli_corpus.corpus_tables, "markdown", lambda meta, rows: "")
    for flag, deterministic in (([], True), (["--nondeterministic"], False)):
        assert cli.main(["bench", "--shapes", "llm:64x1024x8192", "--dtype", "float32", "--out", str(tmp_path),
                         *flag]) == 0
        assert seen["settings"].deterministic is deterministic

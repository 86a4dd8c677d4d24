"""The wmma family without a GPU: constraints, NVRTC compiles, resources, and the layout choices that make
the kernels exact and fast (alignment, shared-memory state space, bank-conflict-free padding)."""
import re

import pytest

from cupy_gemm import compile as compile_mod, registry
from cupy_gemm.errors import CompileError, ConfigError, DeviceError
from cupy_gemm.families import wmma
from cupy_gemm.registry import Variant, make_variant
from cupy_gemm.render import render

FAMILY = registry.family("wmma")
VARIANTS = {n: v for n, v in registry.catalogue().items() if v.family.name == "wmma"}
# the template's text with adjacent string literals joined, as the compiler joins them
TEMPLATE = re.sub(r'"\s*\n\s*"', "", (registry.data_dir("templates") / "wmma.cu.j2").read_text())

# the seed's 128x128 multi-stage kernel, valid for float16
BASE = dict(WARPS_M=4, WARPS_N=2, FRAGS_M=2, FRAGS_N=4, BK=16, A_PAD=8, B_PAD=8, STAGES=3, ASYNC=1, DSMEM=1)
TF32 = dict(BASE, FRAG_K=8, BK=8, A_PAD=4)


def test_the_seed_kernels_are_all_there():
    seed = ["hgemm_wmma_m16n16k16_naive", "hgemm_wmma_m16n16k16_mma4x2", "hgemm_wmma_m16n16k16_mma4x2_warp2x4",
            "hgemm_wmma_m16n16k16_mma4x2_warp2x4_async", "hgemm_wmma_m16n16k16_mma4x2_warp2x4_async_offset",
            "hgemm_wmma_m16n16k16_mma4x2_warp2x4_dbuf_async", "hgemm_wmma_m16n16k16_mma4x2_warp2x4x2_rbuf_async",
            "hgemm_wmma_m16n16k16_mma4x4_warp2x2x2_dbuf_async", "hgemm_wmma_m32n8k16_mma2x4_warp2x4_dbuf_async"]
    seed += [f"hgemm_wmma_m16n16k16_mma4x2_warp2x4_stages{s}{d}" for s in (2, 3, 4) for d in ("", "_dsmem")]
    seed += [f"sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages{s}{d}" for s in (2, 3, 4) for d in ("", "_dsmem")]
    seed += ["sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages2_swizzle1024",
             "sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages3_dsmem_swizzle2048"]
    assert not [n for n in seed if n not in VARIANTS]
    assert any("_mma4x2_warp4x4_stages" in n for n in VARIANTS)  # 256x128
    assert any("_mma4x4_warp4x4_stages" in n for n in VARIANTS)  # 256x256


@pytest.mark.parametrize("name,tile,threads", [
    ("hgemm_wmma_m16n16k16_naive", (16, 16), 32),
    ("hgemm_wmma_m16n16k16_mma4x2", (64, 32), 256),
    ("hgemm_wmma_m16n16k16_mma4x2_warp2x4", (128, 128), 256),
    ("hgemm_wmma_m16n16k16_mma4x4_warp2x2x2_dbuf_async", (128, 128), 512),
    ("hgemm_wmma_m32n8k16_mma2x4_warp2x4_dbuf_async", (128, 128), 256),
    ("hgemm_wmma_m16n16k16_mma4x2_warp4x4_stages3_dsmem", (256, 128), 256),
    ("hgemm_wmma_m16n16k16_mma4x4_warp4x4_stages3_dsmem", (256, 256), 512),
    ("sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages2", (128, 128), 256),
])
def test_seed_tile_sizes(name, tile, threads):
    v = VARIANTS[name]
    assert FAMILY.tile(v.params) == tile and FAMILY.threads(v.params) == threads


def test_accumulate_types_follow_the_names():
    for name, v in VARIANTS.items():
        if v.dtype == "float32":
            assert v.acc == "tf32", name
        elif v.dtype == "bfloat16" or name.endswith("_acc32"):
            assert v.acc == "float32", name
        else:  # seed-named fp16 kernels accumulate in half, as the seed does
            assert v.acc == "float16", name


# ---- constraints: each raises ConfigError naming the parameter, and the template says the same ------------
@pytest.mark.parametrize("dtype,acc,params,param,words", [
    ("float32", "tf32", dict(TF32, FRAG_K=16, BK=16), "FRAG_M", "a WMMA shape of the input type"),
    ("float16", "float16", dict(BASE, FRAG_N=8), "FRAG_M", "a WMMA shape of the input type"),
    ("float16", "float16", dict(BASE, BK=24), "BK", "whole WMMA k-steps per stage"),
    ("float16", "float16", dict(BASE, A_PAD=4), "A_PAD", "16-byte aligned shared-memory rows"),
    ("float32", "tf32", dict(TF32, B_PAD=2), "B_PAD", "16-byte aligned shared-memory rows"),
    ("float16", "float16", dict(BASE, ASYNC=0), "STAGES", "only cp.async copies stay in flight across stages"),
    ("float16", "float16", dict(BASE, RBUF=1), "RBUF", "register double-buffering alternates fragments"),
    ("float16", "float16", dict(BASE, STAGES=5, DSMEM=0), "DSMEM", "static shared memory is limited to 48 KB"),
    ("float16", "float32", dict(BASE, WARPS_N=4, FRAGS_M=4), "FRAGS_N", "the rest would spill"),
])
def test_constraint_errors(dtype, acc, params, param, words):
    with pytest.raises(ConfigError, match=re.escape(words)) as info:
        make_variant(FAMILY, "bad", dtype, params, acc)
    assert info.value.param == param
    assert words in TEMPLATE  # the static_assert repeats the rule's words


def test_parameter_ranges_and_block_size():
    with pytest.raises(ConfigError) as info:
        make_variant(FAMILY, "bad", "float16", dict(BASE, WARPS_M=8, WARPS_N=8), "float16")
    assert info.value.param == "threads"
    with pytest.raises(ConfigError) as info:
        make_variant(FAMILY, "bad", "float16", dict(BASE, STAGES=6), "float16")
    assert info.value.param == "STAGES"
    for dtype, acc in (("float32", "float32"), ("bfloat16", "float16")):
        with pytest.raises(ConfigError) as info:
            make_variant(FAMILY, "bad", dtype, BASE if dtype != "float32" else TF32, acc)
        assert info.value.param == "acc"


@pytest.mark.parametrize("params,acc,words", [
    (dict(BASE, BK=24), "float16", "whole WMMA k-steps per stage"),
    (dict(BASE, A_PAD=4), "float16", "16-byte aligned shared-memory rows"),
    (dict(BASE, ASYNC=0), "float16", "only cp.async copies stay in flight across stages"),
    (dict(BASE, STAGES=5, DSMEM=0), "float16", "static shared memory is limited to 48 KB"),
    (dict(BASE, RBUF=1), "float16", "register double-buffering alternates fragments"),
    (dict(BASE, WARPS_N=4, FRAGS_M=4), "float32", "the rest would spill"),
])
def test_static_asserts_fire_when_python_is_bypassed(params, acc, words, tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))  # the failed source is saved there
    full = FAMILY.complete(params)
    v = Variant(name="unchecked", family=FAMILY, dtype="float16", acc=acc, params=full)
    with pytest.raises(CompileError, match=re.escape(words)):
        compile_mod.compile_variant(v, "sm_80")


# ---- every catalogue entry compiles for sm_80 and sm_90, without spills ---------------------------------
CASES = [(n, a) for n in VARIANTS for a in ("sm_80", "sm_90")]


@pytest.mark.parametrize("name,arch", CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_shared_memory_model_matches_ptxas(name, arch):
    v = VARIANTS[name]
    res = compile_mod.compile_variant(v, arch).resources
    if v.params["DSMEM"]:
        assert res.static_smem == 0 and FAMILY.smem_bytes(v.params, v.dtype, v.acc) == wmma.shared_bytes(
            v.params, v.dtype, v.acc)
    else:  # the family's model of the shared memory is the template's, byte for byte
        assert res.static_smem == wmma.shared_bytes(v.params, v.dtype, v.acc)
        assert FAMILY.smem_bytes(v.params, v.dtype, v.acc) == 0


def test_volta_runs_the_fp16_kernels_without_cp_async():
    volta = [v for v in VARIANTS.values() if not v.params["ASYNC"]]
    assert {v.name for v in volta} >= {"hgemm_wmma_m16n16k16_naive", "hgemm_wmma_m16n16k16_mma4x2_warp2x4"}
    for v in volta:
        assert FAMILY.min_cc(v.params, v.dtype, v.acc) == 70
        assert compile_mod.compile_variant(v, "sm_70").resources.registers > 0
    for name in ("hgemm_wmma_m16n16k16_mma4x2_warp2x4_async", "bf16gemm_wmma_m16n16k16_mma4x2_warp2x4_stages3_dsmem",
                 "sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages2"):
        v = VARIANTS[name]
        assert FAMILY.min_cc(v.params, v.dtype, v.acc) == 80
        with pytest.raises(DeviceError, match="sm_80"):
            compile_mod.compile_variant(v, "sm_75")


def test_alignment_matches_the_16_byte_copies():
    assert FAMILY.align(BASE, "float16") == 8 and FAMILY.align(BASE, "bfloat16") == 8
    assert FAMILY.align(TF32, "float32") == 4


# ---- what the generated code does -------------------------------------------------------------------------
@pytest.mark.parametrize("name,ptx_type", [
    ("hgemm_wmma_m16n16k16_mma4x2_warp2x4_stages3_dsmem", "m16n16k16.shared.f16"),
    ("hgemm_wmma_m32n8k16_mma2x4_warp2x4_dbuf_async", "m32n8k16.shared.f16"),
    ("bf16gemm_wmma_m16n16k16_mma4x2_warp2x4_stages3_dsmem", "m16n16k16.shared.bf16"),
    ("sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages3", "m16n16k8.shared.tf32"),
])
def test_fragments_load_from_the_shared_state_space(name, ptx_type):
    # a generic-address fragment load becomes one load per element instead of ldmatrix / shared loads
    ptx = compile_mod.compile_variant(VARIANTS[name], "compute_80").image
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    loads = re.findall(r"wmma\.load\.[ab]\.sync\.aligned\.row\.(\S+?)\s", ptx)
    assert loads and set(loads) == {ptx_type}
    stores = re.findall(r"wmma\.store\.d\.sync\.aligned\.row\.(\S+?)\s", ptx)
    assert stores and all(".shared." in s for s in stores)


def test_tf32_rounds_inside_the_kernel_only():
    for name, v in VARIANTS.items():
        source = render(v)
        assert ("__float_to_tf32" in source) == (v.acc == "tf32"), name
    ptx = compile_mod.compile_variant(VARIANTS["sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages2"], "compute_80").image
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert "m16n16k8.f32.tf32.tf32.f32" in ptx
    assert ptx.count(".entry") == 1  # one kernel: no separate conversion pass over A or B


def _ldmatrix_conflict_free(ld_bytes: int) -> bool:
    """ldmatrix reads 8 rows of 16 bytes per phase: conflict-free when they fall in 8 distinct 16-byte bank
    groups of the 128-byte bank line."""
    return len({(r * ld_bytes // 16) % 8 for r in range(8)}) == 8


def _tf32_loads_conflict_free(a_ld: int, b_ld: int) -> bool:
    """tf32 fragments load one word per lane (g = lane / 4, t = lane % 4): A at (g, t), B at (t, g)."""
    a = {(g * a_ld + t) % 32 for g in range(8) for t in range(4)}
    b = {(t * b_ld + g) % 32 for g in range(8) for t in range(4)}
    return len(a) == 32 and len(b) == 32


@pytest.mark.parametrize("name", [n for n, v in VARIANTS.items() if v.params["STAGES"] >= 2])
def test_pipelined_kernels_pad_shared_memory_without_bank_conflicts(name):
    p, v = VARIANTS[name].params, VARIANTS[name]
    a_ld, b_ld = p["BK"] + p["A_PAD"], FAMILY.tile(p)[1] + p["B_PAD"]
    if v.acc == "tf32":
        assert _tf32_loads_conflict_free(a_ld, b_ld)
    else:
        assert _ldmatrix_conflict_free(a_ld * 2) and _ldmatrix_conflict_free(b_ld * 2)


def test_unpadded_seed_kernels_do_conflict():
    # the seed's OFFSET=0 kernels stay faithful: the model above must tell them apart from the padded ones
    p = VARIANTS["hgemm_wmma_m16n16k16_mma4x2_warp2x4_async"].params
    assert not _ldmatrix_conflict_free((p["BK"] + p["A_PAD"]) * 2)
    assert not _ldmatrix_conflict_free((128 + p["B_PAD"]) * 2)


@pytest.mark.parametrize("wn", [8, 16, 32])
def test_c_fragment_store_is_conflict_free(wn):
    ld = wmma.c_ld({"FRAG_N": wn})
    # half accumulators: one word per lane, rows g, word t
    assert len({(g * ld // 2 + t) % 32 for g in range(8) for t in range(4)}) == 32
    # float accumulators: two words per lane, a half-warp (rows 0-3) per wavefront
    assert len({(g * ld + 2 * t + e) % 32 for g in range(4) for t in range(4) for e in range(2)}) == 32

"""The BLAS-convention (column-major) family without a GPU: its rules (mirrored by the template), NVRTC
compiles, and the blog idea each catalogue entry keeps, as seen in its parameters and its PTX."""
import pytest

from cupy_gemm import registry
from cupy_gemm.compile import compile_variant
from cupy_gemm.render import render
from family_rules import check_rule, check_template_refuses, template_text

FAMILY = registry.family("blas")
VARIANTS = {n: v for n, v in registry.catalogue().items() if v.family is FAMILY}
TEMPLATE = template_text("blas.cu.j2")
NAMES = [f"gemm_32x32_v{i}" for i in range(6)] + ["gemm_64x64", "gemm_128x128"]


def test_the_blog_kernels_are_all_there():
    assert sorted(VARIANTS) == sorted(NAMES)
    assert all(VARIANTS[n].notes for n in NAMES)  # each says which idea it keeps


def test_column_major_fp32():
    assert FAMILY.layout == "col" and set(FAMILY.dtypes) == {"float32"}
    for v in VARIANTS.values():
        assert v.acc == "float32" and FAMILY.min_cc(v.params, "float32", "float32") == 70
        # only the float4 kernels need M, K and the leading dimensions padded to multiples of 4
        assert FAMILY.align(v.params, "float32") == (4 if v.params["VEC"] == 4 else 1)
    assert "static_assert(COL_MAJOR" in TEMPLATE and "COL_MAJOR = 1" in render(VARIANTS["gemm_32x32_v0"])


@pytest.mark.parametrize("name,tile,threads", [
    ("gemm_32x32_v0", (32, 32), 1024), ("gemm_32x32_v4", (32, 32), 1024), ("gemm_32x32_v5", (32, 32), 256),
    ("gemm_64x64", (64, 64), 256), ("gemm_128x128", (128, 128), 256),
])
def test_blog_shapes(name, tile, threads):
    v = VARIANTS[name]
    assert FAMILY.tile(v.params) == tile and FAMILY.threads(v.params) == threads


def test_each_step_changes_one_idea():
    p = {n: VARIANTS[n].params for n in NAMES}
    diff = lambda a, b: {k for k in p[a] if p[a][k] != p[b][k]}
    assert diff("gemm_32x32_v0", "gemm_32x32_v1") == {"ROW_FAST"}  # thread→element mapping
    assert diff("gemm_32x32_v1", "gemm_32x32_v2") == {"WALK"}      # pointer walking in the K loop
    assert p["gemm_32x32_v3"]["BK"] == 32 and p["gemm_32x32_v2"]["BK"] == 0  # shared-memory tiling
    assert diff("gemm_32x32_v3", "gemm_32x32_v4") == {"PAD"} and p["gemm_32x32_v4"]["PAD"] == 1  # `| 1`
    assert p["gemm_32x32_v5"]["VEC"] == 4 and (p["gemm_32x32_v5"]["TM"], p["gemm_32x32_v5"]["TN"]) == (4, 1)
    assert (p["gemm_64x64"]["TM"], p["gemm_64x64"]["TN"], p["gemm_64x64"]["BK"]) == (4, 4, 16)
    assert p["gemm_128x128"]["DBUF"] == 1 and p["gemm_128x128"]["UNROLL"] == 4 and p["gemm_128x128"]["BK"] == 8


# ---- constraints: each raises ConfigError naming the parameter, and the template says the same ----------
VEC4 = dict(BM=64, BN=64, BK=16, TM=4, TN=4, VEC=4)
SCALAR = dict(BM=32, BN=32, BK=32)
RULES = [
    (dict(VEC4, BM=66), "BM", "a multiple of TM"),
    (dict(VEC4, BN=66), "BN", "a multiple of TN"),
    (dict(VEC4, VEC=1), "TM", "1 when VEC=1 (one element of C per thread)"),
    (dict(VEC4, BK=0), "BK", "> 0 when VEC=4 (float4 kernels stage slices in shared memory)"),
    (dict(VEC4, BM=32, TM=2), "TM", "a multiple of 4 when VEC=4 (rows are float4 groups)"),
    (dict(VEC4, BN=32, TN=2), "TN", "1 or a multiple of 4 when VEC=4 (columns are a scalar or float4 groups)"),
    (dict(VEC4, BK=6), "BK", "a multiple of 4 when VEC=4 (B is loaded as float4 along K)"),
    (dict(VEC4, PAD=1), "PAD", "a multiple of 4 when VEC=4 (shared rows stay 16-byte aligned)"),
    (dict(VEC4, ROW_FAST=0), "ROW_FAST", "1 when VEC=4 (float4 groups run down the rows)"),
    (dict(VEC4, BK=4), "BK", "the A slice's BM/4*BK float4 loads a multiple of"),
    (dict(VEC4, BM=256, BN=16, TM=16, TN=1, BK=4), "BK", "the B slice's BK/4*BN float4 loads a multiple of"),
    (dict(SCALAR, BK=0, PAD=1), "PAD", "0 when BK=0 (nothing is staged in shared memory)"),
    (dict(SCALAR, WALK=1), "WALK", "0 when BK > 0 (only the global-memory K loop walks pointers)"),
    (dict(SCALAR, DBUF=1), "DBUF", "0 unless VEC=4 (the float4 kernels double-buffer)"),
    (dict(VEC4, BM=128, BN=128, TM=8, TN=8, BK=64, DBUF=1), "BK", "keep the static shared memory within 48 KB"),
]


@pytest.mark.parametrize("params,param,words", RULES, ids=[f"{r[1]}-{i}" for i, r in enumerate(RULES)])
def test_constraint_errors(params, param, words):
    check_rule(FAMILY, "float32", params, param, words, TEMPLATE)


@pytest.mark.parametrize("params,param,words", [RULES[3], RULES[8], RULES[12]], ids=["BK", "ROW_FAST", "WALK"])
def test_template_refuses_what_the_rules_refuse(params, param, words, tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    check_template_refuses(FAMILY, "float32", "float32", params, words)


# ---- every variant compiles GPU-free; the PTX shows the idea each one keeps ----------------------------

def test_shared_memory_and_padding():
    smem = {n: compile_variant(VARIANTS[n], "sm_90").resources.static_smem for n in NAMES}
    assert smem["gemm_32x32_v0"] == smem["gemm_32x32_v2"] == 0
    assert smem["gemm_32x32_v3"] == 2 * 32 * 32 * 4
    assert smem["gemm_32x32_v4"] == 2 * 32 * 33 * 4  # the `| 1` rows
    assert smem["gemm_128x128"] == 2 * 2 * 8 * 128 * 4  # two buffers


@pytest.mark.parametrize("name", NAMES)
def test_vector_kernels_move_float4(name):
    v = VARIANTS[name]
    ptx = compile_variant(v, "compute_80").image.decode()
    vec = v.params["VEC"] == 4
    assert ("ld.global.nc.v4.f32" in ptx) == vec and ("st.global.v4." in ptx) == vec  # 16-byte stores
    if vec:
        assert "ld.shared.v4.f32" in ptx
    # two barriers per slice, or one with the double buffer, or none without shared memory
    assert ptx.count("bar.sync") == (0 if v.params["BK"] == 0 else 1 if v.params["DBUF"] else 2)

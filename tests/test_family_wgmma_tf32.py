"""The Hopper TF32 family on the CPU: its rules and their static_assert mirrors, the PTX it emits, GPU-free
sm_90a compiles, and the tensor maps it asks for (B read K-major, as the N×K matrix Bᵀ; A and B of the
tf32 data type, which has the copy engine round them)."""
import re
from types import SimpleNamespace

import numpy as np
import pytest

from cupy_gemm import tma
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import CompileError, ConfigError, DeviceError
from cupy_gemm.families import wgmma
from cupy_gemm.registry import Variant, catalogue, family, make_variant
from cupy_gemm.render import render

TF32 = family("wgmma_tf32")
NAMES = [n for n, v in catalogue().items() if v.family is TF32]
FLAGSHIP = "sgemm_wgmma_m64n256k8_tf32_stages4_ws2"
BASE = dict(catalogue()[FLAGSHIP].params)


def test_family_declares_hopper_tf32_with_k_major_b():
    assert TF32.needs_sm90a and TF32.abi == "tma" and TF32.persistent == 1 and TF32.make_args is not None
    assert TF32.layout == "row" and TF32.b_layout == "col"  # wgmma has no transpose bit for 32-bit operands
    assert dict(TF32.dtypes) == {"float32": ("tf32",)}
    assert TF32.template == family("wgmma").template  # one template for both Hopper families
    assert family("wgmma").b_layout is None  # the 16-bit family keeps reading B row-major
    assert TF32.min_cc(BASE, "float32", "tf32") == 90
    assert TF32.align(BASE, "float32") == 4  # 16-byte TMA strides and bases
    assert TF32.threads(BASE) == 128 * (BASE["CONSUMERS"] + 1)


def test_catalogue_entries_are_tf32():
    assert FLAGSHIP in NAMES and len(NAMES) >= 4
    assert {(catalogue()[n].dtype, catalogue()[n].acc) for n in NAMES} == {("float32", "tf32")}


# (parameter overrides, parameter named by the error, words shared by the rule and its static_assert)
BROKEN = [
    ({"BM": 64, "CONSUMERS": 2}, "BM", "a multiple of 64 * CONSUMERS"),
    ({"BM": 96, "CONSUMERS": 1, "BN": 128}, "BM", "a multiple of 64 * CONSUMERS"),
    ({"BN": 80}, "BN", "a multiple of 32 (one 128-byte swizzle row of fp32, half of one of 16-bit elements)"),
    ({"BM": 256, "CONSUMERS": 1, "BN": 256, "STAGES": 2}, "BN", "at most 192 fp32 accumulators per consumer thread"),
    ({"STAGES": 5}, "smem", "at most 232448 bytes of shared memory per block"),
]


@pytest.mark.parametrize("overrides,param,words", BROKEN, ids=[f"{b[1]}-{i}" for i, b in enumerate(BROKEN)])
def test_rules_name_the_parameter(overrides, param, words):
    with pytest.raises(ConfigError) as e:
        make_variant(TF32, "bad", "float32", {**BASE, **overrides}, "tf32")
    assert e.value.param == param
    if param != "smem":  # the smem check is the core's, in its own words
        assert words in str(e.value)


@pytest.mark.parametrize("overrides,param,words", BROKEN[:4], ids=[f"{b[1]}-{i}" for i, b in enumerate(BROKEN[:4])])
def test_static_asserts_mirror_the_rules(overrides, param, words):
    """A parameter set that skipped the Python rules fails in NVRTC with the rule's words."""
    bad = Variant(name="unchecked", family=TF32, dtype="float32", acc="tf32", params={**BASE, **overrides})
    with pytest.raises(CompileError, match=re.escape(words)):
        compile_variant(bad, "sm_90a")


@pytest.mark.parametrize("params,param", [
    ({"BK": 16}, "BK"),          # shorter than a 128-byte swizzle row of fp32
    ({"BK": 128}, "BK"),         # one stage would take 96 KB of A and B
    ({"BN": 320}, "BN"),         # above wgmma's N
    ({"CONSUMERS": 3}, "CONSUMERS"),
    ({"TMA_STORE": 2}, "TMA_STORE"),
])
def test_parameter_ranges(params, param):
    with pytest.raises(ConfigError) as e:
        make_variant(TF32, "bad", "float32", {**BASE, **params}, "tf32")
    assert e.value.param == param


@pytest.mark.parametrize("dtype,acc,param", [("float16", None, "dtype"), ("float32", "float32", "acc")])
def test_only_fp32_as_tf32(dtype, acc, param):
    with pytest.raises(ConfigError) as e:
        make_variant(TF32, "bad", dtype, {}, acc)
    assert e.value.param == param


def test_smem_accounts_for_ring_staging_and_alignment():
    stage = (128 * 32 + 32 * 256) * 4  # same 48 KB as the 16-bit flagship's 64-deep stage
    assert TF32.smem_bytes(BASE, "float32", "tf32") == 4 * stage + 2 * 2 * 64 * 128 + 1024 + 16 * 4
    assert TF32.smem_bytes(dict(BASE, TMA_STORE=0), "float32", "tf32") == 4 * stage + 1024 + 16 * 4


@pytest.mark.parametrize("name", NAMES)
def test_renders_the_intended_instructions(name):
    v = catalogue()[name]
    src = render(v)
    assert f"wgmma.mma_async.sync.aligned.m64n{v.params['BN']}k8.f32.tf32.tf32" in src
    assert "p, 1, 1;" in src and "p, 1, 1, %" not in src  # no transpose operands for tf32
    assert "constexpr bool B_KMAJOR = 1;" in src and "constexpr int WGMMA_K = 8;" in src
    assert "cp.async.bulk.tensor.2d" in src and "__grid_constant__" in src
    assert "__launch_bounds__(THREADS, 1)" in src and "wgmma_wait<1>()" in src
    assert "cvt.rna" not in src  # no rounding pass in the kernel: the copy engine rounds to tf32
    assert "{{" not in src and "{%" not in src


def test_the_16_bit_path_is_unchanged():
    src = render(catalogue()["hgemm_wgmma_m64n256k16_stages4_ws2"])
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in src and "p, 1, 1, %132, %131;" in src
    assert "constexpr bool B_KMAJOR = 0;" in src and "constexpr int WGMMA_K = 16;" in src


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_refuses_targets_without_wgmma(arch):
    with pytest.raises(DeviceError, match="sm_90a|sm_90 or newer"):
        compile_variant(catalogue()[FLAGSHIP], arch)


def test_tensor_maps_read_b_as_its_transpose(monkeypatch):
    """B arrives column-major (K×N, ldb = column stride): its map is the row-major N×K matrix Bᵀ with boxes
    of BN rows by one 32-element swizzle row of K, the same box shape as A's."""
    calls = []

    def fake_map(ptr, dtype, **kw):
        tma.check_2d(ptr, dtype, **kw)
        calls.append((ptr, dtype, kw))
        return ptr

    monkeypatch.setattr(tma, "tensor_map_2d", fake_map)
    v = catalogue()[FLAGSHIP]
    arr = lambda ptr: SimpleNamespace(data=SimpleNamespace(ptr=ptr))
    m, n, k = 1000, 520, 300
    args = wgmma.make_args(v, arr(1 << 20), arr(2 << 20), arr(3 << 20), m, n, k, 304, 308, 520, 1.0, 0.0)
    (_, a_type, a_kw), (b_ptr, b_type, b_kw), (_, c_type, c_kw) = calls
    # the copy engine rounds A and B to tf32 (nearest even) on the way in; C is plain fp32
    assert (a_type, b_type, c_type) == ("tfloat32", "tfloat32", "float32")
    # A in copies of 64 rows (wgmma.A_COPY_ROWS), so that a copy wholly below M can be left out
    assert a_kw == dict(rows=m, cols=k, ld=304, box_rows=64, box_cols=32, swizzle=128)
    assert b_ptr == 2 << 20 and b_kw == dict(rows=n, cols=k, ld=308, box_rows=256, box_cols=32, swizzle=128)
    assert c_kw == dict(rows=m, cols=n, ld=520, box_rows=64, box_cols=32, swizzle=128)
    assert args[4:] == (np.int32(m), np.int32(n), np.int32(k), np.int64(520), np.float32(1.0), np.float32(0.0))


def test_epilogue_staging_matches_the_128_byte_swizzle():
    """The template's staging address for fp32 column pairs: every element of a 64×32 box lands once, at
    the 16-byte chunk TMA's 128-byte swizzle reads it from (chunk XOR row % 8), and each warp's store of
    8 rows × 4 pairs covers the 32 banks exactly twice (256 bytes: the two wavefronts it must take)."""
    size, seen = 4, {}
    for warp in range(4):
        for jj in range(32 // 8):
            for h in range(2):
                banks = []
                for lane in range(32):
                    r = warp * 16 + lane // 4 + 8 * h
                    col = jj * 8 + (lane % 4) * 2
                    byte = col * size
                    addr = r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15)
                    for e in range(2):
                        seen[addr + e * size] = (r, col + e)
                        banks.append((addr + e * size) // 4 % 32)
                assert sorted(banks) == sorted(list(range(32)) * 2)
    assert len(seen) == 64 * 32
    for addr, (r, c) in seen.items():
        chunk = (c * size) // 16
        assert addr == r * 128 + ((chunk ^ (r % 8)) << 4) + (c * size) % 16

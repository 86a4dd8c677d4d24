"""The Hopper 3xTF32 family on the CPU: its rules and their static_assert mirrors, the PTX it emits
(register-sourced tf32 wgmma, the in-kernel split), GPU-free sm_90a compiles, its tensor maps (plain fp32:
the copy engine must not round), the A-fragment addressing, and the `precision` argument of the API."""
from types import SimpleNamespace

import numpy as np
import pytest

from cupy_gemm import api, tma, verify
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import ConfigError, DeviceError, DTypeError
from cupy_gemm.families import wgmma
from cupy_gemm.registry import catalogue, family, make_variant
from cupy_gemm.render import render
from family_rules import check_rule, check_template_refuses, template_text

X3 = family("wgmma_3xtf32")
NAMES = [n for n, v in catalogue().items() if v.family is X3]
DEFAULT = api.DEFAULTS["3xtf32"][0]
BASE = dict(catalogue()[DEFAULT].params)
TEMPLATE = template_text("wgmma_3xtf32.cu.j2")


def test_family_declares_hopper_3xtf32_with_k_major_b():
    assert X3.needs_sm90a and X3.abi == "tma" and X3.persistent == 1
    assert X3.make_args is wgmma.make_args  # the TF32 family's tensor maps and argument list
    assert X3.layout == "row" and X3.b_layout == "col"  # tf32 wgmma has no transpose bit: B K-major
    assert dict(X3.dtypes) == {"float32": ("3xtf32",)}
    assert X3.min_cc(BASE, "float32", "3xtf32") == 90
    assert X3.align(BASE, "float32") == 4 and X3.threads(BASE) == 128 * (BASE["CONSUMERS"] + 1)


def test_catalogue_entries_are_3xtf32_and_the_default_is_one():
    assert DEFAULT in NAMES and len(NAMES) >= 3
    assert {(catalogue()[n].dtype, catalogue()[n].acc) for n in NAMES} == {("float32", "3xtf32")}
    assert catalogue()[DEFAULT].params["PROMOTE"] == 1
    # never the float32 default, with or without CUPY_TF32
    assert not set(NAMES) & set(api.DEFAULTS["float32"] + api.DEFAULTS["tf32"])


# (parameter overrides, parameter named by the error, words shared by the rule and its static_assert)
BROKEN = [
    ({"BM": 64, "CONSUMERS": 2}, "BM", "a multiple of 64 * CONSUMERS"),
    ({"BN": 80}, "BN", "a multiple of 32 (one 128-byte swizzle row of fp32, half of one of 16-bit elements)"),
    ({"BN": 256, "PROMOTE": 1, "STAGES": 2}, "BN", "at most 224 registers of accumulators and A fragments"),
    ({"BM": 256, "BN": 128, "PROMOTE": 1, "STAGES": 2}, "BN", "at most 224 registers of accumulators"),
    ({"BM": 256, "BN": 192, "PROMOTE": 0, "STAGES": 2}, "BN", "at most 224 registers of accumulators"),
]


@pytest.mark.parametrize("overrides,param,words", BROKEN, ids=[f"{b[1]}-{i}" for i, b in enumerate(BROKEN)])
def test_rules_name_the_parameter_and_the_template_repeats_them(overrides, param, words):
    check_rule(X3, "float32", {**BASE, **overrides}, param, words, TEMPLATE, acc="3xtf32")


@pytest.mark.parametrize("overrides,param,words", BROKEN, ids=[f"{b[1]}-{i}" for i, b in enumerate(BROKEN)])
def test_static_asserts_mirror_the_rules(overrides, param, words):
    check_template_refuses(X3, "float32", "3xtf32", {**BASE, **overrides}, words, arch="sm_90a")


@pytest.mark.parametrize("params,param", [
    ({"STAGES": 5}, "smem"),       # 5 × 48 KB + staging > 227 KB
    ({"BK": 16}, "BK"),            # shorter than a 128-byte swizzle row of fp32
    ({"CONSUMERS": 3}, "CONSUMERS"),
    ({"PROMOTE": 2}, "PROMOTE"),
    ({"BN": 320}, "BN"),
])
def test_parameter_ranges(params, param):
    with pytest.raises(ConfigError) as e:
        make_variant(X3, "bad", "float32", {**BASE, **params}, "3xtf32")
    assert e.value.param == param


@pytest.mark.parametrize("dtype,acc,param", [("float16", None, "dtype"), ("float32", "tf32", "acc")])
def test_only_fp32_as_3xtf32(dtype, acc, param):
    with pytest.raises(ConfigError) as e:
        make_variant(X3, "bad", dtype, {}, acc)
    assert e.value.param == param


def test_smem_accounts_for_ring_small_parts_staging_and_alignment():
    a_stage, b_stage = 128 * 32 * 4, 128 * 32 * 4
    staging = 2 * 2 * 64 * 128
    assert X3.smem_bytes(BASE, "float32", "3xtf32") == 4 * (a_stage + 2 * b_stage) + staging + 1024 + 24 * 4
    assert X3.smem_bytes(dict(BASE, TMA_STORE=0), "float32", "3xtf32") == 4 * (a_stage + 2 * b_stage) + 1024 + 24 * 4


@pytest.mark.parametrize("name", NAMES)
def test_renders_register_sourced_tf32_wgmma_and_the_split(name):
    v = catalogue()[name]
    src = render(v)
    bn = v.params["BN"]
    nacc = bn // 2
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k8.f32.tf32.tf32" in src
    # A from four registers, B from a descriptor, no transpose operands (tf32 has none)
    assert f"{{ %{nacc}, %{nacc + 1}, %{nacc + 2}, %{nacc + 3} }}, %{nacc + 4}, p, 1, 1;" in src
    assert "0xffffe000u" in src and "fence.proxy.async.shared::cta" in src  # the split's rounding
    assert f"PROMOTE = {v.params['PROMOTE']};" in src
    assert f"TRUNCATE_B = {v.params['TRUNCATE_B']};" in src
    assert "__launch_bounds__(THREADS, 1)" in src and "{{" not in src and "{%" not in src


@pytest.mark.parametrize("name", NAMES)
def test_compiles_for_sm_90a_without_spills(name):
    res = compile_variant(catalogue()[name], "sm_90a").resources
    assert (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), res


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_refuses_targets_without_wgmma(arch):
    with pytest.raises(DeviceError, match="sm_90a|sm_90 or newer"):
        compile_variant(catalogue()[DEFAULT], arch)


def test_tensor_maps_are_plain_fp32(monkeypatch):
    """The kernel splits exact fp32 values: the copy engine must not round A or B to tf32 on the way in.
    B (column-major) is mapped as the row-major N×K matrix Bᵀ, boxes of BN rows by 32 k."""
    calls = []

    def fake_map(ptr, dtype, **kw):
        tma.check_2d(ptr, dtype, **kw)
        calls.append((ptr, dtype, kw))
        return ptr

    monkeypatch.setattr(tma, "tensor_map_2d", fake_map)
    v = catalogue()[DEFAULT]
    arr = lambda ptr: SimpleNamespace(data=SimpleNamespace(ptr=ptr))
    m, n, k = 1000, 520, 300
    args = wgmma.make_args(v, arr(1 << 20), arr(2 << 20), arr(3 << 20), m, n, k, 304, 308, 520, 2.0, 0.5)
    (_, a_type, a_kw), (_, b_type, b_kw), (_, c_type, c_kw) = calls
    assert (a_type, b_type, c_type) == ("float32", "float32", "float32")
    assert a_kw == dict(rows=m, cols=k, ld=304, box_rows=128, box_cols=32, swizzle=128)
    assert b_kw == dict(rows=n, cols=k, ld=308, box_rows=128, box_cols=32, swizzle=128)
    assert c_kw == dict(rows=m, cols=n, ld=520, box_rows=64, box_cols=32, swizzle=128)
    assert args[4:] == (np.int32(m), np.int32(n), np.int32(k), np.int64(520), np.float32(2.0), np.float32(0.5))


def test_a_fragments_follow_the_swizzle_without_bank_conflicts():
    """The consumers' A loads (the template's address formula): register i of lane l in warp w holds
    A[16w + l/4 + 8(i%2)][8kk + l%4 + 4(i/2)] (the m64nNk8 tf32 fragment), read from the 128-byte swizzled
    box where TMA put it (16-byte chunk XOR row % 8); each load of a warp touches 32 distinct banks."""
    for kk in range(4):
        for warp in range(4):
            for i in range(4):
                banks = set()
                for lane in range(32):
                    r = warp * 16 + lane // 4 + 8 * (i % 2)
                    k = (kk * 8) % 32 + lane % 4 + 4 * (i // 2)
                    addr = r * 128 + (((k // 4) ^ (r % 8)) << 4) + (k % 4) * 4
                    assert addr == r * 128 + (((k * 4) // 16) ^ (r % 8)) * 16 + (k * 4) % 16  # TMA's swizzle
                    banks.add(addr // 4 % 32)
                assert len(banks) == 32


# ---- the API's precision argument (no GPU: the choice of variant and the errors) ----------------------

def test_precision_selects_the_defaults(monkeypatch):
    monkeypatch.delenv("CUPY_TF32", raising=False)
    assert api.default_variant("float32", 90, "3xtf32") == DEFAULT
    assert api.default_variant("float32", 90, "tf32") == api.DEFAULTS["tf32"][0]
    assert api.default_variant("float32", 90, "fp32") == api.default_variant("float32", 90) == \
        api.DEFAULTS["float32"][0]
    monkeypatch.setenv("CUPY_TF32", "1")  # None follows CuPy's switch; an explicit precision overrides it
    assert api.default_variant("float32", 90) == api.DEFAULTS["tf32"][0]
    assert api.default_variant("float32", 90, "fp32") == api.DEFAULTS["float32"][0]
    assert catalogue()[api.default_variant("float32", 90, "tf32")].acc == "tf32"


@pytest.mark.parametrize("bad", ["fp64", "TF32", "3xTF32", 32, ""])
def test_precision_must_be_a_known_name(bad):
    with pytest.raises(ConfigError, match="precision") as e:
        api.defaults_key("float32", bad)
    assert e.value.param == "precision"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_precision_is_for_float32_only(dtype):
    with pytest.raises(DTypeError, match="float32 inputs only"):
        api.defaults_key(dtype, "3xtf32")
    assert api.defaults_key(dtype, None) == dtype


@pytest.mark.parametrize("cc", [80, 89, 100])
def test_3xtf32_needs_hopper(cc):
    with pytest.raises(DeviceError, match="3xtf32.*sm_90a"):
        api.default_variant("float32", cc, "3xtf32")


def test_error_bound_covers_the_split():
    """The generic check's bound for 3xtf32: fp32 accumulation plus the split's 2^-21 per input."""
    k = 4096
    assert verify.bound_factor("float32", "3xtf32", k) == pytest.approx(
        verify.SAFETY * (2.0**-24 + 2.0**-21 + 2.0**-24 * 64))
    assert verify.bound_factor("float32", "3xtf32", k) < verify.bound_factor("float32", "tf32", k) / 100

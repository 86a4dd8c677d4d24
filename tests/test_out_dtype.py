"""C in another dtype than A and B, without a GPU: what the out_dtype extra renders (an equal one renders
the entry's own source), NVRTC compiles of every converting family, C's alignment in its own elements,
the call path on a fake GPU (C's tensor map, the cache key, the batch's strides of C) and the errors
raised before anything runs."""
import dataclasses

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cupy_gemm import api, batching, dispatch, epilogue, launch, operands, registry  # noqa: E402
from cupy_gemm.compile import compile_variant  # noqa: E402
from cupy_gemm.errors import ConfigError, DTypeError, InputError  # noqa: E402
from cupy_gemm.families.base import CUDA_TYPES  # noqa: E402
from cupy_gemm.render import render  # noqa: E402
from fake_gpu import gpu  # noqa: E402,F401  (the fixture)

CONVERTING = {"wgmma", "wgmma_kmajor", "wgmma_tf32", "wgmma_tf32_rowb", "wgmma_tf32_swap", "wgmma_3xtf32",
              "wgmma_3xtf32_swap", "mma", "mma_kmajor", "sgemm_simt", "sgemm_simt_kmajor"}
OUT_DTYPES = ("float32", "float16", "bfloat16")
# one entry of each family and input dtype, and one split-K entry of each family that splits K
ENTRIES = ["hgemm_wgmma_m64n256k16_stages4_ws2", "bgemm_wgmma_m64n128k16_tile64x128_stages8_ws1_splitk",
           "sgemm_wgmma_m64n256k8_tf32_stages4_ws2", "sgemm_wgmma_m64n64k8_tf32_tile64x64_stages8_ws1_splitk",
           "sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2", "sgemm_wgmma_3xtf32_swap_m64n128k8_tile128x128_stages4_ws2",
           "sgemm_wgmma_m64n16k8_tf32_swap_tile16x128_stages10_ws2_splitk",
           "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32",
           "bgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32",
           "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x2_stages3_swizzle",
           "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf_async", "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"]
CONVERSIONS = [(name, out) for name in ENTRIES for out in OUT_DTYPES if out != registry.lookup(name).dtype]
GELU_BIAS = epilogue.build("y = x + bias[j]", "gelu", operands={"bias": "col"})
# matmul's built-in keywords together: row and column scales, bias, an activation and a clamp
KEYWORDS = api.fused_epilogue(row_scale=np.zeros(1, np.float32), col_scale=np.zeros(1, np.float16),
                              bias=np.zeros(1, np.float32), activation="gelu", clamp=(-1.0, 1.0))[0]
WGMMA = "hgemm_wgmma_m64n256k16_stages3_ws2"
MMA = "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32"


def test_the_families_that_convert():
    assert {name for name, fam in registry.families().items() if fam.convert} == CONVERTING


@pytest.mark.parametrize("name", list(registry.catalogue()))
def test_an_equal_out_dtype_renders_the_entry_itself(name):
    v = registry.lookup(name)
    assert v.with_extras(out_dtype=v.dtype) is v
    source = render(v)
    assert render(dataclasses.replace(v, out_dtype=v.dtype)) == source  # the render context's default
    assert f"using T_OUT = {CUDA_TYPES[v.dtype][0]};" in source


@pytest.mark.parametrize("name,out", CONVERSIONS)
def test_a_conversion_changes_the_c_type_only(name, out):
    """C's type is T_OUT everywhere in the templates: the converted source differs in that line alone."""
    v = registry.lookup(name)
    plain, converted = render(v).splitlines(), render(v.with_extras(out_dtype=out)).splitlines()
    changed = [(a, b) for a, b in zip(plain, converted) if a != b]
    assert len(plain) == len(converted) and len(changed) == 1
    assert changed[0][1].startswith(f"using T_OUT = {CUDA_TYPES[out][0]};")


def _archs(v):
    return ["sm_90a"] if v.family.needs_sm90a else ["sm_80", "sm_90"]


@pytest.mark.parametrize("name,out", CONVERSIONS)
def test_conversions_compile(name, out):
    v = registry.lookup(name).with_extras(out_dtype=out)
    for arch in _archs(v):
        compiled = compile_variant(v, arch)
        if v.family.needs_sm90a:
            assert compiled.resources.local == 0, f"{name} -> {out}: local memory (spills)"


@pytest.mark.parametrize("name", [n for n in ENTRIES if n.endswith("_splitk") or "_mma_" in n])
def test_conversions_compile_batched_with_an_epilogue(name):
    v = registry.lookup(name)
    out = "float32" if v.dtype != "float32" else "bfloat16"
    if not v.family.batched:
        pytest.skip(f"family {v.family.name} runs no batches")
    compile_variant(v.with_extras(batched=True, epilogue=KEYWORDS, out_dtype=out), _archs(v)[0])


def test_a_tf32_tile_without_whole_16_bit_boxes_stores_from_registers():
    """96 columns of fp32 inputs are 1.5 boxes of a 16-bit C: the TMA store is compiled out, not wrong."""
    fam = registry.family("wgmma_tf32")
    v = registry.make_variant(fam, "tf32_bn96", "float32", {"BM": 128, "BN": 96, "BK": 32, "STAGES": 4,
                                                             "CONSUMERS": 2, "SPLIT_K": 0}, "tf32")
    source = render(v.with_extras(out_dtype="float16"))
    assert "constexpr bool C_BY_TMA = TMA_STORE && BN % C_BOX_COLS == 0;" in source
    compile_variant(v.with_extras(out_dtype="float16", epilogue=GELU_BIAS, batched=True), "sm_90a")


def test_with_extras_refuses_what_cannot_be_stored():
    with pytest.raises(ConfigError, match="convert"):
        registry.lookup("hgemm_sliced_k_f16_acc32").with_extras(out_dtype="float32")
    with pytest.raises(ConfigError, match="float32, float16, bfloat16"):
        registry.lookup(WGMMA).with_extras(out_dtype="float64")
    assert registry.lookup("hgemm_sliced_k_f16_acc32").with_extras(out_dtype="float16").out_dtype is None


try:
    import ml_dtypes  # noqa: F401  (NumPy knows "bfloat16" once it is imported)
except ImportError:
    ml_dtypes = None


@pytest.mark.parametrize("given,name", [(None, None), ("float16", "float16"), (np.float32, "float32")]
                         + ([(np.dtype("bfloat16"), "bfloat16")] if ml_dtypes else []))
def test_out_dtype_names(given, name):
    assert operands.out_dtype_name(given) == name


@pytest.mark.parametrize("bad", ["float64", "fp16", "half", "int8", 3, np.float64])
def test_a_bad_out_dtype_is_a_dtype_error(bad):
    with pytest.raises(DTypeError, match="out_dtype"):
        operands.out_dtype_name(bad)


def test_c_is_aligned_to_the_same_bytes_in_its_own_elements():
    assert operands.c_align(8, 2, 4) == 4 and operands.c_align(4, 4, 2) == 8 and operands.c_align(4, 4, 4) == 4
    assert operands.c_align(1, 2, 4) == 1


def test_a_16_bit_c_of_fp32_inputs_gets_a_16_byte_leading_dimension(gpu, monkeypatch):
    """N = 1004 is a multiple of fp32's 4 but not of a 16-bit C's 8: C goes to a buffer whose rows are
    padded to 1008 elements, and back."""
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype=None, order="C": gpu.array(shape, dtype, order))
    a, b, out = gpu.array((64, 32), "float32"), gpu.array((32, 1004), "float32"), gpu.array((64, 1004), "float16")
    ops = operands.resolve(a, b, out, "row", 4, beta_read=False)
    assert ops.ldc == 1008 and ops.C.shape == (64, 1004) and ops.copy_back[0] is out
    fits = gpu.array((64, 1000), "float16")
    assert operands.resolve(a, gpu.array((32, 1000), "float32"), fits, "row", 4, beta_read=False).zero_copy
    wide = gpu.array((64, 1000), "float32")  # 16-bit inputs, fp32 C: 4 elements are 16 bytes
    assert operands.resolve(gpu.array((64, 32), "float16"), gpu.array((32, 1000), "float16"), wide, "row",
                            8, beta_read=False).zero_copy


def test_the_batch_plan_counts_c_in_its_own_elements():
    plan = batching.plan((3, 64, 32), (4096, 64, 2), (3, 32, 128), (8192, 256, 2), (32768, 512, 4),
                         itemsize=2, out_itemsize=4)
    assert plan.c_strides == (8192,) and plan.a_strides == (2048,)


def _loaded(gpu, monkeypatch):
    """Records the variants the fake GPU loads (their extras included)."""
    seen, fake_load = [], launch.load

    def load(v, device):
        seen.append(v)
        return fake_load(v, device)
    monkeypatch.setattr(launch, "load", load)
    return seen


def test_wgmma_stores_c_through_a_map_of_its_dtype(gpu, monkeypatch):
    seen = _loaded(gpu, monkeypatch)
    a, b = gpu.array((256, 128), "float16"), gpu.array((128, 512), "float16")
    out = api.matmul(a, b, variant=WGMMA, out_dtype="float32")
    assert out.dtype == np.float32 and out.shape == (256, 512)
    assert seen[-1].out_dtype == "float32" and seen[-1].family.convert
    _, _, args, _ = gpu.last_launch(WGMMA)
    map_a, map_c = args[0], args[2]
    assert map_a[2] == "float16" and dict(map_a[3])["box_cols"] == 64
    assert map_c[1:3] == (out.data.ptr, "float32") and dict(map_c[3])["box_cols"] == 32
    assert args[3] is out


def test_out_of_another_dtype_means_that_dtype(gpu, monkeypatch):
    seen = _loaded(gpu, monkeypatch)
    a, b = gpu.array((64, 32), "float32"), gpu.array((32, 48), "float32")
    out = gpu.array((64, 48), "float16")
    assert api.matmul(a, b, out=out, variant="sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf_async") is out
    assert seen[-1].out_dtype == "float16"
    assert api.matmul(a, b, out=out, out_dtype="float16") is out  # both given, agreeing


@pytest.mark.skipif(ml_dtypes is None, reason="bfloat16 arrays need ml_dtypes")
def test_the_out_dtype_is_part_of_the_key(gpu):
    a, b = gpu.array((256, 128), "float16"), gpu.array((128, 512), "float16")
    assert api.matmul(a, b).dtype == np.float16
    assert api.matmul(a, b, out_dtype="float32").dtype == np.float32
    assert api.matmul(a, b, out_dtype="bfloat16").dtype.name == "bfloat16"
    assert gpu.decisions == 3
    assert api.matmul(a, b, out_dtype="float32").dtype == np.float32  # a hit allocates the out dtype
    assert api.matmul(a, b, out_dtype="float16").dtype == np.float16  # the inputs' own: a new key
    assert gpu.decisions == 4


def test_the_default_picks_a_family_that_converts():
    gpu = dispatch.Gpu("Fake GPU", 90, 132)
    plain = dispatch.choose(gpu, "float16", 1, 4096, 4096).variant
    assert not registry.lookup(plain).family.convert, plain  # so the needs below must change the choice
    for key, m in (("float16", 1), ("bfloat16", 8), ("float32", 4), ("tf32", 1), ("3xtf32", 1), ("float16", 4096)):
        name = dispatch.choose(gpu, key, m, 4096, 4096, needs=("convert",)).variant
        assert registry.lookup(name).family.convert, (key, m, name)
    ampere = dispatch.Gpu("Fake A100", 80, 108)
    for key in ("float16", "bfloat16", "float32", "tf32"):
        assert registry.lookup(dispatch.choose(ampere, key, 512, 512, 512, needs=("convert",)).variant).family.convert


def test_a_batch_of_another_dtype_steps_c_in_its_elements(gpu, monkeypatch):
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype=None, order="C": gpu.array(shape, dtype, order))
    seen = _loaded(gpu, monkeypatch)
    a, b = gpu.array((3, 64, 32), "float16"), gpu.array((3, 32, 128), "float16")
    out = api.matmul(a, b, variant=MMA, out_dtype="float32")
    assert out.shape == (3, 64, 128) and out.dtype == np.float32
    assert seen[-1].batched and seen[-1].out_dtype == "float32"
    _, _, args, _ = gpu.last_launch(MMA)
    batch = np.frombuffer(bytes(args[11]), batching.BATCH_ARGS_DTYPE)[0]
    assert batch["count"] == 3 and batch["c"][-1] == 64 * 128 and batch["a"][-1] == 64 * 32


def test_errors_before_anything_runs(gpu, monkeypatch):
    monkeypatch.setattr(cupy, "empty", lambda shape, dtype=None, order="C": gpu.array(shape, dtype, order))
    a, b = gpu.array((64, 32), "float16"), gpu.array((32, 48), "float16")
    with pytest.raises(DTypeError, match="out_dtype 'float64'"):
        api.matmul(a, b, out_dtype="float64")
    with pytest.raises(InputError, match="out is float32 but out_dtype is bfloat16"):
        api.matmul(a, b, out=gpu.array((64, 48), "float32"), out_dtype="bfloat16")
    with pytest.raises(DTypeError, match="out is float64"):
        api.matmul(a, b, out=gpu.array((64, 48), "float64"))
    with pytest.raises(DTypeError, match="c must have the output dtype float32"):
        api.gemm(a, b, gpu.array((64, 48), "float16"), beta=1.0, out_dtype="float32")
    with pytest.raises(DTypeError, match="c must have the output dtype float16"):
        api.gemm(a, b, gpu.array((64, 48), "float32"), beta=1.0)
    with pytest.raises(DTypeError, match="needs a family that converts"):
        api.matmul(a, b, out_dtype="float32", variant="hgemm_wmma_m16n16k16_mma4x2_warp2x4")
    with pytest.raises(DTypeError, match="needs a family that converts"):
        api.matmul(a, b, out=gpu.array((64, 48), "float32"), variant="hgemm_sliced_k_f16_acc32")
    with pytest.raises(DTypeError, match="needs a family that converts"):  # a batch checks the same
        api.matmul(gpu.array((2, 64, 32), "float16"), gpu.array((2, 32, 48), "float16"), out_dtype="float32",
                   variant="hgemm_sliced_k_f16_acc32")
    with pytest.raises(DTypeError, match="needs a family that converts"):
        api.plan(a, b, out_dtype="float32", variant="hgemm_sliced_k_f16_acc32")
    assert not gpu.kernels

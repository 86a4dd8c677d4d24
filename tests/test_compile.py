"""Every variant compiles with NVRTC, no GPU needed; compile errors and missing toolkits are explained."""
import re

import pytest

from cupy_gemm import compile as compile_mod, registry, toolkit
from cupy_gemm.errors import CompileError, CompilerNotFoundError, DeviceError

CATALOGUE = registry.catalogue()


def targets(v):
    if v.family.needs_sm90a:
        return ["sm_90a"]
    return [a for a in ("sm_80", "sm_90") if int(a[3:]) >= v.family.min_cc(v.params, v.dtype, v.acc)]


CASES = [(n, a) for n, v in CATALOGUE.items() for a in targets(v)]


@pytest.mark.parametrize("name,arch", CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_compiles_without_spills(name, arch):
    compiled = compile_mod.compile_variant(CATALOGUE[name], arch)
    assert len(compiled.image) > 1000
    res = compiled.resources
    assert 0 < res.registers <= 255
    # register arrays indexed at run time or register pressure past the cap would show as local memory
    assert (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), res
    # ptxas makes every wgmma wait for the one before (C7514), or injects a wait (C7517) or a fence (C7519:
    # it cost an FP8 kernel about a tenth of its speed), where it cannot prove that no other instruction
    # touches registers a wgmma in flight owns
    assert not {"C7514", "C7517", "C7519"} & set(re.findall(r"C75\d\d", compiled.log)), compiled.log


def test_resources_are_parsed():
    log = ("ptxas info    : Used 128 registers, used 1 barriers, 33024 bytes smem, 376 bytes cmem[0]\n"
           "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n")
    res = compile_mod.Resources.parse(log)
    assert (res.registers, res.static_smem, res.local, res.spill_stores, res.spill_loads) == (128, 33024, 24, 8, 4)


def test_compile_error_quotes_the_failing_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    v = CATALOGUE["sgemm_naive_f32"]
    source = compile_mod.render(v).replace("acc = zero<T_ACC>();", "acc = no_such_function();")
    with pytest.raises(CompileError) as info:
        compile_mod.compile_variant(v, "sm_80", source=source)
    message = str(info.value)
    assert "sgemm_naive_f32" in message and "BM=32" in message and "sm_80" in message
    assert "> " in message and "no_such_function" in message
    assert (tmp_path / "failed" / "sgemm_naive_f32-sm_80.cu").read_text() == source


def test_wrong_arch_is_refused():
    v = registry.lookup("sgemm_naive_f32")
    with pytest.raises(Exception, match="sm_80"):
        compile_mod.check_arch(v, "sm80")
    hopper = [x for x in CATALOGUE.values() if x.family.needs_sm90a]
    if hopper:
        with pytest.raises(DeviceError, match="sm_90a"):
            compile_mod.compile_variant(hopper[0], "sm_90")
        with pytest.raises(DeviceError, match="compute capability 9.0"):
            compile_mod.arch_for(hopper[0], 80)


def test_missing_headers_say_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CUDA_INCLUDE", str(tmp_path))
    toolkit.header_set.cache_clear()
    try:
        with pytest.raises(CompilerNotFoundError, match=r"pip install 'cuda-toolkit\[cudart,nvcc\]=="):
            toolkit.header_set(True)
    finally:
        toolkit.header_set.cache_clear()


def test_arch_for_newer_gpu_falls_back_to_ptx():
    v = registry.lookup("sgemm_naive_f32")
    newest = max(toolkit.supported_archs())
    assert compile_mod.arch_for(v, newest) == f"sm_{newest}"
    assert compile_mod.arch_for(v, newest + 5) == f"compute_{newest}"


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_k0_epilogue_kernel_compiles_through_the_cache(dtype, tmp_path, monkeypatch):
    """The epilogue alone (products with K = 0) goes through compile_source: cached like a variant."""
    from cupy_gemm import epilogue, prepared
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    ep = epilogue.build("y = x + bias[j]", "gelu", operands={"bias": ("col", "float16")})
    source = prepared.epilogue_only_source(ep, dtype)
    compiled = compile_mod.compile_source("epilogue_only", source, "sm_80")
    assert compiled.resources.local == 0
    assert compile_mod.compile_source("epilogue_only", source, "sm_80") is compiled


def test_the_traffic_floor_kernel_compiles(tmp_path, monkeypatch):
    """The corpus benchmark's traffic floor (measure/traffic_floor.py) is a helper kernel: checked like the others."""
    from cupy_gemm.render import render_file
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    compiled = compile_mod.compile_source("traffic_floor", render_file("traffic_floor.cu.j2"), "sm_90")
    assert compiled.resources.local == 0


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_the_zero_padding_kernel_compiles(itemsize, tmp_path, monkeypatch):
    """The zero-padded copies of unaligned operands (cupy_gemm/padding.py): one kernel per item size."""
    from cupy_gemm import padding
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    for arch in ("sm_80", "sm_90"):
        compiled = compile_mod.compile_source("zero_pad", padding.source(itemsize), arch)
        assert compiled.resources.local == 0


def test_a_helper_kernels_compile_error_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError, match="the K = 0 epilogue .* sm_80"):
        compile_mod.compile_source("epilogue_only", "extern \"C\" __global__ void f() { no_such(); }", "sm_80",
                                   what="the K = 0 epilogue")

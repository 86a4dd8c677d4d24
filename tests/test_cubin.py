"""Kernel resources read from the cubin agree with ptxas's report, and stand in for a log NVRTC left empty."""
import dataclasses

import pytest

from cupy_gemm import compile as compile_mod, cubin, registry

CASES = [("sgemm_sliced_k_f32", "sm_80"), ("sgemm_sliced_k_f32", "sm_90"), ("hgemv_skinny_r8_mma", "sm_90"),
         ("hgemm_wgmma_m64n256k16_stages3_ws2", "sm_90a"), ("sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2", "sm_90a")]


@pytest.mark.parametrize("name,arch", CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_image_agrees_with_ptxas(name, arch):
    compiled = compile_mod.compile_variant(registry.lookup(name), arch)
    logged = compiled.resources
    assert logged.registers > 0  # the log has the report: the comparison below means something
    assert cubin.resources(compiled.image, arch) == {
        "registers": logged.registers, "static_smem": logged.static_smem, "local": logged.local}


def test_empty_log_falls_back_to_the_image():
    compiled = compile_mod.compile_variant(registry.lookup("sgemm_sliced_k_f32"), "sm_90")
    silent = dataclasses.replace(compiled, log="")
    assert silent.resources.registers == compiled.resources.registers
    assert silent.resources.static_smem == 32 * 32 * 4 * 2


def test_not_an_image():
    assert cubin.resources(b".version 8.0\n.target sm_90\n", "compute_90") is None
    assert cubin.resources(b"\x7fELF\x02" + b"\0" * 20, "sm_90") is None

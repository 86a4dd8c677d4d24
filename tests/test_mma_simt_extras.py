"""Batches and fused epilogues in the mma and sgemm_simt families, without a GPU: the catalogue's own
sources carry neither, the kernel takes its arguments in the launcher's order, and one variant of each
distinct template path compiles with NVRTC for sm_80 batched, with an epilogue, and both."""
import re

import pytest

from cupy_gemm import epilogue, registry
from cupy_gemm.compile import compile_variant
from cupy_gemm.render import render

FAMILIES = ("mma", "sgemm_simt")
ENTRIES = {n: v for n, v in registry.catalogue().items() if v.family.name in FAMILIES}
GELU = epilogue.build("gelu")
# every kind of operand, a row, a column, a full matrix and a scalar, then a builtin
CUSTOM = epilogue.build("y = x * rowscale[i] + bias[j] + res[i, j] * s", "silu",
                        operands={"rowscale": "row", "bias": "col", "res": "full", "s": "scalar"})


def _path(v) -> tuple:
    """The template options that pick distinct code (tile sizes only change constants)."""
    p = v.params
    if v.family.name == "mma":
        return v.dtype, v.acc, p["STAGES"] == 1, p["RBUF"], p["B_X4"], p["SMEM_SWIZZLE"], p["SPLIT_K"] != 1, p["UNALIGNED"]
    return p["A_TRANSPOSED"], p["DBUF"], p["ASYNC"], p["PAIRS"], p["SPLIT_K"] != 1, p["UNALIGNED"]


def _representatives() -> list[str]:
    first = {}
    for name, v in ENTRIES.items():
        first.setdefault((v.family.name, _path(v)), name)
    return list(first.values())


REPRESENTATIVES = _representatives()


def _kernel_params(source: str) -> list[str]:
    """The parameter names of gemm_kernel, in order."""
    signature = re.search(r"\bgemm_kernel\(([^)]*)\)", source).group(1)
    signature = re.sub(r"//[^\n]*", "", signature)
    return [p.split()[-1].lstrip("*&") for p in signature.split(",")]


def test_both_families_run_batches_and_epilogues():
    for name in FAMILIES:
        fam = registry.family(name)
        assert fam.batched and fam.epilogue


@pytest.mark.parametrize("name", list(ENTRIES))
def test_catalogue_sources_carry_no_extras(name):
    """Unbatched and without an epilogue, a variant renders as it did before either existed (checked
    byte for byte when they were added): no batch or epilogue text."""
    source = render(ENTRIES[name])
    for text in ("BatchArgs", "EpilogueParams", "apply_epilogue", "gemm_member", "for_each_member"):
        assert text not in source


def test_representatives_cover_each_dtype_and_split_k():
    reps = [ENTRIES[n] for n in REPRESENTATIVES]
    assert {(v.dtype, v.acc) for v in reps if v.family.name == "mma"} >= {
        ("float16", "float16"), ("float16", "float32"), ("bfloat16", "float32"), ("float32", "tf32")}
    for family in FAMILIES:
        assert any(v.params["SPLIT_K"] != 1 for v in reps if v.family.name == family)


@pytest.mark.parametrize("batched,ep", [(True, None), (False, GELU), (True, GELU)],
                         ids=["batched", "epilogue", "batched+epilogue"])
@pytest.mark.parametrize("name", REPRESENTATIVES[:1] + [n for n in REPRESENTATIVES if n.endswith("_splitk")])
def test_arguments_in_the_launchers_order(name, batched, ep):
    """launch.prepare appends BatchArgs, then EpilogueParams, then the split-K arguments."""
    v = ENTRIES[name]
    params = _kernel_params(render(v.with_extras(batched=batched, epilogue=ep)))
    extras = (["batch"] if batched else []) + (["epi"] if ep else [])
    tail = ["splits", "workspace"] if v.family.takes_split_k_args(v.params) else []
    assert params == ["A", "B", "C", "M", "N", "K", "lda", "ldb", "ldc", "alpha", "beta", *extras, *tail]


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_batched_with_an_epilogue_compiles(name):
    compile_variant(ENTRIES[name].with_extras(batched=True, epilogue=GELU), "sm_80")


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("name", ["hgemm_mma_m16n8k16_naive", "sgemm_t_4x4_tile32x64_sliced_k16_f32x4_bcf_dbuf_offset_splitk"])
def test_an_epilogue_with_every_kind_of_operand_compiles(name, batched):
    """Small tiles: each operand read is unrolled over a thread's every element, which compiles slowly."""
    compile_variant(ENTRIES[name].with_extras(batched=batched, epilogue=CUSTOM), "sm_80")


@pytest.mark.parametrize("name", REPRESENTATIVES[::4])
def test_batched_alone_compiles(name):
    compile_variant(ENTRIES[name].with_extras(batched=True), "sm_80")

"""TF32 with a row-major B read in place (wgmma_tf32_rowb) on the CPU: what the family declares, the
landing buffers its shared memory adds, the converter warps only its entries render, and the dispatch's B-layout rule that hands a column-major B to wgmma_tf32."""
import pytest

from cupy_gemm import placement_rules
from family_rules import b_placement
from cupy_gemm.dispatch import Decision, Gpu
from cupy_gemm.errors import ConfigError
from cupy_gemm.families import wgmma
from cupy_gemm.registry import catalogue, family, make_variant
from cupy_gemm.render import render

ROWB = family("wgmma_tf32_rowb")
NAMES = [n for n, v in catalogue().items() if v.family is ROWB]
HOPPER = Gpu("unknown GPU", 90)


def test_family_reads_b_row_major_with_the_tf32_pipeline():
    tf32 = family("wgmma_tf32")
    assert ROWB.b_layout is None and tf32.b_layout == "col"
    assert ROWB.template == tf32.template and dict(ROWB.dtypes) == {"float32": ("tf32",)}
    assert ROWB.split_k and ROWB.batched and ROWB.epilogue and ROWB.convert
    assert len(NAMES) >= 4 and any(n.endswith("_splitk") for n in NAMES)
    for name in NAMES:
        p = catalogue()[name].params
        landing = p["STAGES"] * (p["BK"] * p["BN"] * 4 + 8)
        assert ROWB.smem_bytes(p, "float32", "tf32") == wgmma.smem_bytes(p, "float32", "tf32") + landing


def test_the_landing_buffers_count_against_shared_memory():
    # 128×256 in 3 stages fits wgmma_tf32 (the landing buffers are what it lacks) but not this family
    params = {"BM": 128, "BN": 256, "BK": 32, "STAGES": 3, "CONSUMERS": 2}
    make_variant(family("wgmma_tf32"), "fits", "float32", params, "tf32")
    with pytest.raises(ConfigError) as e:
        make_variant(ROWB, "too_big", "float32", params, "tf32")
    assert e.value.param == "smem"


def test_only_its_entries_render_the_converters():
    rowb = render(catalogue()[NAMES[0]])
    assert "transpose_b_stage<BK, BN, 32 * CONVERTERS>" in rowb and "mbar_wait(conv(stage), phase)" in rowb
    for name in ("sgemm_wgmma_m64n256k8_tf32_stages4_ws2", "hgemm_wgmma_m64n256k16_stages4_ws2"):
        plain = render(catalogue()[name])
        assert "transpose_b_stage" not in plain and "conv(" not in plain and "CONVERTERS = 0" in plain


@pytest.mark.parametrize("name", NAMES)
def test_a_column_major_b_goes_to_the_wgmma_tf32_tile_nearest(name):
    decision = Decision(name, "a table said so")
    col = placement_rules.b_layout(HOPPER, "tf32", decision, b_placement(512, 4096, 4096, "col"), ())
    twin = catalogue()[col.variant]
    assert twin.family.name == "wgmma_tf32" and "B-layout rule" in col.reason
    assert twin.family.takes_split_k_args(twin.params) == ROWB.takes_split_k_args(catalogue()[name].params)
    assert not b_placement(512, 4096, 4096, "col").for_variant(twin).copies
    # a row-major B is what the entry reads: the decision stands
    assert placement_rules.b_layout(HOPPER, "tf32", decision, b_placement(512, 4096, 4096, "row"), ()) is decision

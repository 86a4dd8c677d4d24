"""The swapped 3xTF32 kernel (wgmma_3xtf32_swap) on the CPU: what the family declares and refuses, the
template's shared claims with wgmma_tf32_swap (fragment addressing, transposed store) and wgmma_3xtf32
(the split, the converters), and the B-layout rule between the two 3xTF32 families."""
import pytest

from cupy_gemm import dispatch, placement_rules
from cupy_gemm.arrange import Placement, fresh
from cupy_gemm.compile import compile_variant
from cupy_gemm.dispatch import Decision, Gpu
from cupy_gemm.errors import ConfigError
from cupy_gemm.families import wgmma_3xtf32_swap as swap
from cupy_gemm.registry import catalogue, family, make_variant
from cupy_gemm.render import render
from family_rules import template_text

SWAP = family("wgmma_3xtf32_swap")
NAMES = [n for n, v in catalogue().items() if v.family is SWAP]
HOPPER = Gpu("NVIDIA H100 80GB HBM3", 90, 132)
BASE = {"BM": 128, "BN": 128, "BK": 32, "STAGES": 4, "CONSUMERS": 2}


def test_family_declares_a_row_major_b_and_3xtf32():
    assert SWAP.b_layout is None and dict(SWAP.dtypes) == {"float32": ("3xtf32",)} and SWAP.needs_sm90a
    assert SWAP.convert and SWAP.abi == "tma" and not SWAP.split_k and not SWAP.batched
    assert all(f"tile{catalogue()[n].params['BM']}x" in n for n in NAMES)


# the tile rules are wgmma_tf32_swap's (swap_tile_rules, tested there); one of them, then this family's own
@pytest.mark.parametrize("params,param", [
    ({"BN": 192}, "BN"),                         # 96 columns a consumer: no whole m64 tile of Cᵀ
    ({"BM": 192, "STAGES": 2}, "BM"),            # 96 + 96 + 32 registers a consumer thread: it spilled
    ({"BM": 256, "STAGES": 3}, "smem"),          # 3 × 80 KB
])
def test_it_refuses_tiles_that_break_its_constraints(params, param):
    with pytest.raises(ConfigError) as e:
        make_variant(SWAP, "bad", "float32", {**BASE, **params}, "3xtf32")
    assert e.value.param == param


def test_registers_and_smem_as_the_template_counts_them():
    assert swap.consumer_registers(BASE) == 128 + 32
    assert swap.smem_bytes(BASE, "float32", "3xtf32") == 4 * (2 * 128 + 128) * 32 * 4 + 1024 + 24 * 4
    assert "BN / CONSUMERS / 64 * (BM + BK) <= 192" in template_text("wgmma_3xtf32_swap.cu.j2")


def test_the_template_shares_the_swap_layout_and_the_split():
    """The fragment rows, their addresses and the transposed store are wgmma_tf32_swap's (whose tests check
    the banks and the coverage); the split and the converters' loop are common/tf32_split.cuh's."""
    ours, tf32_swap = template_text("wgmma_3xtf32_swap.cu.j2"), template_text("wgmma_tf32_swap.cu.j2")
    for line in ("const int n_lo = g % 4 + 16 * (g / 4) + 4 * warp;",
                 "((((n % 32) / 4) ^ (k % 8)) << 4) + (n % 4) * 4",
                 "const int m = tile.row0 + 8 * (i / 4) + 2 * q + i % 2;"):
        assert line in ours and line in tf32_swap
    src = render(catalogue()[NAMES[0]])
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in src
    assert "split_stage_tf32<false, A_STAGE_BYTES>" in src and "0xffffe000u" in src


@pytest.mark.parametrize("name", NAMES)
def test_compiles_for_sm_90a_without_spills(name):
    res = compile_variant(catalogue()[name], "sm_90a").resources
    assert (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), res


def _placement(order, m=4096, n=4096, k=4096):
    b = fresh((k, n), 4) if order == "row" else fresh((n, k), 4).T
    return Placement(fresh((m, k), 4), b, fresh((m, n), 4))


@pytest.mark.parametrize("size", [4096, 8192])
def test_precision_3xtf32_reads_either_b_in_place(size):
    """The heuristic lists the column-major family; a C-ordered B goes to the swapped one, nearest tile."""
    col = dispatch.choose(HOPPER, "3xtf32", size, size, size, placement=_placement("col", size, size, size))
    row = dispatch.choose(HOPPER, "3xtf32", size, size, size, placement=_placement("row", size, size, size))
    assert catalogue()[col.variant].family.name == "wgmma_3xtf32"
    assert catalogue()[row.variant].family is SWAP and "B-layout rule" in row.reason
    assert not _placement("row", size, size, size).for_variant(catalogue()[row.variant], align=1).copy_b


@pytest.mark.parametrize("name", NAMES)
def test_a_column_major_b_goes_back_to_wgmma_3xtf32(name):
    decision = Decision(name, "named by a test")
    col = placement_rules.b_layout(HOPPER, "3xtf32", decision, _placement("col"), ())
    assert catalogue()[col.variant].family.name == "wgmma_3xtf32" and "B-layout rule" in col.reason
    assert placement_rules.b_layout(HOPPER, "3xtf32", decision, _placement("row"), ()) is decision

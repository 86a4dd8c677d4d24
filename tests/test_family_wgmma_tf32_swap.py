"""The swapped TF32 kernel (wgmma_tf32_swap) on the CPU: what the family declares and refuses, the layout
claims of its template (B's fragment loads hit 32 distinct banks, the permuted fragment rows and the
transposed store cover every element of C once) and the B-layout rule that hands a column-major B to
wgmma_tf32."""
import pytest

from cupy_gemm import placement_rules
from cupy_gemm.arrange import Placement, fresh
from cupy_gemm.dispatch import Decision, Gpu
from cupy_gemm.errors import ConfigError
from cupy_gemm.families import wgmma_tf32_swap as swap
from cupy_gemm.registry import catalogue, family, make_variant
from cupy_gemm.render import render

SWAP = family("wgmma_tf32_swap")
NAMES = [n for n, v in catalogue().items() if v.family is SWAP]
HOPPER = Gpu("unknown GPU", 90)
# the template's fragment row -> column of C, and element (k, n) of a landed B box -> its byte offset
N_LO = "const int n_lo = g % 4 + 16 * (g / 4) + 4 * warp;"
B_ADDR = "(n / 32) * B_BOX_BYTES + k * 128 + ((((n % 32) / 4) ^ (k % 8)) << 4) + (n % 4) * 4"


def _column(warp, lane, h):
    g = lane // 4
    return g % 4 + 16 * (g // 4) + 4 * warp + 32 * h


def test_family_declares_a_row_major_b_and_split_k():
    assert SWAP.b_layout is None and dict(SWAP.dtypes) == {"float32": ("tf32",)} and SWAP.needs_sm90a
    assert SWAP.split_k and SWAP.convert and SWAP.abi == "tma" and not SWAP.batched
    assert any(n.endswith("_splitk") for n in NAMES) and any(n.startswith("sgemm_wgmma_m64n16k8") for n in NAMES)
    for name in NAMES:  # the name's instruction is m64n{BM}k8 and its tile BM×BN
        p = catalogue()[name].params
        assert f"m64n{p['BM']}k8" in name and f"tile{p['BM']}x{p['BN']}" in name


@pytest.mark.parametrize("params,param", [
    ({"BM": 20}, "BM"),                                     # not a multiple of 8: no wgmma N
    ({"BN": 192}, "BN"),                                    # 96 columns a consumer: no whole m64 tile of Cᵀ
    ({"BM": 256, "BN": 256, "STAGES": 2}, "BM"),            # 2 × (128 + 32) registers a consumer thread
    ({"BM": 256, "BN": 128, "STAGES": 5}, "smem"),          # 5 × 48 KB
])
def test_it_refuses_tiles_that_break_its_constraints(params, param):
    base = {"BM": 128, "BN": 128, "BK": 32, "STAGES": 4, "CONSUMERS": 2}
    with pytest.raises(ConfigError) as e:
        make_variant(SWAP, "bad", "float32", {**base, **params}, "tf32")
    assert e.value.param == param


def test_the_rendered_kernel_holds_the_layout_tested_below():
    source = render(catalogue()[NAMES[0]])
    assert N_LO in source and B_ADDR in source and "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in source
    small = render(catalogue()["sgemm_wgmma_m64n16k8_tf32_swap_tile16x128_stages10_ws2_splitk"])
    assert "m64n16k8.f32.tf32.tf32" in small  # the register-operand wgmma's N is BM


def test_fragment_loads_hit_32_distinct_banks():
    """Register i of a fragment (k8 step kk) is row 16w + g + 8 (i % 2), k = 8kk + q + 4 (i / 2): every warp's
    load of one register reads 32 words in 32 banks of the 128-byte swizzled B box, for every k8 step."""
    for warp in range(4):
        for kk in range(8):  # BK = 64 at most
            for i in range(4):
                banks = set()
                for lane in range(32):
                    n, k = _column(warp, lane, i % 2), kk * 8 + lane % 4 + 4 * (i // 2)
                    offset = (n // 32) * 64 * 128 + k * 128 + ((((n % 32) // 4) ^ (k % 8)) << 4) + (n % 4) * 4
                    banks.add(offset // 4 % 32)
                assert len(banks) == 32, (warp, kk, i)


def test_the_fragment_rows_and_the_transposed_store_cover_the_tile_once():
    """A consumer's 128 threads, their two row halves and BM/2 accumulators each: every (m, n) of its 64
    columns × BM rows exactly once."""
    bm = 48
    seen = []
    for warp in range(4):
        for lane in range(32):
            for i in range(bm // 2):
                n = _column(warp, lane, (i // 2) % 2)
                m = 8 * (i // 4) + 2 * (lane % 4) + i % 2
                seen.append((m, n))
    assert sorted(seen) == [(m, n) for m in range(bm) for n in range(64)]


def test_smem_and_registers_as_the_template_counts_them():
    p = {"BM": 256, "BN": 128, "BK": 32, "STAGES": 4, "CONSUMERS": 2, "SPLIT_K": 1}
    assert swap.smem_bytes(p, "float32", "tf32") == 4 * (256 + 128) * 32 * 4 + 1024 + 16 * 4
    assert swap.consumer_registers(p) == 128 + 32
    assert swap.smem_bytes({**p, "SPLIT_K": 0}, "float32", "tf32") == swap.smem_bytes(p, "float32", "tf32") + 16


@pytest.mark.parametrize("name", NAMES)
def test_a_column_major_b_goes_to_the_wgmma_tf32_tile_nearest(name):
    def placement(order):
        b = fresh((4096, 4096), 4) if order == "row" else fresh((4096, 4096), 4).T
        return Placement(fresh((512, 4096), 4), b, fresh((512, 4096), 4))
    decision = Decision(name, "a table said so")
    col = placement_rules.b_layout(HOPPER, "tf32", decision, placement("col"), ())
    twin = catalogue()[col.variant]
    assert twin.family.name == "wgmma_tf32" and "B-layout rule" in col.reason
    assert twin.family.takes_split_k_args(twin.params) == SWAP.takes_split_k_args(catalogue()[name].params)
    assert placement_rules.b_layout(HOPPER, "tf32", decision, placement("row"), ()) is decision

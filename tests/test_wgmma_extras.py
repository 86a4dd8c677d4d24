"""Batches and fused epilogues in the Hopper wgmma families, on the CPU: what the extras add to the rendered
source (and that a plain variant's source has none of it), sm_90a compiles with NVRTC, and the batched
tensor maps make_args asks for (the driver's encoder is replaced: it needs a GPU)."""
from types import SimpleNamespace

import numpy as np
import pytest

from cupy_gemm import batching, epilogue, tma
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import ConfigError, InputError
from cupy_gemm.families import wgmma
from cupy_gemm.registry import catalogue, family
from cupy_gemm.render import render

FAMILIES = ("wgmma", "wgmma_tf32")
NAMES = [n for n, v in catalogue().items() if v.family.name in FAMILIES]
FLAGSHIP = "hgemm_wgmma_m64n256k16_stages4_ws2"
TF32 = [n for n in NAMES if catalogue()[n].family.name == "wgmma_tf32"][0]
# every kind of operand, and x from the accumulator
CUSTOM = epilogue.build("y = x * scale + bias[j] + res[i, j] * rowscale[i]", "relu",
                        operands={"scale": "scalar", "bias": "col", "res": "full", "rowscale": "row"})
EXTRAS_ONLY = ("BatchArgs", "EpilogueParams", "apply_epilogue", "cp.async.bulk.tensor.5d", "C0", "member")


def test_both_families_take_batches_and_epilogues():
    for name in FAMILIES:
        assert family(name).batched and family(name).epilogue
    for name in ("wgmma_3xtf32", "wgmma_fp8"):  # their own templates: not (yet)
        assert not family(name).batched and not family(name).epilogue


@pytest.mark.parametrize("name", NAMES)
def test_a_plain_variant_renders_nothing_of_the_extras(name):
    src = render(catalogue()[name])
    assert not [word for word in EXTRAS_ONLY if word in src]
    assert "T_OUT* __restrict__ C, int M, int N, int K, long long ldc,\n" \
           "            float alpha, float beta, int splits, void* __restrict__ workspace)" in src


@pytest.mark.parametrize("name", NAMES)
def test_the_extras_only_add_to_the_plain_source(name):
    """Every line of the plain kernel that the extras change is one of the few they must change: the
    signature, the tile count, the tile walk, the copies' coordinates and the stores."""
    v = catalogue()[name]
    plain = render(v).splitlines()
    extra = set(render(v.with_extras(batched=True, epilogue=CUSTOM)).splitlines())
    changed = [line.strip() for line in plain if line not in extra]
    allowed = ("T_OUT* __restrict__ C,", "float alpha, float beta, int splits", "const int tiles =",
               "const Tile tile = cta_tile(tile_of(tile_id,", "tile.row0 + r);", "tile.col0);", "tile.col0 + r);", "kb * BK);",
               "st_shared_pair(addr, alpha * acc", "tma_store_2d(&map_c, buf,", "acc[mi][4 * j + 2 * h + 1], alpha, beta);",
               "(1 << CLUSTER) - 1);")
    assert [line for line in changed if not any(a in line for a in allowed)] == []
    # two of the signature, the tile count, two tile walks, three copies, three stores
    assert len(changed) == 11


def test_the_extras_reach_every_store():
    src = render(catalogue()["hgemm_wgmma_m64n256k16_stages4_ws2_splitk"].with_extras(batched=True, epilogue=CUSTOM))
    # the epilogue runs once per element, after the split-K sum, and both store paths store its values
    body = src[src.index("split_k_fragments<CONSUMER_THREADS>(acc"):]
    assert body.count("epilogue_in_place(") == 1 and "apply_epilogue" not in body
    assert "st_shared_pair(addr, acc[mi][i], acc[mi][i + 1]);" in body
    assert "acc[mi][4 * j + 2 * h + 1], 1.f, 0.f);" in body
    assert src.count(", at_a);") == 1 and src.count(", at_b);") == 2 and src.count(", at_c);") == 1
    assert "const int tiles = member_tiles * batch.count;" in src  # split-K counters cover every member
    assert "const __grid_constant__ BatchArgs batch, const __grid_constant__ EpilogueParams epi, int splits" in src


def _compiles(variant):
    compiled = compile_variant(variant, "sm_90a")
    assert compiled.resources.local == 0, f"{variant.name}: local memory (spills) with extras"


@pytest.mark.parametrize("name", NAMES)
def test_every_entry_compiles_batched_with_an_epilogue(name):
    _compiles(catalogue()[name].with_extras(batched=True, epilogue=CUSTOM))


@pytest.mark.parametrize("builtin", list(epilogue.BUILTINS))
def test_builtin_epilogues_compile(builtin):
    _compiles(catalogue()[FLAGSHIP].with_extras(epilogue=epilogue.build(builtin)))


@pytest.mark.parametrize("name", [FLAGSHIP, "hgemm_wgmma_m64n256k16_stages4_ws2_regstore", TF32])
def test_batched_alone_and_epilogue_alone_compile(name):
    _compiles(catalogue()[name].with_extras(batched=True))
    _compiles(catalogue()[name].with_extras(epilogue=epilogue.build("gelu").transposed()))


# ---- a C at any leading dimension and address (Family.unaligned_c) ----------------------------------

# the families that write an odd N in place this way (wgmma's entries are wgmma_kmajor's, B read otherwise)
ANY_C = [n for n, v in catalogue().items() if v.family.unaligned_c and v.family.ragged_n]


def test_the_unaligned_c_rendering_stores_from_registers():
    """No TMA store (no map describes such a C); the pairs of columns check their alignment and N."""
    v = catalogue()[FLAGSHIP]
    plain, any_c = render(v), render(v.with_extras(unaligned_c=True))
    assert "store_pair_any" not in plain and "constexpr bool C_BY_TMA = TMA_STORE" in plain
    assert "constexpr bool C_BY_TMA = false;" in any_c
    assert any_c.count("store_pair_any(C + offset(r, col, ldc), col, N, acc[mi]") == 1
    three = catalogue()[[n for n in ANY_C if catalogue()[n].family.name == "wgmma_3xtf32"][0]]
    assert "store_pair_any(" not in render(three)
    assert "constexpr bool C_BY_TMA = false;" in render(three.with_extras(unaligned_c=True))
    with pytest.raises(ConfigError, match="unaligned_c"):
        catalogue()["sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"].with_extras(unaligned_c=True)


@pytest.mark.parametrize("name", ANY_C)
def test_every_entry_compiles_for_an_unaligned_c(name):
    """With a batch and an epilogue where the family has them (wgmma_3xtf32 has neither)."""
    fam = catalogue()[name].family
    _compiles(catalogue()[name].with_extras(batched=fam.batched, epilogue=CUSTOM if fam.epilogue else None,
                                            unaligned_c=True))


def test_make_args_makes_no_map_of_an_unaligned_c(monkeypatch):
    """x @ W.T with W of 7 rows: C's members 7·100 elements apart, a stride TMA refuses, and no map of C."""
    v = catalogue()["hgemm_wgmma_kmajor_m64n256k16_stages4_ws2"].with_extras(batched=True, unaligned_c=True)
    plan = batching.plan((3, 100, 72), (100 * 72 * 2, 72 * 2, 2), (72, 7), (2, 72 * 2), (7 * 100 * 2, 7 * 2, 2),
                         itemsize=2)
    calls = []
    monkeypatch.setattr(tma, "tensor_map", lambda ptr, dtype, **kw: calls.append(ptr) or ptr)
    arr = lambda ptr: SimpleNamespace(data=SimpleNamespace(ptr=ptr))
    args = wgmma.make_args(v, arr(1 << 20), arr(2 << 20), arr(3 << 20), plan.m, plan.n, plan.k, 72, 72, 7, 1.0, 0.0,
                           batch=plan)
    assert calls == [1 << 20, 2 << 20] and not bytes(args[2]).strip(b"\0") and args[3].data.ptr == 3 << 20


# ---- tensor maps over a batch ----------------------------------------------------------------------

def test_batched_layout_puts_the_batch_after_the_matrix():
    # shape (outermost first) 3 × 5; strides 1000 and 200 elements of 2 bytes; rows of 64 elements
    dims, strides = tma.batched_layout(rows=10, cols=40, ld=64, shape=(1, 3, 5), strides=(0, 1000, 200), itemsize=2)
    assert dims == (40, 10, 5, 3, 1)
    assert strides == (128, 400, 2000, 2000 * 3)  # the padded outer dimension: a packed next slice


def test_batched_layout_gives_broadcast_dimensions_size_one():
    dims, strides = tma.batched_layout(rows=10, cols=40, ld=64, shape=(2, 3, 5), strides=(0, 0, 0), itemsize=4)
    assert dims == (40, 10, 1, 1, 1)
    assert strides == (256, 2560, 2560, 2560) and all(s % 16 == 0 for s in strides)


def _plan(a_shape, b_shape, itemsize, a_strides=None, b_strides=None):
    contiguous = lambda shape: tuple(int(np.prod(shape[i + 1:])) * itemsize for i in range(len(shape)))
    return batching.plan(a_shape, a_strides or contiguous(a_shape), b_shape, b_strides or contiguous(b_shape),
                         itemsize=itemsize)


def _make_args(monkeypatch, v, plan, lda, ldb, ldc):
    calls = []
    monkeypatch.setattr(tma, "tensor_map", lambda ptr, dtype, **kw: calls.append((ptr, dtype, kw)) or ptr)
    arr = lambda ptr: SimpleNamespace(data=SimpleNamespace(ptr=ptr))
    args = wgmma.make_args(v, arr(1 << 20), arr(2 << 20), arr(3 << 20), plan.m, plan.n, plan.k, lda, ldb, ldc,
                           1.0, 0.0, batch=plan)
    assert args[:3] == (1 << 20, 2 << 20, 3 << 20)
    return [kw for _, _, kw in calls]


def test_make_args_maps_a_broadcast_weight_as_one_slice(monkeypatch):
    """a (4, 6, 100, 72) @ b (72, 40): a contiguous batch of 24 (one merged dimension), b shared."""
    v = catalogue()[FLAGSHIP]
    plan = _plan((4, 6, 100, 72), (72, 40), 2)
    assert plan.shape == (24,) and plan.b_strides == (0,)
    a, b, c = _make_args(monkeypatch, v, plan, 72, 40, 40)
    assert a == dict(dims=(72, 100, 24, 1, 1), strides=(144, 14400, 14400 * 24, 14400 * 24), box=(64, 64, 1, 1, 1),
                     swizzle=128)
    assert b == dict(dims=(40, 72, 1, 1, 1), strides=(80, 5760, 5760, 5760), box=(64, 64, 1, 1, 1), swizzle=128)
    assert c == dict(dims=(40, 100, 24, 1, 1), strides=(80, 8000, 8000 * 24, 8000 * 24), box=(64, 64, 1, 1, 1),
                     swizzle=128)


def test_make_args_maps_a_two_dimensional_batch_of_slices(monkeypatch):
    """Slices of bigger arrays (16-byte aligned strides that do not merge) over a 2 × 3 batch."""
    v = catalogue()[FLAGSHIP]
    # a: (2, 3, 64, 48) viewed in a (2, 4, 64, 56) array; b broadcast over the first dimension
    plan = _plan((2, 3, 64, 48), (3, 48, 32), 2, a_strides=(4 * 64 * 56 * 2, 64 * 56 * 2, 56 * 2, 2),
                 b_strides=(48 * 40 * 2, 40 * 2, 2))
    assert plan.shape == (2, 3) and plan.a_strides == (4 * 64 * 56, 64 * 56) and plan.b_strides == (0, 48 * 40)
    a, b, c = _make_args(monkeypatch, v, plan, 56, 40, 32)
    assert a["dims"] == (48, 64, 3, 2, 1) and a["strides"] == (112, 64 * 56 * 2, 4 * 64 * 56 * 2, 4 * 64 * 56 * 2 * 2)
    assert b["dims"] == (32, 48, 3, 1, 1) and b["strides"] == (80, 48 * 40 * 2, 48 * 40 * 2 * 3, 48 * 40 * 2 * 3)
    assert c["dims"] == (32, 64, 3, 2, 1) and c["strides"][:3] == (64, 64 * 64, 3 * 64 * 64)


def test_make_args_maps_the_tf32_b_as_its_transpose(monkeypatch):
    v = catalogue()[TF32]
    plan = _plan((5, 100, 72), (5, 72, 40), 4)
    _, b, _ = _make_args(monkeypatch, v, plan, 72, 72, 40)  # B column-major: ldb = K
    assert b["dims"] == (72, 40, 5, 1, 1) and b["box"] == (32, v.params["BN"], 1, 1, 1)


def test_unaligned_batch_strides_are_refused(monkeypatch):
    v = catalogue()[FLAGSHIP]
    plan = _plan((3, 10, 8), (8, 8), 2, a_strides=(84 * 2, 8 * 2, 2))  # 168-byte member stride
    assert not wgmma.batch_fits(plan, "float16")
    with pytest.raises(InputError, match="multiple of 16"):
        _make_args(monkeypatch, v, plan, 8, 8, 8)
    assert wgmma.batch_fits(_plan((3, 10, 8), (8, 8), 2), "float16")
    assert not wgmma.batch_fits(_plan((3, 10, 7), (3, 7, 5), 4), "float32")  # b's members: 140 bytes apart
    assert wgmma.batch_fits(_plan((3, 10, 8), (3, 8, 8), 4), "float32")


def test_a_swapped_plan_exchanges_a_and_b():
    plan = _plan((4, 30, 16), (16, 8), 2)
    kernel = plan.transposed()
    assert (kernel.m, kernel.n, kernel.a_strides, kernel.b_strides) == (plan.n, plan.m, (0,), plan.a_strides)
    assert bytes(plan.kernel_args(swapped=True)) == bytes(kernel.kernel_args())

"""grouped_matmul without a GPU: input checks raise typed errors (NumPy stand-ins carry the shapes,
strides and dtypes the checks read), the device schedule's row ranges and the host's bound on its tiles,
the variant choice, and every grouped variant, in both B layouts, compiles for sm_90a."""

import numpy as np
import pytest

from cupy_gemm import api, compile as compile_mod, grouped, grouping, operands, registry
from cupy_gemm.errors import DTypeError, InputError
from cupy_gemm.families.grouped import MAX_GROUPS

F16 = np.float16
NAMES = [n for n, v in registry.catalogue().items() if v.family.name == "grouped"]


def arr(shape, dtype=F16):
    return np.zeros(shape, dtype)


def experts(rows=10, g=4, k=64, n=32, *, dtype=F16, b_dtype=None, b_layout="kn", offs_dtype=np.int32, offs_len=None,
            out=None):
    b_shape = (g, n, k) if b_layout == "nk" else (g, k, n)
    return grouped.check_experts(arr((rows, k), dtype), arr(b_shape, b_dtype or dtype),
                                 arr((g if offs_len is None else offs_len,), offs_dtype), b_layout, out)


def test_experts_checks_pass_and_report_sizes():
    assert experts() == ("float16", 4, 32, 64)
    assert experts(b_layout="nk", dtype=np.dtype("bfloat16") if hasattr(np, "bfloat16") else F16)[1:] == (4, 32, 64)


@pytest.mark.parametrize("kw,error,match", [
    (dict(b_dtype=np.float32), DTypeError, "float16 or bfloat16"),
    (dict(dtype=np.float32), DTypeError, "float16 or bfloat16"),
    (dict(offs_dtype=np.int64), DTypeError, "int32"),
    (dict(offs_len=3), InputError, r"shape \(4,\)"),
    (dict(k=40 + 4), InputError, "K = 44 must be a multiple of 8"),
    (dict(n=36), InputError, "N = 36 must be a multiple of 8"),
    (dict(out=arr((10, 16))), InputError, r"\(10, 32\) float16"),
    (dict(out=arr((10, 32), np.float32)), InputError, "float16"),
    (dict(out=arr((32, 10)).T), InputError, "C-contiguous"),
    (dict(b_layout="kt"), InputError, "b_layout"),
    (dict(g=MAX_GROUPS + 1), InputError, f"at most {MAX_GROUPS} groups"),
])
def test_experts_checks_refuse(kw, error, match):
    with pytest.raises(error, match=match):
        experts(**kw)


def test_mixed_16_bit_dtypes_are_refused():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(DTypeError, match="one dtype"):
        experts(b_dtype=ml_dtypes.bfloat16)


def test_experts_need_offsets_and_matching_k():
    with pytest.raises(InputError, match="needs offsets"):
        grouped.check_experts(arr((10, 64)), arr((4, 64, 32)), None, "kn", None)
    with pytest.raises(InputError, match="K = 64"):
        grouped.check_experts(arr((10, 48)), arr((4, 64, 32)), arr((4,), np.int32), "kn", None)


def test_masked_checks():
    counts = arr((3,), np.int32)
    assert grouped.check_masked(arr((3, 16, 64)), arr((3, 64, 32)), counts, "kn", None) == ("float16", 3, 16, 32, 64)
    assert grouped.check_masked(arr((3, 16, 64)), arr((3, 32, 64)), counts, "nk", arr((3, 16, 32)))[3] == 32
    with pytest.raises(InputError, match="3 groups but b has 2"):
        grouped.check_masked(arr((3, 16, 64)), arr((2, 64, 32)), counts, "kn", None)
    with pytest.raises(InputError, match=r"masked_m must have shape \(3,\)"):
        grouped.check_masked(arr((3, 16, 64)), arr((3, 64, 32)), arr((4,), np.int32), "kn", None)
    with pytest.raises(DTypeError, match="masked_m must be int32"):
        grouped.check_masked(arr((3, 16, 64)), arr((3, 64, 32)), arr((3,), np.int64), "kn", None)
    with pytest.raises(InputError, match="G, M_max, K"):
        grouped.check_masked(arr((48, 64)), arr((3, 64, 32)), counts, "kn", None)
    with pytest.raises(InputError, match=r"\(3, 16, 32\)"):
        grouped.check_masked(arr((3, 16, 64)), arr((3, 64, 32)), counts, "kn", arr((3, 16, 40)))


def test_list_checks():
    dtype, groups = grouped.check_list([arr((3, 64)), arr((0, 8))], [arr((64, 16)), arr((8, 24))], "kn", None)
    assert dtype == "float16" and [(x.m, x.n, x.k) for x in groups] == [(3, 16, 64), (0, 24, 8)]
    _, groups = grouped.check_list([arr((3, 64))], [arr((16, 64))], "nk", [arr((3, 16))])  # b as (N, K)
    assert (groups[0].n, groups[0].k) == (16, 64)
    with pytest.raises(InputError, match="group 1: K = 12"):
        grouped.check_list([arr((3, 64)), arr((2, 12))], [arr((64, 16)), arr((12, 8))], "kn", None)
    with pytest.raises(InputError, match="K must match"):
        grouped.check_list([arr((3, 64))], [arr((32, 16))], "kn", None)
    with pytest.raises(InputError, match="list of 1 arrays"):
        grouped.check_list([arr((3, 64))], [arr((64, 16))], "kn", [arr((3, 16)), arr((3, 16))])
    with pytest.raises(InputError, match=r"out\[0\]"):
        grouped.check_list([arr((3, 64))], [arr((64, 16))], "kn", [arr((3, 8))])
    with pytest.raises(DTypeError, match="float16 or bfloat16"):
        grouped.check_list([arr((3, 64), np.float32)], [arr((64, 16), np.float32)], "kn", None)
    huge = np.broadcast_to(arr((1, 64)), (2**31, 64))  # no memory behind its rows
    with pytest.raises(InputError, match="group 1: M=2147483648 exceeds 2147483647"):
        grouped.check_list([arr((3, 64)), huge], [arr((64, 16)), arr((64, 16))], "kn", None)


def test_non_cupy_operands_are_refused():
    pytest.importorskip("cupy")
    with pytest.raises(DTypeError, match="CuPy arrays"):
        grouped.grouped_matmul(arr((10, 64)), arr((4, 64, 32)), offsets=arr((4,), np.int32))
    with pytest.raises(DTypeError, match="CuPy arrays"):
        grouped.grouped_matmul([arr((3, 64))], [arr((64, 16))])
    with pytest.raises(InputError, match="lists"):
        grouped.grouped_matmul([arr((3, 64))], arr((64, 16)))
    with pytest.raises(InputError, match="not both"):
        grouped.grouped_matmul(arr((3, 4, 64)), arr((3, 64, 16)), offsets=arr((3,), np.int32),
                               masked_m=arr((3,), np.int32))


# ---- the schedule -------------------------------------------------------------------------------------

@pytest.mark.parametrize("ends,rows", [([0, 17, 17, 144, 1144, 1144], 1200), ([5, 3, 9], 9), ([40, 50], 20),
                                       ([-3, 0, 7], 7), ([], 5)])
def test_stacked_rows_stay_inside_a_and_cover_it(ends, rows):
    got = grouping.stacked_rows(ends, rows)
    assert all(0 <= s <= v <= e <= rows for s, v, e in got)
    assert got[-1][2] == rows and got[-1][1] == got[-1][0]  # the tail: zeros up to the last row
    if all(x <= y for x, y in zip(ends, ends[1:])):  # valid offsets: the groups partition the rows
        assert [s for s, _, _ in got[1:]] == [e for _, _, e in got[:-1]] and got[0][0] == 0


def test_masked_rows():
    assert grouping.stacked_rows([0, 3, 99, -1], 0, group_rows=16) == [(0, 0, 16), (16, 19, 32), (32, 48, 48),
                                                                       (48, 48, 64)]


@pytest.mark.parametrize("bm,bn", [(128, 128), (128, 256), (64, 128)])
def test_the_host_bound_covers_the_device_tile_count(bm, bn):
    rng = np.random.default_rng(0)
    for _ in range(200):
        g = int(rng.integers(1, 70))
        sizes = rng.choice([0, 1, 17, 127, 128, 129, 300, 1000], size=g)
        ends = np.cumsum(sizes).tolist()
        rows, n = ends[-1] + int(rng.integers(0, 300)), int(rng.choice([8, 72, 1000, 4096]))
        groups = [grouping.Group(e - s, n, 64, s) for s, _, e in grouping.stacked_rows(ends, rows)]
        tiles = grouping.tile_prefix(groups, bm, bn)[-1]
        assert tiles <= (-(-rows // bm) + g) * -(-n // bn)


# ---- variants -----------------------------------------------------------------------------------------

def test_default_and_named_variants():
    v = grouped.choose_variant(None, "float16", False, 1000, 4096)
    assert v.family.name == "grouped" and (v.params["BM"], v.params["BN"]) == (128, 256)
    small = grouped.choose_variant(None, "bfloat16", True, 3, 4096)
    assert small.params["BN"] == 128 and small.params["B_KMAJOR"] == 1 and small.name.endswith("_nk")
    nk = registry.lookup("bgemm_grouped_wgmma_m64n256k16_tile128x256_stages4_ws2_nk")
    assert grouped.choose_variant(nk, "bfloat16", False, 1, 8).name == nk.name[:-3]
    with pytest.raises(InputError, match="runs grouped variants"):
        grouped.choose_variant("hgemm_wgmma_m64n256k16_stages4_ws2", "float16", False, 1, 8)
    with pytest.raises(DTypeError, match="takes bfloat16"):
        grouped.choose_variant(nk, "float16", True, 1, 8)


def test_matmul_points_grouped_variants_to_grouped_matmul():
    problem = operands.Problem(8, 8, 8, np.dtype("float16"), 0)
    with pytest.raises(InputError, match="grouped_matmul"):
        api._resolve_variant(NAMES[0], problem)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("flip", [False, True], ids=["catalogue", "other_b_layout"])
def test_compiles_for_sm90a(name, flip):
    v = registry.lookup(name)
    if flip:
        v = grouped.choose_variant(v, v.dtype, not v.params["B_KMAJOR"], 1, 8)
    compiled = compile_mod.compile_variant(v, "sm_90a")
    res = compiled.resources
    assert 0 < res.registers <= 255 and (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), res
    assert "Performance Loss" not in compiled.log  # ptxas would serialise the wgmma pipeline
    source = compile_mod.render(v)
    assert "cp.async.bulk.tensor.3d" in source and "{{" not in source

"""The few-rows families on the GPU (skinny, skinny_kmajor, and decode and decode_kmajor on Hopper): every
entry (and decode layouts of up to 128 rows) against a float64 reference on ragged shapes, both orientations
(few rows, and few columns through the operand swap), Fortran order, beta != 0, NaN-poisoned outputs, forced
and automatic split counts, bitwise repeatability, and the default path reading a linear layer's weight in
place."""
from functools import lru_cache

import cupy
import pytest

import cupy_gemm
from cupy_gemm import registry, verify
from cupy_gemm.errors import InputError

from cupy_gemm.launch import compute_capability

_CC = compute_capability(cupy.cuda.Device()) if cupy.cuda.is_available() else 90
NAMES = [n for n, v in registry.catalogue().items()
         if v.family.name in ("skinny", "skinny_kmajor", "decode", "decode_kmajor") and v.runs_on(_CC)]
DECODE = [n for n in NAMES if registry.lookup(n).family.name.startswith("decode")]
NS = (1, 17, 4095, 4096)
KS = (1, 127, 1000, 4096, 16384)
# one entry per family and dtype for the split-count tests (each SPLIT_K value is a compile)
SPLIT_NAMES = [n for n in NAMES if registry.lookup(n).family.name.startswith("skinny")
               and registry.lookup(n).params["ROWS"] == 8]


@lru_cache(maxsize=24)  # M = 1 and 3 recur across entries of a dtype; B is up to 256 MB, so keep few
def _case(dtype, m, n, k):
    a = verify.random_operand((m, k), dtype, m * 7 + n * 3 + k)
    b = verify.random_operand((k, n), dtype, n * 5 + k * 11)
    return a, b, *verify.reference(a, b)


def _check(v, out, ref, scale, k, what):
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    if verdict.ok:
        return []
    worst = int(cupy.argmax(cupy.nan_to_num(cupy.abs(out.astype(cupy.float64) - ref), nan=cupy.inf)))
    r, c = divmod(worst, out.shape[1])
    return [f"{what}: {verdict}; worst at ({r}, {c}): got {float(out[r, c])!r}, expected {float(ref[r, c])!r} "
            f"(scale {float(scale[r, c]):.3g})"]


def _with_split(name, split):
    v = registry.lookup(name)
    return registry.make_variant(v.family, f"{name}_split{split}", v.dtype, {**v.params, "SPLIT_K": split}, v.acc)


def _rows(v):
    return sorted({1, 3, v.params["ROWS"]} - ({3} if v.params["ROWS"] < 3 else set()))


ROW_CASES = [(n, which) for n in NAMES for which in ("1", "3", "ROWS")
             if not (which == "3" and registry.lookup(n).params["ROWS"] < 3)]


@pytest.mark.parametrize("name,which", ROW_CASES, ids=[f"{n}-m{w}" for n, w in ROW_CASES])
def test_few_rows_every_shape(name, which):
    v = registry.lookup(name)
    m = v.params["ROWS"] if which == "ROWS" else int(which)
    bad = []
    for n in NS:
        for k in KS:
            a, b, ref, scale = _case(v.dtype, m, n, k)
            out = cupy.full((m, n), cupy.nan, dtype=v.dtype)
            cupy_gemm.matmul(a, b, variant=name, out=out)
            bad += _check(v, out, ref, scale, k, f"{m}x{n}x{k}")
    assert not bad, f"{name}: " + "; ".join(bad)


@pytest.mark.parametrize("name", NAMES)
def test_few_columns_and_fortran_order(name):
    """M×K @ K×(N small): C-ordered (the swap gives Cᵀ = Bᵀ·Aᵀ) and Fortran-ordered operands and outputs."""
    v = registry.lookup(name)
    bad = []
    for small in _rows(v):
        for big in (17, 4095):
            for k in (127, 4096):
                a, b, ref, scale = _case(v.dtype, small, big, k)
                at, bt = cupy.ascontiguousarray(b.T), cupy.ascontiguousarray(a.T)  # big×k @ k×small
                out = cupy.full((big, small), cupy.nan, dtype=v.dtype)
                cupy_gemm.matmul(at, bt, variant=name, out=out)
                bad += _check(v, out, ref.T, scale.T, k, f"C order {big}x{small}x{k}")
                out_f = cupy.asfortranarray(cupy.full((big, small), cupy.nan, dtype=v.dtype))
                cupy_gemm.matmul(cupy.asfortranarray(at), cupy.asfortranarray(bt), variant=name, out=out_f)
                bad += _check(v, out_f, ref.T, scale.T, k, f"Fortran {big}x{small}x{k}")
                out_f = cupy.asfortranarray(cupy.full((small, big), cupy.nan, dtype=v.dtype))
                cupy_gemm.matmul(cupy.asfortranarray(a), cupy.asfortranarray(b), variant=name, out=out_f)
                bad += _check(v, out_f, ref, scale, k, f"Fortran {small}x{big}x{k}")
                out = cupy.full((small, big), cupy.nan, dtype=v.dtype)
                cupy_gemm.matmul(a, b.T.copy().T, variant=name, out=out)  # B column-major (x @ W.T)
                bad += _check(v, out, ref, scale, k, f"B column-major {small}x{big}x{k}")
    assert not bad, f"{name}: " + "; ".join(bad)


@pytest.mark.parametrize("name", NAMES)
def test_alpha_beta_and_strided(name):
    v = registry.lookup(name)
    rows = v.params["ROWS"]
    for m, n, k in ((rows, 4095, 1000), (1, 17, 127)):
        a, b, _, _ = _case(v.dtype, m, n, k)
        c = verify.random_operand((m, n), v.dtype, 5)
        ref, scale = verify.reference(a, b, c, 0.75, -1.25)
        out = cupy_gemm.gemm(a, b, c, alpha=0.75, beta=-1.25, variant=name)
        assert verify.check(out, ref, scale, v.dtype, v.acc, k).ok, f"{name} beta at {m}x{n}x{k}"
        c2 = c.copy()  # in place
        cupy_gemm.gemm(a, b, c2, alpha=0.75, beta=-1.25, variant=name, out=c2)
        assert verify.check(c2, ref, scale, v.dtype, v.acc, k).ok
    big = verify.random_operand((2 * rows, 3 * 1000), v.dtype, 9)[::2, 1::3]  # neither C- nor F-contiguous
    b = verify.random_operand((1000, 2 * 4096), v.dtype, 10)[:, ::2]
    out_view = cupy.full((rows, 2 * 4096), cupy.nan, dtype=v.dtype)[:, ::2]
    ref, scale = verify.reference(big, b)
    cupy_gemm.matmul(big, b, variant=name, out=out_view)
    assert verify.check(out_view, ref, scale, v.dtype, v.acc, 1000).ok, f"{name} strided"
    assert cupy.isnan(out_view.base[:, 1::2]).all(), "wrote outside the output view"


@pytest.mark.parametrize("split", [1, 3, 7, 0])
@pytest.mark.parametrize("name", SPLIT_NAMES)
def test_split_counts_are_right_and_bitwise_repeatable(name, split):
    _right_and_repeatable(_with_split(name, split), ((8, 4095, 1000), (3, 4096, 4096), (1, 17, 16384), (8, 4096, 127)),
                          f"{name} SPLIT_K={split}")


def _right_and_repeatable(v, shapes, what):
    """Each shape's product is right, and three repeats give the same bits."""
    for m, n, k in shapes:
        a, b, ref, scale = _case(v.dtype, m, n, k)
        first = cupy.full((m, n), cupy.nan, dtype=v.dtype)
        cupy_gemm.matmul(a, b, variant=v, out=first)
        assert verify.check(first, ref, scale, v.dtype, v.acc, k).ok, f"{what} at {m}x{n}x{k}"
        for _ in range(3):
            again = cupy_gemm.matmul(a, b, variant=v)
            assert bool((again.view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{what} at {m}x{n}x{k}: repeats differ"


@pytest.mark.parametrize("name", DECODE)
def test_decode_cluster_sum_is_right_and_bitwise_repeatable(name):
    """The blocks of a cluster sum their K slices in distributed shared memory in rank order: right where
    a slice is empty (K shorter than the cluster's blocks' stages) or ragged, and the same bits every time."""
    v = registry.lookup(name)
    rows = min(16, v.max_rows())  # the 8-row float32 entries: 8
    _right_and_repeatable(v, ((rows, 4096, 4096), (5, 1000, 64), (rows, 136, 200), (1, 8, 16384)), name)


@pytest.mark.parametrize("name", [n for n in DECODE if registry.lookup(n).params["CS"] > 1])
def test_decode_stages_repeat_bitwise_over_many_launches(name):
    """A consumer reads each stage with ordinary loads and hands it back to the copy engine: without a proxy
    fence between, a later copy overwrote part of a stage before it was read, in about one launch in 400 of
    the 8-block clusters on an H100 (16×8192×16384: 26 of 4800 launches). 600 launches, each output
    NaN-poisoned, all give the first one's bits, which are right."""
    v = registry.lookup(name)
    m, n, k = min(16, v.max_rows()), 8192, 16384
    a = verify.random_operand((m, k), v.dtype, 3)
    b = verify.random_operand((k, n), v.dtype, 5, order="F" if v.family.name == "decode_kmajor" else "C")
    ref, scale = verify.reference(a, b)
    first = cupy.full((m, n), cupy.nan, dtype=v.dtype)
    cupy_gemm.matmul(a, b, variant=name, out=first)
    assert verify.check(first, ref, scale, v.dtype, v.acc, k).ok
    differ = cupy.zeros((), dtype=cupy.int64)
    for _ in range(600):
        out = cupy.full((m, n), cupy.nan, dtype=v.dtype)
        cupy_gemm.matmul(a, b, variant=name, out=out)
        differ += cupy.count_nonzero(out.view(cupy.uint8) != first.view(cupy.uint8))
    assert int(differ) == 0, f"{name}: {int(differ)} bytes differ from the first launch's over 600 launches"


WIDE_ROWS = [(rows, bn, cs, fam) for rows, bn, cs in ((32, 64, 2), (64, 256, 4), (128, 128, 1), (128, 64, 8))
             for fam in ("decode", "decode_kmajor")]


@pytest.mark.parametrize("rows,bn,cs,fam", WIDE_ROWS, ids=[f"r{r}-n{n}-c{c}-{f}" for r, n, c, f in WIDE_ROWS])
def test_decode_takes_up_to_128_rows_on_wgmma(rows, bn, cs, fam):
    """A's ROWS rows as the swapped product's N: ragged M (one row past half of ROWS, and all of them), N and K,
    every element written and right. No catalogue entry takes 128 rows, so the layouts are made here."""
    v = registry.make_variant(registry.family(fam), f"wide_rows_r{rows}_n{bn}_c{cs}_{fam}", "bfloat16",
                              dict(ROWS=rows, BN=bn, BK=64, STAGES=4, WARPS=bn // 16, CS=cs, MMA=1))
    bad = []
    for m in (rows // 2 + 1, rows):
        for n in (17, 4095):
            for k in (127, 4096):
                a, b, ref, scale = _case(v.dtype, m, n, k)
                out = cupy.full((m, n), cupy.nan, dtype=v.dtype)
                cupy_gemm.matmul(a, cupy.asfortranarray(b) if fam == "decode_kmajor" else b, variant=v, out=out)
                bad += _check(v, out, ref, scale, k, f"{m}x{n}x{k}")
    assert not bad, f"{v.name}: " + "; ".join(bad)


@pytest.mark.parametrize("precision", ["float16", "bfloat16", "fp32", "tf32"])
def test_the_default_reads_a_linear_layers_weight_in_place(precision):
    """x @ W.T with W stored N×K: the default takes a K-major few-rows kernel, copies nothing, and is right."""
    dtype = "float32" if precision in ("fp32", "tf32") else precision
    for m, n, k in ((1, 4096, 4096), (16, 1000, 4104), (7, 4040, 136)):  # K, N aligned: nothing to pad
        x = verify.random_operand((m, k), dtype, 3 * m + n)
        w = verify.random_operand((n, k), dtype, 5 * n + k)
        ref, scale = verify.reference(x, w.T)
        plan = cupy_gemm.plan(x, w.T, precision=precision if dtype == "float32" else None)
        assert plan.variant.family.b_layout == "col", (m, n, k, plan.variant.name)
        out = plan()
        assert verify.check(out, ref, scale, plan.variant.dtype, plan.variant.acc, k).ok, (m, n, k, plan.variant.name)


def test_auto_split_uses_several_splits():
    v = registry.lookup("hgemv_skinny_r1")
    cfg = cupy_gemm.get(v.name).launch_config(1, 4096, 4096, cupy.cuda.Device().attributes["MultiProcessorCount"])
    assert cfg.splits > 1  # so the repeatability test above exercises the fixup


@pytest.mark.parametrize("name", ["hgemv_skinny_r8", "sgemv_skinny_kmajor_r4", *DECODE[:1]])
def test_too_large_problems_are_refused_before_launch(name):
    v = registry.lookup(name)
    rows = v.params["ROWS"]
    a = verify.random_operand((rows + 1, 64), v.dtype, 1)
    b = verify.random_operand((64, rows + 1), v.dtype, 2)
    out = cupy.full((rows + 1, rows + 1), cupy.nan, dtype=v.dtype)
    with pytest.raises(InputError, match=f"at most {rows} rows or columns"):
        cupy_gemm.matmul(a, b, variant=name, out=out)
    assert cupy.isnan(out).all()


def test_large_index():
    """A (big×4096) @ B (4096×16): the streamed operand has more than 2^31 elements."""
    rows, k = (1 << 31) // 4096 + 129, 4096
    try:
        a = verify.random_operand((rows, k), "float16", 21)
    except cupy.cuda.memory.OutOfMemoryError:
        pytest.skip("not enough GPU memory for a 2^31-element operand")
    b = verify.random_operand((k, 16), "float16", 22)
    pick = cupy.asarray([0, rows // 2, rows - 3, rows - 1])
    ref, scale = verify.reference(a[pick], b)
    out = cupy_gemm.matmul(a, b, variant="hgemv_skinny_kmajor_r16")
    assert verify.check(out[pick], ref, scale, "float16", "float32", k).ok


def test_split_kernels_of_different_tile_counts_share_a_stream():
    """Partials of a launch with few tiles must not land on the counters of one with many."""
    few, many = _with_split("hgemv_skinny_r8", 5), _with_split("hgemv_skinny_kmajor_r8", 3)
    a, b, ref, scale = _case("float16", 8, 4096, 4096)
    w_t = cupy.ascontiguousarray(b.T).T  # K-contiguous: the kmajor kernel's 512 tiles of 8
    for _ in range(3):
        for v, rhs in ((few, b), (many, w_t)):
            out = cupy.full((8, 4096), cupy.nan, dtype=v.dtype)
            cupy_gemm.matmul(a, rhs, variant=v, out=out)
            assert verify.check(out, ref, scale, v.dtype, v.acc, 4096).ok, v.name


def test_bound_allows_fp16_subnormal_rounding():
    """An fp16 product of two small inputs rounds to a subnormal with an absolute error up to 2^-25:
    correct results must pass however small they are."""
    a = cupy.asarray([[1e-3], [3e-3], [0.5]], dtype=cupy.float16)
    b = cupy.asarray([[2e-3, 7e-4, 0.25]], dtype=cupy.float16)
    ref, scale = verify.reference(a, b)
    out = cupy_gemm.matmul(a, b, variant="hgemv_skinny_kmajor_r4")
    assert verify.check(out, ref, scale, "float16", "float32", 1).ok

"""Batches and fused epilogues of the mma and sgemm_simt families on a GPU, through launch.prepare with
operands already in the kernels' layout (row-major, K and N multiples of the family's `align`): every
builtin and an expression reading row, column, full and scalar operands; broadcast, strided 2- and 3-dim
batches; beta != 0 on a batched C; forced split-K; a batch past the grid's 65535 z. Against float64
references on random normal inputs, outputs poisoned with NaN."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import batching, epilogue, launch, registry, verify
from forced_variants import align as _align, up as _up, variant as _variant


# one variant per distinct template path (as tests/test_mma_simt_extras.py compiles them)
MMA = ["hgemm_mma_m16n8k16_naive", "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages2",
       "hgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle", "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32",
       "bgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32", "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x2_stages3",
       "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x2_stages3_swizzle"]
SIMT = ["sgemm_t_8x8_sliced_k_f32x4", "sgemm_t_8x8_sliced_k_f32x4_bcf_dbuf",
        "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf_async_swizzle", "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk",
        "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf_async_swizzle_splitk"]
SPLITK = [n for n in SIMT if n.endswith("_splitk")]
FEW = ["hgemm_mma_m16n8k16_naive", "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32",
       "bgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32", "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x2_stages3",
       "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf_async_swizzle", "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"]
ROWS = [1, 17, 127, 1000]
COLS = [1, 17, 127, 1000]  # rounded up to the family's align: the kernels take N as a multiple of it
# |f'| at most: the error of x grows by this much through the activation
SLOPE = {"relu": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1, "sigmoid": 0.25}
F64 = {"relu": lambda x: cupy.maximum(x, 0), "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
       "gelu_tanh": lambda x: 0.5 * x * (1 + cupy.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
       "silu": lambda x: x / (1 + cupy.exp(-x)), "sigmoid": lambda x: 1 / (1 + cupy.exp(-x))}
CUSTOM = epilogue.build("y = x * rowscale[i] + bias[j] + res[i, j] * s",
                        operands={"rowscale": "row", "bias": ("col", "float16"), "res": "full", "s": "scalar"})


def _erf(x):
    import cupyx.scipy.special
    return cupyx.scipy.special.erf(x)


def _normal(shape, dtype, seed):
    return cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32).astype(dtype)


def _nan(shape, dtype):
    return cupy.full(shape, cupy.nan, dtype=dtype)


def _run(v, a, b, out, *, alpha=1.0, beta=0.0, ep=None, values=None, batched=False):
    """out = ep(alpha·a@b + beta·out) by one launch; a, b and out are row-major, batched over their leading
    dimensions when `batched` (broadcast where a dimension has size 1 or is missing)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    lda, ldb, ldc = (x.strides[-2] // x.itemsize for x in (a, b, out))
    plan = batching.plan(a.shape, a.strides, b.shape, b.strides, out.strides, a.itemsize) if batched else None
    params = ep.pack(values or {}, m, n) if ep is not None else None
    run = launch.prepare(v.with_extras(batched=batched, epilogue=ep), cupy.cuda.Device(), a, b, out,
                         m, n, k, lda, ldb, ldc, alpha, beta, batch=plan, epilogue_params=params)
    run()
    return run


def _check(v, out, a, b, c=None, *, alpha=1.0, beta=0.0, step=None, values=None, what=""):
    """out against float64: x = alpha·a@b + beta·c, then the epilogue step (a builtin's name, "custom")."""
    x, scale = verify.reference(a, b, c, alpha, beta)
    if step is None:
        y = x
    elif step == "custom":
        rs = values["rowscale"].astype(cupy.float64)[:, None]
        bias, res = values["bias"].astype(cupy.float64), values["res"].astype(cupy.float64)
        terms = [x * rs, bias + 0 * x, res * values["s"]]
        y = sum(terms)
        scale = cupy.abs(rs) * scale + sum(cupy.abs(t) for t in terms)  # rounding of each term and the sums
    else:
        y = F64[step](x)
        scale = SLOPE[step] * scale + cupy.abs(x) + cupy.abs(y)  # the activation's own fp32 rounding
    n = out.shape[-1]
    verdict = verify.check(out.reshape(-1, n), y.reshape(-1, n), scale.reshape(-1, n), v.dtype, v.acc, a.shape[-1])
    assert verdict.ok, f"{v.name} {what}: {verdict}"


SHAPES = [(m, n, k) for m in ROWS for n in COLS for k in (8, 200)] + [(1000, 8, 4000), (8, 1000, 4000)]


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", MMA + SIMT)
def test_gelu_on_ragged_shapes(name, m, n, k):
    v = _variant(name)
    n = _up(n, _align(v))
    a, b = _normal((m, k), v.dtype, m + n), _normal((k, n), v.dtype, k + 1)
    out = _nan((m, n), v.dtype)
    _run(v, a, b, out, ep=epilogue.build("gelu"))
    _check(v, out, a, b, step="gelu", what=f"{m}x{n}x{k}")


@pytest.mark.parametrize("step", list(epilogue.BUILTINS))
@pytest.mark.parametrize("name", FEW)
def test_every_builtin(name, step):
    v = _variant(name)
    m, n, k = 127, _up(1000, _align(v)), 264
    a, b, c = _normal((m, k), v.dtype, 1), _normal((k, n), v.dtype, 2), _normal((m, n), v.dtype, 3)
    out = c.copy()
    _run(v, a, b, out, alpha=0.5, beta=-1.5, ep=epilogue.build(step))
    _check(v, out, a, b, c, alpha=0.5, beta=-1.5, step=step, what=f"beta != 0, {step}")


def _custom_values(m, n, seed):
    res = _normal((m, 2 * n), cupy.float32, seed + 2)[:, ::2]  # a strided full operand
    return {"rowscale": _normal((m,), cupy.float32, seed), "bias": _normal((n,), cupy.float16, seed + 1),
            "res": res, "s": 0.75}


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("name", FEW)
def test_custom_expression_with_every_kind_of_operand(name, batched):
    """The operands are indexed by the element's row and column in its member's C, the same for every member."""
    v = _variant(name)
    m, n, k = 127, _up(136, _align(v)), 96
    lead = (3,) if batched else ()
    a, b = _normal(lead + (m, k), v.dtype, 5), _normal(lead + (k, n), v.dtype, 6)
    out = _nan(lead + (m, n), v.dtype)
    values = _custom_values(m, n, 7)
    _run(v, a, b, out, ep=CUSTOM, values=values, batched=batched)
    _check(v, out, a, b, step="custom", values=values)


def _batches(v, m, n, k, seed):
    """(what, a, b, out): strided, broadcast and multi-dimensional batches in the kernel's alignment;
    out is a NaN-filled view whose base holds it (to check nothing around it is written)."""
    al = _align(v)
    kp, n_pad = _up(k + al, al), _up(n + al, al)  # row strides longer than a row: views, not copies
    big_a = _normal((4, 6, m + 3, kp), v.dtype, seed)
    big_b = _normal((5, k + 2, n_pad), v.dtype, seed + 1)
    yield "3 members, contiguous", _normal((3, m, k), v.dtype, seed + 2), _normal((3, k, n), v.dtype, seed + 3), \
        _nan((3, m, n), v.dtype)
    yield "B broadcast (stride 0)", big_a[0, :5, :m, :k], _normal((k, n), v.dtype, seed + 4), _nan((5, m, n), v.dtype)
    yield "A broadcast", big_a[1, 2, 1:m + 1, :k], big_b[:, 1:k + 1, :n], _nan((5, m, n), v.dtype)
    yield "2-dim, strided", big_a[::2, 1::2, 2:m + 2, :k], big_b[1:4, :k, :n], \
        _nan((2, 3, m + 1, n_pad), v.dtype)[:, :, 1:, :n]
    yield "2-dim, B broadcast along the outer", big_a[1:3, ::2, :m, :k], big_b[None, :3, 2:k + 2, :n], \
        _nan((2, 3, m + 1, n_pad), v.dtype)[:, :, :m, :n]


def _three_dims(v, m, n, k, seed):
    al = _align(v)
    a = _normal((2, 3, 2, m, _up(k + 1, al)), v.dtype, seed)[..., :k]
    b = _normal((3, 1, k, n), v.dtype, seed + 1)  # broadcast along the first and the last batch dimension
    out = _nan((2, 3, 2, m, _up(n + 1, al)), v.dtype)[..., :n]
    return a, b, out


@pytest.mark.parametrize("name", MMA + SIMT)
def test_batches(name):
    v = _variant(name)
    m, n, k = 127, _up(72, _align(v)), 136
    for what, a, b, out in _batches(v, m, n, k, seed=11):
        assert batching.plan(a.shape, a.strides, b.shape, b.strides, out.strides, a.itemsize).fits
        base = out.base if out.base is not None else out
        outside = cupy.isnan(base).sum() - out.size
        _run(v, a, b, out, ep=epilogue.build("silu"), batched=True)
        _check(v, out, a, b, step="silu", what=what)
        assert int(cupy.isnan(base).sum()) == int(outside), f"{v.name} {what}: wrote outside the output"
    a, b, out = _three_dims(v, 17, _up(20, _align(v)), 40, seed=13)
    _run(v, a, b, out, batched=True)
    _check(v, out, a, b, what="3 batch dimensions")


@pytest.mark.parametrize("name", MMA + SIMT)
def test_batched_beta(name):
    """beta != 0 reads each member's own C."""
    v = _variant(name)
    m, n, k = 100, _up(250, _align(v)), 64
    a, b = _normal((2, 3, m, k), v.dtype, 21), _normal((3, k, n), v.dtype, 22)
    c = _normal((2, 3, m, n), v.dtype, 23)
    out = _nan((2, 3, m, n + _align(v)), v.dtype)[..., :n]  # rows longer than N: ldc > N
    out[...] = c
    _run(v, a, b, out, alpha=1.25, beta=0.5, batched=True)
    _check(v, out, a, b, c, alpha=1.25, beta=0.5, what="batched beta")
    out = c.copy()
    _run(v, a, b, out, alpha=-1.0, beta=2.0, ep=epilogue.build("relu"), batched=True)
    _check(v, out, a, b, c, alpha=-1.0, beta=2.0, step="relu", what="batched beta, relu")


@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize("name", SPLITK)
def test_split_k_with_batch_and_epilogue(name, splits):
    """The last split of each member's tile stores it through the epilogue; counters and partials of all
    members' tiles live side by side in the workspace."""
    v = _variant(name, splits)
    for batched in (False, True):
        for m, n, k in [(16, 1000, 4000), (127, 256, 3000), (1, 4, 1000)]:
            lead = (2, 3) if batched else ()
            a, b = _normal(lead + (m, k), v.dtype, m + k), _normal((k, n), v.dtype, n)
            out = _nan(lead + (m, n), v.dtype)
            c = _normal(lead + (m, n), v.dtype, 3)
            values = _custom_values(m, n, 9)
            _run(v, a, b, out, ep=CUSTOM, values=values, batched=batched)
            _check(v, out, a, b, step="custom", values=values, what=f"{m}x{n}x{k} batched={batched}")
            out = c.copy()
            run = _run(v, a, b, out, alpha=0.5, beta=-0.25, ep=epilogue.build("gelu_tanh"), batched=batched)
            assert splits is None or run.config.splits == splits
            _check(v, out, a, b, c, alpha=0.5, beta=-0.25, step="gelu_tanh", what=f"{m}x{n}x{k} beta")


@pytest.mark.parametrize("name", ["hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32",
                                  "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x2_stages3", SIMT[0], SPLITK[0]])
def test_more_members_than_the_grid_holds(name):
    """70000 members: blocks loop over blockIdx.z, then every 65535th member after it."""
    v = _variant(name, 2 if name in SPLITK else None)
    al = _align(v)
    forced = name in SPLITK  # SPLIT_K forced to 2 (SIMT[0] is of the split-K family but does not split)
    m, n, k = 2, al, 2 * v.params["BK"] if forced else al  # split-K: a K block per split
    a, b = _normal((70000, m, k), v.dtype, 31), _normal((70000, k, n), v.dtype, 32)
    out = _nan((70000, m, n), v.dtype)
    run = _run(v, a, b, out, ep=epilogue.build("sigmoid"), batched=True)
    assert run.config.grid[2] == launch.MAX_GRID_Z and run.config.splits == (2 if forced else 1)
    _check(v, out, a, b, step="sigmoid", what="70000 members")


SNAKES = [n for n, v in registry.catalogue().items() if v.family.name.startswith("sgemm_simt") and v.params["FMA_ORDER"]]


@pytest.mark.parametrize("name", SNAKES)
def test_a_snake_order_gives_the_plain_orders_bits(name):
    """FMA_ORDER reorders the thread tile's FMAs, never an element's: the output is bitwise the entry's with
    FMA_ORDER = 0, on ragged shapes, beta != 0 included, and right against float64."""
    v = registry.lookup(name)
    plain = registry.make_variant(v.family, name + "_plain", v.dtype, {**v.params, "FMA_ORDER": 0}, v.acc)
    col = v.family.b_layout == "col"
    for m, n, k in ((1000, 1000, 1000), (17, 4096, 1000), (513, 127 * 4, 4095 + 1)):
        # seeds of their own: at m = n, one seed would make B = Aᵀ, whose diagonal sums only grow
        a = verify.random_operand((m, k), "float32", 3 * m)
        b = (verify.random_operand((n, k), "float32", 3 * n + 1).T if col
             else verify.random_operand((k, n), "float32", 3 * n + 1))
        c = verify.random_operand((m, n), "float32", 3 * k + 2)
        outs = []
        for w in (v, plain):
            out = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
            cupy_gemm.gemm(a, b, c, alpha=0.5, beta=-1.5, variant=w, out=out)
            outs.append(out)
        ref, scale = verify.reference(a, b, c, 0.5, -1.5)
        assert verify.check(outs[0], ref, scale, "float32", "float32", k).ok, (name, m, n, k)
        assert bool((outs[0] == outs[1]).all()), (name, m, n, k)

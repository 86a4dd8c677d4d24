"""Batches and fused epilogues of the Hopper wgmma families on a Hopper GPU, through launch.prepare (the
launcher, below the API): every catalogue entry batched with an epilogue that reads every kind of operand;
broadcast A or B, 2- and 3-dimensional batches of strided slices, beta != 0 with C batched, split-K over a
batch, every built-in epilogue. Against float64 references, with NaN-poisoned outputs on ragged shapes."""
import math

import cupy
import pytest

from cupy_gemm import batching, epilogue, launch, registry, verify

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None

HOPPER = cupy.cuda.is_available() and launch.compute_capability(cupy.cuda.Device()) == 90
pytestmark = pytest.mark.skipif(not HOPPER, reason="needs a compute capability 9.0 GPU (sm_90a)")

NAMES = [n for n, v in registry.catalogue().items() if v.family.name in ("wgmma", "wgmma_tf32", "wgmma_tf32_rowb")]
FP16 = "hgemm_wgmma_m64n256k16_stages4_ws2"
SOME = [FP16, "hgemm_wgmma_m64n256k16_stages4_ws2_regstore", "bgemm_wgmma_m64n256k16_stages4_ws2",
        next(n for n in NAMES if registry.lookup(n).family.name == "wgmma_tf32"),
        next(n for n in NAMES if registry.lookup(n).family.name == "wgmma_tf32_rowb"),
        "hgemm_wgmma_m64n64k16_tile128x64_stages8_ws2_pingpong", "bgemm_wgmma_m64n192k16_tile64x192_stages6_ws2_pingpong"]
# one split-K entry per input type (hgemm, bgemm, sgemm)
SPLITK = list({n.split("_")[0]: n for n in reversed(NAMES) if n.endswith("_splitk")}.values())
SPLITK.append("hgemm_wgmma_m64n256k16_stages4_ws2_splitk")  # two consumers, TMA stores

def custom(dtype):
    """The custom epilogue for a variant of `dtype`: res is in the output's dtype (_custom_values)."""
    return epilogue.build("y = x * scale + bias[j] + res[i, j] * rowscale[i]",
                          operands={"scale": "scalar", "bias": "col", "res": ("full", dtype),
                                    "rowscale": ("row", "float16")})


def _erf(x):
    from cupyx.scipy.special import erf
    return erf(x)


# float64 twins of the built-ins, and each one's largest slope (how far it carries the product's error)
REFERENCE = {
    "relu": (lambda x: cupy.maximum(x, 0), 1.0),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), 1.13),
    "gelu_tanh": (lambda x: 0.5 * x * (1 + cupy.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), 1.13),
    "silu": (lambda x: x / (1 + cupy.exp(-x)), 1.1),
    "sigmoid": (lambda x: 1 / (1 + cupy.exp(-x)), 0.25),
}


def _variant(name, splits=None):
    v = registry.lookup(name)
    if v.dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    if splits is not None:
        v = registry.make_variant(v.family, f"{name}_split{splits}", v.dtype, {**v.params, "SPLIT_K": splits}, v.acc)
    return v


def _padded(shape, dtype, seed, pad=0, fill=None):
    """An array of `shape` whose rows are 16-byte aligned (a slice of a wider one when the last dimension
    is not a multiple of 16 bytes, or `pad` elements wider): random normal, or `fill`."""
    size = cupy.dtype(dtype).itemsize
    align = 16 // size
    wide = -(-(shape[-1] + pad) // align) * align
    if fill is None:
        base = cupy.random.default_rng(seed).standard_normal(shape[:-1] + (wide,), dtype=cupy.float32).astype(dtype)
    else:
        base = cupy.full(shape[:-1] + (wide,), fill, dtype=dtype)
    return base[..., :shape[-1]]


def _b_operand(v, shape, seed):
    """b (…, K, N) as the family reads it: row-major, or for tf32 column-major (a transposed N×K view)."""
    if v.family.b_layout == "col":
        return _padded(shape[:-2] + (shape[-1], shape[-2]), v.dtype, seed).swapaxes(-1, -2)
    return _padded(shape, v.dtype, seed)


def _ld(x, axis):
    return x.strides[axis] // x.itemsize


def _run(v, a, b, out, *, alpha=1.0, beta=0.0, ep=None, values=None):
    """out[...] = ep(alpha · a @ b + beta · out) for (batched) a, b and out in one launch."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batched = max(a.ndim, b.ndim) > 2
    plan = batching.plan(a.shape, a.strides, b.shape, b.strides, out.strides, out.itemsize) if batched else None
    first = lambda x: x[(0,) * (x.ndim - 2)]  # member 0's matrix
    A, B, C = first(a), first(b), first(out)
    ldb = _ld(B, -1) if v.family.b_layout == "col" else _ld(B, -2)
    if v.family.b_layout == "col":
        B = B.T  # the N×K row-major matrix the map reads
    variant = v.with_extras(batched=batched, epilogue=ep)
    params = ep.pack(values or {}, m, n) if ep is not None else None
    run = launch.prepare(variant, cupy.cuda.Device(), A, B, C, m, n, k, _ld(A, -2), ldb, _ld(C, -2), alpha, beta,
                         batch=plan, epilogue_params=params)
    run()
    cupy.cuda.Device().synchronize()


def _expect(v, a, b, c=None, *, alpha=1.0, beta=0.0, ep_name=None, custom=None):
    """The float64 result and the scale of its rounding error (verify.reference's), carried through the
    epilogue: by its slope for a built-in; for the custom one by |scale| plus the size of what it adds."""
    ref, scale = verify.reference(a, b, c, alpha, beta)
    if ep_name is not None:
        fn, slope = REFERENCE[ep_name]
        ref = fn(ref)
        scale = slope * scale + cupy.abs(ref)
    if custom is not None:
        f64 = lambda x: x.astype(cupy.float64)
        added = f64(custom["bias"])[None, :] + f64(custom["res"]) * f64(custom["rowscale"])[:, None]
        ref = ref * custom["scale"] + added
        scale = abs(custom["scale"]) * scale + cupy.abs(added) + cupy.abs(ref)
    return ref, scale


def _verify(v, out, ref, scale, k, what):
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    assert verdict.ok, f"{v.name} {what}: {verdict}"


def _custom_values(v, m, n, seed):
    rng = cupy.random.default_rng(seed)
    res = _padded((m, n), v.dtype, seed + 1, pad=3)  # a strided full operand in the output's dtype
    return {"scale": -0.75, "bias": rng.standard_normal(n, dtype=cupy.float32),
            "res": res, "rowscale": rng.standard_normal(m, dtype=cupy.float32).astype(cupy.float16)}


def _poisoned(shape, dtype):
    return _padded(shape, dtype, None, fill=cupy.nan)


# ---- every entry: a batch with an epilogue reading every kind of operand -----------------------------

@pytest.mark.parametrize("name", NAMES)
def test_every_entry_batched_with_a_custom_epilogue(name):
    v = _variant(name)
    m, n, k, count = 127, 1000, 136, 3
    a = _padded((count, m, k), v.dtype, 1)
    b = _b_operand(v, (count, k, n), 2)
    out = _poisoned((count, m, n), v.dtype)
    values = _custom_values(v, m, n, 3)
    _run(v, a, b, out, ep=custom(v.dtype), values=values)
    ref, scale = _expect(v, a, b, custom=values)
    _verify(v, out, ref, scale, k, f"batch of {count} {m}x{n}x{k} + custom epilogue")


# ---- batches ---------------------------------------------------------------------------------------

SHAPES = [(1, 17, 40), (17, 127, 136), (127, 1, 40), (1000, 17, 1000), (200, 520, 136)]


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", SOME)
def test_broadcast_b_and_broadcast_a(name, m, n, k):
    v = _variant(name)
    a = _padded((4, m, k), v.dtype, m + n)
    b = _b_operand(v, (k, n), k)  # one weight for every member: stride 0
    out = _poisoned((4, m, n), v.dtype)
    _run(v, a, b, out)
    _verify(v, out, *_expect(v, a, b), k, f"a (4, {m}, {k}) @ b ({k}, {n})")
    a2 = _padded((m, k), v.dtype, m + n + 1)
    b2 = _b_operand(v, (3, k, n), k + 1)
    out2 = _poisoned((3, m, n), v.dtype)
    _run(v, a2, b2, out2)
    _verify(v, out2, *_expect(v, a2, b2), k, f"a ({m}, {k}) @ b (3, {k}, {n})")


@pytest.mark.parametrize("name", SOME)
def test_batches_of_strided_slices(name):
    """2- and 3-dimensional batches whose strides do not merge: slices of bigger arrays (16-byte aligned),
    a broadcast dimension in the middle, and members of C between which nothing may be written."""
    v = _variant(name)
    m, n, k = 130, 72, 136
    a = _padded((2, 5, m, k + 8), v.dtype, 11)[:, 1:4, :, 8:]            # (2, 3, m, k)
    b = _b_operand(v, (2, 1, k, n), 12)                                  # broadcast over the 3
    big = _poisoned((2, 4, m, n), v.dtype)
    out = big[:, 1:4]                                                    # (2, 3, m, n); [:, 0] untouched
    _run(v, a, b, out)
    _verify(v, out, *_expect(v, a, b), k, "(2, 3) batch of slices")
    assert bool(cupy.isnan(big[:, 0]).all()), "wrote outside the batch's members"

    a3 = _padded((2, 2, 3, m, k), v.dtype, 13)[:, :, ::2]                # (2, 2, 2, m, k): every other member
    b3 = _b_operand(v, (2, 1, 2, k, n), 14)
    out3 = _poisoned((2, 2, 2, m, n), v.dtype)
    _run(v, a3, b3, out3)
    _verify(v, out3, *_expect(v, a3, b3), k, "(2, 2, 2) batch")


@pytest.mark.parametrize("name", SOME)
def test_beta_with_c_batched(name):
    """beta != 0 reads each member's C (the register path), also with an epilogue after it."""
    v = _variant(name)
    m, n, k = 200, 136, 1000
    a = _padded((3, m, k), v.dtype, 21)
    b = _b_operand(v, (3, k, n), 22)
    c = _padded((3, m, n), v.dtype, 23)
    out = c.copy()
    _run(v, a, b, out, alpha=0.5, beta=-1.25)
    _verify(v, out, *_expect(v, a, b, c, alpha=0.5, beta=-1.25), k, "beta != 0, batched")
    out = c.copy()
    _run(v, a, b, out, alpha=0.5, beta=2.0, ep=epilogue.build("gelu"))
    _verify(v, out, *_expect(v, a, b, c, alpha=0.5, beta=2.0, ep_name="gelu"), k, "beta != 0, batched, gelu")


# ---- split-K over a batch, with epilogues ----------------------------------------------------------

@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("name", SPLITK)
def test_split_k_over_a_batch_with_an_epilogue(name, beta):
    """Each member's tile has its own counter and partials: a batch of 5 with 3 splits, the last split's
    sum going through the epilogue once; a second launch reuses the counters the first reset."""
    v = _variant(name, splits=3)
    m, n, k = 100, 264, 1000
    a = _padded((5, m, k), v.dtype, 31)
    b = _b_operand(v, (k, n), 32)
    c = _padded((5, m, n), v.dtype, 33)
    values = _custom_values(v, m, n, 34)
    for _ in range(2):
        out = c.copy() if beta else _poisoned((5, m, n), v.dtype)
        _run(v, a, b, out, alpha=1.5, beta=beta, ep=custom(v.dtype), values=values)
        ref, scale = _expect(v, a, b, c, alpha=1.5, beta=beta, custom=values)
        _verify(v, out, ref, scale, k, f"split 3, batch of 5, beta={beta}")


@pytest.mark.parametrize("name", SPLITK)
def test_split_k_epilogue_without_a_batch(name):
    v = _variant(name, splits=3)
    m, n, k = 17, 1000, 1000
    a, b = _padded((m, k), v.dtype, 41), _b_operand(v, (k, n), 42)
    out = _poisoned((m, n), v.dtype)
    _run(v, a, b, out, ep=epilogue.build("silu"))
    _verify(v, out, *_expect(v, a, b, ep_name="silu"), k, "split 3 + silu")


# ---- every built-in epilogue, and the custom one, unbatched on ragged shapes --------------------------

@pytest.mark.parametrize("builtin", list(epilogue.BUILTINS))
@pytest.mark.parametrize("name", SOME)
def test_builtin_epilogues(name, builtin):
    v = _variant(name)
    for m, n, k in [(1, 17, 40), (1000, 127, 1000), (17, 1000, 136)]:
        a, b = _padded((m, k), v.dtype, m), _b_operand(v, (k, n), n)
        out = _poisoned((m, n), v.dtype)
        _run(v, a, b, out, alpha=0.8, ep=epilogue.build(builtin))
        _verify(v, out, *_expect(v, a, b, alpha=0.8, ep_name=builtin), k, f"{m}x{n}x{k} + {builtin}")


@pytest.mark.parametrize("name", SOME)
def test_custom_epilogue_reads_row_col_full_and_scalar(name):
    v = _variant(name)
    for m, n, k in [(127, 17, 40), (1000, 1000, 136)]:
        a, b = _padded((m, k), v.dtype, m + 1), _b_operand(v, (k, n), n + 1)
        values = _custom_values(v, m, n, m + n)
        out = _poisoned((m, n), v.dtype)
        _run(v, a, b, out, ep=custom(v.dtype), values=values)
        _verify(v, out, *_expect(v, a, b, custom=values), k, f"{m}x{n}x{k} + custom")

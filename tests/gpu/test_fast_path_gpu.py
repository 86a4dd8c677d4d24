"""The cache of prepared launches on a GPU: calls that share or almost share a key, interleaved, with new
data every time, must each be right (float64 reference, NaN-poisoned outputs)."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import prepared, registry, verify
from cupy_gemm.launch import compute_capability

FIXED = {"float32": ["sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf", "sgemm_wgmma_m64n256k8_tf32_stages3_ws2"],
         "float16": ["hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32", "hgemm_wgmma_m64n256k16_stages3_ws2"]}


def _variants(dtype):
    cc = compute_capability(cupy.cuda.Device())
    return [None] + [name for name in FIXED[dtype] if registry.lookup(name).runs_on(cc)]


def _poisoned(shape, dtype, order="C"):
    return cupy.full(shape, cupy.nan, dtype=dtype, order=order)


class Cases:
    """Calls on few keys: the same shapes in C and Fortran order, as strided and misaligned views, on
    another stream, with and without out=, and a gemm with beta; every call gets fresh operands."""

    def __init__(self, dtype, variant):
        self.dtype, self.variant, self.seed = dtype, variant, 0
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def rand(self, shape, order="C"):
        self.seed += 1
        return verify.random_operand(shape, self.dtype, self.seed, order)

    def run(self, case, m, n, k):
        """(result, reference, scale) of one call of the named case."""
        a, b, c, beta, out, stream = self.rand((m, k)), self.rand((k, n)), None, 0.0, None, None
        if case == "fortran":
            a, b, out = self.rand((m, k), "F"), self.rand((k, n), "F"), _poisoned((m, n), self.dtype, "F")
        elif case == "strided":  # row slices of wider matrices: zero-copy with a larger leading dimension
            a, b = self.rand((m, k + 24))[:, 8:8 + k], self.rand((k, n + 40))[:, :n]
        elif case == "misaligned":  # one element past an aligned address: vector kernels must copy
            a = self.rand((m * k + 1,))[1:].reshape(m, k)
        elif case == "out":
            out = _poisoned((m, n), self.dtype)
        elif case == "stream":
            stream = self.stream
        elif case == "gemm":
            c, beta = self.rand((m, n)), -0.5
            out = c.copy()
        ref, scale = verify.reference(a, b, c, 2.0 if case == "gemm" else 1.0, beta)
        cupy.cuda.Device().synchronize()  # a non-blocking stream does not wait for the default one
        with stream or cupy.cuda.get_current_stream():
            if case == "gemm":
                result = cupy_gemm.gemm(a, b, out, alpha=2.0, beta=beta, variant=self.variant, out=out)
            else:
                result = cupy_gemm.matmul(a, b, variant=self.variant, out=out)
        if stream is not None:
            stream.synchronize()
        assert out is None or result is out
        return result, ref, scale


CASES = ("plain", "fortran", "strided", "misaligned", "out", "stream", "gemm")
SHAPES = ((127, 1000, 17), (17, 127, 1000), (1, 4095, 64), (1000, 17, 127))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_interleaved_calls_on_cached_entries(dtype):
    for variant in _variants(dtype):
        prepared.clear()
        acc = "float32" if variant is None else registry.lookup(variant).acc
        cases = Cases(dtype, variant)
        for round_ in range(3):  # round 0 fills the cache, rounds 1-2 hit it with new arrays
            for shape in SHAPES:
                for case in CASES:
                    result, ref, scale = cases.run(case, *shape)
                    verdict = verify.check(result, ref, scale, dtype, acc, shape[2])
                    assert verdict.ok, f"{variant or 'default'} {case} {shape} round {round_}: {verdict}"


def test_same_key_new_data_is_not_stale():
    """Back-to-back calls on one key whose results are kept: each must be its own product."""
    prepared.clear()
    a = [verify.random_operand((256, 128), "float16", seed) for seed in range(4)]
    b = verify.random_operand((128, 192), "float16", 9)
    results = [cupy_gemm.matmul(x, b) for x in a]
    for x, result in zip(a, results):
        ref, scale = verify.reference(x, b)
        assert verify.check(result, ref, scale, "float16", "float32", 128).ok
    assert len({r.data.ptr for r in results}) == len(results)


@pytest.mark.parametrize("case", ["b_row_major", "a_misaligned"])
def test_copied_operands_are_copied_again_on_every_hit(case):
    """A call that copies an operand into the kernel's layout keeps its launch too: a row-major B for
    TF32's K-major wgmma, an A one element off its alignment. Each later call copies again and launches
    (the launch kept names the copies' layouts); each result is its own product, every element written."""
    name = "sgemm_wgmma_m64n256k8_tf32_stages3_ws2"
    if not registry.lookup(name).runs_on(compute_capability(cupy.cuda.Device())):
        pytest.skip(f"{name} needs sm_90")
    prepared.clear()
    m, n, k = 300, 520, 264
    for seed in range(4):
        a = verify.random_operand((m, k), "float32", 10 * seed)
        if case == "a_misaligned":
            a = cupy.concatenate([cupy.zeros(1, a.dtype), a.ravel()])[1:].reshape(m, k)
        b = verify.random_operand((k, n), "float32", 10 * seed + 1)
        out = _poisoned((m, n), "float32")
        assert cupy_gemm.matmul(a, b, variant=name, out=out) is out
        ref, scale = verify.reference(a, b)
        assert verify.check(out, ref, scale, "float32", "tf32", k).ok, (case, seed)
    (entry,) = prepared._entries.values()
    assert entry.direct is not None and entry.direct.copies == (("row" if case == "a_misaligned" else None), "col")


@pytest.mark.parametrize("name", ["sgemm_wgmma_m64n256k8_tf32_stages3_ws2",
                                  "hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32"])
@pytest.mark.parametrize("beta", [0.0, -0.5])
def test_zero_padded_operands_are_padded_again_on_every_hit(name, beta):
    """K and N off the kernel's alignment: A and B are zero-padded, the kernel writes a padded C of its own,
    whose leading view reaches out (and, with beta != 0, first holds out's C). The launch is kept; every
    later call pads anew, each result its own product with every element written."""
    v = registry.lookup(name)
    if not v.runs_on(compute_capability(cupy.cuda.Device())):
        pytest.skip(f"{name} does not run on this GPU")
    prepared.clear()
    dtype = v.dtype
    m, n, k = 300, 522, 267  # K and N odd: a multiple of no kernel's alignment
    for seed in range(4):
        a = verify.random_operand((m, k), dtype, 10 * seed)
        b = verify.random_operand((k, n), dtype, 10 * seed + 1)
        c = verify.random_operand((m, n), dtype, 10 * seed + 2)
        out = c.copy() if beta else _poisoned((m, n), dtype)
        assert cupy_gemm.gemm(a, b, c if beta else None, alpha=1.5, beta=beta, variant=name, out=out) is out
        ref, scale = verify.reference(a, b, c if beta else None, 1.5, beta)
        assert verify.check(out, ref, scale, dtype, v.acc, k).ok, (name, beta, seed)
    (entry,) = prepared._entries.values()
    align = v.family.align(v.params, dtype)
    assert entry.direct is not None and entry.direct.padded == (m, -(-k // align) * align, -(-n // align) * align)

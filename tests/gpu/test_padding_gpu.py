"""The zero-padded copies of unaligned operands (cupy_gemm/padding.py) on a GPU: every element of each
padded buffer is its operand's, bit for bit, or zero past its edges, for sources in C and Fortran order,
strided, transposed and reversed views, both buffer layouts and item sizes of 1 to 8 bytes. The memory pool
is filled with 0xFF bytes first, so that a buffer the kernel left unwritten shows."""
import cupy
import numpy as np
import pytest

from cupy_gemm import padding

# (M, K, N) of the operands and the padding added to each: small, ragged, one row or column, and rows
# longer than a block's THREADS * VEC elements (a thread's later elements wrap into the next row)
SHAPES = [((1, 1, 1), (0, 7, 7)), ((17, 33, 2000), (7, 7, 0)), ((127, 1, 17), (1, 15, 7)),
          ((1, 1000, 4095), (63, 8, 1)), ((301, 4095, 1), (3, 1, 63)), ((4095, 17, 33), (1, 0, 7)),
          ((3, 2000, 127), (5, 2000, 1))]
DTYPES = ["uint8", "float16", "float32", "float64"]


def _poison_the_pool(nbytes):
    """Fill freed pool memory with 0xFF (NaN in every float format) so new buffers start dirty."""
    cupy.get_default_memory_pool().free_all_blocks()
    dirty = cupy.full(nbytes, 0xFF, cupy.uint8)
    del dirty


def _source(rows, cols, dtype, view, seed):
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        host = rng.integers(1, 256, size=(2 * rows, 2 * cols), dtype=np.uint8)
    else:
        host = rng.standard_normal((2 * rows, 2 * cols)).astype(dtype)
    big = cupy.asarray(host)
    if view == "fortran":
        return cupy.asfortranarray(big[:rows, :cols])
    if view == "strided":  # every other row and column of a larger matrix
        return big[::2, ::2][:rows, :cols]
    if view == "transposed":
        return big[:cols, :rows].T
    if view == "reversed":  # negative strides
        return big[:rows, :cols][::-1, ::-1]
    return cupy.ascontiguousarray(big[:rows, :cols])


def _check(x, buf, shape, order):
    assert buf.shape == shape
    assert buf.flags.c_contiguous if order == "row" else buf.flags.f_contiguous
    rows, cols = x.shape
    got = cupy.asnumpy(buf).view(f"u{buf.itemsize}")
    want = np.zeros(shape, dtype=got.dtype)
    want[:rows, :cols] = cupy.asnumpy(x).view(f"u{x.itemsize}")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("view", ["c", "fortran", "strided", "transposed", "reversed"])
@pytest.mark.parametrize("orders", [("row", "row"), ("row", "col"), ("col", "col"), ("col", "row")])
def test_padded_pairs_hold_their_operands_and_zeros(dtype, view, orders):
    for seed, ((m, k, n), (dm, dk, dn)) in enumerate(SHAPES):
        a, b = _source(m, k, dtype, view, 2 * seed), _source(k, n, dtype, view, 2 * seed + 1)
        padded = (m + dm, k + dk, n + dn)
        _poison_the_pool(2 * (padded[0] * padded[1] + padded[1] * padded[2]) * a.itemsize)
        padder = padding.Padder(a, b, padded, orders)
        A, B = padder(a, b)
        _check(a, A, padded[:2], orders[0])
        _check(b, B, padded[1:], orders[1])
        # the same geometry again with new data: the kept launch, new buffers
        a2, b2 = _source(m, k, dtype, view, 100 + seed), _source(k, n, dtype, view, 200 + seed)
        A2, B2 = padder(a2, b2)
        assert A2.data.ptr not in (A.data.ptr, B.data.ptr) and B2.data.ptr not in (A.data.ptr, B.data.ptr)
        _check(a2, A2, padded[:2], orders[0])
        _check(b2, B2, padded[1:], orders[1])


def test_the_copies_follow_the_current_stream():
    """The kernel runs on the caller's stream, after the work queued there that made its operands."""
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = _source(4095, 1001, "float32", "c", 1) * 2  # queued on that stream before the copies
        b = _source(1001, 4095, "float32", "c", 2) * 2
        A, B = padding.Padder(a, b, (4096, 1008, 4096), ("row", "col"))(a, b)
        stream.synchronize()
    _check(a, A, (4096, 1008), "row")
    _check(b, B, (1008, 4096), "col")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["row", "col"])
def test_a_cropper_copies_a_buffers_leading_view_into_a_dense_out(dtype, layout):
    """The way back (padding.Cropper): the leading m×n view of a larger buffer into a dense out, every element."""
    order = "C" if layout == "row" else "F"
    for seed, (m, n, pad_m, pad_n) in enumerate([(1, 1, 0, 7), (17, 2000, 7, 8), (4095, 17, 1, 3), (127, 301, 0, 0)]):
        full = _source(m + pad_m, n + pad_n, dtype, "fortran" if layout == "col" else "c", seed)
        view = full[:m, :n]
        _poison_the_pool(m * n * full.itemsize)
        dest = cupy.empty((m, n), dtype, order=order)
        assert padding.Cropper.fits(dest, layout)
        crop = padding.Cropper(view, dest, layout)
        crop(view, dest)
        _check(view, dest, (m, n), layout)
        full2 = _source(m + pad_m, n + pad_n, dtype, "fortran" if layout == "col" else "c", 50 + seed)
        crop(full2[:m, :n], dest)  # the kept launch, new addresses
        _check(full2[:m, :n], dest, (m, n), layout)
    assert not padding.Cropper.fits(cupy.empty((64, 64), dtype, order=order)[:, ::2], layout)

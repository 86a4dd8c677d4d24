"""The batch plan against NumPy's matmul: every member's offsets, computed as a kernel would, must pick the
same matrices as np.matmul on random broadcast shapes, 1-D operands, transposed and sliced batches."""
import itertools

import numpy as np
import pytest

from cupy_gemm.batching import MAX_BATCH_DIMS, plan
from cupy_gemm.errors import InputError

as_strided = np.lib.stride_tricks.as_strided


def _matrix(x, offset_elems, rows, cols, squeeze_rows, squeeze_cols):
    """The 2-D member of x (a view into a 1-D buffer) at an element offset, as the kernel would read it."""
    item = x.itemsize
    rs = 0 if squeeze_rows else x.strides[-2 if not squeeze_cols else -1]
    cs = 0 if squeeze_cols else x.strides[-1]
    if squeeze_rows and not squeeze_cols:
        rs, cs = 0, x.strides[-1]
    if squeeze_cols and not squeeze_rows:
        rs, cs = x.strides[-1], 0
    base = x.base if x.base is not None else x
    start = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return as_strided(base[start + offset_elems:], shape=(rows, cols), strides=(rs, cs))


def _emulate(a, b):
    p = plan(a.shape, a.strides, b.shape, b.strides, itemsize=a.itemsize)
    c = np.full(p.count * p.m * p.n, np.nan)
    for index in range(p.count):
        a_off, b_off, c_off = p.offsets(index)
        am = _matrix(a, a_off, p.m, p.k, a.ndim == 1, False)
        bm = _matrix(b, b_off, p.k, p.n, False, b.ndim == 1)
        c[c_off:c_off + p.m * p.n] = (am @ bm).reshape(-1)
    return p, c.reshape(p.out_shape)


def _view(rng, buf, shape, how):
    """A view of `shape` into buf: C order, F order, a batch transposed, or every other element."""
    x = rng.standard_normal(int(np.prod(shape)) * 2 + 7)
    buf[: x.size] = x
    if how == "C" or len(shape) < 2:
        return buf[3:3 + int(np.prod(shape))].reshape(shape)
    if how == "F":
        return buf[3:3 + int(np.prod(shape))].reshape(shape[::-1]).T
    if how == "step":
        return buf[3:3 + 2 * int(np.prod(shape))][::2].reshape(shape)
    if how == "batchT" and len(shape) >= 4:  # swap two batch dimensions of a C-ordered array
        s = list(shape)
        s[0], s[1] = s[1], s[0]
        return np.swapaxes(buf[3:3 + int(np.prod(shape))].reshape(s), 0, 1)
    return buf[3:3 + int(np.prod(shape))].reshape(shape)


CASES = []
rng0 = np.random.default_rng(0)
for _ in range(300):
    nb = rng0.integers(0, 4)
    batch = tuple(int(rng0.integers(1, 4)) for _ in range(nb))
    a_batch = tuple(d if rng0.random() < 0.7 else 1 for d in batch)[int(rng0.integers(0, nb + 1)):]
    b_batch = tuple(d if rng0.random() < 0.7 else 1 for d in batch)[int(rng0.integers(0, nb + 1)):]
    m, k, n = (int(rng0.integers(1, 5)) for _ in range(3))
    a_shape = (k,) if rng0.random() < 0.1 else a_batch + (m, k)
    b_shape = (k,) if rng0.random() < 0.1 else b_batch + (k, n)
    CASES.append((a_shape, b_shape, str(rng0.choice(["C", "F", "step", "batchT"])),
                  str(rng0.choice(["C", "F", "step", "batchT"]))))


@pytest.mark.parametrize("a_shape,b_shape,a_how,b_how", CASES)
def test_offsets_match_numpy(a_shape, b_shape, a_how, b_how):
    rng = np.random.default_rng(abs(hash((a_shape, b_shape))) % 2**32)
    a = _view(rng, np.zeros(4096), a_shape, a_how)
    b = _view(rng, np.zeros(4096), b_shape, b_how)
    want = np.matmul(a, b)
    p, got = _emulate(a, b)
    assert got.shape == want.shape == p.out_shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_contiguous_batches_merge_into_one_dimension():
    a = np.zeros((2, 3, 4, 5, 6))
    b = np.zeros((2, 3, 4, 6, 7))
    p = plan(a.shape, a.strides, b.shape, b.strides, itemsize=8)
    assert p.shape == (24,) and p.a_strides == (30,) and p.b_strides == (42,) and p.c_strides == (35,)


def test_a_shared_weight_is_read_in_place():
    x = np.zeros((16, 2048, 4096))
    w = np.zeros((4096, 4096))
    p = plan(x.shape, x.strides, w.shape, w.strides, itemsize=8)
    assert p.shape == (16,) and p.b_strides == (0,) and p.fits


def test_more_dimensions_than_a_kernel_unravels_are_reported():
    a = np.zeros((2, 1, 2, 1, 2, 3, 3))
    b = np.zeros((1, 2, 1, 2, 1, 3, 3))
    p = plan(a.shape, a.strides, b.shape, b.strides, itemsize=8)
    assert len(p.shape) > MAX_BATCH_DIMS and not p.fits


@pytest.mark.parametrize("a_shape,b_shape,match", [
    ((3, 4), (5, 6), "must equal"), ((4,), (5,), "must equal"), ((2, 3, 4), (3, 4, 5), "do not broadcast"),
    ((), (3, 3), "at least one dimension"),
])
def test_bad_shapes(a_shape, b_shape, match):
    a, b = np.zeros(a_shape), np.zeros(b_shape)
    with pytest.raises(InputError, match=match):
        plan(a.shape, a.strides, b.shape, b.strides, itemsize=8)

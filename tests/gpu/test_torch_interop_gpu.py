"""PyTorch tensors through DLPack: no copies either way, the product on PyTorch's current stream (ordered
after the torch work that writes the inputs and before the torch work that reads the result), for
float16, bfloat16 and float32, 2-D and batched, with a fused epilogue."""
import cupy
import numpy as np
import pytest

import cupy_gemm

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
RTOL = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 1e-4}  # products of |a|,|b| ~ 1 over K = 512


def _f64(t):
    return t.double().cpu().numpy()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [((300, 512), (512, 200)), ((3, 130, 512), (512, 72)), ((2, 64, 512), (2, 512, 136))])
def test_zero_copy_on_torchs_stream(dtype, shape):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.empty(shape[0], device="cuda", dtype=DTYPES[dtype])
        w = torch.empty(shape[1], device="cuda", dtype=DTYPES[dtype])
        bias = torch.randn(shape[1][-1], device="cuda", dtype=DTYPES[dtype])
        torch.cuda._sleep(20_000_000)  # the inputs are written late on this stream: ordering must hold
        x.normal_()
        w.normal_()
        with cupy.cuda.ExternalStream(side.cuda_stream):
            xc, wc, bc = cupy.from_dlpack(x), cupy.from_dlpack(w), cupy.from_dlpack(bias)
            assert (xc.data.ptr, wc.data.ptr) == (x.data_ptr(), w.data_ptr())  # no copies in
            y = cupy_gemm.matmul(xc, wc, bias=bc, activation="relu")
        y_t = torch.from_dlpack(y)
        assert y_t.data_ptr() == y.data.ptr  # none out
        total = y_t.float().sum()  # read by torch on the same stream
    side.synchronize()
    ref = np.maximum(np.matmul(_f64(x), _f64(w)) + _f64(bias), 0)
    got = _f64(y_t)
    assert got.shape == ref.shape and y_t.dtype == DTYPES[dtype]
    np.testing.assert_allclose(got, ref, rtol=RTOL[dtype], atol=RTOL[dtype] * np.sqrt(512))
    assert abs(float(total) - got.sum()) <= 1e-3 * np.abs(got).sum() + 1

"""cuBLAS like for like: the baseline a variant of each (dtype, accumulate type) is compared with, as a call
that `timing.bench` times exactly as it times a variant."""
from __future__ import annotations

from typing import Callable

import numpy as np

# dtype/acc -> the cuBLAS row that a variant of that precision is compared with
BASELINES = {
    ("float32", "float32"): "cublas_f32",
    ("float32", "tf32"): "cublas_tf32",
    ("float32", "3xtf32"): "cublas_f32",  # 3xTF32 answers to fp32 accuracy: compared with SGEMM
    ("float16", "float32"): "cublas_f16_acc32",
    ("float16", "float16"): "cublas_f16_acc16",
    ("bfloat16", "float32"): "cublas_bf16_acc32",
}


def cublas_call(a, b, out, acc: str) -> Callable[[], object]:
    """A call computing out = a @ b with cuBLAS in the precision a variant of (a.dtype, acc) uses.

    float16 with float32 accumulation and float32 call cupy.matmul (cublasGemmEx, CUBLAS_COMPUTE_32F)
    unless CuPy was switched to another compute type (CUPY_TF32=1, set_compute_type): then the same
    cublasGemmEx call is made directly, so the baseline never silently changes precision.
    float16 accumulation uses CUBLAS_COMPUTE_16F, tf32 CUBLAS_COMPUTE_32F_FAST_TF32.
    """
    import cupy
    from cupy_backends.cuda.libs import cublas

    dtype = a.dtype.name
    if (dtype, acc) not in BASELINES:
        raise ValueError(f"no cuBLAS baseline for {dtype} inputs with {acc} accumulation")
    acc = "float32" if acc == "3xtf32" else acc  # fp32 accuracy on tensor cores is measured against SGEMM
    if acc == "float32" and dtype in ("float32", "float16") and all(x.flags.c_contiguous for x in (a, b, out)) \
            and _cupy_compute_is_default(a.dtype):
        return lambda: cupy.matmul(a, b, out=out)
    compute = {"float32": cublas.CUBLAS_COMPUTE_32F, "tf32": cublas.CUBLAS_COMPUTE_32F_FAST_TF32,
               "float16": cublas.CUBLAS_COMPUTE_16F}[acc]
    return _gemm_ex(a, b, out, compute, np.float16 if acc == "float16" else np.float32)


def _cupy_compute_is_default(dtype) -> bool:
    """Whether cupy.matmul computes this dtype with CUBLAS_COMPUTE_32F (not TF32, FP16 or pedantic)."""
    try:
        from cupy._core import _routines_linalg as linalg
        return linalg.get_compute_type(dtype) == linalg.COMPUTE_TYPE_DEFAULT
    except (ImportError, AttributeError):  # CuPy internals moved: call cuBLAS directly instead
        return False


def _gemm_ex(a, b, out, compute: int, scalar_type) -> Callable[[], object]:
    import cupy
    from cupy_backends.cuda.api import runtime
    from cupy_backends.cuda.libs import cublas

    cuda_type = {"float32": runtime.CUDA_R_32F, "float16": runtime.CUDA_R_16F,
                 "bfloat16": runtime.CUDA_R_16BF}[a.dtype.name]
    m, k = a.shape
    n = b.shape[1]
    item = a.itemsize
    # the scalars' type follows the compute type (half for CUBLAS_COMPUTE_16F); kept alive in the closure
    one, zero = np.ones((), scalar_type), np.zeros((), scalar_type)
    if all(x.flags.c_contiguous for x in (a, b, out)):
        # row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands, no transposition
        first, second, rows, cols = b, a, n, m
        ld = (b.strides[0] // item, a.strides[0] // item, out.strides[0] // item)
    elif all(x.flags.f_contiguous for x in (a, b, out)):
        first, second, rows, cols = a, b, m, n
        ld = (a.strides[1] // item, b.strides[1] // item, out.strides[1] // item)
    else:
        raise ValueError("the cuBLAS baseline takes operands that are all C- or all F-contiguous")
    ld = tuple(max(1, x) for x in ld)

    def call():
        handle = cupy.cuda.device.get_cublas_handle()
        cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
        cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, rows, cols, k,
                      one.ctypes.data, first.data.ptr, cuda_type, ld[0], second.data.ptr, cuda_type, ld[1],
                      zero.ctypes.data, out.data.ptr, cuda_type, ld[2], compute,
                      cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP)
        return out
    return call


# Per-SM limits by compute capability, for when the device does not report one (or for a GPU-free estimate):

"""cupy-gemm: a JIT-compiled GEMM kernel zoo on CuPy.

    import cupy, cupy_gemm
    c = cupy_gemm.matmul(a, b)                                  # the dtype's default variant
    c = cupy_gemm.matmul(a, b, variant="sgemm_t_8x8_sliced_k_f32x4_bcf")
    c = cupy_gemm.gemm(a, b, c, alpha=2.0, beta=0.5)            # BLAS semantics
    q_a, s_a = cupy_gemm.quantize(x, scaling="row"); q_b, s_b = cupy_gemm.quantize(w.T, scaling="col")
    y = cupy_gemm.scaled_mm(q_a, q_b, s_a, s_b)                 # FP8 on Hopper, bf16 out
    y = cupy_gemm.grouped_matmul(x, w, offsets=offs)            # experts in one launch (Hopper)
    cupy_gemm.variants("float16"); cupy_gemm.get(name).source; cupy_gemm.render("sliced_k", BK=16)
"""
from .api import CUBLAS, Kernel, Plan, default_variant, gemm, get, matmul, plan, render, variants
from .measure.tune import tune
from .fp8 import dequantize, quantize
from .scaled import scaled_mm, scaled_plan
from .grouped import grouped_matmul
from .errors import (CatalogueError, CompileError, CompilerNotFoundError, ConfigError, CupyGemmError,
                     DeviceError, DTypeError, InputError, UnknownVariantError)
from .epilogue import EpilogueError
from .version import __version__

__all__ = ["matmul", "gemm", "grouped_matmul", "scaled_mm", "scaled_plan", "quantize", "dequantize", "tune", "plan", "Plan", "get",
           "Kernel", "variants", "render", "default_variant", "CUBLAS",
           "CupyGemmError", "ConfigError", "CatalogueError", "CompileError", "CompilerNotFoundError",
           "DeviceError", "DTypeError", "InputError", "UnknownVariantError", "EpilogueError"]

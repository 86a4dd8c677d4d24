"""cupy-gemm: a JIT-compiled GEMM kernel zoo on CuPy.

    import cupy, cupy_gemm
    c = cupy_gemm.matmul(a, b)                                  # the dtype's default variant
    c = cupy_gemm.matmul(a, b, variant="sgemm_t_8x8_sliced_k_f32x4_bcf")
    c = cupy_gemm.gemm(a, b, c, alpha=2.0, beta=0.5)            # BLAS semantics
    cupy_gemm.variants("float16"); cupy_gemm.get(name).source; cupy_gemm.render("sliced_k", BK=16)
"""
from .api import CUBLAS, Kernel, Plan, default_variant, gemm, get, matmul, plan, render, variants
from .measure.tune import tune
from .errors import (CatalogueError, CompileError, CompilerNotFoundError, ConfigError, CupyGemmError,
                     DeviceError, DTypeError, InputError, UnknownVariantError)
from .version import __version__

__all__ = ["matmul", "gemm", "tune", "plan", "Plan", "get", "Kernel", "variants", "render", "default_variant", "CUBLAS",
           "CupyGemmError", "ConfigError", "CatalogueError", "CompileError", "CompilerNotFoundError",
           "DeviceError", "DTypeError", "InputError", "UnknownVariantError"]

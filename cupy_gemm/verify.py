"""Checking a result against a float64 reference, with bounds that follow the arithmetic.

For random inputs the rounding error of element (i, j) scales with s_ij = sqrt(sum_k a_ik^2 b_kj^2), the
size of the terms being summed: rounding the output costs u_out·s, rounding inputs to TF32 about
u_tf32·s, and K-long accumulation in precision u_acc about u_acc·sqrt(K)·s. The bound is SAFETY times
their sum. A wrong index or a missing K slice costs an error of order s itself, far above the bound
except for fp16 accumulation at large K, whose own rounding is of the same order. Below the smallest
normal number rounding is absolute, up to half the smallest subnormal: an fp16 output near 1e-6 (a
product of two small inputs at K = 1) can be off by 3e-8, far more than u_out times itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# "fp8": fp8 products summed by the tensor core, which keeps about 14 bits while it adds (DeepSeek-V3's
# measurement); the wgmma_fp8 kernels add each 128-deep K-block into fp32 registers
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8,
                 "tf32": 2.0**-24, "3xtf32": 2.0**-24, "fp8": 2.0**-13}
TF32_INPUT_ROUNDOFF = 2.0**-11
# 3xTF32 holds each input as big + small to about 2^-22 of its size and drops small·small (2^-22 of a
# product); the tensor cores' truncation adds a few units of 2^-24 per product sum
INPUT_ROUNDOFF = {"tf32": TF32_INPUT_ROUNDOFF, "3xtf32": 2.0**-21}
SMALLEST_SUBNORMAL = {"float64": 2.0**-1074, "float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}
SAFETY = 10.0


@dataclass(frozen=True)
class Verdict:
    ok: bool
    unwritten: int  # NaN elements in the result where the reference is finite (output poisoned with NaN)
    worst_ratio: float  # max |out - ref| / bound: <= 1 passes
    relative_error: float  # ||out - ref||_F / ||ref||_F

    def __str__(self) -> str:
        return (f"{'ok' if self.ok else 'WRONG'}: {self.unwritten} unwritten, worst error/bound "
                f"{self.worst_ratio:.3g}, relative Frobenius error {self.relative_error:.3g}")


def random_operand(shape, dtype, seed=None, order="C"):
    """Uniform in [-1, 1), never zeros or ones: hides nothing that a wrong index would change."""
    import cupy
    rng = cupy.random.default_rng(seed)
    x = (rng.random(shape, dtype=cupy.float32) * 2 - 1).astype(dtype)
    return cupy.asfortranarray(x) if order == "F" else x


def reference(a, b, c=None, alpha=1.0, beta=0.0):
    """alpha·a·b + beta·c in float64, with the scale s of each element's rounding error."""
    import cupy
    a64, b64 = a.astype(cupy.float64), b.astype(cupy.float64)
    ref = alpha * (a64 @ b64)
    scale = abs(alpha) * cupy.sqrt((a64 * a64) @ (b64 * b64))
    if c is not None and beta != 0:
        c64 = c.astype(cupy.float64)
        ref += beta * c64
        scale += abs(beta) * cupy.abs(c64)
    return ref, scale


def bound_factor(dtype: str, acc: str, k: int) -> float:
    u_out = UNIT_ROUNDOFF[dtype]
    u_in = INPUT_ROUNDOFF.get(acc, 0.0)
    return SAFETY * (u_out + u_in + UNIT_ROUNDOFF[acc] * np.sqrt(max(k, 1)))


def check(out, ref, scale, dtype: str, acc: str, k: int) -> Verdict:
    import cupy
    out64 = out.astype(cupy.float64)
    unwritten = int(cupy.count_nonzero(cupy.isnan(out64) & ~cupy.isnan(ref)))
    err = cupy.abs(out64 - ref)
    bound = bound_factor(dtype, acc, k) * scale + SAFETY * SMALLEST_SUBNORMAL[dtype] / 2 + 1e-30
    ratio = cupy.where(cupy.isnan(err), cupy.inf, err / bound)
    worst = float(ratio.max()) if ratio.size else 0.0
    denom = float(cupy.linalg.norm(ref)) or 1.0
    rel = float(cupy.linalg.norm(cupy.nan_to_num(err, nan=np.inf))) / denom if err.size else 0.0
    return Verdict(ok=unwritten == 0 and worst <= 1.0, unwritten=unwritten, worst_ratio=worst, relative_error=rel)

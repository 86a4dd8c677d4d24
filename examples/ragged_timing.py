"""Ragged shapes: GPU time per call of the default path (padding copies included) against the kernels that
need no alignment (sliced_k, blas v0) and cupy.matmul, on products whose K or N is not a multiple of the
vector width the fast kernels load.

    PYTHONPATH=. python examples/ragged_timing.py

Each time is the median of 7 repeats of 20 calls (5 for the align-1 kernels) between two CUDA events,
rotating over operand sets that together exceed twice the L2.
"""
import cupy
import numpy as np
import cupy_gemm
from cupy_gemm import verify
from cupy_gemm.measure import timing

SHAPES = [(129, 1000, 33), (1000, 1000, 33), (4095, 4095, 33), (129, 1000, 1001), (1000, 1000, 1001),
          (2048, 2048, 2047), (4095, 4095, 4095), (17, 4096, 4095), (64, 64, 63), (300, 300, 301), (1000, 1001, 1000)]
ALIGN1 = {"float16": ["hgemm_sliced_k_f16_acc32"], "bfloat16": ["bgemm_sliced_k_bf16"],
          "float32": ["sgemm_sliced_k_f32", "gemm_32x32_v0"]}


def us(calls, launches):
    return timing.rotated_us(calls, launches, repeats=7, warmup_ms=10)


def main():
    l2 = cupy.cuda.Device().attributes["L2CacheSize"]
    print("| dtype | M×N×K | default µs | " + " | ".join(["align-1 µs"] * 2) + " | cupy µs |")
    for dtype in ("float16", "bfloat16", "float32"):
        for m, n, k in SHAPES:
            size = (m * k + k * n + m * n) * np.dtype(dtype).itemsize
            copies = max(2, min(32, -(-2 * l2 // size)))
            data = [(verify.random_operand((m, k), dtype, 2 * i), verify.random_operand((k, n), dtype, 2 * i + 1),
                     cupy.empty((m, n), dtype)) for i in range(copies)]
            row = [us([lambda d=d: cupy_gemm.matmul(d[0], d[1], out=d[2]) for d in data], 20)]
            for name in ALIGN1[dtype]:
                if m * n * k > 2e10:  # too slow to be worth the wait
                    row.append(float("nan"))
                    continue
                row.append(us([lambda d=d: cupy_gemm.matmul(d[0], d[1], out=d[2], variant=name) for d in data], 5))
            row.append(us([lambda d=d: cupy.matmul(d[0], d[1], out=d[2]) for d in data], 20))
            print(f"| {dtype} | {m}×{n}×{k} | " + " | ".join(f"{x:.1f}" for x in row) + " |", flush=True)


if __name__ == "__main__":
    main()

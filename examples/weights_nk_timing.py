"""x @ W.T with W stored N×K, as linear layers keep it: batches of such weights (one per expert or head) and
2-D products whose N is odd (a vocabulary of 32001 or 50257 rows), cupy_gemm.matmul against cupy.matmul
and torch.matmul on the same data.

    PYTHONPATH=. python examples/weights_nk_timing.py              # batches, fp16, bf16 and fp32
    PYTHONPATH=. python examples/weights_nk_timing.py --two-d      # the 2-D products of odd N first

GPU time: the median of 5 repeats of 20 calls between two CUDA events, a spin kernel holding the stream
while the host enqueues them (so host cost does not show as GPU time); the operands are not rotated, and
the smaller products' inputs fit in L2 for every contender alike. Host cost: the best of 5 loops of 20
calls, wall time per call, after a synchronisation. Each result is first compared with cupy.matmul's in
float32 (relerr: the largest difference over the largest magnitude).
"""
import argparse
import time

import cupy

import cupy_gemm
from cupy_gemm.measure.timing import spin

try:
    import torch
except ImportError:
    torch = None

BATCHES = [(8, 512, 14336, 4096), (8, 64, 4096, 14336), (32, 1001, 1001, 128), (32, 128, 4095, 128),
           (4, 2048, 1001, 1024)]  # (members, M, N, K)
TWO_D = [(17, 4095, 1000), (64, 1001, 1024), (128, 32001, 4096), (512, 50257, 768)]


def timeit(fn, reps=20, rounds=5):
    """(GPU µs a call, host µs a call)."""
    fn()
    cupy.cuda.Device().synchronize()
    gpu, host = [], []
    for _ in range(rounds):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        spin(cupy.cuda.Device().id, 0.05)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        gpu.append(cupy.cuda.get_elapsed_time(start, end) * 1000 / reps)
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        host.append((time.perf_counter() - t) * 1e6 / reps)
        cupy.cuda.Device().synchronize()
    return sorted(gpu)[len(gpu) // 2], min(host)


def two_d():
    for dtype in ("float16", "bfloat16"):  # (tf32 and float32: `cupy-gemm bench --default --b-layout col`)
        for m, n, k in TWO_D:
            rng = cupy.random.default_rng(1)
            x = rng.standard_normal((m, k), dtype=cupy.float32).astype(dtype)
            w = rng.standard_normal((n, k), dtype=cupy.float32).astype(dtype)
            ours, ours_h = timeit(lambda: cupy_gemm.matmul(x, w.T))
            cp, cp_h = timeit(lambda: cupy.matmul(x, w.T))
            print(f"2-D {dtype} {m}x{n}x{k} GPU ours {ours:.1f} cupy {cp:.1f} us (x_cupy {cp / ours:.2f}); "
                  f"host ours {ours_h:.0f} cupy {cp_h:.0f} us", flush=True)


def batches():
    for dtype in ("float16", "bfloat16", "float32"):
        for count, m, n, k in BATCHES:
            rng = cupy.random.default_rng(1)
            x = rng.standard_normal((count, m, k), dtype=cupy.float32).astype(dtype)
            w = rng.standard_normal((count, n, k), dtype=cupy.float32).astype(dtype)
            wt = w.transpose(0, 2, 1)
            ref = cupy.matmul(x.astype(cupy.float32), wt.astype(cupy.float32))
            err = float(cupy.abs(cupy_gemm.matmul(x, wt).astype(cupy.float32) - ref).max() / cupy.abs(ref).max())
            ours, ours_h = timeit(lambda: cupy_gemm.matmul(x, wt))
            # cupy.matmul has no bfloat16 batches
            cp, cp_h = timeit(lambda: cupy.matmul(x, wt)) if dtype != "bfloat16" else (float("nan"),) * 2
            th, th_h = float("nan"), float("nan")
            if torch is not None:
                tx, tw = torch.from_dlpack(x), torch.from_dlpack(w)
                th, th_h = timeit(lambda: torch.matmul(tx, tw.transpose(1, 2)))
            print(f"{dtype} {count}x{m}x{n}x{k} GPU ours {ours:.1f} cupy {cp:.1f} torch {th:.1f} us "
                  f"(x_cupy {cp / ours:.2f} x_torch {th / ours:.2f}); host ours {ours_h:.0f} cupy {cp_h:.0f} "
                  f"torch {th_h:.0f} us; relerr {err:.1e}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--two-d", action="store_true", help="also the 2-D products of odd N, first")
    if parser.parse_args().two_d:
        two_d()
    batches()

"""3xTF32 speed on a Hopper GPU: TFLOPS of every wgmma_3xtf32 variant and their ratio to cupy.matmul fp32
(cuBLAS SGEMM), to cuBLAS TF32 and to our TF32 kernel, at 4096³ and 8192³.

Interleaved CUDA-event timing: each round times every contender in turn, LAUNCHES back-to-back launches
between one pair of events, and the median over rounds is reported, because the clock drifts with the
card's temperature more than the gaps measured here. Odd rounds run the contenders in reverse order: in
a fixed order a contender's time depended on what ran before it (the precision='3xtf32' rows, last,
measured up to 8% slower than the same kernel named). "kernel" rows pass a column-major B to wgmma_3xtf32
and a row-major one to wgmma_3xtf32_swap, each read in place; the default path's rows take either.

cuBLAS TF32 is measured twice: as cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32 in this process, and as
cupy.matmul in a child process started with CUPY_TF32=1 (CuPy reads the variable once).

    python examples/tf32x3_timing.py [--shapes 4096,8192] [--rounds 10] [--launches 10]
"""
import argparse
import json
import os
import subprocess
import sys

import cupy

import cupy_gemm
from cupy_gemm import registry
from cupy_gemm.measure import baselines, timing

TF32 = "sgemm_wgmma_m64n256k8_tf32_stages4_ws2"


def operands(n):
    rng = cupy.random.default_rng(n)
    a = rng.standard_normal((n, n), dtype=cupy.float32)
    b = rng.standard_normal((n, n), dtype=cupy.float32)
    return a, b, cupy.asfortranarray(b), cupy.empty((n, n), cupy.float32)


def interleaved_ms(calls: dict, rounds: int, launches: int) -> dict:
    """Median milliseconds per call of each callable, timed in turn within every round."""
    for call in calls.values():  # compile, load and warm up
        call()
    cupy.cuda.Device().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = {name: [] for name in calls}
    for r in range(rounds):
        for name, call in (reversed if r % 2 else iter)(list(calls.items())):
            start.record()
            for _ in range(launches):
                call()
            end.record()
            end.synchronize()
            times[name].append(cupy.cuda.get_elapsed_time(start, end) / launches)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def cupy_matmul_child(n: int, rounds: int, launches: int) -> None:
    """Runs in the child: time cupy.matmul under this process's CUPY_TF32 and print one JSON line."""
    a, b, _, out = operands(n)
    ms = interleaved_ms({"cupy": lambda: cupy.matmul(a, b, out=out)}, rounds, launches)["cupy"]
    print(json.dumps({"ms": ms}))


def cupy_tf32_ms(n: int, rounds: int, launches: int) -> float:
    env = dict(os.environ, CUPY_TF32="1")
    done = subprocess.run([sys.executable, __file__, "--child", str(n), "--rounds", str(rounds),
                           "--launches", str(launches)], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["ms"]


def contenders(n):
    a, b, b_col, out = operands(n)
    calls = {"cupy.matmul fp32 (SGEMM)": baselines.cublas_call(a, b, out, "float32"),
             "cuBLAS TF32 (cublasGemmEx)": baselines.cublas_call(a, b, out, "tf32"),
             f"{TF32}, kernel": cupy_gemm.plan(a, b_col, variant=TF32, out=out)}
    for name, v in registry.catalogue().items():
        if v.family.name == "wgmma_3xtf32":
            calls[f"{name}, kernel"] = cupy_gemm.plan(a, b_col, variant=name, out=out)
        elif v.family.name == "wgmma_3xtf32_swap":  # reads a row-major B in place
            calls[f"{name}, kernel, row-major B"] = cupy_gemm.plan(a, b, variant=name, out=out)
    # the default path picks its tile per shape (dispatch.wave_fill) and the family reading B where it lies
    calls["precision='3xtf32', column-major B"] = cupy_gemm.plan(a, b_col, precision="3xtf32", out=out)
    calls["precision='3xtf32', row-major B"] = cupy_gemm.plan(a, b, precision="3xtf32", out=out)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="4096,8192", help="comma-separated sizes n of n×n×n problems")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return cupy_matmul_child(args.child, args.rounds, args.launches)
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"{props['name'].decode()}, CuPy {cupy.__version__}; interleaved medians, "
          f"{args.rounds} rounds × {args.launches} launches")
    print("| contender | n | ms | TFLOP/s | vs SGEMM | vs cuBLAS TF32 | vs our TF32 |")
    print("|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.shapes.split(",")):
        ms = interleaved_ms(contenders(n), args.rounds, args.launches)
        ms["cupy.matmul with CUPY_TF32=1 (child process)"] = cupy_tf32_ms(n, args.rounds, args.launches)
        sgemm, cublas_tf32 = ms["cupy.matmul fp32 (SGEMM)"], ms["cuBLAS TF32 (cublasGemmEx)"]
        ours_tf32 = ms[f"{TF32}, kernel"]
        for name, t in ms.items():
            print(f"| {name} | {n} | {t:.4f} | {timing.tflops(n, n, n, t):.1f} | {sgemm / t:.2f}× | "
                  f"{cublas_tf32 / t:.2f}× | {ours_tf32 / t:.2f}× |", flush=True)


if __name__ == "__main__":
    main()

"""Per-call wall time of cupy_gemm.matmul against cupy.matmul: a loop of calls, one synchronisation.

    PYTHONPATH=. python examples/host_overhead.py [--calls 2000] [--shapes 64,256,1024] [--dtypes float16,float32]
        [--variant NAME]

For each dtype and shape (a square's size, or MxNxK) it prints the wall time per call of cupy.matmul, of
cupy_gemm.matmul with the default (variant=None) and with a fixed variant (--variant, else the default's
pick named), and their ratios to cupy.matmul (<= 1.00 is the target). A fixed variant whose alignment the
shape misses (K = 250 for an 8-element rule) times the calls that zero-pad A and B. `queued` is the time
until the loop has queued every call, before the synchronisation: the host's own cost while the GPU keeps
up. `miss` is one call whose prepared launch is not cached (the first call of a new shape; the compiled
kernel is cached). Best of three loops.
--breakdown adds, per row, what a cached call is made of: the key, the output allocation, the launch
alone with prepared arguments, and the kernel's GPU time (a CUDA graph of 100 launches, so without the
host's gaps).
"""
import argparse
import time

import cupy

import cupy_gemm
from cupy_gemm import dispatch, prepared, verify


def per_call_us(fn, calls: int) -> tuple[float, float]:
    """(wall µs per call including the final synchronisation, µs per call until the last was queued)."""
    best_wall = best_queued = float("inf")
    for _ in range(3):
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        queued = time.perf_counter()
        cupy.cuda.Device().synchronize()
        end = time.perf_counter()
        best_wall = min(best_wall, (end - start) / calls * 1e6)
        best_queued = min(best_queued, (queued - start) / calls * 1e6)
    return best_wall, best_queued


def breakdown(a, b, calls: int) -> str:
    """µs per call of the parts of a cached default call, and the GPU time per launch."""
    cupy_gemm.matmul(a, b)
    key = prepared._key(a, b, None, None, 1.0, 0.0, None)
    entry = prepared._entries[key]
    known, swapped = entry.direct.run, entry.direct.swapped
    out = cupy_gemm.matmul(a, b)
    args = known.rebind(*((b.T, a.T, out.T) if swapped else (a, b, out)))
    launch_only = lambda: known.launch(args)  # noqa: E731
    parts = {"key": per_call_us(lambda: prepared._key(a, b, None, None, 1.0, 0.0, None), calls)[1],
             "alloc": per_call_us(lambda: prepared.allocate(out.shape, out.dtype), calls)[1],
             "launch": per_call_us(launch_only, calls)[1]}
    stream, start, end, launches = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Event(), cupy.cuda.Event(), 100
    cupy.cuda.Device().synchronize()
    with stream:  # a CUDA graph of launches: GPU time without the host's gaps
        stream.begin_capture()
        for _ in range(launches):
            launch_only()
        graph = stream.end_capture()
        graph.launch()
        start.record(stream)
        graph.launch()
        end.record(stream)
    end.synchronize()
    parts["gpu"] = cupy.cuda.get_elapsed_time(start, end) * 1e3 / launches
    return "  " + " ".join(f"{name} {us:.1f}" for name, us in parts.items())


def miss_us(a, b, calls: int = 50) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        prepared.clear()
        cupy_gemm.matmul(a, b)
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--shapes", default="64,256,1024", help="comma-separated square sizes or MxNxK")
    parser.add_argument("--variant", help="the fixed variant (default: the one variant=None picks)")
    parser.add_argument("--dtypes", default="float16,float32")
    parser.add_argument("--breakdown", action="store_true", help="time the parts of a cached call too")
    args = parser.parse_args()
    device = cupy.cuda.Device()
    gpu = dispatch.gpu_of(device.id)
    print(f"{gpu.name} (sm_{gpu.cc}), CuPy {cupy.__version__}, {args.calls} calls per loop, best of 3; µs per call")
    print(f"{'dtype':8s} {'shape':>14s} {'cupy':>8s} {'default':>8s} {'ratio':>6s} {'queued':>7s} "
          f"{'fixed':>8s} {'ratio':>6s} {'miss':>7s}  variant")
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            m, n, k = (int(x) for x in (shape.split("x") if "x" in shape else (shape,) * 3))
            a, b = verify.random_operand((m, k), dtype, 1), verify.random_operand((k, n), dtype, 2)
            name = args.variant or dispatch.choose(gpu, dispatch.dtype_key(dtype), m, n, k).variant
            for fn in (lambda: cupy.matmul(a, b), lambda: cupy_gemm.matmul(a, b),
                       lambda: cupy_gemm.matmul(a, b, variant=name)):
                fn()  # compile, load and fill the caches before timing
            base, _ = per_call_us(lambda: cupy.matmul(a, b), args.calls)
            default, queued = per_call_us(lambda: cupy_gemm.matmul(a, b), args.calls)
            fixed, _ = per_call_us(lambda: cupy_gemm.matmul(a, b, variant=name), args.calls)
            print(f"{dtype:8s} {m:>4d}x{n:>4d}x{k:>4d} {base:8.1f} {default:8.1f} {default / base:6.2f} "
                  f"{queued:7.1f} {fixed:8.1f} {fixed / base:6.2f} {miss_us(a, b):7.1f}  {name}"
                  + (breakdown(a, b, args.calls) if args.breakdown else ""))


if __name__ == "__main__":
    main()

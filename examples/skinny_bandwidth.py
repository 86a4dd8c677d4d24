"""How close the skinny variants come to HBM bandwidth on decode-style products, against cupy.matmul.

    PYTHONPATH=. python examples/skinny_bandwidth.py [--reps 200]

For M ∈ {1, 8, 16} × K=4096 × N ∈ {4096, 14336}, fp16/bf16/fp32 and three layouts (x @ W with W stored
K×N, x @ W.T with W stored N×K, and W @ x.T: few columns), prints the GPU time per call (a CUDA graph of
many calls between two events, so host cost is excluded; operands rotated through more than twice the
L2 size), the bytes moved per second, that as a % of a device-to-device copy measured in the same run,
and the time of cupy.matmul on the same operands divided by ours (> 1: faster than cupy.matmul).
"""
from __future__ import annotations

import argparse

import cupy
import numpy as np

import cupy_gemm
from cupy_gemm import verify

SHAPES = [(m, 4096, n) for m in (1, 8, 16) for n in (4096, 14336)]  # (M, K, N)
PREFIX = {"float16": "h", "bfloat16": "b", "float32": "s"}


_SPIN_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}"""


def hold_stream(cycles=50_000_000):
    """Keep the current stream busy for tens of milliseconds, so that launches issued meanwhile queue up
    and then run back to back: events around them time the GPU, not the host."""
    cupy.RawKernel(_SPIN_SOURCE, "spin")((1,), (1,), (np.int64(cycles),))


def gpu_time_per_call(calls, reps):
    """(seconds per call of `calls` (cycled), whether a CUDA graph held them): a graph of `reps` calls, or
    plain launches queued behind a busy kernel if the calls cannot be captured."""
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for call in calls:  # compile, allocate, prepare outside the capture
            call()
        stream.synchronize()
        try:
            stream.begin_capture()
            for i in range(reps):
                calls[i % len(calls)]()
            graph = stream.end_capture()
            run, captured = graph.launch, True
        except Exception:  # noqa: BLE001 - anything refusing capture is timed as plain launches
            if stream.is_capturing():
                try:
                    stream.end_capture()
                except Exception:  # noqa: BLE001 - an invalidated capture ends with an error
                    pass
            run, captured = (lambda: [calls[i % len(calls)]() for i in range(reps)]), False
        run()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        if not captured:
            hold_stream()
        start.record(stream)
        run()
        end.record(stream)
        end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / 1e3 / reps, captured


def copy_bandwidth(reps=20) -> float:
    """Bytes per second of a device-to-device copy (read plus write)."""
    nbytes = 1 << 30
    src, dst = cupy.empty(nbytes, cupy.uint8), cupy.empty(nbytes, cupy.uint8)
    copy = lambda: cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes,  # noqa: E731
                                                 cupy.cuda.runtime.memcpyDeviceToDevice,
                                                 cupy.cuda.get_current_stream().ptr)
    return 2 * nbytes / gpu_time_per_call([copy], reps)[0]


def operand_sets(make, nbytes, l2_bytes):
    """Enough copies of the operands that rotating through them moves more than twice the L2 size."""
    return [make(seed) for seed in range(max(2, -(-2 * l2_bytes // nbytes) + 1))]


def layouts(m, k, n, dtype):
    """name -> (operands maker, variant family, output order): the big operand W is the one streamed;
    W @ x.T writes a Fortran-ordered output, whose transpose the kernel writes in place."""
    rand = lambda shape, seed: verify.random_operand(shape, dtype, seed)  # noqa: E731
    return {
        "x @ W": (lambda s: (rand((m, k), s), rand((k, n), s + 100)), "skinny", "C"),
        "x @ W.T": (lambda s: (rand((m, k), s), rand((n, k), s + 100).T), "skinny_kmajor", "C"),
        "W @ x.T": (lambda s: (rand((n, k), s + 100), rand((m, k), s).T), "skinny_kmajor", "F"),
    }


def variant_for(family, dtype, m):
    """The entry with the fewest rows that still serves m, on tensor cores where there is one."""
    name = f"{PREFIX[dtype]}gemv_{family}_r{min(r for r in (1, 2, 4, 8, 16) if r >= m)}"
    return f"{name}_mma" if f"{name}_mma" in cupy_gemm.variants(dtype) else name


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    dev = cupy.cuda.Device()
    l2 = dev.attributes["L2CacheSize"]
    copy_bw = copy_bandwidth()
    print(f"{cupy.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()}: L2 {l2 >> 20} MB, "
          f"device-to-device copy {copy_bw / 1e9:.0f} GB/s")
    print("L: timed as plain launches queued behind a busy kernel (the calls could not be captured in a graph); "
          "C: a call copies operands")
    print(f"{'dtype':9} {'M×K×N':15} {'layout':8} {'variant':32} {'µs':>8} {'GB/s':>7} {'% copy':>7} "
          f"{'cupy µs':>8} {'× cupy':>7}")
    for dtype in ("float16", "bfloat16", "float32"):
        size = cupy.dtype(dtype).itemsize
        for m, k, n in SHAPES:
            nbytes = (m * k + k * n + m * n) * size
            for layout, (make, family, order) in layouts(m, k, n, dtype).items():
                sets = operand_sets(make, nbytes, l2)
                name = variant_for(family, dtype, m)
                outs = [cupy.empty((a.shape[0], b.shape[1]), dtype, order=order) for a, b in sets]
                plans = [cupy_gemm.plan(a, b, variant=name, out=o) for (a, b), o in zip(sets, outs)]
                ours, graphed = gpu_time_per_call(plans, args.reps)
                theirs, their_graph = gpu_time_per_call([lambda a=a, b=b, o=o: cupy.matmul(a, b, out=o)
                                                         for (a, b), o in zip(sets, outs)], args.reps)
                mark = ("" if graphed else "L") + ("" if plans[0]._fixed_launch else "C")
                print(f"{dtype:9} {f'{m}×{k}×{n}':15} {layout:8} {name + (' ' + mark if mark else ''):32} "
                      f"{ours * 1e6:8.1f} {nbytes / ours / 1e9:7.0f} {100 * nbytes / ours / copy_bw:6.0f}% "
                      f"{theirs * 1e6:8.1f}{'' if their_graph else 'L'} {theirs / ours:7.2f}")
                del sets, outs


if __name__ == "__main__":
    main()

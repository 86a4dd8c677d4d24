"""Timing on one GPU that survives scrutiny, and the measurement of one variant at one problem size.

How a time is taken (`bench`):
  * CUDA events around each call, on the current stream; the host never times the GPU.
  * Warm-up calls until `warmup_ms` of GPU time has passed (clocks ramp up, modules load), then a fixed
    number of repeats, reduced only for calls so slow that `max_seconds` would be exceeded.
  * Before every repeat the L2 cache is overwritten (a kernel writes a buffer twice its size), or the
    caller rotates between copies of the inputs, so a small problem cannot be served from a warm cache.
  * A spin kernel holds the GPU while the host enqueues every repeat, so Python's launch overhead is never
    inside an event pair: the GPU runs flush, start, kernel, end back to back.
  * The median is reported with the quartiles; two results whose quartile intervals overlap are not
    ranked with confidence (`Timing.overlaps`).

It knows nothing of sweeps: `cupy_gemm.measure.workbench` applies it to a variant at a shape, and
`baselines` times cuBLAS with it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

_HELPERS = r"""
// Spin until `ns` nanoseconds of the global timer have passed: holds the stream while the host enqueues.
extern "C" __global__ void cupy_gemm_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// Overwrite a buffer larger than L2 so the next kernel starts with a cold cache.
extern "C" __global__ void cupy_gemm_flush(long long* buf, long long n, long long value) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) buf[i] = value;
}
"""

_modules: dict[int, object] = {}


def _helpers(device_id: int):
    import cupy
    module = _modules.get(device_id)
    if module is None:
        module = cupy.RawModule(code=_HELPERS)
        _modules[device_id] = module
    return module


@dataclass(frozen=True)
class Timing:
    """Statistics of one timed call, in milliseconds."""
    times_ms: tuple[float, ...]
    warmup: int

    @property
    def repeats(self) -> int:
        return len(self.times_ms)

    @property
    def median(self) -> float:
        return float(np.median(self.times_ms))

    @property
    def q1(self) -> float:
        return float(np.percentile(self.times_ms, 25))

    @property
    def q3(self) -> float:
        return float(np.percentile(self.times_ms, 75))

    @property
    def minimum(self) -> float:
        return float(min(self.times_ms))

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else 0.0

    def overlaps(self, other: "Timing") -> bool:
        return self.q1 <= other.q3 and other.q1 <= self.q3



def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12 if ms > 0 else 0.0


class L2Flush:
    """A buffer of twice the device's L2 (at least 32 MiB), overwritten before each timed call."""

    def __init__(self, device_id: int):
        import cupy
        l2 = int(cupy.cuda.Device(device_id).attributes.get("L2CacheSize", 0)) or 64 << 20
        self.words = max(2 * l2, 32 << 20) // 8
        with cupy.cuda.Device(device_id):
            self.buffer = cupy.empty(self.words, dtype=cupy.int64)
        self.kernel = _helpers(device_id).get_function("cupy_gemm_flush")
        self.count = 0

    def __call__(self) -> None:
        self.count += 1  # a new value each time: nothing can be skipped as already written
        self.kernel((1024,), (256,), (self.buffer, np.int64(self.words), np.int64(self.count)))


def spin(device_id: int, seconds: float) -> None:
    kernel = _helpers(device_id).get_function("cupy_gemm_spin")
    kernel((1,), (1,), (np.uint64(int(seconds * 1e9)),))


def bench(fn: Callable[[], object], *, repeats: int = 20, warmup_ms: float = 25.0,
          flush: Callable[[], None] | None = None, max_seconds: float | None = None,
          max_warmup: int = 500) -> Timing:
    """Time `fn` (which launches on CuPy's current stream) with CUDA events; see the module docstring."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    device_id = cupy.cuda.Device().id
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    stream.synchronize()
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    first_ms = cupy.cuda.get_elapsed_time(start, end)

    warmup = min(max_warmup, max(1, math.ceil(warmup_ms / max(first_ms, 1e-3))))
    host = time.perf_counter()
    for _ in range(warmup):
        fn()
    host_per_call = (time.perf_counter() - host) / warmup
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    estimate_ms = cupy.cuda.get_elapsed_time(start, end)

    if max_seconds is not None and estimate_ms * repeats > max_seconds * 1e3:
        repeats = max(3, int(max_seconds * 1e3 / max(estimate_ms, 1e-3)))
    starts = [cupy.cuda.Event() for _ in range(repeats)]
    ends = [cupy.cuda.Event() for _ in range(repeats)]
    # head start: enqueuing one repeat costs the host about a call plus a flush and two records
    spin(device_id, min(0.2, 1e-3 + 1.5 * repeats * (host_per_call + 30e-6)))
    for s, e in zip(starts, ends):
        if flush is not None:
            flush()
        s.record(stream)
        fn()
        e.record(stream)
    ends[-1].synchronize()
    times = tuple(float(cupy.cuda.get_elapsed_time(s, e)) for s, e in zip(starts, ends))
    return Timing(times, warmup + 2)


def interleaved(contenders: dict, rounds: int, launches: int, warmup: int = 2) -> dict:
    """Median milliseconds per call of each contender (a list of callables, called in rotation) for
    comparisons in one run: every round times each contender in turn, `launches` calls between two CUDA
    events, so the clock's drift with temperature falls on all of them alike. `warmup` rotations of each
    list first (modules compiled and loaded, clocks up)."""
    import cupy
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for calls in contenders.values():
        for i in range(warmup * len(calls)):
            calls[i % len(calls)]()
    cupy.cuda.Device().synchronize()
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, calls in contenders.items():
            start.record()
            for i in range(launches):
                calls[i % len(calls)]()
            end.record()
            end.synchronize()
            times[name].append(cupy.cuda.get_elapsed_time(start, end) / launches)
    return {name: float(np.median(t)) for name, t in times.items()}


def rotated_us(calls, launches: int, repeats: int = 10, warmup_ms: float = 20.0) -> float:
    """Median GPU microseconds per call: `bench` of `launches` calls a repeat, rotating through `calls`
    (callables on operand copies that together exceed the L2, so none finds its inputs cached)."""
    def run():
        for i in range(launches):
            calls[i % len(calls)]()
    return bench(run, repeats=repeats, warmup_ms=warmup_ms).median * 1e3 / launches

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

cuBLAS is timed by the same function with the same inputs, with like-for-like precision (`cublas_call`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
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


def numpy_dtype(name: str):
    """The NumPy dtype of an input dtype name; bfloat16 comes from the ml_dtypes package when NumPy lacks it."""
    try:
        return np.dtype(name)
    except TypeError:
        try:
            import ml_dtypes
            return np.dtype(getattr(ml_dtypes, name))
        except (ImportError, AttributeError, TypeError):
            raise TypeError(f"{name} arrays need the ml_dtypes package (pip install ml-dtypes)") from None


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


def _spin(device_id: int, seconds: float) -> None:
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
    _spin(device_id, min(0.2, 1e-3 + 1.5 * repeats * (host_per_call + 30e-6)))
    for s, e in zip(starts, ends):
        if flush is not None:
            flush()
        s.record(stream)
        fn()
        e.record(stream)
    ends[-1].synchronize()
    times = tuple(float(cupy.cuda.get_elapsed_time(s, e)) for s, e in zip(starts, ends))
    return Timing(times, warmup + 2)


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
# registers, threads, shared memory bytes, resident blocks, shared memory the system reserves per block.
SM_LIMITS = {
    70: (65536, 2048, 96 << 10, 32, 0), 75: (65536, 1024, 64 << 10, 16, 0),
    80: (65536, 2048, 164 << 10, 32, 1024), 86: (65536, 1536, 100 << 10, 16, 1024),
    89: (65536, 1536, 100 << 10, 24, 1024), 90: (65536, 2048, 228 << 10, 32, 1024),
}


def sm_limits(cc: int, attributes: dict | None = None) -> tuple[int, int, int, int, int]:
    base = SM_LIMITS.get(cc) or SM_LIMITS[max(c for c in SM_LIMITS if c <= max(cc, 70))]
    if not attributes:
        return base
    keys = ("MaxRegistersPerMultiprocessor", "MaxThreadsPerMultiProcessor", "MaxSharedMemoryPerMultiprocessor",
            "MaxBlocksPerMultiprocessor", "ReservedSharedMemoryPerBlock")
    return tuple(int(attributes.get(key) or value) for key, value in zip(keys, base))


def occupancy(threads: int, registers: int, smem: int, limits) -> tuple[int, float]:
    """(resident blocks per SM, fraction of the SM's warp slots in use) from the launch and ptxas's counts."""
    regs_sm, threads_sm, smem_sm, blocks_sm, reserved = limits
    warps = -(-threads // 32)
    by_threads = threads_sm // (warps * 32)
    regs_per_warp = -(-max(registers, 1) * 32 // 256) * 256  # registers are allocated per warp, 256 at a time
    by_regs = (regs_sm // regs_per_warp) // warps
    by_smem = smem_sm // (smem + reserved) if smem + reserved > 0 else blocks_sm
    blocks = max(0, min(by_threads, by_regs, by_smem, blocks_sm))
    return blocks, blocks * warps * 32 / threads_sm


# ---- one variant at one shape, on the current device ---------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """How points are measured (the same for every point and for cuBLAS)."""
    repeats: int = 20
    warmup_ms: float = 25.0
    flush: str = "l2"  # "l2": overwrite L2 before each repeat; "rotate": cycle through input copies; "none"
    max_seconds: float = 2.0  # per point: slower kernels get fewer repeats (at least 3)
    check: bool = True  # correctness at the shape and at its ragged neighbour
    seed: int = 0

    def __post_init__(self):
        if self.flush not in ("l2", "rotate", "none"):
            raise ValueError(f"flush must be 'l2', 'rotate' or 'none', not {self.flush!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, not {self.repeats}")


def ragged_neighbour(m: int, n: int, k: int) -> tuple[int, int, int]:
    """A shape next to (m, n, k) that no tile divides and that breaks 16-byte alignment along K and N:
    partial tiles at every edge and the API's padding path, at the same scale as the swept shape."""
    return m + 1, (n - 1 if n > 2 else n + 1), k + 1


def _timing_fields(t: Timing, shape) -> dict:
    return {"time_ms": t.median, "time_q1_ms": t.q1, "time_q3_ms": t.q3, "spread": t.spread,
            "repeats": t.repeats, "tflops": tflops(*shape, t.median), "times_ms": list(t.times_ms)}


class Workbench:
    """Inputs, float64 references and cuBLAS baselines for one (shape, dtype, layout) on the current device.

    Inputs are uniform in [-1, 1) from a fixed seed, so every device of a multi-GPU sweep and every run
    sees the same numbers. Column-major families get Fortran-ordered operands: they are timed on the
    problem as stated, not on its transpose."""

    def __init__(self, shape, dtype: str, layout: str, settings: Settings):
        import cupy
        from . import verify
        self.shape, self.dtype, self.layout, self.settings = tuple(shape), dtype, layout, settings
        self.np_dtype = numpy_dtype(dtype)
        self.device_id = cupy.cuda.Device().id
        self.order = "F" if layout == "col" else "C"
        m, n, k = self.shape
        seed = settings.seed
        self.a = verify.random_operand((m, k), self.np_dtype, seed, self.order)
        self.b = verify.random_operand((k, n), self.np_dtype, seed + 1, self.order)
        self.c = cupy.empty((m, n), dtype=self.np_dtype, order=self.order)
        self.copies = [(self.a, self.b)]
        if settings.flush == "rotate":
            l2 = int(cupy.cuda.Device().attributes.get("L2CacheSize", 0)) or 64 << 20
            count = min(16, 1 + -(-2 * l2 // (self.a.nbytes + self.b.nbytes)))
            self.copies += [(self.a.copy(order=self.order), self.b.copy(order=self.order))
                            for _ in range(count - 1)]
        self.flush = L2Flush(self.device_id) if settings.flush == "l2" else None
        self._reference = None
        self._ragged = None
        self._baselines: dict[str, dict] = {}

    def reference(self):
        if self._reference is None:
            from . import verify
            self._reference = verify.reference(self.a, self.b)
        return self._reference

    def ragged(self):
        """(shape, a, b, c, (ref, scale)) of the ragged neighbour, made on first use."""
        if self._ragged is None:
            import cupy
            from . import verify
            m, n, k = ragged_neighbour(*self.shape)
            a = verify.random_operand((m, k), self.np_dtype, self.settings.seed + 2, self.order)
            b = verify.random_operand((k, n), self.np_dtype, self.settings.seed + 3, self.order)
            c = cupy.empty((m, n), dtype=self.np_dtype, order=self.order)
            self._ragged = ((m, n, k), a, b, c, verify.reference(a, b))
        return self._ragged

    def _verdict(self, call, out, ref_scale, acc: str, k: int):
        import cupy
        from . import verify
        out.fill(cupy.nan)  # a kernel that skips an element leaves NaN behind
        call()
        cupy.cuda.get_current_stream().synchronize()
        ref, scale = ref_scale
        return verify.check(out, ref, scale, self.dtype, acc, k)

    def _bench(self, calls) -> Timing:
        s = self.settings
        index = [0]

        def rotating():
            call = calls[index[0] % len(calls)]
            index[0] += 1
            return call()
        return bench(calls[0] if len(calls) == 1 else rotating, repeats=s.repeats, warmup_ms=s.warmup_ms,
                     flush=self.flush, max_seconds=s.max_seconds)

    def baseline(self, acc: str) -> dict:
        """The cuBLAS row for this precision: name, status, timing fields, error. Measured once."""
        if acc not in self._baselines:
            name = BASELINES.get((self.dtype, acc), "")
            try:
                calls = [cublas_call(a, b, self.c, acc) for a, b in self.copies]
                verdict = self._verdict(calls[0], self.c, self.reference(), acc, self.shape[2]) \
                    if self.settings.check else None
                result = {"variant": name, "status": "ok", "reason": "",
                          "error": verdict.worst_ratio if verdict else None,
                          **_timing_fields(self._bench(calls), self.shape)}
            except Exception as e:  # cuBLAS refusing a precision must not stop the sweep
                if _is_cuda_error(e):
                    raise
                result = {"variant": name, "status": "launch_failed", "reason": f"{type(e).__name__}: {e}"}
            self._baselines[acc] = result
        return self._baselines[acc]

    def measure(self, variant) -> dict:
        """Record fields for one variant: status and reason, correctness, timing and % of cuBLAS.

        Configuration errors found only on the device (shared memory above this GPU's limit, a newer
        compute capability needed) make the point `invalid`; a CUDA error propagates to the caller, which
        decides whether the context survived."""
        from . import api
        from .errors import CompileError, ConfigError, CupyGemmError, DeviceError
        base = self.baseline(variant.acc)
        fields = {"cublas": base["variant"], "cublas_ms": base.get("time_ms")}
        try:
            plans = [api.plan(a, b, variant=variant, out=self.c) for a, b in self.copies]
        except (ConfigError, DeviceError) as e:
            return {**fields, "status": "invalid", "reason": str(e)}
        except CompileError as e:
            return {**fields, "status": "compile_failed", "reason": str(e)}
        except CupyGemmError as e:
            return {**fields, "status": "invalid", "reason": str(e)}
        if self.settings.check:
            verdict = self._verdict(plans[0], self.c, self.reference(), variant.acc, self.shape[2])
            shape_r, a, b, c, ref_r = self.ragged()
            ragged = self._verdict(api.plan(a, b, variant=variant, out=c), c, ref_r, variant.acc, shape_r[2])
            fields.update(error=verdict.worst_ratio, ragged_error=ragged.worst_ratio,
                          ragged_shape="x".join(map(str, shape_r)))
            for where, v in ((self.shape, verdict), (shape_r, ragged)):
                if not v.ok:
                    return {**fields, "status": "incorrect",
                            "reason": f"at {'x'.join(map(str, where))}: {v}"}
        timing = self._bench(plans)
        fields.update(status="ok", reason="", **_timing_fields(timing, self.shape))
        if fields["cublas_ms"]:
            fields["pct_cublas"] = 100.0 * fields["cublas_ms"] / timing.median
        return fields


def _is_cuda_error(e: BaseException) -> bool:
    import cupy
    return isinstance(e, (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError))


def context_usable() -> bool:
    """False after a sticky CUDA error (illegal address, launch failure): the process must be replaced."""
    import cupy
    try:
        cupy.cuda.runtime.deviceSynchronize()
        probe = cupy.ones(4, dtype=cupy.float32)
        return float((probe + 1).sum()) == 8.0
    except Exception:
        return False

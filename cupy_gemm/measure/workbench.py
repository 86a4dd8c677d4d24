"""The measurement of one variant at one problem size on the current GPU: inputs, float64 references, the
cuBLAS baseline, correctness at the shape and at a ragged neighbour, then the timing."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import api, verify
from ..errors import CompileError, ConfigError, CupyGemmError, DeviceError
from .baselines import BASELINES, cublas_call
from .timing import L2Flush, Timing, bench, tflops


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
    problem as stated, not on its transpose. B lies as the family reads it (`b_layout`, Family.b_layout):
    a family reading B K-major gets a column-major B, not a copy of a row-major one on every call."""

    def __init__(self, shape, dtype: str, layout: str, settings: Settings, b_layout: str | None = None):
        import cupy
        self.shape, self.dtype, self.layout, self.settings = tuple(shape), dtype, layout, settings
        self.np_dtype = numpy_dtype(dtype)
        self.device_id = cupy.cuda.Device().id
        self.order = "F" if layout == "col" else "C"
        self.b_order = "F" if (b_layout or layout) == "col" else "C"
        m, n, k = self.shape
        seed = settings.seed
        self.a = verify.random_operand((m, k), self.np_dtype, seed, self.order)
        self.b = verify.random_operand((k, n), self.np_dtype, seed + 1, self.b_order)
        self.c = cupy.empty((m, n), dtype=self.np_dtype, order=self.order)
        self.copies = [(self.a, self.b)]
        if settings.flush == "rotate":
            l2 = int(cupy.cuda.Device().attributes.get("L2CacheSize", 0)) or 64 << 20
            count = min(16, 1 + -(-2 * l2 // (self.a.nbytes + self.b.nbytes)))
            self.copies += [(self.a.copy(order=self.order), self.b.copy(order=self.b_order))
                            for _ in range(count - 1)]
        self.flush = L2Flush(self.device_id) if settings.flush == "l2" else None
        self._reference = None
        self._ragged: dict[tuple, tuple] = {}
        self._baselines: dict[str, dict] = {}

    def reference(self):
        if self._reference is None:
            self._reference = verify.reference(self.a, self.b)
        return self._reference

    def ragged(self, max_rows: int | None = None):
        """(shape, a, b, c, (ref, scale)) of the ragged neighbour, made on first use. For a variant serving
        at most max_rows rows (or columns) the neighbour keeps the swept M where M + 1 would be refused."""
        m, n, k = ragged_neighbour(*self.shape)
        if max_rows is not None and min(m, n) > max_rows:
            m = self.shape[0]
        if (m, n, k) not in self._ragged:
            import cupy
            a = verify.random_operand((m, k), self.np_dtype, self.settings.seed + 2, self.order)
            b = verify.random_operand((k, n), self.np_dtype, self.settings.seed + 3, self.b_order)
            c = cupy.empty((m, n), dtype=self.np_dtype, order=self.order)
            self._ragged[m, n, k] = ((m, n, k), a, b, c, verify.reference(a, b))
        return self._ragged[m, n, k]

    def _verdict(self, call, out, ref_scale, acc: str, k: int):
        import cupy
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
            shape_r, a, b, c, ref_r = self.ragged(variant.max_rows())
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

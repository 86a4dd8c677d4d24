"""The two jobs of a sweep, as plain functions of plain data so that any worker can run them: a local
worker process (cupy_gemm.measure.pool) or a Dask worker (cupy_gemm.measure.cluster).

    compile_point(spec, arch)       NVRTC only, never touches a GPU: ptxas's resources, or why it failed
    Measurer(settings).measure(spec, shape)   on the current GPU: the Record fields of one point
"""
from __future__ import annotations

import time

from .. import registry
from .workbench import Settings, Workbench, context_usable


def short_error(e: BaseException, limit: int = 600) -> str:
    """A compile error's NVRTC lines and where the source was saved; other errors as they are."""
    text = str(e)
    lines = text.splitlines()
    if len(lines) > 4:
        keep = [lines[0]] + [ln for ln in lines[1:] if "error" in ln][:3] + [ln for ln in lines if "source:" in ln][-1:]
        text = "\n".join(dict.fromkeys(keep))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compile_point(spec: tuple, arch: str) -> dict:
    """Compile a variant (registry.Variant.to_spec()) for `arch`: {"ok", "resources" | "reason", "arch",
    "seconds"}. The compile cache on disk is what a measuring worker on the same host then loads from."""
    from .. import compile as compile_mod
    start = time.perf_counter()
    try:
        res = compile_mod.compile_variant(registry.from_spec(spec), arch).resources
        payload = {"ok": True, "resources": {"registers": res.registers, "static_smem": res.static_smem,
                                             "local": res.local, "spill_stores": res.spill_stores,
                                             "spill_loads": res.spill_loads}}
    except Exception as e:
        payload = {"ok": False, "reason": short_error(e)}
    payload.update(arch=arch, seconds=time.perf_counter() - start)
    return payload


class ContextLost(Exception):
    """A sticky CUDA error (illegal address, …) poisoned this process's context: its owner must end it."""

    def __init__(self, fields: dict):
        super().__init__(fields["reason"])
        self.fields = fields


class Measurer:
    """Measures points on the current GPU, keeping the inputs and references of the last shape."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.bench, self.bench_key = None, None

    def measure(self, spec: tuple, shape) -> dict:
        """Record fields of one point (with "baseline": the cuBLAS row of its precision). Raises ContextLost
        when the CUDA context did not survive; every other failure is a `launch_failed` record."""
        import cupy
        try:
            variant = registry.from_spec(spec)
            fam = variant.family
            key = (tuple(shape), variant.dtype, fam.layout, fam.b_layout)
            if key != self.bench_key:
                self.bench = self.bench_key = None
                cupy.get_default_memory_pool().free_all_blocks()
                self.bench = Workbench(shape, variant.dtype, fam.layout, self.settings, fam.b_layout)
                self.bench_key = key
            fields = self.bench.measure(variant)
            fields["baseline"] = self.bench.baseline(variant.acc)
            return fields
        except Exception as e:
            fields = {"status": "launch_failed", "reason": f"{type(e).__name__}: {e}"}
            if not context_usable():
                fields["reason"] += " (the CUDA context was lost; the GPU worker was replaced)"
                raise ContextLost(fields) from None
            if isinstance(e, MemoryError):
                self.bench = self.bench_key = None
                cupy.get_default_memory_pool().free_all_blocks()
            return fields

"""Parameter sweeps: compile points (cupy_gemm.measure.space) on workers (NVRTC needs no GPU) and measure
them on one or more GPUs, locally or on a Dask cluster. Every (configuration, shape) becomes a Record — `ok`,
`invalid` (with the rule that failed), `compile_failed`, `launch_failed` or `incorrect` — and the sweep
goes on.

    from cupy_gemm.measure import sweep
    result = sweep.run("sliced_k", ["1024x1024x1024"], {"BK": [8, 16, 32]}, dtype="float32")
    for record, tied in result.ranked():
        print(record.variant, record.time_ms, "≈" if tied else "")

Compiles start at once and the GPUs start measuring as soon as the first kernels are ready. The local
runner starts its workers with `spawn`, so scripts that sweep need the `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

from ..families.base import Family
from .local import LocalRunner
from .results import Record
from .runner import runner_for
from .schedule import SweepResult
from .shapes import parse_shapes
from .space import Point, points
from .workbench import Settings


def measure(pts: Iterable[Point], shapes, *, devices=None, scheduler: str | None = None,
            settings: Settings | None = None, compile_workers: int | None = None, compile_timeout: float = 300.0,
            gpu_timeout: float = 600.0, resume: Iterable[Record] = (),
            on_event: Callable[[str, object], None] | None = None, **settings_kw) -> SweepResult:
    """Compile and measure points (from `space.points` or `space.catalogue_points`) on one or more GPUs.

    shapes      (M, N, K) tuples or 'MxNxK' strings for every point, or {dtype: shapes}.
    devices     GPU ids, or "all"; default: the current device. One worker process per GPU; same model.
    scheduler   a Dask scheduler's address (tcp://HOST:8786): measure on its workers instead, one per GPU;
                each GPU model measures every point and is ranked on its own (docs/SWEEP.md).
    settings    workbench.Settings: repeats, warm-up, L2 flush or input rotation, correctness checks; or
                its fields as keywords (repeats=10, flush="rotate", …).
    resume      records of an earlier run (results.read(path)[1]): points already measured there with the
                same rendered source on the same GPU model are kept instead of measured again.
    on_event    on_event(kind, data) as things happen: "start" (dict of counts), "compiled" (dict: point,
                ok, seconds, reason), "record" (a kernel Record), "baseline" (a cuBLAS Record), "device"
                (dict: device, state = ready | restarted | failed, message).
    """
    runner = runner_for(devices, scheduler, compile_workers=compile_workers, compile_timeout=compile_timeout,
                        gpu_timeout=gpu_timeout)
    return runner.measure(list(pts), shapes, settings or Settings(**settings_kw), resume, on_event)


def compile_only(pts: Iterable[Point], arch: str, shapes=None, *, compile_workers: int | None = None,
                 compile_timeout: float = 300.0, on_event=None) -> SweepResult:
    """Compile points for `arch` without a GPU: records with status `compiled` (registers, shared memory,
    spills, an occupancy estimate for that architecture), `compile_failed` or `invalid`."""
    runner = LocalRunner(measure=False, compile_workers=compile_workers, compile_timeout=compile_timeout)
    return runner.compile(list(pts), arch, shapes or [(0, 0, 0)], on_event)


def run(family: str | Family, shapes, grid: Mapping[str, Iterable[int]] | None = None, dtype: str | None = None,
        acc: str | None = None, *, devices=None, scheduler: str | None = None, settings: Settings | None = None,
        resume: Iterable[Record] = (), on_event=None, compile_workers: int | None = None,
        compile_timeout: float = 300.0, gpu_timeout: float = 600.0, **settings_kw) -> SweepResult:
    """Sweep a family's parameter grid at one or more shapes: `space.points` then `measure`. Settings' fields
    (repeats, warmup_ms, flush, max_seconds, check, seed) may be passed as keywords."""
    settings = settings or Settings(**settings_kw)
    pts = points(family, grid, dtype, acc)
    shapes = parse_shapes([shapes] if isinstance(shapes, str) else
                          [s if isinstance(s, str) else "x".join(map(str, s)) for s in shapes], pts[0].dtype)
    return measure(pts, shapes, devices=devices, scheduler=scheduler, settings=settings,
                   compile_workers=compile_workers, compile_timeout=compile_timeout, gpu_timeout=gpu_timeout,
                   resume=resume, on_event=on_event)

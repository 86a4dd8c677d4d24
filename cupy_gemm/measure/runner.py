"""What runs a sweep's work, as an interface with two implementations:

    LocalRunner  (cupy_gemm.measure.local)    this machine's GPUs, one process per GPU; nothing to install
    DaskRunner   (cupy_gemm.measure.cluster)  the workers of a Dask scheduler, one per GPU, on any hosts

Both take the same points, shapes and settings and return the same SweepResult; neither decides what a
result means (cupy_gemm.measure.schedule does). `runner_for` picks one from what the caller gave.
"""
from __future__ import annotations

from typing import Callable, Iterable, Protocol

from .results import Record
from .schedule import GPUModel, SweepResult
from .workbench import Settings


class Runner(Protocol):
    def gpu_models(self) -> list[GPUModel]:
        """The GPU models that will measure (each one measures every point and is ranked on its own)."""

    def measure(self, points, shapes, settings: Settings, resume: Iterable[Record] = (),
                emit: Callable[[str, object], None] | None = None) -> SweepResult:
        """Compile and measure `points` at `shapes`; see cupy_gemm.measure.sweep.measure."""


def runner_for(devices=None, scheduler: str | None = None, *, compile_workers: int | None = None,
               compile_timeout: float = 300.0, gpu_timeout: float = 600.0) -> Runner:
    """The Dask runner when a scheduler address is given (devices must then be None: the cluster's workers
    are the GPUs), else the local runner on `devices`."""
    if scheduler:
        if devices is not None:
            raise ValueError("devices and a scheduler exclude each other: on a cluster, every worker is one GPU")
        from .cluster import DaskRunner
        return DaskRunner(scheduler, compile_timeout=compile_timeout, gpu_timeout=gpu_timeout)
    from .local import LocalRunner
    return LocalRunner(devices, compile_workers=compile_workers, compile_timeout=compile_timeout,
                       gpu_timeout=gpu_timeout)

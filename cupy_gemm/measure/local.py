"""The embedded runner: the GPUs of this machine, one measuring process per GPU, and NVRTC compile processes
on the CPUs, nothing to install. Measuring in child processes keeps a kernel that corrupts its CUDA context
(illegal address) or hangs from ending the sweep: the worker is replaced and the point recorded as
`launch_failed`. Workers start with the `spawn` method (children must not inherit a CUDA context), so
scripts that sweep need the usual `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

from .. import devices
from ..errors import DeviceError
from . import provenance
from .occupancy import sm_limits
from .pool import Pool, compile_worker, cpu_count, device_worker
from .schedule import GPUModel, Sweep, SweepResult
from .workbench import Settings


class LocalRunner:
    """A runner (see cupy_gemm.measure.runner) on `devices` (GPU ids, "all", or None: the current GPU) of
    this process; with measure=False only the compile processes (no GPU needed)."""

    def __init__(self, devices_=None, *, measure: bool = True, compile_workers: int | None = None,
                 compile_timeout: float = 300.0, gpu_timeout: float = 600.0):
        self.devices = devices.device_ids(devices_) if measure else []
        self.compile_workers, self.compile_timeout, self.gpu_timeout = compile_workers, compile_timeout, gpu_timeout

    def gpu_model(self) -> GPUModel:
        """The one GPU model of this run: a sweep's local GPUs must be the same model."""
        import cupy
        found = {(info["name"], info["cc"]): info for info in (provenance.here(d) for d in self.devices)}
        if len(found) > 1:
            raise DeviceError(f"a sweep's GPUs must be the same model; got {sorted(found)}")
        info = next(iter(found.values()))
        return GPUModel(info["name"], info["cc"], sm_limits(info["cc"], cupy.cuda.Device(self.devices[0]).attributes),
                        info["host"], info["driver"])

    def gpu_models(self) -> list[GPUModel]:
        return [self.gpu_model()]

    def measure(self, points, shapes, settings: Settings, resume=(), emit=None) -> SweepResult:
        sweep = Sweep(points, shapes, self.gpu_model(), settings=settings, resume=resume, emit=emit)
        self.execute(sweep, settings)
        meta = provenance.metadata(self.devices, settings=settings.__dict__.copy())
        return SweepResult(sweep.ordered_records(), sweep.points, sweep.order, meta)

    def compile(self, points, arch: str, shapes, emit=None) -> SweepResult:
        sweep = Sweep(points, shapes, GPUModel.for_arch(arch), arch=arch, measure=False, emit=emit)
        self.execute(sweep, Settings())
        meta = provenance.metadata((), settings=Settings().__dict__.copy(), arch=arch)
        return SweepResult(sweep.ordered_records(), sweep.points, sweep.order, meta)

    def execute(self, sweep: Sweep, settings: Settings) -> None:
        sweep.start()
        if sweep.compile_queue:
            _Loop(self, sweep, settings).run()


class _Loop:
    def __init__(self, runner: LocalRunner, sweep: Sweep, settings: Settings):
        self.runner, self.sweep, self.settings = runner, sweep, settings
        self.compile_queue = list(sweep.compile_queue)
        self.gpu_queue: list[tuple] = []
        self.fatal: list[str] = []
        self.devices_ready = 0

    def run(self) -> None:
        import multiprocessing
        from multiprocessing import connection
        r, sweep = self.runner, self.sweep
        ctx = multiprocessing.get_context("spawn")  # children must not inherit a CUDA context
        workers = r.compile_workers or max(1, min(32, cpu_count() - len(r.devices)))
        cpool = Pool(ctx, compile_worker, [()] * min(workers, len(self.compile_queue)), r.compile_timeout)
        dpool = Pool(ctx, device_worker, [(d, self.settings) for d in r.devices], r.gpu_timeout) \
            if r.devices else None
        pools = [cpool] + ([dpool] if dpool else [])
        try:
            while self.compile_queue or self.gpu_queue or sweep.later or any(pool.busy() for pool in pools):
                for w in cpool.idle():
                    if self.compile_queue:
                        pi = self.compile_queue.pop(0)
                        if not cpool.submit(w, pi, sweep.compile_task(pi)):
                            self.compile_queue.insert(0, pi)
                for w in dpool.idle() if dpool else ():
                    if self.gpu_queue:
                        pi, shape = self.gpu_queue.pop(0)
                        if not dpool.submit(w, (pi, shape), sweep.measure_task(pi, shape)):
                            self.gpu_queue.insert(0, (pi, shape))
                ready = connection.wait([x for pool in pools for x in pool.waitables()], timeout=0.25)
                for event in cpool.collect(ready) + cpool.check_timeouts():
                    self._on_compile(event)
                if dpool:
                    for event in dpool.collect(ready) + dpool.check_timeouts():
                        self._on_device(event)
                if sweep.later and not self.compile_queue and not cpool.busy():
                    self.gpu_queue += sweep.take_later()
                self._fail_orphans(cpool, dpool)
        finally:
            for pool in pools:
                pool.close()

    def _on_compile(self, event) -> None:
        kind, _, pi, payload = event
        if kind == "retired":
            self.fatal.append(f"compiler worker: {payload}")
        elif kind == "lost":
            self.gpu_queue += self.sweep.compile_lost(pi, payload)
        elif kind == "result":
            self.gpu_queue += self.sweep.on_compiled(pi, payload)

    def _on_device(self, event) -> None:
        kind, worker, task, payload = event
        device = worker.args[0]
        if kind == "ready":
            self.devices_ready += 1
            self.sweep.emit("device", {"device": payload["device"], "state": "ready", "message": payload["name"]})
        elif kind == "retired":  # follows "fatal" once the process has ended
            self.fatal.append(str(payload))
            self.sweep.emit("device", {"device": device, "state": "failed", "message": str(payload)})
        elif kind == "lost":
            self.sweep.emit("device", {"device": device, "state": "restarted", "message": payload})
            self.sweep.measure_lost(*task, f"GPU {device}: {payload}", device)
        elif kind == "result":
            self.sweep.on_measured(*task, payload)

    def _fail_orphans(self, cpool: Pool, dpool: Pool | None) -> None:
        sweep = self.sweep
        if self.compile_queue and not cpool.live():
            reason = "no compiler worker could run: " + "; ".join(self.fatal[-3:])
            while self.compile_queue:
                self.gpu_queue += sweep.compile_lost(self.compile_queue.pop(0), reason)
        if dpool is not None and not dpool.live() and (self.gpu_queue or sweep.later):
            if not self.devices_ready:
                raise DeviceError("no GPU worker could start: " + "; ".join(self.fatal[-3:]))
            reason = "no GPU worker left: " + "; ".join(self.fatal[-3:])
            for pi, shape in self.gpu_queue + sweep.take_later():
                sweep.measure_lost(pi, shape, reason)
            self.gpu_queue = []

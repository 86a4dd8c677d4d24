"""The Dask runner: a sweep's measuring workers are the workers of a Dask scheduler, one per GPU (each started
with its own CUDA_VISIBLE_DEVICES), on any number of hosts; compiles run on any worker. Needs the `cluster`
extra (Dask distributed); docs/SWEEP.md shows the set-up.

What it guarantees, as the local runner does:
  * each GPU worker runs one measurement at a time, so timings never share a GPU;
  * every record carries its provenance (host, GPU model, driver); workers are grouped by GPU model, each
    model measures every point, and models are never ranked together (SweepResult.ranked(gpu=...));
  * a worker that dies mid-measurement loses nothing: its point goes back to the queue, and is recorded
    `launch_failed` (with the reason) only if it ends a worker twice; a worker that hangs past the GPU
    timeout, or whose CUDA context a kernel broke, is restarted (workers under a nanny, the default);
  * an unreachable scheduler is a DeviceError naming the address.
"""
from __future__ import annotations

import os
import platform
import time

from .. import devices
from ..errors import DeviceError
from . import provenance
from .occupancy import sm_limits
from .schedule import GPUModel, Sweep, SweepResult
from .tasks import ContextLost, Measurer, compile_point
from .workbench import Settings

MAX_STRIKES = 2  # a point that ends this many workers is recorded launch_failed instead of tried again
RESTART_GRACE = 30.0  # seconds to wait for a model's restarted worker before failing what it had left


# ---- what runs on a worker ----------------------------------------------------------------------------

def probe_gpu(dask_worker=None) -> dict | None:
    """This worker's GPU (its CUDA_VISIBLE_DEVICES' first) with its provenance and SM limits; None without.
    (Client.run hands the worker itself to a function taking `dask_worker`.)"""
    try:
        devices.gpu_count()
    except DeviceError:
        return None
    import cupy
    info = provenance.here(0)
    info["limits"] = list(sm_limits(info["cc"], cupy.cuda.Device(0).attributes))
    info["device"] = _physical_id()
    return info


def _physical_id() -> int:
    """The GPU's id on its host (from CUDA_VISIBLE_DEVICES), so two workers of one host are told apart."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


_measurers: dict = {}


def measure_on_worker(spec: tuple, shape, settings: Settings) -> dict:
    """tasks.Measurer on this worker's GPU, keeping inputs between calls of the same shape."""
    measurer = _measurers.setdefault(settings, Measurer(settings))
    try:
        fields = measurer.measure(spec, shape)
    except ContextLost as lost:  # the runner restarts this worker: its context is gone
        _measurers.clear()
        fields = {**lost.fields, "worker_exit": True}
    return {**fields, "device": _physical_id(), "host": platform.node(), "driver": devices.driver_version()}


# ---- the runner ---------------------------------------------------------------------------------------

class DaskRunner:
    """A runner (see cupy_gemm.measure.runner) on the workers of the Dask scheduler at `address`.

    `client`, `probe` and `measure_fn` stand in for the real ones in tests: a distributed.Client already
    connected, probe(dask_worker) -> worker info as probe_gpu, measure_fn(spec, shape, settings) -> record fields."""

    def __init__(self, address: str | None = None, *, client=None, probe=None, measure_fn=None,
                 compile_timeout: float = 300.0, gpu_timeout: float = 600.0, connect_timeout: float = 10.0,
                 poll: float = 0.25):
        self.address, self._client = address, client
        self.probe, self.measure_fn = probe or probe_gpu, measure_fn or measure_on_worker
        self.compile_timeout, self.gpu_timeout, self.connect_timeout, self.poll = \
            compile_timeout, gpu_timeout, connect_timeout, poll
        self.gpus: dict[str, dict] = {}  # worker address -> probe_gpu() info
        self.others: set[str] = set()  # workers without a GPU: compiles only

    def client(self):
        if self._client is None:
            try:
                import distributed
            except ImportError:
                raise DeviceError("--scheduler needs Dask distributed: pip install 'cupy-gemm[cluster]'") from None
            try:
                self._client = distributed.Client(self.address, timeout=self.connect_timeout, set_as_default=False)
            except (OSError, TimeoutError) as e:
                raise DeviceError(f"cannot reach the Dask scheduler at {self.address}: {e}".rstrip(": ")) from None
        return self._client

    def alive(self) -> set[str]:
        client = self.client()
        try:
            info = client.scheduler_info(n_workers=-1)  # newer versions list only a few workers by default
        except TypeError:  # older distributed: every worker, no such argument
            info = client.scheduler_info()
        return set(info["workers"])

    def refresh(self) -> set[str]:
        """Probe workers that joined (a restarted worker comes back under a new address); forget those gone."""
        alive = self.alive()
        for addr in set(self.gpus) - alive:
            del self.gpus[addr]
        self.others &= alive
        new = sorted(alive - set(self.gpus) - self.others)
        if new:
            for addr, info in self.client().run(self.probe, workers=new, on_error="return").items():
                if isinstance(info, dict):
                    self.gpus[addr] = info
                else:
                    self.others.add(addr)
        return alive

    def gpu_models(self) -> list[GPUModel]:
        self.refresh()
        if not self.gpus:
            raise DeviceError(f"no GPU worker at the Dask scheduler {self.address or ''}: start one `dask worker` "
                              f"per GPU with CUDA_VISIBLE_DEVICES set (docs/SWEEP.md)")
        models: dict[tuple, GPUModel] = {}
        for info in self.gpus.values():
            models.setdefault((info["name"], info["cc"]), GPUModel(info["name"], info["cc"], tuple(info["limits"]),
                                                                  info["host"], info["driver"]))
        return list(models.values())

    def measure(self, points, shapes, settings: Settings, resume=(), emit=None) -> SweepResult:
        models = self.gpu_models()
        resume = list(resume or ())
        sweeps = {m.name: Sweep(points, shapes, m, settings=settings, resume=resume, emit=emit) for m in models}
        for sweep in sweeps.values():
            sweep.start()
        _ClusterLoop(self, sweeps, settings).run()
        seen, records = set(), []
        for sweep in sweeps.values():  # each model's records; what --resume kept appears once
            for rec in sweep.ordered_records():
                if id(rec) not in seen:
                    seen.add(id(rec))
                    records.append(rec)
        meta = provenance.metadata([{k: v for k, v in info.items() if k != "limits"} | {"worker": addr}
                                    for addr, info in sorted(self.gpus.items())],
                                   settings=settings.__dict__.copy(), scheduler=self.address or "")
        first = next(iter(sweeps.values()))
        return SweepResult(records, first.points, first.order, meta)


class _ClusterLoop:
    """Compiles as Dask futures on any worker; measurements handed out one at a time per GPU worker of the
    right model, so that a worker's death is noticed and its point re-queued."""

    def __init__(self, runner: DaskRunner, sweeps: dict[str, Sweep], settings: Settings):
        self.runner, self.sweeps, self.settings = runner, sweeps, settings
        self.client = runner.client()
        self.compiling: dict = {}  # future -> (model, point index, submitted at)
        self.queues: dict[str, list] = {name: [] for name in sweeps}
        self.busy: dict[str, tuple] = {}  # worker -> (future, model, (pi, shape), started at)
        self.strikes: dict[tuple, int] = {}
        self.gone_since: dict[str, float] = {}
        for name, sweep in sweeps.items():
            for pi in sweep.compile_queue:
                self._compile(name, pi)

    def _compile(self, model: str, pi: int) -> None:
        spec, arch = self.sweeps[model].compile_task(pi)
        future = self.client.submit(compile_point, spec, arch, pure=False)
        self.compiling[future] = (model, pi, time.monotonic())

    def _work_left(self) -> bool:
        return bool(self.compiling or self.busy or any(self.queues.values())
                    or any(s.later for s in self.sweeps.values()))

    def run(self) -> None:
        import distributed
        try:
            while self._work_left():
                alive = self.runner.refresh()
                self._check_busy(alive)
                self._dispatch()
                futures = list(self.compiling) + [b[0] for b in self.busy.values()]
                try:  # wait() asks for the current client: ours is not the process's default
                    with self.client.as_current():
                        distributed.wait(futures, timeout=self.runner.poll, return_when="FIRST_COMPLETED")
                except TimeoutError:  # nothing finished within the poll interval
                    pass
                self._collect_compiles()
                self._collect_measurements()
                for name, sweep in self.sweeps.items():
                    if sweep.later and not any(m == name for m, _, _ in self.compiling.values()):
                        self.queues[name] += sweep.take_later()
                self._fail_orphans()
        finally:
            for future in list(self.compiling) + [b[0] for b in self.busy.values()]:
                future.cancel()

    def _dispatch(self) -> None:
        for addr, info in sorted(self.runner.gpus.items()):
            queue = self.queues.get(info["name"])
            if addr in self.busy or not queue:
                continue
            pi, shape = queue.pop(0)
            spec, shape = self.sweeps[info["name"]].measure_task(pi, shape)
            future = self.client.submit(self.runner.measure_fn, spec, shape, self.settings, workers=[addr],
                                        allow_other_workers=False, pure=False)
            self.busy[addr] = (future, info["name"], (pi, shape), time.monotonic())

    def _check_busy(self, alive: set[str]) -> None:
        now = time.monotonic()
        for addr, (future, model, task, started) in list(self.busy.items()):
            if addr not in alive:
                self._lost(addr, f"the Dask worker {addr} measuring it ended")
            elif now - started > self.runner.gpu_timeout:
                self._restart(addr)
                self._lost(addr, f"timed out after {self.runner.gpu_timeout:g} s on {addr}", retry=False)

    def _lost(self, addr: str, reason: str, retry: bool = True) -> None:
        future, model, (pi, shape), _ = self.busy.pop(addr)
        future.cancel()
        key = (model, pi, shape)
        self.strikes[key] = self.strikes.get(key, 0) + 1
        sweep = self.sweeps[model]
        sweep.emit("device", {"device": addr, "state": "restarted", "message": reason})
        if retry and self.strikes[key] < MAX_STRIKES:
            self.queues[model].insert(0, (pi, shape))  # re-queued: another worker of the model measures it
        else:
            sweep.measure_lost(pi, shape, reason)

    def _restart(self, addr: str) -> None:
        try:  # under a nanny the worker comes back (new address) and refresh() probes it
            self.client.restart_workers([addr], raise_for_error=False)
        except Exception:
            pass

    def _collect_compiles(self) -> None:
        now = time.monotonic()
        for future, (model, pi, since) in list(self.compiling.items()):
            sweep = self.sweeps[model]
            if future.done():
                del self.compiling[future]
                try:
                    self.queues[model] += sweep.on_compiled(pi, future.result())
                except Exception as e:  # KilledWorker: every worker that tried it died
                    self.queues[model] += sweep.compile_lost(pi, f"{type(e).__name__}: {e}")
            elif now - since > self.runner.compile_timeout + self.runner.gpu_timeout:
                # queued behind measurements as well as compiling: generous, but never forever
                del self.compiling[future]
                future.cancel()
                self.queues[model] += sweep.compile_lost(pi, "timed out")

    def _collect_measurements(self) -> None:
        for addr, (future, model, (pi, shape), _) in list(self.busy.items()):
            if not future.done():
                continue
            del self.busy[addr]
            try:
                fields = future.result()
            except Exception as e:
                fields = {"status": "launch_failed", "reason": f"{type(e).__name__}: {e}"}
            if fields.pop("worker_exit", False):
                self._restart(addr)
            self.sweeps[model].on_measured(pi, shape, fields)

    def _fail_orphans(self) -> None:
        """Measurements of a model none of whose workers is left, and none came back within RESTART_GRACE
        seconds (a restarted worker takes a few), are recorded failed."""
        models_alive = {info["name"] for info in self.runner.gpus.values()}
        now = time.monotonic()
        for model, queue in self.queues.items():
            sweep = self.sweeps[model]
            if model in models_alive or not (queue or sweep.later):
                self.gone_since.pop(model, None)
                continue
            if now - self.gone_since.setdefault(model, now) < RESTART_GRACE:
                continue
            for pi, shape in queue + sweep.take_later():
                sweep.measure_lost(pi, shape, f"no {model} worker left at the scheduler")
            queue.clear()

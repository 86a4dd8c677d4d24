"""The local runner's processes: NVRTC compile workers and one measuring worker per GPU, and the pool that
feeds them tasks, replaces a worker that hangs or dies (a kernel that corrupts its CUDA context ends only
its worker) and retires them at the end. cupy_gemm.measure.local schedules the work; this module runs it.
"""
from __future__ import annotations

import os


def _tasks(conn):
    """The (task id, payload) messages a worker receives, until the pool sends None or goes away."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        yield message


def compile_worker(conn) -> None:
    """Compile tasks (spec, arch) -> tasks.compile_point's payload."""
    try:
        from . import tasks
    except BaseException as e:  # report, then end: the pool retires this worker
        conn.send(("fatal", None, f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", None, {"pid": os.getpid()}))
    for task_id, (spec, arch) in _tasks(conn):
        conn.send(("result", task_id, tasks.compile_point(spec, arch)))


def device_worker(conn, device_id: int, settings) -> None:
    """Measure tasks (spec, shape) on one GPU with a tasks.Measurer."""
    try:
        import cupy
        from . import provenance, tasks
        cupy.cuda.Device(device_id).use()
        stream = cupy.cuda.Stream(non_blocking=True)
        info = {"device": device_id, **provenance.here(device_id), "pid": os.getpid()}
    except BaseException as e:
        conn.send(("fatal", None, f"GPU {device_id}: {type(e).__name__}: {e}"))
        return
    conn.send(("ready", None, info))
    measurer = tasks.Measurer(settings)
    with stream:
        for task_id, (spec, shape) in _tasks(conn):
            try:
                fields = measurer.measure(spec, shape)
            except tasks.ContextLost as lost:
                # report and end at once, skipping exit handlers that would touch the dead context
                conn.send(("result", task_id, {**lost.fields, "device": device_id, "worker_exit": True}))
                conn.close()
                os._exit(3)
            fields["device"] = device_id
            conn.send(("result", task_id, fields))


class Worker:
    def __init__(self, slot: int, args: tuple):
        self.slot, self.args = slot, args
        self.proc = self.conn = None
        self.task = None
        self.since = 0.0
        self.ready = self.fatal = self.retired = False
        self.info: dict = {}
        self.strikes = 0
        self.message = ""


class Pool:
    """Worker processes, one task each at a time, so that a hung or crashed task is known, its worker
    killed (by its own handle) and replaced, and the task recorded as failed."""

    def __init__(self, ctx, target, worker_args: list[tuple], task_timeout: float, start_timeout: float = 300.0,
                 max_strikes: int = 3):
        self.ctx, self.target = ctx, target
        self.task_timeout, self.start_timeout, self.max_strikes = task_timeout, start_timeout, max_strikes
        self.workers = [Worker(i, args) for i, args in enumerate(worker_args)]
        for w in self.workers:
            self._start(w)

    def _start(self, w: Worker) -> None:
        import time
        parent, child = self.ctx.Pipe()
        w.proc = self.ctx.Process(target=self.target, args=(child, *w.args), daemon=True)
        w.proc.start()
        child.close()
        w.conn, w.task, w.ready, w.since = parent, None, False, time.monotonic()

    def live(self) -> list[Worker]:
        return [w for w in self.workers if not w.retired]

    def idle(self) -> list[Worker]:
        return [w for w in self.live() if w.ready and w.task is None]

    def busy(self) -> bool:
        return any(w.task is not None for w in self.live())

    def waitables(self) -> list:
        return [x for w in self.live() for x in (w.conn, w.proc.sentinel)]

    def submit(self, w: Worker, task_id, payload) -> bool:
        """Hand a task to an idle worker; False if the worker has just died (its sentinel will say so)."""
        import time
        try:
            w.conn.send((task_id, payload))
        except (OSError, ValueError):
            w.ready = False
            return False
        w.task, w.since = task_id, time.monotonic()
        return True

    def collect(self, ready) -> list[tuple]:
        events = []
        for w in self.live():
            if w.conn in ready or w.proc.sentinel in ready:
                events += self._drain(w)
        return events

    def _drain(self, w: Worker) -> list[tuple]:
        import time
        events = []
        try:
            while w.conn.poll():
                kind, task_id, payload = w.conn.recv()
                if kind == "ready":
                    w.ready, w.info, w.strikes = True, payload, 0
                    events.append(("ready", w, None, payload))
                elif kind == "result":
                    late = time.monotonic() - w.since > self.task_timeout
                    w.task = None
                    if payload.get("worker_exit"):
                        w.ready = False  # ending: no new task until it is replaced
                    if late:  # past its time limit however soon it was collected: the limit decides, not polling
                        events.append(("lost", w, task_id, f"timed out after {self.task_timeout:g} s"))
                    else:
                        events.append(("result", w, task_id, payload))
                else:
                    w.fatal, w.message = True, str(payload)
                    events.append(("fatal", w, None, payload))
        except (EOFError, OSError):
            pass
        if not w.proc.is_alive():
            events += self._replace(w, f"the worker process ended (exit code {w.proc.exitcode})")
        return events

    def check_timeouts(self) -> list[tuple]:
        import time
        now, events = time.monotonic(), []
        for w in self.live():
            if w.task is not None and now - w.since > self.task_timeout:
                events += self._replace(w, f"timed out after {self.task_timeout:g} s")
            elif not w.ready and now - w.since > self.start_timeout:
                w.fatal, w.message = True, f"did not start within {self.start_timeout:g} s"
                events += self._replace(w, w.message)
        return events

    def _replace(self, w: Worker, reason: str) -> list[tuple]:
        task, w.task = w.task, None
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join()
        w.conn.close()
        if not w.ready:  # dying before ready, again and again, is a broken setup: stop restarting it
            w.strikes += 1
        events = [("lost", w, task, reason)] if task is not None else []
        if w.fatal or w.strikes >= self.max_strikes:
            w.retired = True
            events.append(("retired", w, None, w.message or reason))
        else:
            self._start(w)
        return events

    def close(self, grace: float = 5.0) -> None:
        import time
        for w in self.live():
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + grace  # then end whoever is still busy (a long compile, a hung kernel)
        for w in self.live():
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
            w.conn.close()
            w.retired = True


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 2

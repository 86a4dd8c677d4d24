"""GPU time and host cost of a call, each taken so that the other cannot hide in it.

GPU time (`time_rounds`): many calls back to back between two CUDA events. Each call takes the next of
several operand sets (A, B, out), so many that between two uses of one set the GPU has touched more than
twice the L2 cache of other memory: no call finds its operands in L2. A spin kernel holds the stream while
the host enqueues a repeat's calls, so a call that costs the host more than the GPU still shows its GPU
time. The implementations compared take turns repeat by repeat, so clock and temperature drift reaches
them alike.

Host cost (`host_costs`): the wall time of many calls in a loop closed by one synchronisation, reported
as it is (on a shape whose GPU time is longer, the GPU time shows instead); the implementations take
turns, and each keeps its best loop.

Bandwidth (`copy_bandwidth`): bytes read plus bytes written by a large device-to-device copy.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable

from .timing import spin  # holds the stream while the host enqueues

MAX_HOLD = 0.2  # seconds a spin kernel holds the stream at most
ROTATION_FACTOR = 2  # operands rotate through more than this many L2 caches
MOST_SETS = 1024


def rotation_count(set_bytes: int, l2_bytes: int, factor: float = ROTATION_FACTOR, most: int = MOST_SETS) -> int:
    """How many operand sets of `set_bytes` to cycle through: between two uses of one set the other sets
    pass more than factor × L2 through the cache (at least two sets, at most `most`)."""
    if set_bytes <= 0:
        raise ValueError(f"set_bytes must be positive, not {set_bytes}")
    return max(2, min(most, 1 + math.ceil(factor * l2_bytes / set_bytes)))


def calls_per_repeat(estimate_ms: float, target_ms: float = 2.0, most: int = 64) -> int:
    """Calls between one pair of events: enough for about `target_ms` of GPU time, so an event's
    resolution (about a microsecond) is small against it, and few enough to stay well inside the
    launch queue while the spin kernel holds the stream."""
    return max(1, min(most, math.ceil(target_ms / max(estimate_ms, 1e-4))))


def l2_bytes(device_id: int) -> int:
    import cupy
    return int(cupy.cuda.Device(device_id).attributes.get("L2CacheSize", 0)) or 64 << 20


class Rotation:
    """One implementation's calls, one per operand set, taken in turn (the position carries on)."""

    def __init__(self, calls: list[Callable[[], object]]):
        if not calls:
            raise ValueError("a rotation needs at least one call")
        self.calls, self.position = calls, 0

    def run(self, count: int) -> None:
        calls, size = self.calls, len(self.calls)
        for _ in range(count):
            calls[self.position % size]()
            self.position += 1


def _estimate(rotation: Rotation, stream, device_id: int, warmup_ms: float) -> tuple[float, float]:
    """(GPU ms per call, host seconds per call) of warm calls, after warming up for `warmup_ms`.

    Every operand set is used once first: module load, cuBLAS heuristics, workspace allocation, and each
    set's first call (a prepared launch packs its arguments per address), which would otherwise count as
    the calls' cost. The sample's GPU time is taken behind a spin kernel, as the rounds are: enqueued by
    the host faster than the GPU runs it, a call's host cost would show as GPU time, and an estimate
    inflated so would leave the rounds few calls between two events, whose own cost then shows."""
    import cupy
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    rotation.run(len(rotation.calls))
    stream.synchronize()
    sample = min(8, len(rotation.calls))
    host = time.perf_counter()
    rotation.run(sample)
    host = (time.perf_counter() - host) / sample
    stream.synchronize()
    spin(device_id, min(MAX_HOLD, 20e-6 + 1.5 * sample * host))
    start.record(stream)
    rotation.run(sample)
    end.record(stream)
    end.synchronize()
    per_call = cupy.cuda.get_elapsed_time(start, end) / sample
    rotation.run(min(500, math.ceil(warmup_ms / max(per_call, 1e-3))))
    stream.synchronize()
    return per_call, host


def time_rounds(rotations: dict[str, Rotation], *, repeats: int = 7, warmup_ms: float = 20.0,
                target_ms: float = 2.0, max_seconds: float = 3.0) -> dict[str, dict]:
    """GPU ms per call of each implementation: {name: {"times_ms": [per repeat], "calls": per repeat}}.

    Repeats shrink (to no fewer than three) when `max_seconds` would be exceeded by the slowest calls."""
    import cupy
    stream = cupy.cuda.get_current_stream()
    device_id = cupy.cuda.Device().id
    plan = {}
    for name, rotation in rotations.items():
        per_call, host = _estimate(rotation, stream, device_id, warmup_ms)
        plan[name] = (calls_per_repeat(per_call, target_ms), per_call, host)
    round_ms = sum(count * per_call for count, per_call, _ in plan.values())
    repeats = max(3, min(repeats, int(max_seconds * 1e3 / max(round_ms, 1e-3))))
    events = {name: [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(repeats)] for name in rotations}
    order = list(rotations)
    for r in range(repeats):
        for name in order[r % len(order):] + order[:r % len(order)]:  # a different one goes first each round
            count, per_call, host = plan[name]
            start, end = events[name][r]
            for _ in range(3):
                hold = min(MAX_HOLD, 20e-6 + 1.5 * count * host)
                spin(device_id, hold)
                begin = time.perf_counter()
                start.record(stream)
                rotations[name].run(count)
                end.record(stream)
                enqueued = time.perf_counter() - begin
                if enqueued < 0.8 * hold or hold == MAX_HOLD:
                    break
                # the spin ended before the host had enqueued the calls, so the GPU waited for it: the
                # repeat again, held for as long as this enqueueing took (and so every later repeat)
                stream.synchronize()
                host = max(host, enqueued / count)
                plan[name] = (count, per_call, host)
        stream.synchronize()  # one round in flight at a time: the launch queue never fills
    return {name: {"calls": plan[name][0],
                   "times_ms": [cupy.cuda.get_elapsed_time(s, e) / plan[name][0] for s, e in events[name]]}
            for name in rotations}


def host_costs(calls: dict[str, Callable[[], object]], count: int = 2000, repeats: int = 3) -> dict[str, float]:
    """Wall seconds per call of each implementation: `count` back-to-back calls closed by one
    synchronisation, the implementations taking turns within every repeat (drift in the host's clock or
    load reaches them alike), the best repeat of each kept (the least disturbed by the rest of the host)."""
    import cupy
    stream = cupy.cuda.get_current_stream()
    best = dict.fromkeys(calls, math.inf)
    for call in calls.values():
        for _ in range(min(50, count)):
            call()
    stream.synchronize()
    for _ in range(repeats):
        for name, call in calls.items():
            begin = time.perf_counter()
            for _ in range(count):
                call()
            stream.synchronize()
            best[name] = min(best[name], (time.perf_counter() - begin) / count)
    return best


def copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Device memory bandwidth in bytes per second: (read + written) bytes of a device-to-device copy
    of `nbytes`, median of `repeats`."""
    import cupy
    stream = cupy.cuda.get_current_stream()
    src = cupy.ones(nbytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    times = []
    for i in range(repeats + 2):  # the first two warm up
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        dst.data.copy_from_device_async(src.data, nbytes, stream)
        end.record(stream)
        end.synchronize()
        if i >= 2:
            times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    del src, dst
    return 2 * nbytes / statistics.median(times)

"""The bookkeeping of one sweep on one GPU model, apart from who runs the work: which points need compiling
and measuring (after --resume and pruning), what to do with each compile and measurement as it comes back,
and the records that result. A runner (cupy_gemm.measure.local, cupy_gemm.measure.cluster) moves tasks
between a Sweep and its workers; it never decides what a result means.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

from .. import registry
from ..compile import arch_for, check_arch
from ..errors import ConfigError, DeviceError
from . import results
from .occupancy import occupancy, sm_limits
from .results import Record
from .shapes import parse_shape, parse_shapes
from .space import Point
from .workbench import Settings, numpy_dtype


@dataclass(frozen=True)
class GPUModel:
    """The GPUs a Sweep measures on: one model, its limits, and where it is (for each record's provenance)."""
    name: str
    cc: int
    limits: tuple
    host: str = ""
    driver: str = ""

    @classmethod
    def for_arch(cls, arch: str) -> "GPUModel":
        """No GPU: a compile-only run's occupancy estimate uses the architecture's published limits."""
        found = re.fullmatch(r"(sm|compute)_(\d+)a?", arch)
        if not found:
            raise ConfigError("arch", arch, "like sm_80, sm_90 or sm_90a")
        cc = int(found.group(2))
        return cls("", cc, sm_limits(cc))


@dataclass
class SweepResult:
    records: list[Record]
    points: list[Point]
    shapes: list[tuple[int, int, int]]
    metadata: dict

    def kernels(self, shape=None) -> list[Record]:
        return [r for r in self.records if not r.is_baseline and (shape is None or r.shape == tuple(shape))]

    def baselines(self, shape=None) -> list[Record]:
        return [r for r in self.records if r.is_baseline and (shape is None or r.shape == tuple(shape))]

    def gpu_models(self) -> list[str]:
        return results.gpu_models(self.kernels())

    def ranked(self, shape=None, gpu: str | None = None) -> list[tuple[Record, bool]]:
        """`ok` records fastest first, with whether each one's interval overlaps the next one's; a result of
        several GPU models is ranked per model (gpu=one of gpu_models())."""
        return results.ranked(self.kernels(shape), gpu)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.kernels():
            out[r.status] = out.get(r.status, 0) + 1
        return out


def base_record(point: Point, shape, status: str, reason: str = "", layout: str = "") -> Record:
    layout = layout or registry.family(point.family).layout
    return Record(family=point.family, variant=point.name, dtype=point.dtype, acc=point.acc, layout=layout,
                  M=shape[0], N=shape[1], K=shape[2], status=status, reason=reason, params=dict(point.params),
                  catalogue=point.catalogue, source_hash=point.source_hash)


def _resource_fields(point: Point, compiled: dict, limits) -> dict:
    fam = registry.family(point.family)
    res = compiled["resources"]
    threads = fam.threads(point.params)
    dynamic = fam.smem_bytes(point.params, point.dtype, point.acc)
    blocks, occ = occupancy(threads, res["registers"], res["static_smem"] + dynamic, limits)
    return {"registers": res["registers"], "static_smem": res["static_smem"], "dynamic_smem": dynamic,
            "local_bytes": res["local"], "spill_stores": res["spill_stores"], "spill_loads": res["spill_loads"],
            "threads": threads, "blocks_per_sm": blocks, "occupancy": occ, "compile_s": compiled["seconds"],
            "arch": compiled["arch"]}


def _fill(rec: Record, fields: dict) -> None:
    for key, value in fields.items():
        if hasattr(rec, key):
            setattr(rec, key, value)


def shapes_by_point(shapes) -> Callable[[Point], list]:
    """shapes: (M, N, K) tuples or 'MxNxK' strings for every point, or {dtype: shapes}."""
    if isinstance(shapes, Mapping):
        per_dtype = {d: parse_shapes(s) if isinstance(s, str) else [tuple(x) for x in s] for d, s in shapes.items()}
        return lambda p: per_dtype.get(p.dtype, [])
    flat = [parse_shape(s) if isinstance(s, str) else tuple(s) for s in shapes]
    return lambda p: flat


class Sweep:
    """What is left to do for a list of points at their shapes on one GPU model (gpu), or compiled only for
    `arch` (measure=False), and the records so far. `emit(kind, data)` announces events (see sweep.measure)."""

    def __init__(self, points, shapes, gpu: GPUModel, *, arch: str | None = None, measure: bool = True,
                 settings: Settings | None = None, resume=(), emit=None):
        self.points, self.gpu, self.arch, self.measuring = list(points), gpu, arch, measure
        self.settings = settings or Settings()
        self.emit = emit or (lambda kind, data: None)
        self.shapes_of = shapes_by_point(shapes)
        self.order = list(dict.fromkeys(s for p in self.points for s in self.shapes_of(p)))
        self.records: dict[tuple, Record] = {}
        self.baselines: dict[tuple, Record] = {}
        self.fresh_baselines: set = set()
        self.kept: list[Record] = []
        self.compiled: dict[int, dict] = {}
        self.arch_of: dict[int, str] = {}
        self.pending: dict[int, list] = {}
        self.compile_queue: list[int] = []
        self.later: list = []
        self.resumed = 0
        self.started = False
        self.early: list[Record] = []
        self._prepare(list(resume or ()))

    def _record(self, pi: int, shape, rec: Record) -> None:
        rec.device_name = rec.device_name or self.gpu.name
        if self.measuring:
            rec.host, rec.driver = rec.host or self.gpu.host, rec.driver or self.gpu.driver
        self.records[(pi, tuple(shape))] = rec
        if self.started:
            self.emit("record", rec)
        else:
            self.early.append(rec)  # announced after "start", which needs the counts

    def _prepare(self, resume: list[Record]) -> None:
        reusable, other_gpus = {}, []
        for rec in resume:
            if rec.device_name not in ("", self.gpu.name):
                other_gpus.append(rec)  # another model's: kept in the file, never mixed with this model's
            elif rec.is_baseline:
                self.baselines[(rec.device, rec.shape, rec.dtype, rec.variant, rec.layout, rec.host)] = rec
            else:
                reusable[rec.key()] = rec
        for pi, p in enumerate(self.points):
            pending = []
            for shape in self.shapes_of(p):
                old = reusable.pop((p.family, p.name, p.dtype, p.acc, tuple(sorted(p.params.items())), *shape),
                                   None)
                if old is not None and old.source_hash == p.source_hash:
                    self.records[(pi, shape)] = old
                    self.resumed += 1
                elif not p.valid:
                    self._record(pi, shape, base_record(p, shape, "invalid", p.reason))
                else:
                    pending.append(shape)
            if not pending:
                continue
            try:
                if self.measuring:
                    numpy_dtype(p.dtype)  # e.g. bfloat16 without ml_dtypes: say so once, not per launch
                if self.arch:
                    check_arch(p.variant, self.arch)
                arch = self.arch or arch_for(p.variant, self.gpu.cc)
            except (DeviceError, ConfigError, TypeError) as e:
                for shape in pending:
                    self._record(pi, shape, base_record(p, shape, "invalid", str(e)))
                continue
            self.arch_of[pi], self.pending[pi] = arch, pending
            self.compile_queue.append(pi)
        self.kept = list(reusable.values()) + other_gpus  # earlier records of points outside this run stay

    def start(self) -> None:
        self.emit("start", {"points": len(self.points), "valid": sum(p.valid for p in self.points),
                            "compiles": len(self.compile_queue),
                            "measurements": sum(len(v) for v in self.pending.values()) if self.measuring else 0,
                            "resumed": self.resumed, "device_name": self.gpu.name})
        self.started = True
        for rec in self.early:
            self.emit("record", rec)

    def compile_task(self, pi: int) -> tuple:
        """(spec, arch) for tasks.compile_point."""
        return self.points[pi].variant.to_spec(), self.arch_of[pi]

    def measure_task(self, pi: int, shape) -> tuple:
        """(spec, shape) for tasks.Measurer.measure."""
        return self.points[pi].variant.to_spec(), tuple(shape)

    def on_compiled(self, pi: int, payload: dict) -> list[tuple]:
        """Take a compile result; returns the (point, shape) measurements to start now: the point's first
        shape. Its other shapes wait in `later` until every compile is done (take_later)."""
        p = self.points[pi]
        self.compiled[pi] = payload
        self.emit("compiled", {"point": p, "ok": payload["ok"], "seconds": payload["seconds"],
                               "reason": payload.get("reason", "")})
        if not payload["ok"]:
            for shape in self.pending[pi]:
                rec = base_record(p, shape, "compile_failed", payload["reason"])
                rec.arch, rec.compile_s = payload["arch"], payload["seconds"]
                self._record(pi, shape, rec)
            return []
        if not self.measuring:
            for shape in self.pending[pi]:
                rec = base_record(p, shape, "compiled")
                _fill(rec, _resource_fields(p, payload, self.gpu.limits))
                self._record(pi, shape, rec)
            return []
        first = self.shapes_of(p)[0]
        now = []
        for shape in self.pending[pi]:
            if shape == first:
                now.append((pi, shape))
            else:
                self.later.append((self.order.index(shape), pi, shape))
        return now

    def compile_lost(self, pi: int, reason: str) -> list[tuple]:
        return self.on_compiled(pi, {"ok": False, "reason": f"compiler: {reason}", "arch": self.arch_of[pi],
                                     "seconds": None})

    def take_later(self) -> list[tuple]:
        """The measurements of every point's other shapes, shape by shape (so inputs are made once each)."""
        tasks = [(pi, shape) for _, pi, shape in sorted(self.later)]
        self.later = []
        return tasks

    def on_measured(self, pi: int, shape, payload: dict) -> None:
        """Take a measurement's fields (tasks.Measurer.measure, plus device and optionally host/driver)."""
        p = self.points[pi]
        rec = base_record(p, shape, payload["status"], payload.get("reason", ""))
        rec.device = payload.get("device")
        rec.host, rec.driver = payload.get("host", ""), payload.get("driver", "")
        _fill(rec, _resource_fields(p, self.compiled[pi], self.gpu.limits))
        _fill(rec, {k: v for k, v in payload.items() if k not in ("status", "reason", "baseline", "device_name")})
        if payload.get("baseline"):
            self._baseline(p, shape, rec, payload["baseline"])
        self._record(pi, shape, rec)

    def measure_lost(self, pi: int, shape, reason: str, device=None, host: str = "") -> None:
        self.on_measured(pi, shape, {"status": "launch_failed", "reason": reason, "device": device, "host": host})

    def _baseline(self, p: Point, shape, rec: Record, data: dict) -> None:
        key = (rec.device, tuple(shape), p.dtype, data["variant"], rec.layout, rec.host or self.gpu.host)
        if key in self.fresh_baselines:
            return
        self.fresh_baselines.add(key)
        base = Record(family="cublas", variant=data["variant"], dtype=p.dtype, acc=p.acc, layout=rec.layout,
                      M=shape[0], N=shape[1], K=shape[2], status=data["status"], reason=data.get("reason", ""),
                      device=rec.device, device_name=self.gpu.name, host=rec.host or self.gpu.host,
                      driver=rec.driver or self.gpu.driver)
        _fill(base, {k: v for k, v in data.items() if k not in ("variant", "status", "reason")})
        self.baselines[key] = base
        self.emit("baseline", base)

    def ordered_records(self) -> list[Record]:
        """Per shape: its cuBLAS rows, then the points in grid order; then what --resume kept from elsewhere."""
        ordered = []
        for shape in self.order:
            ordered += sorted((r for r in self.baselines.values() if r.shape == shape),
                              key=lambda r: (r.host, r.device if r.device is not None else -1, r.variant))
            ordered += [self.records[(pi, shape)] for pi in range(len(self.points)) if (pi, shape) in self.records]
        return ordered + [r for r in self.baselines.values() if r.shape not in self.order] + self.kept

"""Parameter sweeps: expand a grid of template parameters, prune it with the family's own rules, compile the
survivors on a pool of worker processes (NVRTC needs no GPU), and measure them on one or more GPUs, one
worker process per device. Every (configuration, shape) becomes a Record — `ok`, `invalid` (with the rule
that failed), `compile_failed`, `launch_failed` or `incorrect` — and the sweep goes on.

    from cupy_gemm import sweep
    result = sweep.run("sliced_k", ["1024x1024x1024"], {"BK": [8, 16, 32]}, dtype="float32")
    for record, tied in result.ranked():
        print(record.variant, record.time_ms, "≈" if tied else "")

Compiles start at once and the GPUs start measuring as soon as the first kernels are ready. Measuring in
child processes keeps a kernel that corrupts its CUDA context (illegal address) or hangs from ending the
sweep: the worker is replaced and the point recorded as `launch_failed`. Workers are started with the
`spawn` method, so scripts that call `run` need the usual `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

import hashlib
import itertools
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from . import registry, results
from .errors import ConfigError, DeviceError
from .families.base import Family
from .registry import Variant
from .results import Record
from .timing import Settings, numpy_dtype, occupancy, sm_limits
from .workers import Pool, compile_worker, cpu_count, device_worker

# ---- shapes -------------------------------------------------------------------------------------------

# the problem sizes of the seed benchmark tables (HGEMM and SGEMM READMEs)
SEED_HGEMM = [(1024, 1024, 1024), (1024, 2048, 256), (4096, 4096, 256), (4096, 4096, 512), (4096, 4096, 1024)]
SEED_SGEMM = [(m, n, k) for m in (4096, 8192, 16384) for n in (4096, 8192, 16384) for k in (2048, 4096, 8192)]
SHAPE_SETS = {
    "hgemm": SEED_HGEMM,
    "sgemm": SEED_SGEMM,
    "square": [(s, s, s) for s in (512, 1024, 2048, 4096, 8192)],
    "quick": [(1024, 1024, 1024), (4096, 4096, 4096)],
}


def seed_shapes(dtype: str) -> list[tuple[int, int, int]]:
    """The seed table for a dtype: SGEMM's shapes for float32, HGEMM's for the 16-bit types."""
    return list(SEED_SGEMM if dtype == "float32" else SEED_HGEMM)


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4096x4096x1024' -> (4096, 4096, 1024); '2048' -> (2048, 2048, 2048)."""
    parts = text.strip().lower().replace("×", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) == 1:
        dims = dims * 3
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"shape {text!r}: expected MxNxK with positive integers (or one size for a cube)")
    return dims


def parse_shapes(specs: Iterable[str] | str, dtype: str | None = None) -> list[tuple[int, int, int]]:
    """Shapes from strings: MxNxK, comma-separated lists of them, or a named set (seed, hgemm, sgemm, square,
    quick). `seed` needs the dtype."""
    specs = [specs] if isinstance(specs, str) else list(specs)
    out: list[tuple[int, int, int]] = []
    for spec in specs:
        for item in (s for s in spec.split(",") if s.strip()):
            name = item.strip().lower()
            if name == "seed":
                if dtype is None:
                    raise ValueError("the 'seed' shapes depend on the dtype: give one")
                out += seed_shapes(dtype)
            elif name in SHAPE_SETS:
                out += SHAPE_SETS[name]
            else:
                out.append(parse_shape(item))
    return list(dict.fromkeys(out))


# ---- grids --------------------------------------------------------------------------------------------

def parse_values(text: str) -> list[int]:
    """Values of one parameter: '64,128', '16:128:*2' (doubling), '32:128:32' (step 32), '8:12' (step 1).
    Ranges include both ends."""
    values: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            if ":" not in part:
                values.append(int(part))
                continue
            bits = part.split(":")
            if len(bits) not in (2, 3):
                raise ValueError
            lo, hi = int(bits[0]), int(bits[1])
            step = bits[2].strip() if len(bits) == 3 else "1"
        except ValueError:
            raise ValueError(f"{part!r}: expected an integer, lo:hi, lo:hi:step or lo:hi:*factor") from None
        if step.startswith("*"):
            factor = int(step[1:])
            if factor < 2 or lo < 1:
                raise ValueError(f"{part!r}: a geometric range needs lo >= 1 and a factor >= 2")
            v = lo
            while v <= hi:
                values.append(v)
                v *= factor
        else:
            if int(step) < 1:
                raise ValueError(f"{part!r}: the step must be positive")
            values += list(range(lo, hi + 1, int(step)))
    if not values:
        raise ValueError(f"{text!r} gives no values")
    return list(dict.fromkeys(values))


def parse_set(item: str) -> tuple[str, list[int]]:
    """'BM=64,128' -> ('BM', [64, 128])."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--set takes NAME=VALUES (e.g. BM=64,128 or BK=8:64:*2), got {item!r}")
    return name.strip(), parse_values(value)


@dataclass
class GridSpec:
    """A sweep grid: values per parameter, plus what a grid file may also fix."""
    params: dict[str, list[int]] = field(default_factory=dict)
    family: str | None = None
    dtype: str | None = None
    acc: str | None = None
    shapes: list[tuple[int, int, int]] = field(default_factory=list)


def load_grid(path) -> GridSpec:
    """A TOML grid file (see docs/SWEEP.md):

        family = "sliced_k"                  # optional
        dtype = "float32"                    # optional
        acc = "float32"                      # optional
        shapes = ["4096x4096x4096"]          # optional
        [params]
        BM = [32, 64]                        # a list,
        BK = "8:64:*2"                       # a range string (as for --set),
        PAD = 0                              # or one value
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None
    unknown = set(data) - {"family", "dtype", "acc", "shapes", "params"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a grid file has family, dtype, acc, shapes "
                         f"and a [params] table")
    spec = GridSpec(family=data.get("family"), dtype=data.get("dtype"), acc=data.get("acc"),
                    shapes=parse_shapes([str(s) for s in data.get("shapes", [])]))
    for name, value in data.get("params", {}).items():
        try:
            if isinstance(value, list):
                values = [v for item in value for v in (parse_values(item) if isinstance(item, str) else [item])]
            else:
                values = parse_values(value) if isinstance(value, str) else [value]
            if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
                raise ValueError("parameters are integers")
        except ValueError as e:
            raise ValueError(f"{path}: params.{name}: {e}") from None
        spec.params[name] = list(dict.fromkeys(values))
    return spec


def expand(family: Family, grid: Mapping[str, Iterable[int]]) -> list[dict[str, int]]:
    """Every combination of the grid's values, in the family's parameter order with the last varying
    fastest; parameters the grid leaves out keep their defaults. Unknown names raise ConfigError."""
    grid = {name: list(values) for name, values in grid.items()}
    family.complete({name: values[0] for name, values in grid.items() if values})  # names check
    axes = [grid.get(p.name, [p.default]) or [p.default] for p in family.params]
    names = [p.name for p in family.params]
    return [dict(zip(names, combo)) for combo in itertools.product(*(list(dict.fromkeys(a)) for a in axes))]


# ---- points -------------------------------------------------------------------------------------------

_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep: its complete parameters, and either a Variant or why it is invalid."""
    index: int
    family: str
    dtype: str
    acc: str
    params: dict
    name: str
    variant: Variant | None = None
    reason: str = ""  # why the point is invalid ("" when valid)
    param: str = ""  # the parameter the failing rule names
    catalogue: str = ""  # the catalogue variant with the same parameters, if any
    source_hash: str = ""

    @property
    def valid(self) -> bool:
        return self.variant is not None

    def spec(self) -> tuple:
        """What a worker process needs to rebuild the Variant."""
        return (self.family, self.name, self.dtype, self.acc, tuple(self.params.items()))


def point_name(family: str, dtype: str, acc: str, params: Mapping[str, int]) -> str:
    """A stable name for a parameter set (it is part of the rendered source, hence of the compile cache key)."""
    body = "_".join(f"{k}{v}" for k, v in params.items())
    return f"{family}-{_SHORT.get(dtype, dtype)}-acc{_SHORT.get(acc, acc)}-{body}"


def source_hash(variant: Variant) -> str:
    """Hash of the rendered source: changes whenever the template or a helper it includes changes."""
    from .render import render
    return hashlib.sha256(render(variant).encode()).hexdigest()[:16]


def _catalogue_index() -> dict[tuple, str]:
    return {(v.family.name, v.dtype, v.acc, tuple(sorted(v.params.items()))): name
            for name, v in registry.catalogue().items()}


def points(family: str | Family, grid: Mapping[str, Iterable[int]] | None = None, dtype: str | None = None,
           acc: str | None = None, *, max_points: int = 100_000) -> list[Point]:
    """Expand and prune a grid with the family's rules (Family.check, through registry.make_variant). A
    point equal to a catalogue variant takes the catalogue's name."""
    fam = registry.family(family) if isinstance(family, str) else family
    dtype = dtype or next(iter(fam.dtypes))
    if dtype not in fam.dtypes:
        raise ConfigError("dtype", dtype, f"one of {sorted(fam.dtypes)} for family {fam.name!r}")
    acc = acc or fam.dtypes[dtype][0]
    if acc not in fam.dtypes[dtype]:
        raise ConfigError("acc", acc, f"one of {list(fam.dtypes[dtype])} for {dtype} inputs in family {fam.name!r}")
    combos = expand(fam, grid or {})
    if len(combos) > max_points:
        raise ValueError(f"the grid has {len(combos)} points, more than max_points={max_points}; narrow it")
    index = _catalogue_index()
    out = []
    for i, params in enumerate(combos):
        known = index.get((fam.name, dtype, acc, tuple(sorted(params.items()))), "")
        name = known or point_name(fam.name, dtype, acc, params)
        try:
            variant = registry.make_variant(fam, name, dtype, params, acc)
        except ConfigError as e:
            out.append(Point(i, fam.name, dtype, acc, params, name, None, f"{e.param}={e.value!r}: {e.expected}",
                             e.param, known))
            continue
        out.append(Point(i, fam.name, dtype, acc, dict(variant.params), name, variant, "", "", known,
                         source_hash(variant)))
    return out


def catalogue_points(names: Iterable[str | Variant]) -> list[Point]:
    """Points for named catalogue variants (what `bench` and `tune` measure)."""
    out = []
    for i, item in enumerate(names):
        v = registry.lookup(item) if isinstance(item, str) else item
        out.append(Point(i, v.family.name, v.dtype, v.acc, dict(v.params), v.name, v, "", "",
                         v.name if v.name in registry.catalogue() else "", source_hash(v)))
    return out


# ---- results ------------------------------------------------------------------------------------------

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

    def ranked(self, shape=None) -> list[tuple[Record, bool]]:
        """`ok` records fastest first, with whether each one's interval overlaps the next one's."""
        return results.ranked(self.kernels(shape))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.kernels():
            out[r.status] = out.get(r.status, 0) + 1
        return out


def _base_record(point: Point, shape, status: str, reason: str = "", layout: str = "") -> Record:
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


# ---- the run ------------------------------------------------------------------------------------------

class _Run:
    def __init__(self, pts, shapes, settings: Settings, devices: list[int], arch: str | None, compile_workers,
                 compile_timeout: float, gpu_timeout: float, resume, on_event):
        self.points = list(pts)
        self.settings, self.devices, self.arch = settings, devices, arch
        self.compile_workers, self.compile_timeout, self.gpu_timeout = compile_workers, compile_timeout, gpu_timeout
        self.emit = on_event or (lambda kind, data: None)
        if isinstance(shapes, Mapping):
            per_dtype = {d: parse_shapes(s) if isinstance(s, str) else [tuple(x) for x in s]
                         for d, s in shapes.items()}
            self.shapes_of = lambda p: per_dtype.get(p.dtype, [])
        else:
            flat = [parse_shape(s) if isinstance(s, str) else tuple(s) for s in shapes]
            self.shapes_of = lambda p: flat
        self.order = list(dict.fromkeys(s for p in self.points for s in self.shapes_of(p)))
        self.records: dict[tuple, Record] = {}
        self.baselines: dict[tuple, Record] = {}
        self.fresh_baselines: set = set()
        self.kept: list[Record] = []
        self.compiled: dict[int, dict] = {}
        self.arch_of: dict[int, str] = {}
        self.pending: dict[int, list] = {}
        self.compile_queue: deque = deque()
        self.gpu_queue: deque = deque()
        self.later: list = []
        self.fatal: list[str] = []
        self.devices_ready = 0
        self.resumed = 0
        self.started = False
        self.early: list[Record] = []
        self.info = self._device_info()
        self.resume = list(resume or ())

    def _device_info(self) -> dict:
        if not self.devices:
            cc = int(self.arch.split("_")[1].rstrip("a")) if self.arch else 90
            return {"name": "", "cc": cc, "limits": sm_limits(cc)}
        import cupy
        found = {(results.device_name(d), int(cupy.cuda.Device(d).compute_capability)) for d in self.devices}
        if len(found) > 1:
            raise DeviceError(f"a sweep's GPUs must be the same model; got {sorted(found)}")
        name, cc = found.pop()
        return {"name": name, "cc": cc, "limits": sm_limits(cc, cupy.cuda.Device(self.devices[0]).attributes)}

    # -- preparation --
    def _record(self, pi: int, shape, rec: Record) -> None:
        self.records[(pi, tuple(shape))] = rec
        if self.started:
            self.emit("record", rec)
        else:
            self.early.append(rec)  # announced after "start", which needs the counts

    def _prepare(self) -> None:
        from .compile import arch_for, check_arch
        reusable = {}
        for rec in self.resume:
            if rec.is_baseline:
                self.baselines[(rec.device, rec.shape, rec.dtype, rec.variant, rec.layout)] = rec
            else:
                reusable[rec.key()] = rec
        for pi, p in enumerate(self.points):
            pending = []
            for shape in self.shapes_of(p):
                old = reusable.pop((p.family, p.name, p.dtype, p.acc, tuple(sorted(p.params.items())), *shape),
                                   None)
                if old is not None and old.source_hash == p.source_hash \
                        and old.device_name in ("", self.info["name"]):
                    self.records[(pi, shape)] = old
                    self.resumed += 1
                elif not p.valid:
                    self._record(pi, shape, _base_record(p, shape, "invalid", p.reason))
                else:
                    pending.append(shape)
            if not pending:
                continue
            try:
                if self.devices:
                    numpy_dtype(p.dtype)  # e.g. bfloat16 without ml_dtypes: say so once, not per launch
                if self.arch:
                    check_arch(p.variant, self.arch)
                arch = self.arch or arch_for(p.variant, self.info["cc"])
            except (DeviceError, ConfigError, TypeError) as e:
                for shape in pending:
                    self._record(pi, shape, _base_record(p, shape, "invalid", str(e)))
                continue
            self.arch_of[pi], self.pending[pi] = arch, pending
            self.compile_queue.append(pi)
        self.kept = list(reusable.values())  # earlier records of points outside this grid stay in the file

    # -- events --
    def _on_compile(self, event) -> None:
        kind, _, pi, payload = event
        if kind in ("ready", "fatal", "retired"):
            if kind == "retired":
                self.fatal.append(f"compiler worker: {payload}")
            return
        p = self.points[pi]
        if kind == "lost":
            payload = {"ok": False, "reason": f"compiler: {payload}", "arch": self.arch_of[pi], "seconds": None}
        self.compiled[pi] = payload
        self.emit("compiled", {"point": p, "ok": payload["ok"], "seconds": payload["seconds"],
                               "reason": payload.get("reason", "")})
        if not payload["ok"]:
            for shape in self.pending[pi]:
                rec = _base_record(p, shape, "compile_failed", payload["reason"])
                rec.arch, rec.compile_s = payload["arch"], payload["seconds"]
                self._record(pi, shape, rec)
            return
        if not self.devices:
            for shape in self.pending[pi]:
                rec = _base_record(p, shape, "compiled")
                self._fill(rec, _resource_fields(p, payload, self.info["limits"]))
                self._record(pi, shape, rec)
            return
        first = self.shapes_of(p)[0]
        for shape in self.pending[pi]:
            if shape == first:
                self.gpu_queue.append((pi, shape))
            else:
                self.later.append((self.order.index(shape), pi, shape))

    def _on_device(self, event) -> None:
        kind, worker, task, payload = event
        if kind == "ready":
            self.devices_ready += 1
            self.emit("device", {"device": payload["device"], "state": "ready", "message": payload["name"]})
            return
        if kind == "fatal":  # followed by "retired" once the process has ended
            return
        if kind == "retired":
            self.fatal.append(str(payload))
            self.emit("device", {"device": worker.args[0], "state": "failed", "message": str(payload)})
            return
        pi, shape = task
        p = self.points[pi]
        if kind == "lost":
            self.emit("device", {"device": worker.args[0], "state": "restarted", "message": payload})
            payload = {"status": "launch_failed", "reason": f"GPU {worker.args[0]}: {payload}",
                       "device": worker.args[0]}
        rec = _base_record(p, shape, payload["status"], payload.get("reason", ""))
        rec.device, rec.device_name = payload.get("device"), self.info["name"]
        self._fill(rec, _resource_fields(p, self.compiled[pi], self.info["limits"]))
        self._fill(rec, {k: v for k, v in payload.items() if k not in ("status", "reason", "baseline")})
        if payload.get("baseline"):
            self._baseline(p, shape, rec.layout, rec.device, payload["baseline"])
        self._record(pi, shape, rec)

    def _baseline(self, p: Point, shape, layout: str, device, data: dict) -> None:
        key = (device, tuple(shape), p.dtype, data["variant"], layout)
        if key in self.fresh_baselines:
            return
        self.fresh_baselines.add(key)
        rec = Record(family="cublas", variant=data["variant"], dtype=p.dtype, acc=p.acc, layout=layout,
                     M=shape[0], N=shape[1], K=shape[2], status=data["status"], reason=data.get("reason", ""),
                     device=device, device_name=self.info["name"])
        self._fill(rec, {k: v for k, v in data.items() if k not in ("variant", "status", "reason")})
        self.baselines[key] = rec
        self.emit("baseline", rec)

    @staticmethod
    def _fill(rec: Record, fields: dict) -> None:
        for key, value in fields.items():
            if hasattr(rec, key):
                setattr(rec, key, value)

    # -- the loop --
    def execute(self) -> SweepResult:
        self._prepare()
        self.emit("start", {"points": len(self.points), "valid": sum(p.valid for p in self.points),
                            "compiles": len(self.compile_queue),
                            "measurements": sum(len(v) for v in self.pending.values()) if self.devices else 0,
                            "resumed": self.resumed,
                            "devices": list(self.devices), "device_name": self.info["name"]})
        self.started = True
        for rec in self.early:
            self.emit("record", rec)
        if self.compile_queue:
            self._loop()
        return self._result()

    def _loop(self) -> None:
        import multiprocessing
        from multiprocessing import connection
        ctx = multiprocessing.get_context("spawn")  # children must not inherit a CUDA context
        workers = self.compile_workers or max(1, min(32, cpu_count() - len(self.devices)))
        cpool = Pool(ctx, compile_worker, [()] * min(workers, len(self.compile_queue)), self.compile_timeout)
        dpool = Pool(ctx, device_worker, [(d, self.settings) for d in self.devices], self.gpu_timeout) \
            if self.devices else None
        pools = [cpool] + ([dpool] if dpool else [])
        try:
            while self.compile_queue or self.gpu_queue or self.later or any(pool.busy() for pool in pools):
                for w in cpool.idle():
                    if self.compile_queue:
                        pi = self.compile_queue.popleft()
                        if not cpool.submit(w, pi, (self.points[pi].spec(), self.arch_of[pi])):
                            self.compile_queue.appendleft(pi)
                for w in dpool.idle() if dpool else ():
                    if self.gpu_queue:
                        pi, shape = self.gpu_queue.popleft()
                        if not dpool.submit(w, (pi, shape), (self.points[pi].spec(), shape)):
                            self.gpu_queue.appendleft((pi, shape))
                ready = connection.wait([x for pool in pools for x in pool.waitables()], timeout=0.25)
                for event in cpool.collect(ready) + cpool.check_timeouts():
                    self._on_compile(event)
                if dpool:
                    for event in dpool.collect(ready) + dpool.check_timeouts():
                        self._on_device(event)
                if self.later and not self.compile_queue and not cpool.busy():
                    self.gpu_queue.extend((pi, shape) for _, pi, shape in sorted(self.later))
                    self.later = []
                self._fail_orphans(cpool, dpool)
        finally:
            for pool in pools:
                pool.close()

    def _fail_orphans(self, cpool: Pool, dpool: Pool | None) -> None:
        if self.compile_queue and not cpool.live():
            reason = "no compiler worker could run: " + "; ".join(self.fatal[-3:])
            while self.compile_queue:
                self._on_compile(("lost", None, self.compile_queue.popleft(), reason))
        if dpool is not None and not dpool.live() and (self.gpu_queue or self.later):
            if not self.devices_ready:
                raise DeviceError("no GPU worker could start: " + "; ".join(self.fatal[-3:]))
            reason = "no GPU worker left: " + "; ".join(self.fatal[-3:])
            tasks = list(self.gpu_queue) + [(pi, shape) for _, pi, shape in self.later]
            self.gpu_queue.clear()
            self.later = []
            for pi, shape in tasks:
                self._record(pi, shape, _base_record(self.points[pi], shape, "launch_failed", reason))

    def _result(self) -> SweepResult:
        ordered = []
        for shape in self.order:
            ordered += sorted((r for r in self.baselines.values() if r.shape == shape),
                              key=lambda r: (r.device if r.device is not None else -1, r.variant))
            ordered += [self.records[(pi, shape)] for pi in range(len(self.points)) if (pi, shape) in self.records]
        ordered += [r for r in self.baselines.values() if r.shape not in self.order] + self.kept
        meta = results.metadata(self.devices, settings=self.settings.__dict__.copy(),
                                **({"arch": self.arch} if self.arch else {}))
        return SweepResult(ordered, self.points, self.order, meta)


def _device_ids(devices) -> list[int]:
    if devices is None:
        import cupy
        return [cupy.cuda.Device().id]
    if devices == "all":
        import cupy
        return list(range(cupy.cuda.runtime.getDeviceCount()))
    ids = [int(d) for d in devices]
    if not ids:
        raise ValueError("devices: give at least one GPU id")
    return list(dict.fromkeys(ids))


def measure(pts: Iterable[Point], shapes, *, devices=None, settings: Settings | None = None,
            compile_workers: int | None = None, compile_timeout: float = 300.0, gpu_timeout: float = 600.0,
            resume: Iterable[Record] = (), on_event: Callable[[str, object], None] | None = None,
            **settings_kw) -> SweepResult:
    """Compile and measure points (from `points` or `catalogue_points`) on one or more GPUs.

    shapes      (M, N, K) tuples or 'MxNxK' strings for every point, or {dtype: shapes}.
    devices     GPU ids, or "all"; default: the current device. One worker process per GPU; same model.
    settings    timing.Settings: repeats, warm-up, L2 flush or input rotation, correctness checks; or
                its fields as keywords (repeats=10, flush="rotate", …).
    resume      records of an earlier run (results.read(path)[1]): points already measured there with the
                same rendered source on the same GPU model are kept instead of measured again.
    on_event    on_event(kind, data) as things happen: "start" (dict of counts), "compiled" (dict: point,
                ok, seconds, reason), "record" (a kernel Record), "baseline" (a cuBLAS Record), "device"
                (dict: device, state = ready | restarted | failed, message).
    """
    return _Run(pts, shapes, settings or Settings(**settings_kw), _device_ids(devices), None, compile_workers,
                compile_timeout, gpu_timeout, resume, on_event).execute()


def compile_only(pts: Iterable[Point], arch: str, shapes=None, *, compile_workers: int | None = None,
                 compile_timeout: float = 300.0, on_event=None) -> SweepResult:
    """Compile points for `arch` without a GPU: records with status `compiled` (registers, shared memory,
    spills, an occupancy estimate for that architecture), `compile_failed` or `invalid`."""
    return _Run(pts, shapes or [(0, 0, 0)], Settings(), [], arch, compile_workers, compile_timeout, 0.0,
                (), on_event).execute()


def run(family: str | Family, shapes, grid: Mapping[str, Iterable[int]] | None = None, dtype: str | None = None,
        acc: str | None = None, *, devices=None, settings: Settings | None = None, resume: Iterable[Record] = (),
        on_event=None, compile_workers: int | None = None, compile_timeout: float = 300.0,
        gpu_timeout: float = 600.0, **settings_kw) -> SweepResult:
    """Sweep a family's parameter grid at one or more shapes: `points` then `measure`. Settings' fields
    (repeats, warmup_ms, flush, max_seconds, check, seed) may be passed as keywords."""
    settings = settings or Settings(**settings_kw)
    pts = points(family, grid, dtype, acc)
    shapes = parse_shapes([shapes] if isinstance(shapes, str) else
                          [s if isinstance(s, str) else "x".join(map(str, s)) for s in shapes], pts[0].dtype)
    return measure(pts, shapes, devices=devices, settings=settings,
                   compile_workers=compile_workers, compile_timeout=compile_timeout, gpu_timeout=gpu_timeout,
                   resume=resume, on_event=on_event)

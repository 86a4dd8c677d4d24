"""The tuning database behind `matmul(a, b, variant="auto")`, and `tune(...)` that fills it.

An entry is keyed by the GPU (name and compute capability), the input dtype, the accumulate type, the operand
layout and a shape bucket (each of M, N, K rounded to the nearest power of two on a log scale). It names the
fastest configuration measured there, with the hash of its rendered source: once its template or a helper it
includes changes, the entry is ignored until tuned again. Where no entry covers a shape, `lookup` takes the
nearest tuned shape of the same GPU, dtype, accumulate type and layout if every dimension is within a factor
FALLBACK_RATIO of it and the entry clearly beat the default where it was tuned; otherwise it answers None:
the dtype's default.

The database is one JSON file, `tuning.json` in cupy_gemm.config.cache_dir(), with a schema version. Writers
take an exclusive lock (fcntl) on `tuning.json.lock`, re-read, merge and replace the file atomically, so
several processes may tune at once; readers never lock and see either the old or the new file.

`cupy_gemm.tune(...)` calls `tune()`: the module is callable, so `cupy_gemm.tune.lookup` stays reachable.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import os
from pathlib import Path
from typing import Iterable

from . import config, registry
from .registry import Variant

SCHEMA = 1
FALLBACK_RATIO = 2.0  # nearest-shape fallback: every dimension within this factor of the tuned shape
FALLBACK_MIN_GAIN = 0.03  # ... and the entry beat the default by at least 3% at its own shape


def db_path() -> Path:
    return config.cache_dir() / "tuning.json"


def bucket(m: int, n: int, k: int) -> tuple[int, int, int]:
    """log2 of each dimension, rounded to the nearest integer: 4096 and 5000 share a bucket, 6000 does not."""
    return tuple(int(math.floor(math.log2(max(d, 1)) + 0.5)) for d in (m, n, k))


def entry_key(device: str, cc: int, dtype: str, acc: str, layout: str, shape_bucket) -> str:
    return f"{device}|sm_{cc}|{dtype}|{acc}|{layout}|" + "x".join(f"2^{b}" for b in shape_bucket)


def default_acc(dtype: str) -> str:
    """The accumulate type `matmul` uses when none is asked for: float32, or tf32 for float32 inputs when
    CUPY_TF32=1 (as cupy.matmul)."""
    return "tf32" if dtype == "float32" and config.allow_tf32() else "float32"


# ---- the file -----------------------------------------------------------------------------------------

def load(path=None) -> dict[str, dict]:
    """All entries. A missing, unreadable or other-schema file reads as empty (and is replaced on the next
    write): a cache must never stop a matmul."""
    path = Path(path) if path else db_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


@contextlib.contextmanager
def _locked(path: Path):
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def store(entries: Iterable[dict], path=None) -> None:
    """Add or replace entries (by key), safely with other processes doing the same."""
    from .results import write_atomic
    path = Path(path) if path else db_path()
    with _locked(path):
        current = load(path)
        for entry in entries:
            current[entry["key"]] = entry
        write_atomic(path, json.dumps({"schema": SCHEMA, "entries": current}, indent=1, sort_keys=True))


def remove(keys: Iterable[str], path=None) -> int:
    """Delete entries by key; returns how many were there."""
    from .results import write_atomic
    path = Path(path) if path else db_path()
    with _locked(path):
        current = load(path)
        gone = [k for k in keys if current.pop(k, None) is not None]
        write_atomic(path, json.dumps({"schema": SCHEMA, "entries": current}, indent=1, sort_keys=True))
    return len(gone)


# ---- lookup -------------------------------------------------------------------------------------------

_state: dict = {"stamp": None, "entries": {}, "answers": {}}
_valid: dict[tuple, Variant | None] = {}
_devices: dict[int, tuple[str, int]] = {}


def device_key(device) -> tuple[str, int]:
    """(name, compute capability) of a device given as an id, a cupy.cuda.Device or a (name, cc) pair."""
    if isinstance(device, tuple):
        return str(device[0]), int(device[1])
    import cupy
    dev_id = device if isinstance(device, int) else device.id
    if dev_id not in _devices:
        from .results import device_name
        _devices[dev_id] = (device_name(dev_id), int(cupy.cuda.Device(dev_id).compute_capability))
    return _devices[dev_id]


def _entries(path=None) -> dict[str, dict]:
    """The entries, re-read only when the file changed (lookup runs on every matmul with variant="auto")."""
    path = Path(path) if path else db_path()
    try:
        st = os.stat(path)
        stamp = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (str(path), None, None)
    if stamp != _state["stamp"]:
        _state.update(stamp=stamp, entries=load(path) if stamp[1] is not None else {}, answers={})
    return _state["entries"]


def resolve(entry: dict, which: str = "variant") -> Variant | None:
    """The Variant an entry names (`variant`: the winner; `catalogue`: the best catalogue variant), or None
    when it no longer exists, no longer validates, or its rendered source changed since it was tuned."""
    prefix = "" if which == "variant" else "catalogue_"
    name = entry.get(prefix + "variant")
    if not name:
        return None
    params = entry.get(prefix + "params") or {}
    family = entry.get(prefix + "family") or entry.get("family")
    key = (name, family, entry.get("dtype"), entry.get("acc"), tuple(sorted(params.items())),
           entry.get(prefix + "source_hash"))
    if key not in _valid:
        _valid[key] = _rebuild(name, family, entry.get("dtype"), entry.get("acc"), params,
                               entry.get(prefix + "source_hash"))
    return _valid[key]


def _rebuild(name, family, dtype, acc, params, expected_hash) -> Variant | None:
    from .errors import CupyGemmError
    from .sweep import source_hash
    try:
        known = registry.catalogue().get(name)
        if known is not None and dict(known.params) == params and known.dtype == dtype and known.acc == acc:
            variant = known
        else:
            variant = registry.make_variant(registry.family(family), name, dtype, params, acc)
        return variant if source_hash(variant) == expected_hash else None
    except (CupyGemmError, KeyError, TypeError):
        return None


def _distance(entry: dict, m: int, n: int, k: int) -> tuple[float, float]:
    gaps = [abs(math.log2(d / max(e, 1))) for d, e in zip((m, n, k), entry["shape"])]
    return max(gaps), sum(gaps)


def _gain(entry: dict, which: str) -> float:
    own = entry.get("time_ms" if which == "variant" else "catalogue_ms")
    default = entry.get("default_ms")
    if not own:
        return -1.0
    return math.inf if not default else default / own - 1.0


def lookup_entry(device, dtype: str, acc: str | None, layout: str, m: int, n: int, k: int,
                 which: str = "variant", path=None) -> tuple[dict, Variant] | None:
    """The entry (and its Variant) that covers this problem: the shape's own bucket, else the nearest tuned
    shape within FALLBACK_RATIO per dimension whose winner beat the default by FALLBACK_MIN_GAIN."""
    name, cc = device_key(device)
    acc = acc or default_acc(dtype)
    entries = _entries(path)
    exact = entries.get(entry_key(name, cc, dtype, acc, layout, bucket(m, n, k)))
    if exact is not None:
        variant = resolve(exact, which)
        if variant is not None:
            return exact, variant
    limit = math.log2(FALLBACK_RATIO)
    near = []
    for entry in entries.values():
        if (entry.get("device"), entry.get("cc"), entry.get("dtype"), entry.get("acc"), entry.get("layout")) \
                != (name, cc, dtype, acc, layout) or entry is exact:
            continue
        dist = _distance(entry, m, n, k)
        if dist[0] <= limit + 1e-9 and _gain(entry, which) >= FALLBACK_MIN_GAIN:
            near.append((dist, entry["key"], entry))
    for _, _, entry in sorted(near, key=lambda t: (t[0], t[1])):
        variant = resolve(entry, which)
        if variant is not None:
            return entry, variant
    return None


def _answer(device, dtype: str, acc: str | None, layout: str, m: int, n: int, k: int):
    """(the winner's Variant, the catalogue variant's name) for a problem, memoised until the file changes."""
    _entries()  # re-reads a changed file and forgets earlier answers
    memo_key = (device_key(device), dtype, acc, layout, m, n, k)
    answers = _state["answers"]
    if memo_key not in answers:
        found = lookup_entry(device, dtype, acc, layout, m, n, k, "variant")
        winner = found[1] if found else None
        if winner is None or winner.name not in registry.catalogue():
            found = lookup_entry(device, dtype, acc, layout, m, n, k, "catalogue")
        answers[memo_key] = (winner, found[1].name if found else None)
    return answers[memo_key]


def lookup_variant(device, dtype: str, acc: str | None, layout: str, m: int, n: int, k: int) -> Variant | None:
    """The tuned configuration for this problem (possibly a swept point outside the catalogue), or None."""
    return _answer(device, dtype, acc, layout, m, n, k)[0]


def lookup(device, dtype: str, acc: str | None, layout: str, m: int, n: int, k: int) -> str | None:
    """The name of the catalogue variant `variant="auto"` should use, or None for the dtype's default.

    Names only catalogue variants (what registry.lookup resolves): when the overall winner is a swept point
    outside the catalogue, this is the fastest catalogue variant measured in the same tuning run;
    `lookup_variant` returns the winner itself. Answers are memoised until the database file changes."""
    return _answer(device, dtype, acc, layout, m, n, k)[1]


# ---- tuning -------------------------------------------------------------------------------------------

@dataclasses.dataclass
class TuneResult:
    shape: tuple[int, int, int]
    key: str
    winner: object = None  # results.Record of the fastest correct configuration (None: nothing ran)
    default: object = None  # the dtype default's Record
    cublas: object = None  # the cuBLAS Record
    catalogue: object = None  # the fastest catalogue variant's Record


def _default_for(dtype: str, acc: str, cc: int) -> str | None:
    """The variant matmul would use by default for this dtype and accumulate type on compute capability cc."""
    from .api import DEFAULTS
    cat = registry.catalogue()
    for name in DEFAULTS.get(acc if acc in ("tf32", "3xtf32") else dtype, ()):
        v = cat.get(name)
        if v is not None and v.acc == acc and cc >= v.family.min_cc(v.params, v.dtype, v.acc) \
                and (not v.family.needs_sm90a or cc == 90):
            return name
    return None


def tune(shapes, dtype: str = "float32", acc: str | None = None, *, families: Iterable[str] | None = None,
         variants: Iterable[str] | None = None, family: str | None = None, grid=None, devices=None,
         settings=None, path=None, on_event=None, **sweep_kw) -> list[TuneResult]:
    """Measure candidates at each shape and store the fastest correct one per shape bucket.

    Candidates: the catalogue's variants for (dtype, acc) — only `variants` if given, only those of
    `families` if given — plus the points of `grid` in `family` if given, plus always the default, so that
    the stored choice is never slower than the default at the tuned shape. Other keywords go to
    sweep.measure (compile_workers, …, or Settings fields such as repeats=10).
    """
    import numpy as np
    from . import sweep
    dtype = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    acc = acc or default_acc(dtype)
    shapes = sweep.parse_shapes([shapes] if isinstance(shapes, str) else
                                [s if isinstance(s, str) else "x".join(map(str, s)) for s in shapes], dtype)
    device_ids = sweep._device_ids(devices)
    device, cc = device_key(device_ids[0])
    cat = registry.catalogue()
    if variants is not None:
        names = [registry.lookup(n).name for n in variants]
    else:
        wanted = set(families) if families is not None else None
        names = [n for n, v in cat.items() if v.dtype == dtype and v.acc == acc
                 and (wanted is None or v.family.name in wanted)]
    default = _default_for(dtype, acc, cc)
    if default and default not in names:
        names.append(default)
    pts = sweep.catalogue_points(names)
    if family is not None:
        extra = [p for p in sweep.points(family, grid or {}, dtype, acc) if p.valid and p.name not in names]
        pts += extra
    pts = [dataclasses.replace(p, index=i) for i, p in enumerate(pts)]
    result = sweep.measure(pts, shapes, devices=device_ids, settings=settings, on_event=on_event, **sweep_kw)
    layout = "row"
    out, entries = [], []
    for shape in shapes:
        key = entry_key(device, cc, dtype, acc, layout, bucket(*shape))
        ranked = [r for r, _ in result.ranked(shape)]
        found = TuneResult(shape, key)
        found.default = next((r for r in result.kernels(shape) if r.variant == default), None)
        found.cublas = next((r for r in result.baselines(shape) if r.status == "ok"), None)
        found.catalogue = next((r for r in ranked if r.variant in cat), None)
        found.winner = ranked[0] if ranked else None
        out.append(found)
        if found.winner is not None:
            entries.append(_entry(found, device, cc, dtype, acc, layout, default))
    if entries:
        store(entries, path)
    return out


def _entry(found: TuneResult, device: str, cc: int, dtype: str, acc: str, layout: str, default: str | None) -> dict:
    from . import __version__
    w, c, d = found.winner, found.catalogue, found.default
    entry = {"key": found.key, "device": device, "cc": cc, "dtype": dtype, "acc": acc, "layout": layout,
             "bucket": list(bucket(*found.shape)), "shape": list(found.shape),
             "variant": w.variant, "family": w.family, "params": dict(w.params), "source_hash": w.source_hash,
             "time_ms": w.time_ms, "time_q1_ms": w.time_q1_ms, "time_q3_ms": w.time_q3_ms,
             "default": default or "", "default_ms": d.time_ms if d is not None and d.status == "ok" else None,
             "cublas": found.cublas.variant if found.cublas else "",
             "cublas_ms": found.cublas.time_ms if found.cublas else None,
             "tuned_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "cupy_gemm": __version__}
    if c is not None:
        entry.update(catalogue_variant=c.variant, catalogue_family=c.family, catalogue_params=dict(c.params),
                     catalogue_source_hash=c.source_hash, catalogue_ms=c.time_ms)
    return entry


def listing(path=None) -> list[dict]:
    """Every entry with `valid`: whether its winner still renders to the source it was tuned with."""
    return [{**entry, "valid": resolve(entry) is not None} for entry in sorted(load(path).values(),
                                                                                   key=lambda e: e["key"])]

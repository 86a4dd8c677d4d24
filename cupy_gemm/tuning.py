"""The tuning database behind `matmul(a, b, variant="auto")`: the file, and the lookup. It depends only on the
catalogue and the renderer, so that the API imports it; `cupy_gemm.measure.tune` fills it.

An entry is keyed by the GPU (name and compute capability), the input dtype, the accumulate type, B's layout
("row", or "col" for x @ W.T with W stored N×K) and a shape bucket (each of M, N, K rounded to the nearest
power of two on a log scale), or the exact shape for entries of `cupy-gemm tune`'s default mode (a model's
shapes often share a bucket: 3584 and 4096 do). It names the fastest configuration measured there, with the
hash of its rendered source: once its template or a helper it includes changes, the entry is ignored until
tuned again. `lookup` takes the entry of the exact shape, else of its bucket, else the nearest tuned shape of
the same GPU, dtype, accumulate type and layout if every dimension is within a factor FALLBACK_RATIO of it and
the entry clearly beat the default where it was tuned; otherwise it answers None: the dtype's default.

The database is one JSON file, `tuning.json` in cupy_gemm.config.cache_dir(), with a schema version. Writers
take an exclusive lock (fcntl) on `tuning.json.lock`, re-read, merge and replace the file atomically, so
several processes may tune at once; readers never lock and see either the old or the new file.

    from cupy_gemm import tuning
    tuning.lookup(device, dtype, acc, layout, m, n, k)          # the catalogue variant's name, or None
    tuning.lookup_variant(device, dtype, acc, layout, m, n, k)  # the winner itself (maybe a swept point)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Iterable

from . import config, devices, registry
from .errors import CupyGemmError
from .fsutil import write_atomic
from .registry import Variant
from .render import render

SCHEMA = 1
FALLBACK_RATIO = 2.0  # nearest-shape fallback: every dimension within this factor of the tuned shape
FALLBACK_MIN_GAIN = 0.03  # ... and the entry beat the default by at least 3% at its own shape


def source_hash(variant: Variant) -> str:
    """Hash of the rendered source: changes whenever the template or a helper it includes changes. Tuning
    entries and sweep records carry it, so a result is never applied to a kernel that has changed since."""
    return hashlib.sha256(render(variant).encode()).hexdigest()[:16]


def db_path() -> Path:
    return config.cache_dir() / "tuning.json"


def bucket(m: int, n: int, k: int) -> tuple[int, int, int]:
    """log2 of each dimension, rounded to the nearest integer: 4096 and 5000 share a bucket, 6000 does not."""
    return tuple(int(math.floor(math.log2(max(d, 1)) + 0.5)) for d in (m, n, k))


def entry_key(device: str, cc: int, dtype: str, acc: str, layout: str, shape_bucket) -> str:
    return f"{device}|sm_{cc}|{dtype}|{acc}|{layout}|" + "x".join(f"2^{b}" for b in shape_bucket)


def shape_key(device: str, cc: int, dtype: str, acc: str, layout: str, shape) -> str:
    """The key of an entry that answers one shape first (the bucket's and the neighbours' come after)."""
    return f"{device}|sm_{cc}|{dtype}|{acc}|{layout}|" + "x".join(str(int(d)) for d in shape)


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
    path = Path(path) if path else db_path()
    with _locked(path):
        current = load(path)
        for entry in entries:
            current[entry["key"]] = entry
        write_atomic(path, json.dumps({"schema": SCHEMA, "entries": current}, indent=1, sort_keys=True))


def remove(keys: Iterable[str], path=None) -> int:
    """Delete entries by key; returns how many were there."""
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
    dev_id = device if isinstance(device, int) else device.id
    if dev_id not in _devices:
        _devices[dev_id] = (devices.device_name(dev_id), devices.compute_capability(dev_id))
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
    # the variant's own accumulate type where it differs from the key's (an exact float32 kernel that won
    # under TF32, which allows it, as the default's rules do)
    acc = entry.get("variant_acc") or entry.get("acc")
    key = (name, family, entry.get("dtype"), acc, tuple(sorted(params.items())), entry.get(prefix + "source_hash"))
    if key not in _valid:
        _valid[key] = _rebuild(name, family, entry.get("dtype"), acc, params, entry.get(prefix + "source_hash"))
    return _valid[key]


def _rebuild(name, family, dtype, acc, params, expected_hash) -> Variant | None:
    try:
        variant = registry.from_spec((family, name, dtype, acc, tuple(params.items())))
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
    """The entry (and its Variant) that covers this problem: the shape's own, else its bucket's, else the
    nearest tuned shape within FALLBACK_RATIO per dimension whose winner beat the default by FALLBACK_MIN_GAIN."""
    name, cc = device_key(device)
    acc = acc or default_acc(dtype)
    entries = _entries(path)
    for exact in (entries.get(shape_key(name, cc, dtype, acc, layout, (m, n, k))),
                  entries.get(entry_key(name, cc, dtype, acc, layout, bucket(m, n, k)))):
        variant = resolve(exact, which) if exact is not None else None
        if variant is not None:
            return exact, variant
    limit = math.log2(FALLBACK_RATIO)
    near = []
    for entry in entries.values():
        if (entry.get("device"), entry.get("cc"), entry.get("dtype"), entry.get("acc"), entry.get("layout")) \
                != (name, cc, dtype, acc, layout):
            continue  # (an exact entry that failed to resolve above fails again below)
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


def listing(path=None) -> list[dict]:
    """Every entry with `valid`: whether its winner still renders to the source it was tuned with."""
    return [{**entry, "valid": resolve(entry) is not None} for entry in sorted(load(path).values(),
                                                                                   key=lambda e: e["key"])]

"""`tune(...)`: measure candidates at shapes and store the fastest correct one per shape bucket in the
tuning database (cupy_gemm.tuning), which `matmul(variant="auto")` reads."""
from __future__ import annotations

import dataclasses
import datetime
from typing import Iterable

import numpy as np

from .. import registry, tuning
from ..api import DEFAULTS
from ..version import __version__
from . import space
from .runner import runner_for
from .shapes import parse_shapes
from .workbench import Settings


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
    cat = registry.catalogue()
    for name in DEFAULTS.get(acc if acc in ("tf32", "3xtf32") else dtype, ()):
        v = cat.get(name)
        if v is not None and v.acc == acc and v.runs_on(cc):
            return name
    return None


def tune(shapes, dtype: str = "float32", acc: str | None = None, *, families: Iterable[str] | None = None,
         variants: Iterable[str] | None = None, family: str | None = None, grid=None, devices=None,
         scheduler: str | None = None, settings=None, path=None, on_event=None, compile_workers=None,
         compile_timeout: float = 300.0, gpu_timeout: float = 600.0, **settings_kw) -> list[TuneResult]:
    """Measure candidates at each shape and store the fastest correct one per shape bucket and GPU model.

    Candidates: the catalogue's variants for (dtype, acc) — only `variants` if given, only those of
    `families` if given — plus the points of `grid` in `family` if given, plus always the default, so that
    the stored choice is never slower than the default at the tuned shape. `devices` or `scheduler` pick
    the GPUs as for sweep.measure; on a cluster of several GPU models each model is tuned on its own.
    """
    dtype = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    acc = acc or tuning.default_acc(dtype)
    shapes = parse_shapes([shapes] if isinstance(shapes, str) else
                          [s if isinstance(s, str) else "x".join(map(str, s)) for s in shapes], dtype)
    run = runner_for(devices, scheduler, compile_workers=compile_workers, compile_timeout=compile_timeout,
                     gpu_timeout=gpu_timeout)
    models = run.gpu_models()
    cat = registry.catalogue()
    if variants is not None:
        names = [registry.lookup(n).name for n in variants]
    else:
        wanted = set(families) if families is not None else None
        names = [n for n, v in cat.items() if v.dtype == dtype and v.acc == acc and v.family.abi in ("pointers", "tma")
                 and (wanted is None or v.family.name in wanted)]  # scaled_mm's and grouped_matmul's run elsewhere
    defaults = {m.name: _default_for(dtype, acc, m.cc) for m in models}
    names += [d for d in dict.fromkeys(defaults.values()) if d and d not in names]
    pts = space.catalogue_points(names)
    if family is not None:
        pts += [p for p in space.points(family, grid or {}, dtype, acc) if p.valid and p.name not in names]
    pts = [dataclasses.replace(p, index=i) for i, p in enumerate(pts)]
    result = run.measure(pts, shapes, settings or Settings(**settings_kw), (), on_event)
    out, entries = [], []
    for model in models:
        for shape in shapes:
            found = _found(result, model, shape, dtype, acc, defaults[model.name])
            out.append(found)
            if found.winner is not None:
                entries.append(_entry(found, model.name, model.cc, dtype, acc, "row", defaults[model.name]))
    if entries:
        tuning.store(entries, path)
    return out


def _found(result, model, shape, dtype: str, acc: str, default: str | None) -> TuneResult:
    """The winner, the default, cuBLAS and the best catalogue variant at one shape on one GPU model."""
    cat = registry.catalogue()
    key = tuning.entry_key(model.name, model.cc, dtype, acc, "row", tuning.bucket(*shape))
    ranked = [r for r, _ in result.ranked(shape, gpu=model.name)]
    found = TuneResult(shape, key)
    mine = [r for r in result.records if r.device_name == model.name and r.shape == tuple(shape)]
    found.default = next((r for r in mine if not r.is_baseline and r.variant == default), None)
    found.cublas = next((r for r in mine if r.is_baseline and r.status == "ok"), None)
    found.catalogue = next((r for r in ranked if r.variant in cat), None)
    found.winner = ranked[0] if ranked else None
    return found


def _entry(found: TuneResult, device: str, cc: int, dtype: str, acc: str, layout: str, default: str | None) -> dict:
    w, c, d = found.winner, found.catalogue, found.default
    entry = {"key": found.key, "device": device, "cc": cc, "dtype": dtype, "acc": acc, "layout": layout,
             "bucket": list(tuning.bucket(*found.shape)), "shape": list(found.shape),
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

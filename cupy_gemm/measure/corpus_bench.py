"""The corpus benchmark: the default `cupy_gemm.matmul` against `cupy.matmul` and `torch.matmul` (when
PyTorch is importable) on the shapes of cupy_gemm.measure.corpus, in one run on one GPU.

Per precision and shape: GPU time per call of each (corpus_timing: events around many calls, operands
rotated through more than twice the L2 cache; the three share the same device memory, torch through
DLPack), TFLOPS, ratios, the share of the copy bandwidth measured at the start of the run, and every
output checked against the float64 reference. Memory-bound shapes also time their traffic floor (A and B
read, C written by a plain kernel: measure/traffic_floor.py), the least time those bytes take in one launch.
Per precision: host cost per call on small squares.
Precisions: float16 and bfloat16 (fp32 accumulation), float32 (exact, CUDA cores, for all three) and
tf32 (float32 inputs on TF32 tensor cores for all three).

    cupy-gemm bench --shapes llm-small --dtype float16 --dtype tf32 --out DIR
    cupy-gemm bench --shapes llm-small --b-layout col --out DIR      # x @ W.T, W stored N×K

With `variants=[...]` each shape times those of the variants that serve the precision instead of the
default, recording each and marking the fastest correct one `best`: what a dispatch table is made from.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .. import api, registry, verify
from ..arrange import B_LAYOUTS
from ..errors import CupyGemmError
from .workbench import numpy_dtype
from . import corpus_records as records_
from . import corpus_timing as timing
from . import traffic_floor
from .corpus import Shape


@dataclass(frozen=True)
class Settings:
    repeats: int = 7
    warmup_ms: float = 20.0
    target_ms: float = 2.0  # GPU time between one pair of events
    max_seconds: float = 3.0  # per shape and precision, all implementations together
    host_sizes: tuple[int, ...] = (64, 256, 1024)  # squares whose host cost per call is measured
    host_calls: int = 2000
    check: bool = True
    torch: bool = True  # compare with torch.matmul when PyTorch is importable
    seed: int = 0
    b_layout: str = "row"  # arrange.B_LAYOUTS: B stored K×N (x @ W), or the transpose of an N×K array (x @ W.T)
    variant: str | None = None  # the path timed as ours: None, the default; "auto", the tuning database's choice
    deterministic: bool = True  # False: ours as matmul(deterministic=False), split-K summed by atomics

    def __post_init__(self):
        if self.b_layout not in B_LAYOUTS:
            raise ValueError(f"b_layout must be one of {', '.join(B_LAYOUTS)}, not {self.b_layout!r}")
        if self.variant not in (None, api.AUTO):
            raise ValueError(f"variant must be None (the default) or {api.AUTO!r}, not {self.variant!r}")


def input_dtype(mode: str) -> str:
    return "float32" if mode == "tf32" else mode


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@contextlib.contextmanager
def precision(mode: str):
    """Exact float32 or TF32 for all three libraries while the block runs, switched as a user would:
    CUPY_TF32 (read by cupy_gemm at every call), CuPy's compute type (CuPy reads CUPY_TF32 only once, at
    its first product) and torch's allow_tf32. Everything is restored afterwards."""
    from cupy._core import _routines_linalg as linalg
    if mode not in records_.DTYPES:
        raise ValueError(f"unknown dtype {mode!r}; choose from {', '.join(records_.DTYPES)}")
    tf32, torch = mode == "tf32", _torch()
    saved = (os.environ.get("CUPY_TF32"), linalg.get_compute_type(np.float32),
             torch.backends.cuda.matmul.allow_tf32 if torch else None)
    os.environ["CUPY_TF32"] = "1" if tf32 else "0"
    linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32 if tf32 else linalg.COMPUTE_TYPE_DEFAULT)
    if torch:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        env, compute, torch_tf32 = saved
        if env is None:
            os.environ.pop("CUPY_TF32", None)
        else:
            os.environ["CUPY_TF32"] = env
        linalg.set_compute_type(np.float32, compute)
        if torch:
            torch.backends.cuda.matmul.allow_tf32 = torch_tf32


def operand_sets(mnk: tuple[int, int, int], dtype: str, count: int, seed: int, b_layout: str = "row") -> list[tuple]:
    """`count` sets (A, B, out), inputs random normal: never zeros, which would hide a wrong index. b_layout
    "col": B is the transpose of a C-contiguous N×K array, as a linear layer's weight in x @ W.T."""
    import cupy
    m, n, k = mnk
    target = numpy_dtype(dtype)
    sets = []
    for i in range(count):
        rng = cupy.random.default_rng(seed + i)
        a = rng.standard_normal((m, k), dtype=cupy.float32).astype(target)
        if b_layout == "col":
            b = rng.standard_normal((n, k), dtype=cupy.float32).astype(target).T
        else:
            b = rng.standard_normal((k, n), dtype=cupy.float32).astype(target)
        sets.append((a, b, cupy.empty((m, n), dtype=target)))
    return sets


def baseline_calls(sets, torch) -> dict[str, list[Callable]]:
    """cupy.matmul and (with torch) torch.matmul on the same device memory, shared through DLPack."""
    import cupy
    calls = {"cupy": [lambda a=a, b=b, o=o: cupy.matmul(a, b, out=o) for a, b, o in sets]}
    if torch is not None:
        views = [tuple(torch.from_dlpack(x) for x in s) for s in sets]
        calls["torch"] = [lambda a=a, b=b, o=o: torch.matmul(a, b, out=o) for a, b, o in views]
    return calls


def candidates(mode: str, names: Iterable[str]) -> list[registry.Variant]:
    """The variants among `names` that serve `mode`: its input dtype, and never TF32 in exact float32. Under
    tf32 the exact float32 kernels compete too: TF32 is allowed there, not required (dispatch.why_not
    accepts them for the tf32 key), and where a TF32 kernel must copy a row-major B or the product is
    memory-bound, CUDA cores can win. An unknown name raises UnknownVariantError first."""
    found = [registry.lookup(name) for name in names]
    return [v for v in found if v.dtype == input_dtype(mode) and v.acc in ("float32", mode)]


def _ours(sets, variants, deterministic: bool = True) -> tuple[dict, dict]:
    """({key: plans} of the implementations that could be planned, {key: outcome} of all of them). A
    variant None (the default) or "auto" (the tuning database's choice) is keyed `ours`."""
    plans, outcomes = {}, {}
    for variant in variants:
        key = "ours" if variant is None or isinstance(variant, str) else variant.name
        try:
            plans[key] = [api.Plan(a, b, out=o, variant=variant, deterministic=deterministic) for a, b, o in sets]
        except CupyGemmError as e:  # a variant that cannot serve this shape is a finding, not a stop
            outcomes[key] = {"variant": key, "status": "invalid", "reason": f"{type(e).__name__}: {e}"}
            continue
        used = plans[key][0].variant
        outcomes[key] = {"variant": getattr(used, "name", used), "status": "ok", "reason": "",
                         "default": variant is None}
    return plans, outcomes


def _first_calls(calls: dict, plans: dict, outcomes: dict, sets, mode: str, k: int,
                 check: bool) -> tuple[dict, dict]:
    """Run each implementation once on the first set, its output NaN-poisoned: ({key: worst error/bound}
    when `check`, {baseline: why it failed}). A wrong result of ours makes its outcome `incorrect`; a
    baseline that raises (a dtype its library lacks) is dropped from `calls`."""
    import cupy
    reference = verify.reference(sets[0][0], sets[0][1]) if check else None
    out = sets[0][2]
    errors, failures = {}, {}
    for key in list(calls):
        used = plans[key][0].variant if key in plans else None
        acc = used.acc if isinstance(used, registry.Variant) else "tf32" if mode == "tf32" else "float32"
        out.fill(cupy.nan)  # an element the call skips stays NaN
        try:
            calls[key][0]()
            cupy.cuda.get_current_stream().synchronize()
        except (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError):
            raise  # the context may be gone: not a finding about one library
        except Exception as e:
            if key in plans:
                raise
            del calls[key]
            failures[key] = f"{type(e).__name__}: {e}"
            continue
        if check:
            verdict = verify.check(out, *reference, input_dtype(mode), acc, k)
            errors[key] = verdict.worst_ratio
            if key in plans and not verdict.ok:
                outcomes[key].update(status="incorrect", reason=str(verdict))
    return errors, failures


def measure_shape(shape: Shape, mode: str, settings: Settings, bandwidth: float, ridge: float | None,
                  variants: list | None = None) -> list[dict]:
    """Records for one shape in one precision (inside precision(mode)): a `corpus` record for the
    default path (settings.variant), or a `candidate` record per variant when `variants` is given (None
    among them: the default path, its record marked `default`)."""
    import cupy
    itemsize = numpy_dtype(input_dtype(mode)).itemsize
    count = timing.rotation_count(records_.min_bytes(*shape.mnk, itemsize), timing.l2_bytes(cupy.cuda.Device().id))
    sets = operand_sets(shape.mnk, input_dtype(mode), count, settings.seed, settings.b_layout)
    calls = baseline_calls(sets, _torch() if settings.torch else None)
    if records_.memory_bound(*shape.mnk, itemsize, ridge):
        calls["floor"] = traffic_floor.calls(sets)  # the floor of these bytes, timed in the same rounds
    plans, outcomes = _ours(sets, [settings.variant] if variants is None else variants, settings.deterministic)
    calls.update(plans)
    errors, failures = _first_calls(calls, plans, outcomes, sets, mode, shape.k, settings.check)
    timed = {key: timing.Rotation(c) for key, c in calls.items()
             if c and (key not in outcomes or outcomes[key]["status"] == "ok")}
    times = timing.time_rounds(timed, repeats=settings.repeats, warmup_ms=settings.warmup_ms,
                               target_ms=settings.target_ms, max_seconds=settings.max_seconds)
    return records_.shape_records(shape, mode, "corpus" if variants is None else "candidate", outcomes, times,
                                  errors, itemsize, count, bandwidth, ridge, failures)


def host_records(mode: str, settings: Settings) -> list[dict]:
    """Wall time per call of `host_calls` calls in a loop, one synchronisation, on small squares: the best
    of three loops, ours and the baselines' in turn."""
    import cupy
    torch = _torch() if settings.torch else None
    out = []
    for size in settings.host_sizes:
        sets = operand_sets((size, size, size), input_dtype(mode), 1, settings.seed, settings.b_layout)
        a, b, o = sets[0]
        calls = {"ours": lambda: api.matmul(a, b, out=o, deterministic=settings.deterministic),
                 **{key: c[0] for key, c in baseline_calls(sets, torch).items()}}
        us = {key: seconds * 1e6 for key, seconds in timing.host_costs(calls, settings.host_calls).items()}
        used = api.Plan(a, b, out=o).variant
        record = {"kind": "host", "dtype": mode, "name": f"square.{size}", "M": size, "N": size, "K": size,
                  "variant": getattr(used, "name", used), "status": "ok", "calls": settings.host_calls,
                  **{f"{key}_us": us.get(key) for key in ("ours",) + records_.BASELINES}}
        record.update({f"x_{key}": records_.ratio(record[f"{key}_us"], record["ours_us"])
                       for key in records_.BASELINES})
        out.append(record)
        cupy.cuda.get_current_stream().synchronize()
    return out


def _check_streams() -> None:
    """Events, CuPy and torch must share one stream, or the events would not bracket torch's kernels."""
    import cupy
    torch = _torch()
    if torch is not None and torch.cuda.current_stream().cuda_stream != cupy.cuda.get_current_stream().ptr:
        raise RuntimeError("torch and CuPy launch on different streams; run from the default stream of both")


def run(shapes: list[Shape], dtypes: Iterable[str] = records_.DTYPES, *, variants: list[str] | None = None,
        settings: Settings = Settings(), progress: Callable[[str], None] | None = None,
        command: str = "", checkpoint: Callable[[dict, list], None] | None = None,
        with_default: bool = False) -> tuple[dict, list[dict]]:
    """(provenance, records) of the corpus benchmark on the current GPU; `progress` receives a line per
    measurement, `checkpoint` (provenance, records so far) after each shape, so that a run cut short
    still leaves what it measured. with_default: time the default path beside the `variants`."""
    import cupy
    say = progress or (lambda line: None)
    dtypes = list(dtypes)
    chosen = {mode: candidates(mode, variants) for mode in dtypes} if variants is not None else {}
    device = cupy.cuda.Device()
    _check_streams()
    bandwidth = timing.copy_bandwidth()
    meta = records_.provenance(command, [device.id], hbm_bytes_per_s=bandwidth, l2_bytes=timing.l2_bytes(device.id),
                               rotation_factor=timing.ROTATION_FACTOR, settings=dataclasses.asdict(settings))
    say(f"{meta['gpu']}: copy bandwidth {bandwidth / 1e9:.0f} GB/s, L2 {meta['l2_bytes'] >> 20} MiB")
    out: list[dict] = []
    for mode in dtypes:
        if variants is not None and not chosen[mode]:
            say(f"[{mode}] none of the variants takes {mode}: skipped")
            continue
        ridge = records_.ridge_point(meta["gpu"], mode, bandwidth)
        with precision(mode):
            for i, shape in enumerate(shapes, 1):
                timed = chosen.get(mode)
                rows = measure_shape(shape, mode, settings, bandwidth, ridge,
                                     [None, *timed] if timed is not None and with_default else timed)
                out += rows
                for r in rows:
                    say(f"[{mode} {i}/{len(shapes)}] {shape.name} {shape.label}: {line(r)}")
                cupy.get_default_memory_pool().free_all_blocks()
                if checkpoint:
                    checkpoint(meta, out)
            for r in host_records(mode, settings) if variants is None else []:
                out.append(r)
                say(f"[{mode} host] {r['name']}: {line(r)}")
            if checkpoint:
                checkpoint(meta, out)
    return meta, out


def line(r: dict) -> str:
    """A record in one line of progress."""
    def us(key):
        return "-" if r.get(key) is None else f"{r[key]:.1f}"

    def x(key):
        return "-" if r.get(key) is None else f"{r[key]:.2f}x"
    text = (f"{r['variant']} {r['status']} ours {us('ours_us')} cupy {us('cupy_us')} torch {us('torch_us')} us, "
            f"{x('x_cupy')} cupy, {x('x_torch')} torch")
    if r.get("ours_tflops") is not None:
        text += f", {r['ours_tflops']:.1f} TFLOPS, {r['ours_hbm_pct']:.0f}% HBM"
        if r.get("ours_floor_pct") is not None:
            text += f", {r['ours_floor_pct']:.0f}% of the floor"
    return text + (f" ({r['reason']})" if r.get("reason") else "")


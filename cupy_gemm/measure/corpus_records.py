"""Records of the corpus benchmark, their summary and their files; no GPU needed.

A record is a flat dict. `kind` says what it holds:
  corpus     one shape in one precision: the default path (`ours_*`, its `variant`) against cupy.matmul
             (`cupy_*`) and torch.matmul (`torch_*`); `x_cupy` = cupy time / our time, so > 1 means faster
  candidate  the same for one explicit variant, `best` marking the fastest correct one of the shape
  host       wall time per call of a loop of calls (host cost), on a small square
Times are GPU microseconds per call (medians), `*_hbm_pct` the share of the bandwidth a device-to-device
copy reached in the same run, counting each operand read once and the output written once. Memory-bound
shapes carry `floor_us`, the same operands read and output written by a plain kernel in the same rounds
(measure/traffic_floor.py), and `ours_floor_pct` = 100 × floor_us / ours_us: how close ours comes to what
one launch moving those bytes can do.
"""
from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path
from typing import Iterable

from ..fsutil import write_atomic
from .provenance import metadata

DTYPES = ("float16", "bfloat16", "float32", "tf32")
BASELINES = ("cupy", "torch")
RATIOS = ("x_cupy", "x_torch")
SCHEMA = 1

# Dense tensor-core (float16/bfloat16, tf32) and CUDA-core (float32) peaks from the datasheets, TFLOPS,
# matched against the device name in this order. They place the ridge point (peak / bandwidth) that
# separates memory-bound shapes from compute-bound ones.
PEAK_TFLOPS = (
    ("H200", {"float16": 989.4, "bfloat16": 989.4, "tf32": 494.7, "float32": 66.9}),
    ("H100 NVL", {"float16": 835.0, "bfloat16": 835.0, "tf32": 417.5, "float32": 59.8}),
    ("H100 PCIe", {"float16": 756.0, "bfloat16": 756.0, "tf32": 378.0, "float32": 51.2}),
    ("H100", {"float16": 989.4, "bfloat16": 989.4, "tf32": 494.7, "float32": 66.9}),
    ("A100", {"float16": 312.0, "bfloat16": 312.0, "tf32": 156.0, "float32": 19.5}),
)


def ridge_point(device_name: str, mode: str, bandwidth: float) -> float | None:
    """FLOP per byte at which the device's peak for `mode` meets its bandwidth (bytes/s); None for a GPU
    the table does not know."""
    for key, peaks in PEAK_TFLOPS:
        if key in device_name:
            return peaks[mode] * 1e12 / bandwidth
    return None


def min_bytes(m: int, n: int, k: int, itemsize: int) -> int:
    """The least memory traffic of a product: A and B read once, C written once."""
    return (m * k + k * n + m * n) * itemsize


def memory_bound(m: int, n: int, k: int, itemsize: int, ridge: float | None) -> bool | None:
    """Whether the product's FLOP per byte of min_bytes lies below the ridge point (None: ridge unknown)."""
    return None if ridge is None else 2.0 * m * n * k / min_bytes(m, n, k, itemsize) < ridge


def impl_fields(m: int, n: int, k: int, timing: dict | None, bandwidth: float, traffic: int) -> dict:
    """us, tflops, hbm_pct, spread, calls, repeats of one implementation from time_rounds' entry."""
    if not timing:
        return {"us": None, "tflops": None, "hbm_pct": None, "spread": None, "calls": None, "repeats": None}
    times = sorted(timing["times_ms"])
    median = statistics.median(times)
    q1, q3 = (statistics.quantiles(times, n=4)[::2] if len(times) > 1 else (median, median))
    seconds = median * 1e-3
    return {"us": median * 1e3, "tflops": 2.0 * m * n * k / seconds / 1e12,
            "hbm_pct": 100.0 * traffic / seconds / bandwidth, "spread": (q3 - q1) / median,
            "calls": timing["calls"], "repeats": len(times)}


def ratio(baseline_us: float | None, ours_us: float | None) -> float | None:
    return baseline_us / ours_us if baseline_us and ours_us else None


def shape_records(shape, mode: str, kind: str, outcomes: dict[str, dict], times: dict[str, dict],
                  errors: dict[str, float], itemsize: int, sets: int, bandwidth: float,
                  ridge: float | None, failures: dict[str, str] | None = None) -> list[dict]:
    """One record per entry of `outcomes` (key -> {variant, status, reason}), each carrying the baselines'
    figures; `times` and `errors` are keyed like outcomes plus "cupy" and "torch", `failures` says why a
    baseline has no figures."""
    m, n, k = shape.mnk
    traffic = min_bytes(m, n, k, itemsize)
    intensity = 2.0 * m * n * k / traffic
    base = {"kind": kind, "dtype": mode, "name": shape.name, "model": shape.model, "layer": shape.layer,
            "M": m, "N": n, "K": k, "also": ",".join(shape.also), "sets": sets, "min_bytes": traffic,
            "intensity": intensity, "memory_bound": memory_bound(m, n, k, itemsize, ridge),
            "floor_us": impl_fields(m, n, k, times.get("floor"), bandwidth, traffic)["us"]}
    for key in BASELINES:
        fields = impl_fields(m, n, k, times.get(key), bandwidth, traffic)
        base.update({f"{key}_{f}": fields[f] for f in ("us", "tflops", "hbm_pct")})
        base[f"{key}_error"] = errors.get(key)
        base[f"{key}_reason"] = (failures or {}).get(key, "")
    records = []
    for key, outcome in outcomes.items():
        fields = impl_fields(m, n, k, times.get(key), bandwidth, traffic)
        record = {**base, **outcome, "error": errors.get(key), **{f"ours_{f}": v for f, v in fields.items()}}
        record.update({f"x_{b}": ratio(record[f"{b}_us"], record["ours_us"]) for b in BASELINES})
        floor = ratio(record["floor_us"], record["ours_us"])
        record["ours_floor_pct"] = None if floor is None else 100.0 * floor
        records.append(record)
    if kind == "candidate":
        timed = [r for r in records if r["status"] == "ok" and r["ours_us"]]
        fastest = min(timed, key=lambda r: r["ours_us"], default=None)
        for r in records:
            r["best"] = r is fastest
    return records


def geomean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _stats(records: list[dict], key: str) -> dict:
    rows = [r for r in records if r.get(key) is not None]
    worst = min(rows, key=lambda r: r[key], default=None)
    return {"geomean": geomean(r[key] for r in rows), "min": worst[key] if worst else None,
            "min_at": worst["name"] if worst else "", "count": len(rows)}


def summarise(records: Iterable[dict]) -> dict:
    """Per dtype: geometric mean and minimum (with the shape it occurs at) of each ratio over the corpus
    records, of our share of the bandwidth and of the traffic floor's speed over shapes with M <= 16, and of
    the host-cost ratios.
    Shapes where ours failed or was wrong count in `failed`, not in the means."""
    records = list(records)
    out = {}
    for mode in dict.fromkeys(r["dtype"] for r in records):
        shapes = [r for r in records if r["dtype"] == mode and r["kind"] == "corpus"]
        ok = [r for r in shapes if r["status"] == "ok"]
        host = [r for r in records if r["dtype"] == mode and r["kind"] == "host"]
        out[mode] = {**{key: _stats(ok, key) for key in RATIOS},
                     "hbm_pct_m16": _stats([r for r in ok if r["M"] <= 16], "ours_hbm_pct"),
                     "floor_pct_m16": _stats([r for r in ok if r["M"] <= 16], "ours_floor_pct"),
                     "host": {key: _stats(host, key) for key in RATIOS},
                     "shapes": len(shapes), "failed": [r["name"] for r in shapes if r["status"] != "ok"]}
    return out


def provenance(command: str, device_ids: Iterable[int] = (), **extra) -> dict:
    """Where, when and with what: GPU, driver, CUDA runtime, NVRTC, CuPy, PyTorch, git revision, date,
    the command."""
    torch_meta = {"torch": ""}
    try:
        import torch
        matmul = torch.backends.cuda.matmul  # torch's own defaults, kept: what its users get
        torch_meta = {"torch": torch.__version__, "torch_cuda": torch.version.cuda or "",
                      "torch_blas": str(torch.backends.cuda.preferred_blas_library()),
                      "torch_fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
                      "torch_bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction}
    except ImportError:
        pass
    meta = metadata(device_ids, command=command, **torch_meta, **extra)
    meta["gpu"] = ", ".join(d["name"] for d in meta.get("devices", []))
    return meta


def to_csv(meta: dict, records: list[dict]) -> str:
    """`# key: value` lines of provenance, then one row per record with the union of their fields."""
    buf = io.StringIO()
    for key, value in meta.items():
        buf.write(f"# {key}: {json.dumps(value) if isinstance(value, (dict, list)) else value}\n")
    columns = list(dict.fromkeys(key for r in records for key in r))
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in records:
        writer.writerow([r.get(c) for c in columns])  # None becomes an empty cell
    return buf.getvalue()


def write(directory, meta: dict, records: list[dict]) -> dict[str, Path]:
    """corpus.json (provenance, summary, records) and corpus.csv in `directory`, each written whole."""
    directory = Path(directory)
    paths = {"json": directory / "corpus.json", "csv": directory / "corpus.csv"}
    document = {"schema": SCHEMA, "metadata": meta, "summary": summarise(records), "records": records}
    write_atomic(paths["json"], json.dumps(document, indent=1))
    write_atomic(paths["csv"], to_csv(meta, records))
    return paths


def read(path) -> tuple[dict, list[dict]]:
    document = json.loads(Path(path).read_text())
    if document.get("schema") != SCHEMA:
        raise ValueError(f"{path}: corpus results of schema {document.get('schema')!r}; this reads {SCHEMA}")
    return document["metadata"], document["records"]

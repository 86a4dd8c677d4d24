"""Sweep and benchmark records: one row per (configuration, shape), their ranking, and CSV/JSON files that
carry the machine they were measured on.

CSV files start with `# key: value` lines (pandas: `read_csv(path, comment="#")`); JSON files are
`{"schema": 1, "metadata": {...}, "records": [...]}`. Both are rewritten atomically, so a killed sweep
leaves a complete file that `--resume` continues from.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..fsutil import write_atomic

SCHEMA = 1
STATUSES = ("ok", "invalid", "compile_failed", "launch_failed", "incorrect", "compiled")


@dataclass
class Record:
    """One configuration at one shape. Times in milliseconds; `error` is max |C - ref| / bound (<= 1 passes,
    see cupy_gemm.verify); `pct_cublas` is 100 · cuBLAS time / this time on the same device."""
    family: str
    variant: str
    dtype: str
    acc: str
    layout: str
    M: int
    N: int
    K: int
    status: str
    reason: str = ""
    params: dict = field(default_factory=dict)
    catalogue: str = ""  # the catalogue variant with exactly these parameters, if any
    time_ms: float | None = None  # median
    time_q1_ms: float | None = None
    time_q3_ms: float | None = None
    spread: float | None = None  # (q3 - q1) / median
    repeats: int | None = None
    tflops: float | None = None
    cublas: str = ""  # the baseline row this one is compared with
    cublas_ms: float | None = None
    pct_cublas: float | None = None
    error: float | None = None
    ragged_shape: str = ""
    ragged_error: float | None = None
    registers: int | None = None
    static_smem: int | None = None
    dynamic_smem: int | None = None
    local_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    threads: int | None = None
    blocks_per_sm: int | None = None
    occupancy: float | None = None
    compile_s: float | None = None
    arch: str = ""
    source_hash: str = ""
    device: int | None = None
    device_name: str = ""
    host: str = ""  # where it was measured: with device_name and driver, the point's provenance
    driver: str = ""
    times_ms: list = field(default_factory=list)  # every repeat (JSON only)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.M, self.N, self.K)

    @property
    def is_baseline(self) -> bool:
        return self.family == "cublas"

    def key(self) -> tuple:
        """What identifies a measurement for --resume: the configuration and the shape."""
        return (self.family, self.variant, self.dtype, self.acc, tuple(sorted(self.params.items())),
                self.M, self.N, self.K)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Record":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


FIELDS = [f.name for f in dataclasses.fields(Record)]
_CSV_SKIP = {"params", "times_ms"}
_INT_FIELDS = {f.name for f in dataclasses.fields(Record) if "int" in str(f.type) and "float" not in str(f.type)}
_FLOAT_FIELDS = {f.name for f in dataclasses.fields(Record) if "float" in str(f.type)}


def gpu_models(records: Iterable[Record]) -> list[str]:
    """The GPU models the records were measured on, in order of first appearance ("" for GPU-free ones)."""
    return list(dict.fromkeys(r.device_name for r in records if r.time_ms is not None))


def ranked(records: Iterable[Record], gpu: str | None = None) -> list[tuple[Record, bool]]:
    """The `ok` kernel records fastest first (ties broken by name, so the order is reproducible), each with
    whether its quartile interval overlaps the next one's: such neighbours are not reliably ordered.

    Timings of different GPU models are never ranked together: records of several models need `gpu=`
    (one of `gpu_models(records)`), else ValueError."""
    ok = [r for r in records if r.status == "ok" and not r.is_baseline and r.time_ms is not None
          and (gpu is None or r.device_name == gpu)]
    models = gpu_models(ok)
    if len(models) > 1:
        raise ValueError(f"these records were measured on {len(models)} GPU models ({', '.join(models)}): "
                         f"rank each model's on its own (gpu=NAME)")
    ok.sort(key=lambda r: (r.time_ms, r.variant))
    out = []
    for i, rec in enumerate(ok):
        nxt = ok[i + 1] if i + 1 < len(ok) else None
        tied = nxt is not None and rec.time_q3_ms is not None and nxt.time_q1_ms is not None \
            and rec.time_q1_ms <= nxt.time_q3_ms and nxt.time_q1_ms <= rec.time_q3_ms
        out.append((rec, tied))
    return out


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def to_csv(records: list[Record], meta: dict) -> str:
    params = list(dict.fromkeys(p for r in records for p in r.params))
    fixed = [f for f in FIELDS if f not in _CSV_SKIP]
    param_cols = [p if p not in FIELDS else f"param_{p}" for p in params]
    buf = io.StringIO()
    for key, value in meta.items():
        text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        buf.write(f"# {key}: {text}\n")
    writer = csv.writer(buf, lineterminator="\n")
    head = fixed[:fixed.index("status")]
    writer.writerow(head + param_cols + fixed[len(head):])
    for r in records:
        row = r.to_dict()
        writer.writerow([_cell(row[f]) for f in head] + [_cell(r.params.get(p)) for p in params]
                        + [_cell(row[f]) for f in fixed[len(head):]])
    return buf.getvalue()


def from_csv(text: str) -> tuple[dict, list[Record]]:
    lines = text.splitlines(keepends=True)  # a quoted reason may hold newlines
    meta = {}
    body_start = 0
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            body_start = i
            break
        key, _, value = line[1:].strip().partition(": ")
        try:
            meta[key] = json.loads(value) if value[:1] in "[{" else value
        except json.JSONDecodeError:
            meta[key] = value
    else:
        body_start = len(lines)
    records = []
    for row in csv.DictReader(io.StringIO("".join(lines[body_start:]))):
        data, params = {}, {}
        for key, value in row.items():
            if key in FIELDS:
                data[key] = _parse_cell(key, value)
            else:
                params[key[6:] if key.startswith("param_") else key] = int(value) if value else None
        data["params"] = {k: v for k, v in params.items() if v is not None}
        records.append(Record.from_dict(data))
    return meta, records


def _parse_cell(key: str, value: str):
    if key in _INT_FIELDS:
        return int(value) if value != "" else None
    if key in _FLOAT_FIELDS:
        return float(value) if value != "" else None
    return value


def to_json(records: list[Record], meta: dict) -> str:
    return json.dumps({"schema": SCHEMA, "metadata": meta, "records": [r.to_dict() for r in records]}, indent=1)


def from_json(text: str) -> tuple[dict, list[Record]]:
    data = json.loads(text)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"results file has schema {data.get('schema')!r}; this cupy-gemm reads schema {SCHEMA}")
    return data.get("metadata", {}), [Record.from_dict(r) for r in data.get("records", [])]


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".json"):
        raise ValueError(f"results file {str(path)!r}: the name must end in .csv or .json")
    return suffix[1:]


def write(path, records: list[Record], meta: dict) -> None:
    path = Path(path)
    text = to_csv(records, meta) if _format(path) == "csv" else to_json(records, meta)
    write_atomic(path, text)


def read(path) -> tuple[dict, list[Record]]:
    path = Path(path)
    text = path.read_text()
    return from_csv(text) if _format(path) == "csv" else from_json(text)



class ResultWriter:
    """Keeps a results file up to date while a sweep runs: rewritten atomically at most every
    `interval` seconds, and on close."""

    def __init__(self, path, meta: dict, records: Iterable[Record] = (), interval: float = 2.0):
        self.path = Path(path)
        _format(self.path)
        self.meta, self.records, self.interval = meta, list(records), interval
        self._last = float("-inf")  # the first record is written at once

    def add(self, record: Record) -> None:
        self.records.append(record)
        if time.monotonic() - self._last >= self.interval:
            self.flush()

    def flush(self) -> None:
        write(self.path, self.records, self.meta)
        self._last = time.monotonic()

    def close(self, records: list[Record] | None = None) -> None:
        if records is not None:
            self.records = list(records)
        self.flush()

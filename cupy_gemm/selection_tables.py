"""Dispatch tables: per GPU, the fastest variant measured at each shape of a corpus (kernels/dispatch/table-*.toml).

This is the only module that knows their format:

    [generated]                      # how the table was made
    command = "cupy-gemm bench --shapes llm --json h100.json"
    date = "2026-11-23"
    device = "NVIDIA H100 80GB HBM3"
    cupy = "14.2.0"
    nvrtc = "13.0"
    earlier = [                      # optional: the commands of the runs before it, newest first
        "cupy-gemm bench --shapes llm-small --dtype tf32 ...",
    ]

    [gpu]                            # the GPU it serves: the name CUDA reports, and its compute capability
    name = "NVIDIA H100 80GB HBM3"
    cc = 90
    sm_count = 132
    memory_bytes_per_ns = 3017       # optional: devices.memory_bytes_per_ns, for the split-K model off the GPU

    [[entry]]                        # one per measured (dtype key, shape)
    dtype = "float16"                # float32, tf32 (float32 under CUPY_TF32=1), float16 or bfloat16
    m = 16
    n = 4096
    k = 4096
    variant = "hgemm_wgmma_m64n256k16_stages3_ws2"
    median_ms = 0.0398               # optional: the winner's median
    layout = "row"                   # optional, "row" by default
    b_layout = "col"                 # optional: measured with B column-major (x @ W.T); "row" by default

A problem takes the entry nearest to it in log space (the largest |log2| ratio over M, N, K; their sum
breaks ties), not a power-of-two bucket: a corpus is irregular (real models' projections, 4096, 11008,
14336, M = 1, 8, 16, ...), so power-of-two buckets would leave most of the 3-D grid empty and lump unlike
shapes together (11008 with 14336 but not with 8192). Each measured point answers the shapes that look
like it, within dispatch.TABLE_REACH, and the heuristic answers the rest.

Entries with b_layout = "col" were timed on x @ W.T (W stored N×K, the way linear layers keep it), each
candidate with whatever copies it needs: they answer calls whose B lies column-major, before the row-major
entries and the dispatch's B-layout rule (which swaps in the twin that reads such a B in place) do.
"""
from __future__ import annotations

import datetime
import math
import re
from functools import lru_cache

from . import registry
from .errors import CatalogueError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

_ENTRY_KEYS = {"dtype", "m", "n", "k", "variant", "median_ms", "layout", "b_layout"}
# A tile of at most this many rows of C is a decode specialist: it is filed only for shapes with no more rows
# than it has. An entry answers problems up to twice its M, and where a 16-row tile won at 512³ (H100 tf32:
# more blocks on the GPU, 6.6 µs against 7.6) it ran 1.7× slower than cuBLAS at 1024³.
FEW_ROWS = 16


def _same_gpu_name(name: str) -> str:
    return " ".join(name.split()).lower()


@lru_cache(maxsize=None)
def tables() -> tuple[dict, ...]:
    """Every shipped table, validated, entries with their log2 coordinates."""
    folder = registry.data_dir("kernels") / "dispatch"
    return tuple(parse_table(path.read_text(), path.name) for path in sorted(folder.glob("table-*.toml")))


def parse_table(text: str, file: str = "<table>") -> dict:
    """A table's TOML text, validated (CatalogueError names what is wrong), entries with log2 coordinates."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CatalogueError(f"kernels/dispatch/{file}: not valid TOML: {e}") from None
    gpu = data.get("gpu", {})
    if not isinstance(gpu.get("name"), str) or not isinstance(gpu.get("cc"), int):
        raise CatalogueError(f"kernels/dispatch/{file}: needs [gpu] with name (as CUDA reports it) and cc (e.g. 90)")
    entries = []
    for i, entry in enumerate(data.get("entry", [])):
        missing = {"dtype", "m", "n", "k", "variant"} - set(entry)
        if missing or set(entry) - _ENTRY_KEYS:
            raise CatalogueError(f"kernels/dispatch/{file} entry #{i + 1}: needs dtype, m, n, k, variant, may "
                                 f"have median_ms, layout, b_layout; got keys {sorted(entry)}")
        if entry.get("b_layout", "row") not in ("row", "col"):
            raise CatalogueError(f"kernels/dispatch/{file} entry #{i + 1}: b_layout is \"row\" or \"col\", not "
                                 f"{entry['b_layout']!r}")
        entries.append({**entry, "layout": entry.get("layout", "row"), "b_layout": entry.get("b_layout", "row"),
                        "logs": tuple(math.log2(max(entry[d], 1)) for d in "mnk")})
    return {"file": file, "generated": data.get("generated", {}), "gpu": gpu, "entries": entries,
            "gpu_key": (_same_gpu_name(gpu["name"]), gpu["cc"])}


def table_for(name: str, cc: int) -> dict | None:
    """The table of the GPU called `name` (spacing and case aside) with compute capability cc, or None."""
    wanted = (_same_gpu_name(name), cc)
    return next((t for t in tables() if t["gpu_key"] == wanted), None)


def nearest(table: dict, key: str, layout: str, m: int, n: int, k: int,
            b_layout: str = "row") -> list[tuple[dict, float]]:
    """The table's entries for (dtype key, layout, b_layout), nearest first, each with its log2 distance."""
    logs = [math.log2(max(d, 1)) for d in (m, n, k)]
    ranked = []
    for entry in table["entries"]:
        if (entry["dtype"], entry["layout"], entry["b_layout"]) == (key, layout, b_layout):
            gaps = [abs(a - b) for a, b in zip(logs, entry["logs"])]
            ranked.append((max(gaps), sum(gaps), entry))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [(entry, distance) for distance, _, entry in ranked]


def table_from_results(records, *, gpu_name: str | None = None, cc: int | None = None,
                       sm_count: int | None = None, command: str = "", date: str | None = None,
                       cupy_version: str | None = None, nvrtc_version: str | None = None,
                       memory_bytes_per_ns: float | None = None) -> dict:
    """A table from measured results: per (dtype key, layout, shape) the catalogue variant with the smallest
    median (a tile of at most FEW_ROWS rows only where M fits in it). A record is a dict with dtype, m, n, k
    (or M, N, K), variant and median_ms (or time_ms), and may have acc ("tf32" files it under the tf32 key),
    layout, b_layout ("col": timed with B column-major), status (only "ok" counts), device_name and arch
    (results.Record's fields, so `dataclasses.asdict` of sweep or bench records will do)."""
    best: dict[tuple, dict] = {}
    catalogue = registry.catalogue()
    for r in records:
        median = r.get("median_ms", r.get("time_ms"))
        name = r["variant"] if r["variant"] in catalogue else r.get("catalogue")  # a swept point may equal one
        if r.get("status", "ok") != "ok" or median is None or name not in catalogue:
            continue  # baselines (cublas), swept points outside the catalogue and failures cannot be dispatched
        key = "tf32" if r.get("acc") == "tf32" else r["dtype"]
        shape = tuple(int(r[d] if d in r else r[d.upper()]) for d in "mnk")
        rows = catalogue[name].family.tile(catalogue[name].params)[0]
        if rows <= FEW_ROWS < shape[0] and catalogue[name].max_rows() is None:
            continue  # a decode specialist at a shape of more rows (skinny families swap operands instead)
        slot = (key, r.get("layout", "row"), r.get("b_layout", "row"), shape)
        if slot not in best or median < best[slot]["median_ms"]:
            best[slot] = {"dtype": key, "m": shape[0], "n": shape[1], "k": shape[2], "variant": name,
                          "median_ms": float(median), "layout": slot[1],
                          **({"b_layout": "col"} if slot[2] == "col" else {})}
        gpu_name = gpu_name or r.get("device_name") or None
        arch = re.fullmatch(r"(?:sm|compute)_(\d+)a?", r.get("arch") or "")
        cc = cc if cc is not None or arch is None else int(arch.group(1))
    if not gpu_name or cc is None:
        raise ValueError("table_from_results needs the GPU's name (gpu_name, or device_name in the records) "
                         "and its compute capability (cc, or arch such as sm_90a in the records)")
    if cupy_version is None or nvrtc_version is None:
        from . import toolkit
        import cupy
        cupy_version = cupy_version or cupy.__version__
        nvrtc_version = nvrtc_version or ".".join(map(str, toolkit.nvrtc_version()))
    generated = {"command": command, "date": date or datetime.date.today().isoformat(), "device": gpu_name,
                 "cupy": cupy_version, "nvrtc": nvrtc_version}
    gpu = {"name": gpu_name, "cc": int(cc), **({"sm_count": int(sm_count)} if sm_count else {}),
           **({"memory_bytes_per_ns": round(memory_bytes_per_ns)} if memory_bytes_per_ns else {})}
    return {"generated": generated, "gpu": gpu, "entries": [best[s] for s in sorted(best)]}


def merged(new: dict, old: dict) -> dict:
    """`new` (a table just measured) over `old` (the shipped one): old's entries that new did not re-time
    (other shapes, dtypes, B layout) stay, and old's command heads new's `earlier`, one command a line,
    newest first, each once (tables from before the list kept them in one string joined by " | ")."""
    def key(e):
        return e["b_layout"], e["dtype"], e["layout"], e["m"], e["n"], e["k"]
    timed = {key(e) for e in new["entries"]}
    entries = new["entries"] + [e for e in old["entries"] if key(e) not in timed]
    entries.sort(key=lambda e: (e["b_layout"] != "row", e["dtype"], e["layout"], e["m"], e["n"], e["k"]))
    past = old["generated"].get("earlier", [])
    past = past.split(" | ") if isinstance(past, str) else list(past)
    earlier = list(dict.fromkeys(c for c in [old["generated"].get("command", ""), *past] if c))
    return {**new, "generated": {**new["generated"], "earlier": earlier}, "entries": entries}


def format_table(table: dict) -> str:
    """The TOML text of a table (what kernels/dispatch/table-<gpu>.toml holds)."""
    def value(v):
        if isinstance(v, list):  # earlier: one string a line
            return "[\n" + "".join(f"    {_quote(str(x))},\n" for x in v) + "]"
        return repr(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _quote(str(v))
    lines = ["[generated]", *(f"{k} = {value(v)}" for k, v in table["generated"].items()), "",
             "[gpu]", *(f"{k} = {value(v)}" for k, v in table["gpu"].items())]
    for entry in table["entries"]:
        lines += ["", "[[entry]]", *(f"{k} = {value(entry[k])}" for k in
                                     ("dtype", "m", "n", "k", "variant", "median_ms", "layout")
                                     if k in entry)]
        if entry.get("b_layout", "row") != "row":
            lines.append(f"b_layout = {value(entry['b_layout'])}")
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

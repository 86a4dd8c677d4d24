"""Which variant `matmul(variant=None)` runs: a measured table per GPU, else a heuristic on family properties.

The decision takes the GPU (name, compute capability, SM count), the dtype key (float32, tf32 when
CUPY_TF32=1, float16, bfloat16) and the problem M×N×K, and goes

1. to the GPU's dispatch table (kernels/dispatch/table-*.toml, cupy_gemm/selection_tables.py): the nearest
   measured shape in log space, if it lies within TABLE_REACH of the problem in every dimension, the
   problem has at most 2**TABLE_GROWTH times its work and (a persistent, unsplit entry) its tiles' waves
   are within WAVE_TIE of as full as at that shape;
2. else to the heuristic, whose candidates per rule are data (kernels/dispatch/candidates.toml):
   - min(M, N) <= SKINNY_MAX: the product is memory-bound; the first `skinny` entry in list order that
     covers the small dimension and keeps IN_FLIGHT_BYTES of loads in flight (an entry that splits K itself
     always does; else the covering entry with the most blocks). The lists stop where split-K measured faster;
   - the `default` entry's tiles fill less than half the GPU's block slots: the `one_wave` entry whose
     whole-K tiles (two to ONE_WAVE_TILE_ROWS rows of them, clusters whose blocks have rows of M) fill
     the most of one wave, if that is at least ONE_WAVE_FILL of the SMs; else a `split_k` entry when K is
     deep (16-bit: the one the launcher's split-K cost model expects to finish first; else the first whose
     tiles pad C within PAD_TIE of the least), else a `small_tile` entry that puts the most blocks on it
     (or, for a product that no entry cuts into more tiles, the one that pads C least);
   - otherwise the big tiles (cupy_gemm/big_tiles.py): of the `default` entries with a [tile_cost], the
     one it expects to finish first, where that beats the first entry by COST_MARGIN; else the first.
3. then, for a call whose operands are known (their Placement), the rules of cupy_gemm/placement_rules.py:
   the twin family that reads a column-major B in place, then an `unaligned` entry where the chosen
   variant's alignment copies cost as much as the product (its own twin, where B is column-major).
A named variant the catalogue lacks, that does not run on the GPU, or that does not compute in the
dtype key's precision is skipped at every step, so tables and candidate lists may name kernels that a
given installation or GPU does not have. This runs once per call geometry (the fast path caches it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import big_tiles, devices, launch_explain, placement_rules, registry, selection_tables
from .arrange import B_LAYOUTS, Placement, check_sizes, fresh
from .big_tiles import COST_MARGIN, WAVE_TIE  # noqa: F401  (dispatch's API)
from .candidates import DTYPE_KEYS, ROLES, Decision, candidates, dtype_key, tile_costs, why_not  # noqa: F401
from .errors import ConfigError, DeviceError, DTypeError
from .split_policy import MIN_K_PER_SPLIT, SPLIT_MARGIN, resident_blocks, split_plan
from .tile_geometry import (deep_k, in_flight_bytes, one_wave_blocks, padded_area, rows_of, tiles_of,  # noqa: F401
                            wave_fill, waves)
from .placement_rules import COPY_SHARE, FLOPS_PER_BYTE, kernel_cost  # noqa: F401  (dispatch's API)
from .registry import Variant
from .selection_tables import format_table, table_from_results  # noqa: F401  (the table half of the API)

SKINNY_MAX = 16  # M or N at most this: too few rows to reuse B from shared memory, so B's bytes bound it
# loads in flight over the GPU that keep HBM busy (~3 TB/s × ~1.3 µs): a few-rows entry that does not split K
# streams B through its blocks' shared-memory rings, so its blocks × ring bytes must reach this. On the H100
# 64 blocks of an 83 KB ring (5.3 MB) ran 16×4096×4096 at 80% of the copy bandwidth, 32 (2.6 MB) lost to
# 64 smaller slices of K at 16×2048×7168.
IN_FLIGHT_BYTES = 4 << 20
# the big tiles go on unless they would fill less than half the block slots (SMs × resident blocks): on
# the H100 one wave of 128×256 wgmma tiles on 96 or 112 of 132 SMs (512×6144×4096, 128×28672×8192) beat
# every split-K and smaller-tile entry by 1.5×, while CUDA-core tiles, 4 to an SM, still gain from splits
IDLE_FRACTION = 2
# log2: a measured shape answers problems within √2 of it in every dimension. Against 2×, over the H100's llm
# corpus (× cupy.matmul geomean): float16 0.964 → 0.990, bfloat16 0.973 → 0.992 (124 of 150 shapes off the
# table then); tf32 1.036 → 1.045, float32 1.059 → 1.060 (the table refined over it; tf32 128×8192×28672
# had taken 64×7168×16384's 64×64 tile at 0.69×, 1.04× on the heuristic's)
TABLE_REACH = 0.5
# log2: ... and with at most 4× its work (M·N·K). An entry timed on a smaller product chose smaller tiles or
# more K splits than 8× the work needs: on the H100, 1024³ took 512³'s entries at 0.72–0.89× cuBLAS where
# the heuristic's ran 1.05× (float32), 0.88× (tf32) and 0.97–1.04× (16-bit), 18–22% faster
TABLE_GROWTH = 2.0
# split-K tiles: the first listed (the larger) unless another pads C by more than this much less; the least
# padding alone put 1000³ tf32 on 16×128 tiles, 2.4× slower than 128×128 (1.6% more padding)
PAD_TIE = 0.10
# the one-wave rule: at most this many rows of an entry's tiles, and one wave of its blocks on at least this
# share of the SMs (H100, float16: at 128 to 512 rows 96 to 128 blocks of 64×128 or 64×192 beat the split-K
# entries' best; at 1000×2048 128 blocks of 128×128 in pairs ran 1.17-1.26× the split-K rule's pick)
ONE_WAVE_TILE_ROWS, ONE_WAVE_FILL = 8, 0.7
MODELLED_SPLITS = ("float16", "bfloat16")  # dtype keys whose split-K tile the launcher's cost model picks,
MODEL_PAD_LIMIT = 1.25  # among tiles padding C at most this much more than the least (not 128 rows for 64)
ASSUMED_SM_COUNT = 132  # an H100 SXM's, when neither the GPU nor its table says


@dataclass(frozen=True)
class Gpu:
    """What the decision needs to know of a GPU; None: unknown (ASSUMED_SM_COUNT SMs, an H100's memory)."""
    name: str
    cc: int
    sm_count: int | None = None
    memory_bytes_per_ns: float | None = None


# float32's `precision` argument -> the dispatch key it selects (kernels/dispatch/candidates.toml), which
# is also the `acc` of the tensor-core variants listed there; None keeps the dtype's rule (CUPY_TF32)
PRECISIONS = {"fp32": "float32", "tf32": "tf32", "3xtf32": "3xtf32"}


def defaults_key(dtype: str, precision: str | None = None) -> str:
    """The dispatch key for inputs of `dtype` computed at `precision` ("fp32", "tf32", "3xtf32", or None
    for the dtype's own rule). Raises before anything launches when the pair makes no sense."""
    if precision is None:
        return dtype_key(dtype)
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ConfigError("precision", precision, f"one of {', '.join(map(repr, PRECISIONS))} or None "
                          f"(the default: exact fp32, or TF32 with CUPY_TF32=1)")
    if dtype != "float32":
        raise DTypeError(f"precision={precision!r} applies to float32 inputs only; got {dtype} (leave "
                         f"precision=None: {dtype} runs on tensor cores with float32 accumulation)")
    return PRECISIONS[precision]


def first_default(key: str, cc: int) -> str:
    """The dtype key's big-tile default on compute capability cc, whatever the shape."""
    for name in candidates()["default"][key]:
        if why_not(name, key, cc) is None:
            return name
    raise DTypeError(f"no variant in the catalogue serves {key} on compute capability {cc}")


def choose(gpu: Gpu, key: str, m: int, n: int, k: int, layout: str = "row", needs=(),
           placement: Placement | None = None) -> Decision:
    """needs: Family flags the call uses ("epilogue" for a fused epilogue): entries without them are skipped.
    placement: where the operands lie (operands.Problem's), for the placement rules; None skips them."""
    decision = _table_or_heuristic(gpu, key, m, n, k, layout, needs,
                                   "row" if placement is None else placement.b_layout)
    if placement is None:
        return decision
    decision = placement_rules.b_layout(gpu, key, decision, placement, needs)
    decision = placement_rules.unaligned(gpu, key, m, n, k, decision, placement, needs)
    return placement_rules.b_layout(gpu, key, decision, placement, needs)


def _table_or_heuristic(gpu: Gpu, key: str, m: int, n: int, k: int, layout: str, needs,
                        b_layout: str = "row") -> Decision:
    """b_layout "col" (B column-major) asks the entries timed on such a B first, then the row-major ones."""
    notes: list[str] = []
    table, sms = selection_tables.table_for(gpu.name, gpu.cc), gpu.sm_count or ASSUMED_SM_COUNT
    if table is not None:
        for measured in (("col", "row") if b_layout == "col" else ("row",)):
            with_b = " with B column-major" if measured == "col" else ""
            ranked = selection_tables.nearest(table, key, layout, m, n, k, measured)
            if not ranked and measured == "col":
                notes.append(f"dispatch table {table['file']}: no {key} entries timed with B column-major")
                continue
            for entry, distance in ranked:
                if distance > TABLE_REACH:
                    break
                reason = (why_not(entry["variant"], key, gpu.cc, needs) or _too_many_rows(entry["variant"], m, n)
                          or _too_small(entry, m, n, k) or _emptier_waves(entry, m, n, sms))
                if reason is None:
                    return Decision(entry["variant"], f"dispatch table {table['file']}: nearest measured shape "
                                    f"{_shape(entry)}{with_b} (log2 distance {distance:.2f})", tuple(notes), measured)
                notes.append(f"{entry['variant']} (table, {_shape(entry)}{with_b}): {reason}")
            notes.append(f"dispatch table {table['file']}: no usable {key} shape{with_b} within a factor "
                         f"{2 ** TABLE_REACH:.3g} of {m}×{n}×{k} in every dimension")
    else:
        notes.append(f"no dispatch table for {gpu.name} (sm_{gpu.cc})")
    return _heuristic(gpu, key, m, n, k, notes, needs)


def _heuristic(gpu: Gpu, key: str, m: int, n: int, k: int, notes: list[str], needs=()) -> Decision:
    usable = {role: [] for role in ROLES}
    for role, names in candidates().items():
        for name in names[key]:
            reason = why_not(name, key, gpu.cc, needs)
            if reason is None and role == "split_k":
                reason = _why_no_split(registry.catalogue()[name])
            if reason is None:
                usable[role].append(registry.catalogue()[name])
            elif role != "default":
                notes.append(f"{name} ({role}): {reason}")
    if not usable["default"]:
        uses = f" with {' and '.join(needs)} support" if needs else ""
        raise DTypeError(f"no variant in the catalogue serves {key}{uses} on compute capability {gpu.cc}")
    default = usable["default"][0]
    small = min(m, n)
    if small <= SKINNY_MAX:
        covering = [v for v in usable["skinny"] if rows_of(v) >= small]
        if covering:
            filling = [v for v in covering if v.family.split_k or in_flight_bytes(v, m, n) >= IN_FLIGHT_BYTES]
            best = filling[0] if filling else max(covering, key=lambda v: tiles_of(v, m, n))  # max: first of equals
            why = "that keeps HBM busy" if filling else "with the most blocks"
            return Decision(best.name, f"heuristic: min(M, N) = {small} <= {SKINNY_MAX} is memory-bound; the "
                            f"first skinny entry for {rows_of(best)} rows >= {small} {why}", tuple(notes))
        notes.append(f"min(M, N) = {small} <= {SKINNY_MAX} is memory-bound, but no skinny entry for "
                     f"{small} rows runs here")
    sm_count = gpu.sm_count or ASSUMED_SM_COUNT
    tiles = tiles_of(default, m, n)
    slots = sm_count * resident_blocks(default)  # blocks the GPU runs at once
    if tiles * IDLE_FRACTION < slots:
        idle = f"{default.name}'s {tiles} tiles fill {tiles / slots:.0%} of the {slots} block slots of {sm_count} SMs"
        filling = [(one_wave_blocks(v, m, n, sm_count), v) for v in usable["one_wave"]
                   if m <= ONE_WAVE_TILE_ROWS * v.family.tile(v.params)[0]]
        blocks, wave = max(filling, key=lambda f: f[0], default=(0, None))  # max: the first of equals
        if blocks >= ONE_WAVE_FILL * sm_count:
            return Decision(wave.name, f"heuristic: {idle}, M = {m} is at most {ONE_WAVE_TILE_ROWS} rows of its "
                            f"tiles: one wave of {blocks} whole-K {big_tiles.tile_words(wave)}", tuple(notes))
        deep = deep_k(m, n, k)
        if deep and usable["split_k"]:
            best, how = _fastest_split(usable["split_k"], key, m, n, k, gpu)
            return Decision(best.name, f"heuristic: {idle} and K = {k} is deep (K >= {2 * MIN_K_PER_SPLIT} "
                            f"and K² >= M·N): split K, {how}", tuple(notes))
        smaller = [v for v in usable["small_tile"] if tiles_of(v, m, n) > tiles]
        if smaller:
            filling = [v for v in smaller if tiles_of(v, m, n) >= sm_count]
            best = filling[0] if filling else max(smaller, key=lambda v: tiles_of(v, m, n))
            return Decision(best.name, f"heuristic: {idle}: a smaller tile ({tiles_of(best, m, n)} tiles)",
                            tuple(notes))
        # no entry has more tiles (a tiny product): the one whose tile pads C least
        tighter = [v for v in usable["small_tile"] if padded_area(v, m, n) < padded_area(default, m, n)]
        if tighter:
            best = min(tighter, key=lambda v: padded_area(v, m, n))
            return Decision(best.name, f"heuristic: {idle}, and no entry has more: the tile that pads C least "
                            f"({padded_area(best, m, n)} elements)", tuple(notes))
        notes.append(f"{idle}, but no {'split-K or ' if deep else ''}smaller-tile entry runs here")
    how = ""
    if default.family.persistent:
        family = [v for v in usable["default"] if v.family is default.family]
        default, how = big_tiles.choose(family, m, n, k, sm_count)
    return Decision(default.name, f"heuristic: the big-tile default ({tiles_of(default, m, n)} tiles of "
                    f"{big_tiles.tile_words(default)}, {wave_fill(default, m, n, sm_count):.0%} of their waves "
                    f"full{how})", tuple(notes))


def _why_no_split(v: Variant) -> str | None:
    if not v.family.split_k:
        return "its family does not split K"
    if not v.family.takes_split_k_args(v.params):
        return "SPLIT_K = 1 compiles its split-K steps out"
    return None


def _too_many_rows(name: str, m: int, n: int) -> str | None:
    """Why a few-rows variant (Family.max_rows) cannot serve m×n, or None: a table's nearest shape may have
    fewer rows than the problem (16×4096 answers 17×4096)."""
    rows = registry.catalogue()[name].max_rows()
    if rows is not None and min(m, n) > rows:
        return f"serves at most {rows} rows or columns, not {min(m, n)}"
    return None


def _fastest_split(entries: list[Variant], key: str, m: int, n: int, k: int, gpu: Gpu) -> tuple[Variant, str]:
    """16-bit inputs: the split-K entry the launcher's cost model (split_policy.split_plan: loads against
    multiply-adds per K block, waves of tiles × splits, the partial tiles' traffic) expects to finish
    first among those padding C at most MODEL_PAD_LIMIT times the least, ties to list order. Otherwise,
    or where it models none of them, the first whose tiles pad C within PAD_TIE of the least: the model
    takes CUDA-core tiles for equally fast per multiply-add, which they are not (float32 1024³ on the
    H100: 32×64 tiles 71 µs, 128×64 60)."""
    least = min(padded_area(v, m, n) for v in entries)
    # a split tile must beat an unsplit one by SPLIT_MARGIN, as a split beats none, but where M fits one row
    # of the least tile: each block then streams its own slice of B once, and the split's partials are small
    # beside it (H100: 1000×768×2048 ran 14.4 µs on 128×128 in 2 splits, 10.3 on 64×128 whole; 32×3584×14336
    # 40.7 on 64×128 in 2 splits, 52.0 on 64×64 whole)
    margin = SPLIT_MARGIN if m > min(v.family.tile(v.params)[0] for v in entries) else 1.0
    modelled = []
    for v in entries if key in MODELLED_SPLITS else ():
        if padded_area(v, m, n) > least * MODEL_PAD_LIMIT:
            continue
        splits, ns = split_plan(v, m, n, k, tiles_of(v, m, n), gpu.sm_count or ASSUMED_SM_COUNT,
                                memory_bytes_per_ns=gpu.memory_bytes_per_ns)
        if ns is not None:
            modelled.append((ns / margin if splits > 1 else ns, ns, v, splits))
    if modelled:
        _, ns, best, splits = min(modelled, key=lambda r: r[0])  # min keeps the first of equals
        return best, f"on the tile the split-K model expects first ({splits} splits, ~{ns / 1000:.0f} µs)"
    best = next(v for v in entries if padded_area(v, m, n) <= least * (1 + PAD_TIE))
    return best, "on the tile that pads C least"


def _emptier_waves(entry, m: int, n: int, sm_count: int) -> str | None:
    """Why a persistent, unsplit entry's tile does not carry over from its shape to m×n, or None: its waves
    are emptier here by more than WAVE_TIE. On the H100 the 128×192 tile of 512×10240×8192 (216 tiles,
    82% of two waves) ran 512×8192×8192 (172 tiles, 65%) at 0.66× cupy.matmul."""
    v = registry.catalogue()[entry["variant"]]
    if not v.family.persistent or v.params.get("SPLIT_K", 1) != 1:
        return None
    there, here = wave_fill(v, entry["m"], entry["n"], sm_count), wave_fill(v, m, n, sm_count)
    if here < there - WAVE_TIE:
        return f"its tiles fill {here:.0%} of their waves here, {there:.0%} at {_shape(entry)}"
    return None


def _too_small(entry, m: int, n: int, k: int) -> str | None:
    """Why a table entry's shape is too small a product to answer m×n×k (TABLE_GROWTH), or None."""
    growth = sum(math.log2(max(d, 1)) for d in (m, n, k)) - sum(entry["logs"])
    if growth > TABLE_GROWTH:
        return f"timed on {2 ** growth:.0f}× less work than {m}×{n}×{k} (at most {2 ** TABLE_GROWTH:g}×)"
    return None


def _shape(entry) -> str:
    return f"{entry['m']}×{entry['n']}×{entry['k']}"


_gpus: dict[int, Gpu] = {}


def gpu_of(device_id: int) -> Gpu:
    """The Gpu of a CUDA device id (queried once per process)."""
    if device_id not in _gpus:
        props = devices.properties(device_id)
        _gpus[device_id] = Gpu(devices.device_name(device_id), 10 * props["major"] + props["minor"],
                               props["multiProcessorCount"], devices.memory_bytes_per_ns(device_id))
    return _gpus[device_id]


def describe_gpu(name: str, cc: int) -> Gpu:
    """A GPU given by name and compute capability (no device needed): its SM count and memory from its table."""
    gpu = (selection_tables.table_for(name, cc) or {}).get("gpu", {})
    return Gpu(name, cc, gpu.get("sm_count"), gpu.get("memory_bytes_per_ns"))


def gpu_for(device=None) -> Gpu:
    """The Gpu of a CUDA device id or cupy Device (None: the current one), a Gpu, or a (name, cc) pair for a
    GPU not present."""
    if isinstance(device, tuple) and not isinstance(device, Gpu):
        return describe_gpu(*device)
    if isinstance(device, Gpu):
        return device
    if device is None:
        import cupy
        try:
            device = cupy.cuda.runtime.getDevice()
        except Exception as e:  # no driver, no device: CuPy's own CUDA errors
            raise DeviceError(f"no CUDA GPU to explain for ({e}); name one instead: device=(name, cc), "
                              f"or --gpu NAME --cc XY on the command line") from None
    return gpu_of(device if isinstance(device, int) else device.id)


def explain(dtype, m: int, n: int, k: int, device=None, precision: str | None = None, b_layout: str = "row") -> str:
    """Which variant `matmul(variant=None)` runs for an m×n×k product of `dtype`, and why. device: a CUDA
    device id or cupy Device (None: the current one), or a Gpu / (name, cc) pair for a GPU not present.
    b_layout: "row" (B is K×N, C-contiguous) or "col" (B column-major, as W.T of a linear layer's N×K W)."""
    if b_layout not in B_LAYOUTS:
        raise ValueError(f"b_layout must be one of {', '.join(B_LAYOUTS)}, not {b_layout!r}")
    check_sizes(M=m, N=n, K=k)  # matmul refuses the call before it chooses
    asked, device = device, gpu_for(device)
    key = defaults_key(dtype if isinstance(dtype, str) else getattr(dtype, "name", str(dtype)), precision)
    itemsize = 2 if key in ("float16", "bfloat16") else 4
    b = fresh((k, n), itemsize) if b_layout == "row" else fresh((n, k), itemsize).T
    fresh_arrays = Placement(fresh((m, k), itemsize), b, fresh((m, n), itemsize))
    decision = choose(device, key, m, n, k, placement=fresh_arrays)
    sms = f"{device.sm_count} SMs" if device.sm_count else f"SM count unknown, {ASSUMED_SM_COUNT} assumed"
    lines = [f"{key} {m}×{n}×{k} on {device.name} (sm_{device.cc}, {sms})",
             f"variant: {decision.variant}", f"why: {decision.reason}"]
    lines += [f"note: {s}" for s in decision.notes] + launch_explain.describe(decision.variant, fresh_arrays, m, n, k,
                                                                          device, asked)
    given = ", B as the transpose of one (x @ W.T)" if b_layout == "col" else ""
    lines.append(f"note: operands taken as new contiguous arrays{given}; views, offsets and Fortran order can add copies")
    if key == "float32" and precision is None:
        lines.append("note: CUPY_TF32=1 (or precision tf32 / 3xtf32) would choose among tensor-core variants")
    return "\n".join(lines) + "\n"


__all__ = ["Gpu", "Decision", "PRECISIONS", "defaults_key", "dtype_key", "candidates", "why_not", "first_default",
           "choose", "explain", "gpu_for", "gpu_of", "describe_gpu", "rows_of", "tiles_of", "padded_area", "deep_k",
           "table_from_results", "format_table", "kernel_cost", "SKINNY_MAX", "IN_FLIGHT_BYTES", "TABLE_REACH", "COPY_SHARE"]

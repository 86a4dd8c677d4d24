"""The default's last rules, for a call whose operands are known (their arrange.Placement): they revise the
table's or heuristic's Decision (cupy_gemm/dispatch.py) for where the operands lie.

- unaligned: when the variant chosen would copy the operands for its family's alignment (zero-padded K or N,
  or a view off its vectors) and the copies an `unaligned` entry saves cost at least as much as the product
  itself (the copies' traffic >= COPY_SHARE × kernel_cost, plus, against a wgmma choice, what an mma.sync
  entry's slower arithmetic costs: MMA_SYNC_FLOPS_PER_BYTE), such an entry, which reads them in place: of
  those that can serve the call and, as the B-layout twin that will run them, copy B (for its layout) or
  x and C (for a 32-row tile's swap of A and B) cheaply, where any does, the first whose tile has the
  fewest rows that hold the rows it runs (N where it swaps), else the tallest, priced as that twin.
- b_layout: an entry chosen for a row-major B (a table's row-major entries, the heuristic) that would copy a
  column-major B (x @ W.T with W kept N×K) into its layout gives way to its twin family's entry of the
  nearest tile (unaligned where the chosen one is), which reads it in place (B_LAYOUT_TWINS); so does a
  3xTF32 entry (B column-major) given a row-major B. A table entry timed on a column-major B stands.
"""
from __future__ import annotations

import math
from dataclasses import replace

from . import registry
from .arrange import COPY_LAUNCH_BYTES, Placement
from .candidates import Decision, candidates, why_not

# The unaligned rule prices the default's copies and the product in bytes of memory traffic. A launch counts
# COPY_LAUNCH_BYTES (a small copy kernel's launch and tail, about 2 µs, at about 3 TB/s); the product the larger
# of its operands' bytes and its FLOPs over FLOPS_PER_BYTE, where the default kernels turn compute-bound. The
# rule fires when the copies cost at least COPY_SHARE of the product: an unaligned entry up to 1 + COPY_SHARE
# times slower than the default still wins. fp16, new arrays: 129×1000×33 pads A and B, priced as 4 launches
# (24.2 MB against 0.32 MB: unaligned), 4095×4095×33 copies C back too (101 MB against 32.5 MB: unaligned),
# 2048×2048×2047 pads 32 MB, priced as 4 launches (56 MB against 128 MB: padded, measured 59.5 µs to cuBLAS's
# 130; 48.3 since one kernel pads both operands, arrange._padding).
FLOPS_PER_BYTE = {"float32": 16, "tf32": 64, "3xtf32": 32, "float16": 128, "bfloat16": 128}
COPY_SHARE = 1.0
# A @ x with x of a few columns swapped onto a 32-row tile (a `_rows32` entry) copies x and C: two launches,
# worth it where they cost less than SWAP_SHARE of the product. H200, against the 64-row tile unswapped:
# float16 4095×8×4095 33.5 µs against 37.6 (copies 0.36 of the product), 14336×16×4095 84 against 121;
# 4095×32×1001 23 against 16 (1.5), 1001×8×1001 17 against 13 (3); float32 4095×32×1001 28 against 23
# (0.75). The skinny kernels' swap pays whatever the copies (float16 4095×2×1001: 11.9 against 17.3).
SWAP_SHARE = 0.5
# An unaligned entry on mma.sync runs a compute-bound product at well under half the rate of the wgmma entry a
# Hopper default pads for (H200: float16 1000×1001×4095 153 µs against 60 on a padded wgmma tile; tf32 with a
# column-major B, 257×8191×8191, 968 against 385), so against a wgmma choice its FLOPs count at this many per
# byte of traffic, half of FLOPS_PER_BYTE.
MMA_SYNC_FLOPS_PER_BYTE = {"float16": 64, "bfloat16": 64, "tf32": 32}


def unaligned(gpu, key: str, m: int, n: int, k: int, decision: Decision, placement: Placement,
               needs) -> Decision:
    """The decision, or the `unaligned` entry whose tile fits M best where the chosen variant's copies cost
    more."""
    chosen = registry.catalogue()[decision.variant]
    padded = placement.for_variant(chosen)
    if padded.traffic == placement.for_variant(chosen, align=1).traffic:
        return decision  # no copy is for the alignment (a layout the family cannot read may still cost one)
    notes = list(decision.notes)
    usable = []
    for name in candidates()["unaligned"][key]:
        reason = why_not(name, key, gpu.cc, needs)
        if reason is not None:
            notes.append(f"{name} (unaligned): {reason}")
        else:
            usable.append(name)
    serving = [name for name in usable if min(m, n) <= (registry.catalogue()[name].max_rows() or min(m, n))]
    if not serving:
        notes.append(f"{chosen.name} copies its operands ({_mb(padded.copy_bytes)}, {_launches(padded)}), "
                     f"but no unaligned entry for {key} runs here")
        return replace(decision, notes=tuple(notes))
    kernel = kernel_cost(key, m, n, k, placement.a.itemsize)
    twins = {name: b_layout(gpu, key, Decision(name, ""), placement, needs).variant for name in serving}
    arrangements = {name: placement.for_variant(registry.catalogue()[twins[name]]) for name in serving}
    name = _fittest(serving, arrangements, m, n, kernel)
    runs = twins[name]  # its twin, if it would copy B
    saved = padded.traffic - arrangements[name].traffic
    copies = (f"{chosen.name} would copy {_mb(padded.copy_bytes)} ({_launches(padded)}) to align "
              f"them, {_mb(saved)} of traffic counting {_mb(COPY_LAUNCH_BYTES)} a launch (beyond {runs}'s own "
              f"copies, if any), against {_mb(kernel)} for the product")
    slower = _slower_arithmetic(key, m, n, k, chosen, registry.catalogue()[runs], kernel)
    if slower:
        copies += f", plus {_mb(slower)} for {runs}'s slower arithmetic"
    if saved < COPY_SHARE * kernel + slower:
        notes.append(f"unaligned rule: {copies}: the copies cost less, {chosen.name} stays")
        return replace(decision, notes=tuple(notes))
    notes.append(f"{chosen.name} was the choice: {decision.reason}")
    return Decision(name, f"unaligned operands: {copies} (the larger of the operands' bytes and 2·M·N·K / "
                    f"{FLOPS_PER_BYTE[key]} FLOP per byte): the unaligned entry whose tile fits M best reads them "
                    f"where they lie", tuple(notes))


def _fittest(serving: list[str], arrangements: dict, m: int, n: int, kernel: int) -> str:
    """Of the entries serving m×n, as their B-layout twins will run them (`arrangements`), those whose own
    copies are cheap, where any are: a B of the other layout that no twin reads in place must cost less
    than COPY_SHARE of the product, x and C copied for a 32-row tile's swap (FEW_ROWS) less than
    SWAP_SHARE; then the first whose tile best fits the rows it will run (N where A and B swap)."""
    def cheap(name):
        arr = arrangements[name]
        if arr.copy_b or arr.padded:
            return arr.traffic < COPY_SHARE * kernel
        swaps_a_tile = arr.swapped and registry.catalogue()[name].params.get("FEW_ROWS")
        return not swaps_a_tile or arr.traffic < SWAP_SHARE * kernel
    pool = [name for name in serving if cheap(name)] or serving
    return min(pool, key=lambda name: _fit(name, n if arrangements[name].swapped else m))  # the first of equals


def _fit(name: str, rows: int) -> tuple[int, int]:
    """Orders unaligned entries for a kernel's rows: tiles that hold them, fewest rows first, then the
    others, tallest first. 32-row tiles ran products of at most 32 rows 15-30% sooner than 64-row ones
    (H200); above 32 rows they won at some shapes and lost at others (64×4095×1000 15.7 µs against 18.8,
    64×11007×4095 121 against 113, 300×1001×3000 38 against 32)."""
    v = registry.catalogue()[name]
    tile_rows = v.family.tile(v.params)[0]
    return (0, tile_rows) if tile_rows >= rows else (1, -tile_rows)


# a family whose entries copy a B of the other layout -> the family that reads that layout in place.
# x @ W.T with W stored N×K (a linear layer's weight) is a column-major B: copying it costs as much as a
# prefill-sized product and ten times a decode-sized one. 3xTF32 goes both ways (precision="3xtf32" has no
# table; its heuristic lists the column-major family): a C-ordered B costs the copy 6-10% at 4096³.
B_LAYOUT_TWINS = {"wgmma_tf32_rowb": "wgmma_tf32", "wgmma_tf32_swap": "wgmma_tf32", "wgmma": "wgmma_kmajor",
                  "decode": "decode_kmajor", "skinny": "skinny_kmajor", "sgemm_simt": "sgemm_simt_kmajor",
                  "mma": "mma_kmajor", "wgmma_3xtf32": "wgmma_3xtf32_swap", "wgmma_3xtf32_swap": "wgmma_3xtf32"}


def b_layout(gpu, key: str, decision: Decision, placement: Placement, needs) -> Decision:
    """The decision, or its twin family's entry of the nearest tile (split-K alike, covering as many rows;
    the same arithmetic and parameters first) where the chosen one would copy B into its layout and the
    twin reads B where it lies."""
    chosen = registry.catalogue()[decision.variant]
    twin_family = B_LAYOUT_TWINS.get(chosen.family.name)
    if twin_family is None or decision.b_layout == "col" or not placement.for_variant(chosen, align=1).copy_b:
        return decision  # (a choice timed on a column-major B, its copy included, stands)
    bm, bn = chosen.family.tile(chosen.params)
    splits = chosen.family.takes_split_k_args(chosen.params)
    rows = chosen.max_rows()
    twins = [v for name, v in registry.catalogue().items()
             if v.family.name == twin_family and v.family.takes_split_k_args(v.params) == splits
             and (v.max_rows() is None if rows is None else (v.max_rows() or 0) >= rows)
             and why_not(name, key, gpu.cc, needs) is None and not placement.for_variant(v, align=1).copy_b]
    if not twins:
        return decision
    unaligned = chosen.family.align(chosen.params, chosen.dtype) == 1

    def distance(v):  # an unaligned entry for an unaligned one (and not for an aligned one, which the unaligned
        # rule has priced), the same arithmetic, then log2 of the tile's sides, the same parameters, more stages
        tm, tn = v.family.tile(v.params)
        return ((v.family.align(v.params, v.dtype) == 1) != unaligned, v.acc != chosen.acc,
                abs(math.log2(tm / bm)) + abs(math.log2(tn / bn)), v.params != chosen.params, -v.params.get("STAGES", 0))
    twin = min(twins, key=distance)
    return Decision(twin.name, f"B-layout rule: {chosen.name} would copy B into its own layout; "
                    f"{twin.name} ({twin_family}, the nearest tile) reads it in place",
                    decision.notes + (f"{chosen.name} was the choice: {decision.reason}",))


def _slower_arithmetic(key: str, m: int, n: int, k: int, chosen, unaligned, kernel: int) -> int:
    """The traffic an unaligned mma.sync entry's slower arithmetic is worth against a wgmma choice: its FLOPs
    at MMA_SYNC_FLOPS_PER_BYTE beyond the product's cost; 0 for other pairs."""
    if (key not in MMA_SYNC_FLOPS_PER_BYTE or not chosen.family.name.startswith("wgmma")
            or unaligned.family.name not in ("mma", "mma_kmajor")):
        return 0
    return max(0, 2 * m * n * k // MMA_SYNC_FLOPS_PER_BYTE[key] - kernel)


def kernel_cost(key: str, m: int, n: int, k: int, itemsize: int) -> int:
    """The product in bytes of traffic: its operands' bytes, or its FLOPs at FLOPS_PER_BYTE if more."""
    return max((m * k + k * n + m * n) * itemsize, 2 * m * n * k // FLOPS_PER_BYTE[key])


def _launches(arr) -> str:
    return f"priced as {arr.copy_launches} launch{'' if arr.copy_launches == 1 else 'es'}"


def _mb(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MB"

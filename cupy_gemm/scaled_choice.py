"""The default FP8 variant for a call: formats, scaling and output pick the catalogue's entries (or one
derived from them), and M, N and the SM count pick the tile among them (scaled.py checks and runs)."""
from __future__ import annotations

from functools import lru_cache

from . import fp8, registry
from .tile_geometry import wave_fill

FAMILY = "wgmma_fp8"
SCALING_IDS = {"tensor": 0, "rowcol": 1, "block": 2}
# Per-tensor and row/column scales leave the main loop the same: there a 128×192 tile (one wgmma group per
# K-block, so one wait and one promotion) beats the first entry's 128×256 where its waves are about as full,
# and loses where 128×256's are fuller. H100, 2026-11-26, TFLOPS: 8192³ (waves 99% against 97% full)
# 1241 against 1148; 4096³ (89% against 97%) 1099–1129 against 1146–1205; 4096×7168×16384 (92% against
# 97%) 1115–1149 against 1160–1167.
NARROW_TILE = (128, 192)
NARROW_TILE_MARGIN = 0.02  # how much emptier its waves may be
# At M <= SMALL_M 128-row tiles leave most SMs idle: there the first of these 64-row tiles (one consumer
# warpgroup) whose tiles fit one wave is taken. H100, 2026-11-28, µs against 128×256 and torch._scaled_mm:
# 16×2048×7168 14.3 (64×64) against 41.5 and 25.0; 64×4096×14336 26.8 against 75.9 and 28.3;
# 128×7168×4096 16.4 (64×128) against 26.0 and 20.0; block scales alike.
SMALL_M = 128
SMALL_TILES = ((64, 64), (64, 128))


def variant_for(format_a: str, format_b: str, mode: str, out_dtype: str, m: int | None = None,
                n: int | None = None, sm_count: int | None = None) -> registry.Variant:
    """The first catalogue entry for these formats, scaling and output that promotes every K-block (with
    m, n and the SM count, per-tensor and row/column scales take the catalogue's 128×192 entry instead
    where its waves are within NARROW_TILE_MARGIN of as full, and M <= SMALL_M a 64-row tile of
    SMALL_TILES); else the per-tensor default's tile and pipeline with them (validated like any variant)."""
    if sm_count and m and n and m <= SMALL_M:
        for tile in SMALL_TILES:
            if -(-m // tile[0]) * -(-n // tile[1]) <= sm_count:
                return _entry_with_tile(format_a, format_b, mode, out_dtype, tile)
    first, narrow = _entries_for(format_a, format_b, mode, out_dtype)
    if narrow is not None and mode != "block" and sm_count and m and n and \
            wave_fill(narrow, m, n, sm_count) >= wave_fill(first, m, n, sm_count) - NARROW_TILE_MARGIN:
        return narrow
    return first


def _wanted(format_a: str, format_b: str, mode: str) -> dict:
    return {"FORMAT_A": fp8.FORMATS.index(format_a), "FORMAT_B": fp8.FORMATS.index(format_b),
            "SCALING": SCALING_IDS[mode], "PROMOTE": 1}


def _derived(base: registry.Variant, tag: str, format_a: str, format_b: str, mode: str,
             out_dtype: str) -> registry.Variant:
    """base's tile and pipeline made to take these formats, scaling and output (validated like any variant)."""
    name = f"fp8gemm_wgmma_{tag}{format_a}{'' if format_b == format_a else format_b}_{mode}_{out_dtype}"
    return registry.make_variant(base.family, name, out_dtype, {**base.params, **_wanted(format_a, format_b, mode)})


def _matching(want: dict, out_dtype: str) -> list[registry.Variant]:
    return [v for v in registry.catalogue().values() if v.family.name == FAMILY and v.dtype == out_dtype
            and all(v.params[key] == value for key, value in want.items())]


@lru_cache(maxsize=None)
def _entry_with_tile(format_a: str, format_b: str, mode: str, out_dtype: str, tile) -> registry.Variant:
    """The catalogue entry with this BM×BN tile (no clusters) for these formats, scaling and output; else the
    first catalogue entry with the tile, made to take them."""
    want = _wanted(format_a, format_b, mode)
    with_tile = lambda v: (v.params["BM"], v.params["BN"]) == tile and v.params["CLUSTER"] == 1
    found = [v for v in _matching(want, out_dtype) if with_tile(v)]
    if found:
        return found[0]
    base = next(v for v in registry.catalogue().values() if v.family.name == FAMILY and with_tile(v))
    return _derived(base, f"tile{tile[0]}x{tile[1]}_", format_a, format_b, mode, out_dtype)


@lru_cache(maxsize=None)
def _entries_for(format_a: str, format_b: str, mode: str, out_dtype: str) -> tuple[registry.Variant, registry.Variant | None]:
    """(the default for these formats, scaling and output, its catalogue 128×192 alternative or None); cached
    per call kind, where the wave rule above depends on the shape."""
    matching = _matching(_wanted(format_a, format_b, mode), out_dtype)
    if matching:
        narrow = [v for v in matching if (v.params["BM"], v.params["BN"]) == NARROW_TILE and v.params["CLUSTER"] == 1]
        return matching[0], (narrow[0] if narrow else None)
    first = next(v for v in registry.catalogue().values() if v.family.name == FAMILY)
    return _derived(first, "", format_a, format_b, mode, out_dtype), None

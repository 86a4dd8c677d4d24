"""How a variant's tiles lie over an M×N product: how many, how full their waves, how much they pad C, how
much a streaming kernel keeps in flight, and whether K is deep enough to split. The dispatch's rules
(cupy_gemm/dispatch.py) and the table lookup weigh candidates with these; no GPU needed."""
from __future__ import annotations

from .registry import Variant
from .split_policy import MIN_K_PER_SPLIT


def rows_of(v: Variant) -> int:
    """The small dimension an entry is built for: its ROWS parameter, else its tile's smaller side."""
    return v.params.get("ROWS") or min(v.family.tile(v.params))


def tiles_of(v: Variant, m: int, n: int) -> int:
    bm, bn = v.family.tile(v.params)
    return -(-m // bm) * -(-n // bn)


def in_flight_bytes(v: Variant, m: int, n: int) -> int:
    """Shared memory over v's blocks at m×n: what a streaming kernel that does not split K has in flight."""
    return tiles_of(v, m, n) * v.family.smem_bytes(v.params, v.dtype, v.acc)


def _units_and_slots(v: Variant, m: int, n: int, sm_count: int) -> tuple[int, int]:
    """A persistent v's tiles at m×n and how many it runs at once on sm_count SMs (with clusters: cluster
    tiles and the clusters that fit; a cluster that splits K takes one tile)."""
    cluster, bn = v.family.cluster(v.params), v.family.tile(v.params)[1]
    return -(-m // v.family.cluster_rows(v.params)) * -(-n // bn), max(1, sm_count // cluster)


# Clusters that run at once, as a share of sm_count // size: a cluster lives in one GPC, so larger ones leave
# SMs over (cuOccupancyMaxActiveClusters on the H100, one block an SM: 66 of two, 30 of four)
CLUSTER_SLOT_SHARE = {1: 1.0, 2: 1.0, 4: 30 / 33}


def one_wave_blocks(v: Variant, m: int, n: int, sm_count: int) -> int:
    """The blocks of a persistent v's tiles at m×n where they take one wave on sm_count SMs, at least two
    rows of them (one row reads each weight once anyway, and split-K ran faster there: 64×8192×28672 on the
    H100), and no cluster with a block below M, save one of 64-row tiles no taller than M, else 0. On the
    H100 64×128 pairs at 300 rows (5 rows of tiles, the last pair half empty) ran 0.98-1.15× as fast as
    the split-K rule's pick, 64×192 in clusters of four at 200 rows (4 rows of tiles, 256 > 200) 1.31-1.40×;
    128×128 pairs with a half-empty last pair 0.80-0.95× (300 to 800 rows), full ones 0.95-1.26×."""
    cluster, bm = v.family.cluster(v.params), v.family.tile(v.params)[0]
    units = _units_and_slots(v, m, n, sm_count)[0]
    tile_rows = -(-m // bm)
    full = v.family.cluster_splits_k(v.params) or tile_rows % cluster == 0
    if (tile_rows < 2 or not (full or (bm <= 64 and v.family.cluster_rows(v.params) <= m))
            or units > int(sm_count // cluster * CLUSTER_SLOT_SHARE.get(cluster, 0))):
        return 0
    return units * cluster


def waves(v: Variant, m: int, n: int, sm_count: int) -> int:
    """How many rounds of tiles a persistent v's blocks take at m×n on sm_count SMs."""
    units, slots = _units_and_slots(v, m, n, sm_count)
    return -(-units // slots)


def wave_fill(v: Variant, m: int, n: int, sm_count: int) -> float:
    """How full the waves of a persistent v's tiles are on sm_count SMs: tiles over waves × SMs."""
    units, slots = _units_and_slots(v, m, n, sm_count)
    return units / (-(-units // slots) * slots)


def padded_area(v: Variant, m: int, n: int) -> int:
    """Elements of C the variant's tiles cover, padding included."""
    bm, bn = v.family.tile(v.params)
    return -(-m // bm) * bm * -(-n // bn) * bn


def deep_k(m: int, n: int, k: int) -> bool:
    """K deep enough to split: room for two slices of MIN_K_PER_SPLIT, and at least the geometric mean
    of M and N, so each block's K loop, not the partial tiles' traffic, is the cost being divided."""
    return k >= 2 * MIN_K_PER_SPLIT and k * k >= m * n

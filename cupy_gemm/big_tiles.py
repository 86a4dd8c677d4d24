"""The heuristic's last rule, for products whose big tiles fill at least half the GPU: which of the
`default` entries of one persistent family to run (cupy_gemm/dispatch.py asks it; no GPU needed).

Entries with a measured [tile_cost] (kernels/dispatch/candidates.toml) compete on an expected time, their
rounds of tiles × (K blocks × ns per K block + ns per tile); the first entry gives way only to one expected
COST_MARGIN sooner. A family without costs (3xTF32's two tiles) takes its largest tile whose waves are
within WAVE_TIE of the fullest."""
from __future__ import annotations

from .candidates import tile_costs
from .registry import Variant
from .tile_geometry import wave_fill, waves

WAVE_TIE = 0.05  # the big-tile rule's margin: a larger tile is worth up to this much emptier waves
# the estimate misses the L2 traffic of tiles that share no operand in a cluster. On the H100 5000×3000×1000
# ran 0.91× cupy.matmul on the clustered 128×256 tile and 0.61× on the 128×192 one that the estimate put 2%
# ahead. Timed candidates at the `unseen` corpus's shapes with M >= 1000: the clustered tile 0.870
# (geomean), this rule 0.939, the best of the four tiles 0.940
COST_MARGIN = 0.05


def expected_ns(v: Variant, m: int, n: int, k: int, sm_count: int) -> float:
    """A costed entry's expected time at m×n×k: rounds of tiles × (K blocks × ns per K block + ns per tile)."""
    per_k_block, per_tile = tile_costs()[v.name]
    return waves(v, m, n, sm_count) * (-(-k // v.params["BK"]) * per_k_block + per_tile)


def choose(family: list[Variant], m: int, n: int, k: int, sm_count: int) -> tuple[Variant, str]:
    """(the entry of `family`, the usable `default` entries of one persistent family in list order, to run
    at m×n×k; the reason's tail)."""
    first = family[0]
    costed = [v for v in family if v.name in tile_costs()]
    if first in costed:
        estimate = {v.name: expected_ns(v, m, n, k, sm_count) for v in costed}
        best = min(costed, key=lambda v: estimate[v.name])  # min keeps the first of equals
        if estimate[best.name] > (1 - COST_MARGIN) * estimate[first.name]:
            return first, ""
        return best, (f"; expected ~{estimate[best.name] / 1000:.0f} µs against ~{estimate[first.name] / 1000:.0f} "
                      f"for {tile_words(first)}")
    # 3xTF32 on an H100: 128×192 at 8192³ (99% of its waves full) ran 2.00× SGEMM where 128×128 ran
    # 1.52–1.81×; at 4096³ (128×192: 89%, 128×128: 97%) 128×128 ran 1.91×, 128×192 1.77×
    fullest = max(wave_fill(v, m, n, sm_count) for v in family)
    area = lambda v: v.family.tile(v.params)[0] * v.family.tile(v.params)[1]  # noqa: E731
    return max((v for v in family if wave_fill(v, m, n, sm_count) >= fullest - WAVE_TIE), key=area), ""


def tile_words(v: Variant) -> str:
    bm, bn = v.family.tile(v.params)
    cluster = v.family.cluster(v.params)
    return f"{bm}×{bn}" + (f" in clusters of {cluster}" if cluster > 1 else "")

"""Grouped GEMM problems, checked before launch, and the tile schedule one launch walks.

Two layouts, as `torch._grouped_mm` has them:
  list      grouped_matmul([a0, a1, …], [b0, b1, …]): independent products, any Mᵢ, Nᵢ, Kᵢ.
  experts   a (ΣMᵢ, K) holds every group's rows one after the other, b (G, K, N) — or (G, N, K), the
            weights as linear layers keep them — one matrix per group; `offsets` (G,) int32 are the
            cumulative row ends, so group g owns rows offsets[g-1] .. offsets[g] (an empty group has equal
            ends); out is (ΣMᵢ, N). With the offsets on the device (decode: counts the router wrote) nothing
            about their values is checked on the host, which would synchronise: the kernel clamps them.
A persistent kernel walks one flat range of tiles: group g contributes ceil(Mg/BM)·ceil(Ng/BN) tiles, and
tile t belongs to the group whose prefix range holds it (`locate`, the same search the device does).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from .errors import DTypeError, InputError


@dataclass(frozen=True)
class Group:
    m: int
    n: int
    k: int
    row0: int = 0  # experts layout: the group's first row in a and out


def list_problems(a_shapes, b_shapes, a_dtypes, b_dtypes) -> list[Group]:
    """The groups of grouped_matmul(as_, bs); raises InputError / DTypeError before anything launches."""
    a_shapes, b_shapes = list(a_shapes), list(b_shapes)
    if not a_shapes:
        raise InputError("grouped_matmul needs at least one group")
    if len(a_shapes) != len(b_shapes):
        raise InputError(f"grouped_matmul needs as many b as a: got {len(a_shapes)} and {len(b_shapes)}")
    dtypes = set(a_dtypes) | set(b_dtypes)
    if len(dtypes) != 1:
        raise DTypeError(f"every a and b of a grouped product must share one dtype; "
                         f"got {sorted(map(str, dtypes))}")
    groups = []
    for g, (sa, sb) in enumerate(zip(a_shapes, b_shapes)):
        if len(sa) != 2 or len(sb) != 2:
            raise InputError(f"group {g}: a and b must be 2-D; got shapes {tuple(sa)} and {tuple(sb)}")
        if sa[1] != sb[0]:
            raise InputError(f"group {g}: a is {sa[0]}×{sa[1]} but b is {sb[0]}×{sb[1]} (K must match)")
        groups.append(Group(sa[0], sb[1], sa[1]))
    return groups


def expert_problems(a_shape, b_shape, b_k_major: bool, offsets=None, offsets_shape=None,
                    offsets_dtype=None) -> tuple[int, int, int]:
    """(G, N, K) of an experts-layout product, with its shapes checked; `offsets` host values (a sequence)
    are checked too (non-decreasing, within a's rows), device ones only by shape and dtype."""
    if len(a_shape) != 2 or len(b_shape) != 3:
        raise InputError(f"the experts layout takes a of shape (rows, K) and b of shape (G, K, N) or "
                         f"(G, N, K); got {tuple(a_shape)} and {tuple(b_shape)}")
    g, kb, n = (b_shape[0], b_shape[2], b_shape[1]) if b_k_major else b_shape
    if a_shape[1] != kb:
        raise InputError(f"a has K = {a_shape[1]} but each b matrix has K = {kb}")
    if offsets_shape is not None and tuple(offsets_shape) != (g,):
        raise InputError(f"offsets must have shape ({g},), one cumulative row end per group; "
                         f"got {tuple(offsets_shape)}")
    if offsets_dtype is not None and str(offsets_dtype) != "int32":
        raise DTypeError(f"offsets must be int32 (as torch._grouped_mm's offs); got {offsets_dtype}")
    if offsets is not None:
        ends = [int(x) for x in offsets]
        if len(ends) != g:
            raise InputError(f"offsets must have {g} entries, one per group; got {len(ends)}")
        for i, (lo, hi) in enumerate(zip([0, *ends], ends)):
            if hi < lo:
                raise InputError(f"offsets must not decrease: group {i} ends at row {hi}, before {lo}")
        if ends and ends[-1] > a_shape[0]:
            raise InputError(f"offsets end at row {ends[-1]}, past a's {a_shape[0]} rows")
    return g, n, kb


def expert_groups(ends, n: int, k: int) -> list[Group]:
    """The groups of an experts product from host offsets (already checked)."""
    starts = [0, *ends[:-1]]
    return [Group(hi - lo, n, k, lo) for lo, hi in zip(starts, ends)]


def tile_prefix(groups, bm: int, bn: int) -> list[int]:
    """Cumulative tile counts: group g's tiles are prefix[g] .. prefix[g+1] - 1 (empty groups add none)."""
    prefix = [0]
    for grp in groups:
        prefix.append(prefix[-1] + -(-grp.m // bm) * -(-grp.n // bn))
    return prefix


def locate(t: int, prefix, groups, bn: int) -> tuple[int, int, int]:
    """(group, tile row, tile column) of flat tile t: the last group whose range starts at or before t."""
    g = bisect.bisect_right(prefix, t) - 1
    local = t - prefix[g]
    cols = -(-groups[g].n // bn)
    return g, local // cols, local % cols


def stacked_rows(ends, rows: int, group_rows: int = 0) -> list[tuple[int, int, int]]:
    """The (start, valid_end, store_end) rows templates/grouped.cu.j2 gives each group of its schedule, as
    the device computes them from `ends` (host values here). Experts (group_rows = 0): `ends` are
    cumulative row ends clamped to [0, rows], each group starting where the previous end lies, plus one
    last group of the rows after the last end (valid_end = start: written with zeros). Masked
    (group_rows = M_max): `ends` are row counts; group g owns rows g·M_max .., its first count valid."""
    clamp = lambda x, hi: min(max(int(x), 0), hi)
    if group_rows:
        return [(g * group_rows, g * group_rows + clamp(c, group_rows), (g + 1) * group_rows)
                for g, c in enumerate(ends)]
    out = []
    for g, e in enumerate(ends):
        start = clamp(ends[g - 1], rows) if g else 0
        end = max(clamp(e, rows), start)
        out.append((start, end, end))
    last = clamp(ends[-1], rows) if len(ends) else 0
    return out + [(last, last, rows)]

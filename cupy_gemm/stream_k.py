"""Stream-K's partition of a persistent grid's work, as templates/common/stream_k.cuh computes it on the
GPU: the launcher needs the most blocks any tile is shared by (the split-K workspace holds that many
partial tiles per tile), and the tests check that the units cover every K block of every tile once."""
from __future__ import annotations

from typing import NamedTuple


class Unit(NamedTuple):
    tile: int
    kb_begin: int
    kb_count: int
    split: int  # this block's place among the blocks sharing the tile, in K order
    splits: int  # how many blocks share the tile


class _Plan(NamedTuple):
    dp_tiles: int  # tiles taken whole, by every block
    total: int  # stream-K iterations: the other tiles' K blocks
    sk_blocks: int  # blocks sharing them

    def owner(self, x: int) -> int:
        """The block whose share holds iteration x: the last b with b * total // sk_blocks <= x."""
        return ((x + 1) * self.sk_blocks - 1) // self.total


def blocks(tiles: int, k_blocks: int, slots: int) -> int:
    """The grid: a block per slot (persistent blocks the GPU holds), no more than there are K blocks,
    so that no block's share of the stream-K iterations is empty."""
    return max(1, min(slots, tiles * k_blocks))


def _plan(tiles: int, k_blocks: int, blocks: int) -> _Plan:
    waves = tiles // blocks
    dp_tiles = (waves - 1) * blocks if waves > 1 else 0
    total = (tiles - dp_tiles) * k_blocks
    return _Plan(dp_tiles, total, min(blocks, total))


def shared_tiles(tiles: int, k_blocks: int, blocks: int) -> int:
    """The tiles after those taken whole: the workspace's counters and partials are theirs alone."""
    return tiles - _plan(tiles, k_blocks, blocks).dp_tiles


def units(tiles: int, k_blocks: int, blocks: int, block: int) -> list[Unit]:
    """Block `block`'s work units in the order it walks them (stream_k_plan and stream_k_unit)."""
    plan = _plan(tiles, k_blocks, blocks)
    out = [Unit(block + u * blocks, 0, k_blocks, 0, 1) for u in range(plan.dp_tiles // blocks)]
    if block >= plan.sk_blocks:
        return out
    lo, hi = plan.total * block // plan.sk_blocks, plan.total * (block + 1) // plan.sk_blocks
    for t in range(lo // k_blocks, (hi - 1) // k_blocks + 1):
        begin, end = t * k_blocks, (t + 1) * k_blocks
        first = plan.owner(begin)
        out.append(Unit(plan.dp_tiles + t, max(begin, lo) - begin, min(end, hi) - max(begin, lo), block - first,
                        plan.owner(end - 1) - first + 1))
    return out


def most_splits(tiles: int, k_blocks: int, blocks: int) -> int:
    """The most blocks that share one tile: the `splits` the kernel gets, which sizes its workspace."""
    plan = _plan(tiles, k_blocks, blocks)
    return max((plan.owner((t + 1) * k_blocks - 1) - plan.owner(t * k_blocks) + 1
                for t in range(plan.total // k_blocks)), default=1)

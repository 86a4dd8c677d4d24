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


def blocks(tiles: int, k_blocks: int, slots: int) -> int:
    """The grid: a block per slot (persistent blocks the GPU holds), no more than there are K blocks,
    so that no block's share of the stream-K iterations is empty."""
    return max(1, min(slots, tiles * k_blocks))


def _split(tiles: int, k_blocks: int, blocks: int) -> tuple[int, int]:
    """(tiles taken whole, by every block; stream-K iterations, of the other tiles)."""
    waves = tiles // blocks
    dp_tiles = (waves - 1) * blocks if waves > 1 else 0
    return dp_tiles, (tiles - dp_tiles) * k_blocks


def shared_tiles(tiles: int, k_blocks: int, blocks: int) -> int:
    """The tiles after those taken whole: the workspace's counters and partials are theirs alone."""
    return tiles - _split(tiles, k_blocks, blocks)[0]


def units(tiles: int, k_blocks: int, blocks: int, block: int) -> list[Unit]:
    """Block `block`'s work units in the order it walks them (stream_k_plan and stream_k_unit)."""
    dp_tiles, total = _split(tiles, k_blocks, blocks)
    sk_blocks = min(blocks, total)
    owner = lambda x: ((x + 1) * sk_blocks - 1) // total  # noqa: E731  (the block holding iteration x)
    out = [Unit(block + u * blocks, 0, k_blocks, 0, 1) for u in range(dp_tiles // blocks)]
    if block >= sk_blocks:
        return out
    lo, hi = total * block // sk_blocks, total * (block + 1) // sk_blocks
    for t in range(lo // k_blocks, (hi - 1) // k_blocks + 1):
        begin, end = t * k_blocks, (t + 1) * k_blocks
        first = owner(begin)
        out.append(Unit(dp_tiles + t, max(begin, lo) - begin, min(end, hi) - max(begin, lo), block - first,
                        owner(end - 1) - first + 1))
    return out


def most_splits(tiles: int, k_blocks: int, blocks: int) -> int:
    """The most blocks that share one tile: the `splits` the kernel gets, which sizes its workspace."""
    dp_tiles, total = _split(tiles, k_blocks, blocks)
    sk_blocks = min(blocks, total)
    owner = lambda x: ((x + 1) * sk_blocks - 1) // total  # noqa: E731
    return max((owner((t + 1) * k_blocks - 1) - owner(t * k_blocks) + 1 for t in range(total // k_blocks)),
               default=1)

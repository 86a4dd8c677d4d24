"""Stream-K's partitions of a persistent grid's work, as templates/common/stream_k.cuh computes them on the
GPU (`mode` is the STREAM_K parameter: 1 classic, 2 the last wave split): the launcher needs the most
blocks any tile is shared by (the split-K workspace holds that many partial tiles per tile), and the
tests check that the units cover every K block of every tile once."""
from __future__ import annotations

import re
from typing import NamedTuple

from .registry import data_dir


def _tail_splits() -> int:
    """STREAM_K_TAIL_SPLITS, read from the header that defines it for the kernels."""
    header = data_dir("templates") / "common" / "stream_k.cuh"
    return int(re.search(r"constexpr int STREAM_K_TAIL_SPLITS = (\d+);", header.read_text()).group(1))


TAIL_SPLITS = _tail_splits()  # mode 2: the most shares one tile of the last wave is cut into


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


def blocks(tiles: int, k_blocks: int, slots: int, mode: int) -> int:
    """The grid: a block per slot (persistent blocks the GPU holds), no more than there are K blocks,
    so that no block's share of the stream-K iterations is empty; in mode 2, when the tiles are fewer than
    the slots, only the blocks that take a share (a partition of that many blocks is the same one)."""
    grid = max(1, min(slots, tiles * k_blocks))
    return tiles * _tail_shares(tiles, k_blocks, grid) if mode == 2 and tiles < grid else grid


def _tail_shares(rest: int, k_blocks: int, blocks: int) -> int:
    """Mode 2: the shares each of the `rest` tiles of the last wave is cut into."""
    return max(1, min(blocks // rest, k_blocks, TAIL_SPLITS))


def _plan(tiles: int, k_blocks: int, blocks: int, mode: int) -> _Plan:
    if mode not in (1, 2):
        raise ValueError(f"stream-K mode is 1 or 2, not {mode}")
    waves = tiles // blocks
    dp_tiles = waves * blocks if mode == 2 else (waves - 1) * blocks if waves > 1 else 0
    rest = tiles - dp_tiles
    total = rest * k_blocks
    if mode == 2:
        return _Plan(dp_tiles, total, rest and rest * _tail_shares(rest, k_blocks, blocks))
    return _Plan(dp_tiles, total, min(blocks, total))


def shared_tiles(tiles: int, k_blocks: int, blocks: int, mode: int) -> int:
    """The tiles after those taken whole: the workspace's counters and partials are theirs alone."""
    return tiles - _plan(tiles, k_blocks, blocks, mode).dp_tiles


def units(tiles: int, k_blocks: int, blocks: int, block: int, mode: int) -> list[Unit]:
    """Block `block`'s work units in the order it walks them (stream_k_plan and stream_k_unit)."""
    plan = _plan(tiles, k_blocks, blocks, mode)
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


def launch(tiles: int, k_blocks: int, slots: int, mode: int) -> tuple[int, int, int]:
    """(grid, splits, shared tiles) of a stream-K launch on `slots` persistent blocks: blocks(), and on that
    grid most_splits() and shared_tiles(), which the launcher sizes the workspace by (one partition)."""
    grid = blocks(tiles, k_blocks, slots, mode)
    plan = _plan(tiles, k_blocks, grid, mode)
    return grid, _most_splits(plan, k_blocks), tiles - plan.dp_tiles


def most_splits(tiles: int, k_blocks: int, blocks: int, mode: int) -> int:
    """The most blocks that share one tile: the `splits` the kernel gets, which sizes its workspace."""
    return _most_splits(_plan(tiles, k_blocks, blocks, mode), k_blocks)


def _most_splits(plan: _Plan, k_blocks: int) -> int:
    return max((plan.owner((t + 1) * k_blocks - 1) - plan.owner(t * k_blocks) + 1
                for t in range(plan.total // k_blocks)), default=1)

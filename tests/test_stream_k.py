"""Stream-K's partitions (cupy_gemm/stream_k.py, as templates/common/stream_k.cuh computes them): every K
block of every tile in exactly one unit, the blocks sharing a tile numbered in K order, shares equal."""
import pytest

from cupy_gemm import stream_k

CASES = [(tiles, k_blocks, slots) for tiles in (1, 2, 12, 131, 132, 133, 160, 264, 265, 512, 2048)
         for k_blocks in (1, 2, 7, 112, 128) for slots in (1, 3, 132)]


def _walk(tiles, k_blocks, blocks, mode):
    """{(tile, K block): block}, {tile: [(kb_begin, split, splits, block)]}, [K blocks of each block]."""
    owner, sharers, work = {}, {}, []
    for b in range(blocks):
        units = stream_k.units(tiles, k_blocks, blocks, b, mode)
        work.append(sum(u.kb_count for u in units))
        for u in units:
            assert u.kb_count > 0 and 0 <= u.split < u.splits <= stream_k.most_splits(tiles, k_blocks, blocks, mode)
            for kb in range(u.kb_begin, u.kb_begin + u.kb_count):
                assert (u.tile, kb) not in owner
                owner[u.tile, kb] = b
            sharers.setdefault(u.tile, []).append((u.kb_begin, u.split, u.splits, b, u.kb_count))
    assert len(owner) == tiles * k_blocks
    for parts in sharers.values():  # split s is the s-th block along K, and all agree on their number
        parts.sort()
        assert [p[1] for p in parts] == list(range(len(parts))) and {p[2] for p in parts} == {len(parts)}
    return owner, sharers, work


@pytest.mark.parametrize("tiles,k_blocks,slots", CASES)
def test_classic_units_cover_every_k_block_once(tiles, k_blocks, slots):
    blocks = stream_k.blocks(tiles, k_blocks, slots, 1)
    assert blocks == min(slots, tiles * k_blocks)
    _, _, work = _walk(tiles, k_blocks, blocks, 1)
    # every block as much work as any other, within one tile's K blocks (the whole tiles) and one K block
    assert max(work) - min(work) <= (k_blocks if tiles // blocks > 1 else 0) + 1


@pytest.mark.parametrize("tiles,k_blocks,slots", CASES)
def test_last_wave_units_split_whole_tiles_evenly(tiles, k_blocks, slots):
    blocks = stream_k.blocks(tiles, k_blocks, slots, 2)
    _, sharers, work = _walk(tiles, k_blocks, blocks, 2)
    grid = min(slots, tiles * k_blocks)  # fewer tiles than slots: only the blocks with a share are launched
    assert blocks == (grid if tiles >= grid else tiles * max(1, min(grid // tiles, k_blocks, stream_k.TAIL_SPLITS)))
    rest = tiles % blocks
    splits = max(1, min(blocks // rest, k_blocks, stream_k.TAIL_SPLITS)) if rest else 1
    for tile, parts in sharers.items():
        if tile < tiles - rest:  # the whole waves: one block each
            assert len(parts) == 1 and parts[0][4] == k_blocks
        else:  # the last wave: `splits` shares whose sizes differ by one K block at most
            sizes = [p[4] for p in parts]
            assert len(parts) == splits and max(sizes) - min(sizes) <= 1
    # each block holds whole tiles of the full waves and at most one share of the last
    assert max(work) <= (tiles // blocks) * k_blocks + -(-k_blocks // splits)
    assert stream_k.most_splits(tiles, k_blocks, blocks, 2) == (splits if rest else 1)
    assert stream_k.shared_tiles(tiles, k_blocks, blocks, 2) == rest


def test_the_classic_shares_the_last_wave_and_keeps_the_others_whole():
    # 160 tiles on 132 blocks: no whole wave to keep, every tile shared by at most two blocks
    assert stream_k.shared_tiles(160, 128, 132, 1) == 160 and stream_k.most_splits(160, 128, 132, 1) == 2
    # 2048 tiles: 14 whole waves, the 15th and the remainder (200 tiles) shared
    assert stream_k.shared_tiles(2048, 128, 132, 1) == 200
    assert [u.splits for u in stream_k.units(2048, 128, 132, 0, 1)[:14]] == [1] * 14
    # 12 tiles of 112 K blocks over 132 blocks, shares of 10 or 11 K blocks: at most 11 blocks a tile
    assert stream_k.most_splits(12, 112, 132, 1) == 11


def test_the_last_wave_split_keeps_every_whole_wave():
    # 160 tiles on 132 blocks: one whole wave, then 28 tiles in 4 shares of 32 K blocks (112 blocks busy)
    assert stream_k.shared_tiles(160, 128, 132, 2) == 28 and stream_k.most_splits(160, 128, 132, 2) == 4
    assert stream_k.units(160, 128, 132, 5, 2)[1] == stream_k.Unit(133, 32, 32, 1, 4)
    assert len(stream_k.units(160, 128, 132, 112, 2)) == 1  # past the 112 sharing blocks: its whole tile only
    # a last wave of one tile: at most TAIL_SPLITS shares; none left over: no shares at all
    assert stream_k.most_splits(133, 128, 132, 2) == stream_k.TAIL_SPLITS
    assert stream_k.shared_tiles(264, 128, 132, 2) == 0 and stream_k.most_splits(264, 128, 132, 2) == 1
    with pytest.raises(ValueError, match="mode"):
        stream_k.units(160, 128, 132, 0, 0)


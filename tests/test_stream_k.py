"""Stream-K's partition (cupy_gemm/stream_k.py, as templates/common/stream_k.cuh computes it): every K
block of every tile in exactly one unit, the blocks sharing a tile numbered in K order, shares equal."""
import pytest

from cupy_gemm import stream_k

CASES = [(tiles, k_blocks, slots) for tiles in (1, 2, 12, 131, 132, 133, 160, 264, 265, 512, 2048)
         for k_blocks in (1, 2, 7, 112, 128) for slots in (1, 3, 132)]


@pytest.mark.parametrize("tiles,k_blocks,slots", CASES)
def test_units_cover_every_k_block_once(tiles, k_blocks, slots):
    blocks = stream_k.blocks(tiles, k_blocks, slots)
    assert blocks == min(slots, tiles * k_blocks)
    owner, sharers, work = {}, {}, []
    for b in range(blocks):
        units = stream_k.units(tiles, k_blocks, blocks, b)
        work.append(sum(u.kb_count for u in units))
        for u in units:
            assert u.kb_count > 0 and 0 <= u.split < u.splits <= stream_k.most_splits(tiles, k_blocks, blocks)
            for kb in range(u.kb_begin, u.kb_begin + u.kb_count):
                assert (u.tile, kb) not in owner
                owner[u.tile, kb] = b
            sharers.setdefault(u.tile, []).append((u.kb_begin, u.split, u.splits, b))
    assert len(owner) == tiles * k_blocks
    for parts in sharers.values():  # split s is the s-th block along K, and all agree on their number
        parts.sort()
        assert [p[1] for p in parts] == list(range(len(parts))) and {p[2] for p in parts} == {len(parts)}
    # every block as much work as any other, within one tile's K blocks (the whole tiles) and one K block
    assert max(work) - min(work) <= (k_blocks if tiles // blocks > 1 else 0) + 1


def test_the_last_wave_is_shared_and_the_others_whole():
    # 160 tiles on 132 blocks: no whole wave to keep, every tile shared by at most two blocks
    assert stream_k.shared_tiles(160, 128, 132) == 160 and stream_k.most_splits(160, 128, 132) == 2
    # 2048 tiles: 14 whole waves, the 15th and the remainder (200 tiles) shared
    assert stream_k.shared_tiles(2048, 128, 132) == 200
    assert [u.splits for u in stream_k.units(2048, 128, 132, 0)[:14]] == [1] * 14
    # 12 tiles of 112 K blocks over 132 blocks, shares of 10 or 11 K blocks: at most 11 blocks a tile
    assert stream_k.most_splits(12, 112, 132) == 11

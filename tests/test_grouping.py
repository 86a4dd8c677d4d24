"""Grouped problems: shapes and offsets checked before launch, and a tile schedule that covers every
group's tiles exactly once, empty groups included."""
import pytest

from cupy_gemm import grouping
from cupy_gemm.errors import DTypeError, InputError


def test_list_problems():
    groups = grouping.list_problems([(3, 5), (0, 7)], [(5, 2), (7, 9)], ["float16"] * 2, ["float16"] * 2)
    assert groups == [grouping.Group(3, 2, 5), grouping.Group(0, 9, 7)]


@pytest.mark.parametrize("a,b,dt,match", [
    ([], [], ["float16"], "at least one"), ([(3, 5)], [], ["float16"], "as many b"),
    ([(3, 5)], [(4, 2)], ["float16"], "K must match"), ([(3, 5, 1)], [(5, 2)], ["float16"], "2-D"),
])
def test_list_problems_refused(a, b, dt, match):
    with pytest.raises(InputError, match=match):
        grouping.list_problems(a, b, dt, dt)


def test_mixed_dtypes_refused():
    with pytest.raises(DTypeError, match="one dtype"):
        grouping.list_problems([(3, 5)], [(5, 2)], ["float16"], ["bfloat16"])


def test_experts_layout_and_empty_groups():
    g, n, k = grouping.expert_problems((10, 64), (4, 64, 32), False, offsets=[3, 3, 9, 10],
                                       offsets_shape=(4,), offsets_dtype="int32")
    assert (g, n, k) == (4, 32, 64)
    assert grouping.expert_problems((10, 64), (4, 32, 64), True) == (4, 32, 64)  # weights as (G, N, K)
    groups = grouping.expert_groups([3, 3, 9, 10], n, k)
    assert [(x.m, x.row0) for x in groups] == [(3, 0), (0, 3), (6, 3), (1, 9)]


@pytest.mark.parametrize("kw,match", [
    (dict(offsets=[3, 2, 9, 10]), "must not decrease"), (dict(offsets=[3, 3, 9, 11]), "past a's 10 rows"),
    (dict(offsets=[3, 9]), "4 entries"), (dict(offsets_shape=(5,)), r"shape \(4,\)"),
])
def test_bad_offsets(kw, match):
    with pytest.raises(InputError, match=match):
        grouping.expert_problems((10, 64), (4, 64, 32), False, **kw)


def test_offsets_dtype_and_shapes():
    with pytest.raises(DTypeError, match="int32"):
        grouping.expert_problems((10, 64), (4, 64, 32), False, offsets_dtype="int64")
    with pytest.raises(InputError, match="K = 64"):
        grouping.expert_problems((10, 48), (4, 64, 32), False)


def test_the_schedule_covers_every_tile_once():
    groups = [grouping.Group(m, n, 8) for m, n in [(130, 70), (0, 64), (1, 1), (64, 128), (0, 0), (257, 3)]]
    bm, bn = 64, 64
    prefix = grouping.tile_prefix(groups, bm, bn)
    seen = [grouping.locate(t, prefix, groups, bn) for t in range(prefix[-1])]
    want = [(g, i, j) for g, grp in enumerate(groups)
            for i in range(-(-grp.m // bm)) for j in range(-(-grp.n // bn))]
    assert seen == want and len(set(seen)) == len(seen)

"""Shapes, grids and the search space without a GPU: parsing, counting before expanding, pruning with reasons."""
import pytest

from cupy_gemm import registry
from cupy_gemm.errors import ConfigError
from cupy_gemm.measure import grids, shapes, space
from cupy_gemm.tuning import source_hash

FAMILY = "sliced_k"


def test_parse_shapes():
    assert shapes.parse_shape("4096x2048x512") == (4096, 2048, 512)
    assert shapes.parse_shape("1024") == (1024, 1024, 1024)
    assert shapes.parse_shapes(["1x2x3,4x5x6", "1x2x3"]) == [(1, 2, 3), (4, 5, 6)]
    assert shapes.parse_shapes("seed", "float16") == shapes.SEED_HGEMM
    assert shapes.parse_shapes("seed", "float32") == shapes.SEED_SGEMM
    assert len(shapes.SEED_SGEMM) == 27 and (16384, 16384, 8192) in shapes.SEED_SGEMM
    for bad in ("4096x4096", "0x1x1", "axbxc"):
        with pytest.raises(ValueError, match="MxNxK"):
            shapes.parse_shape(bad)
    with pytest.raises(ValueError, match="dtype"):
        shapes.parse_shapes("seed")


def test_parse_values():
    assert grids.parse_values("64,128") == [64, 128]
    assert grids.parse_values("16:128:*2") == [16, 32, 64, 128]
    assert grids.parse_values("32:128:32") == [32, 64, 96, 128]
    assert grids.parse_values("8:10,9,64") == [8, 9, 10, 64]
    assert grids.parse_set("BK = 8:32:*2") == ("BK", [8, 16, 32])
    for bad in ("x", "1:2:3:4", "4:64:*1", "8:4:0"):
        with pytest.raises(ValueError):
            grids.parse_values(bad)
    with pytest.raises(ValueError, match="NAME=VALUES"):
        grids.parse_set("BK")


def test_expand_order_and_defaults():
    fam = registry.family(FAMILY)
    combos = grids.expand(fam, {"BK": [8, 16], "BM": [16, 32]})
    defaults = {p.name: p.default for p in fam.params}
    assert [(c["BM"], c["BK"]) for c in combos] == [(16, 8), (16, 16), (32, 8), (32, 16)]  # family order, last fastest
    assert all(c["BN"] == defaults["BN"] and c["PAD"] == defaults["PAD"] for c in combos)
    assert grids.expand(fam, {"BM": [16, 16]}) == [{**defaults, "BM": 16}]
    with pytest.raises(ConfigError, match="BQ"):
        grids.expand(fam, {"BQ": [1]})


def test_load_grid(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('family = "sliced_k"\ndtype = "float16"\nacc = "float32"\nshapes = ["1024x1024x512", "2048"]\n'
                    '[params]\nBM = [16, 32]\nBK = "8:32:*2"\nPAD = 0\nBN = ["16:32:16", 64]\n')
    spec = grids.load_grid(path)
    assert (spec.family, spec.dtype, spec.acc) == ("sliced_k", "float16", "float32")
    assert spec.shapes == [(1024, 1024, 512), (2048, 2048, 2048)]
    assert spec.params == {"BM": [16, 32], "BK": [8, 16, 32], "PAD": [0], "BN": [16, 32, 64]}
    path.write_text('[params]\nBM = [1.5]\n')
    with pytest.raises(ValueError, match="params.BM"):
        grids.load_grid(path)
    path.write_text('familly = "x"\n')
    with pytest.raises(ValueError, match="unknown keys"):
        grids.load_grid(path)


def test_points_prune_with_reasons():
    pts = space.points(FAMILY, {"BM": [16, 64], "BN": [32], "BK": [32, 256]}, "float32")
    by = {(p.params["BM"], p.params["BK"]): p for p in pts}
    assert by[(16, 32)].valid and by[(16, 32)].source_hash
    assert not by[(64, 32)].valid and by[(64, 32)].param == "threads" and "1024" in by[(64, 32)].reason
    smem = space.points(FAMILY, {"BM": [32], "BN": [32], "BK": [256]}, "float32")[0]
    assert not smem.valid and smem.param == "BK" and "48 KB" in smem.reason
    # a point equal to a catalogue variant is named after it (so tuning can return a catalogue name)
    cat = registry.lookup("sgemm_sliced_k_f32")
    same = space.points(FAMILY, {k: [v] for k, v in cat.params.items()}, "float32")[0]
    assert same.name == same.catalogue == "sgemm_sliced_k_f32"
    assert same.source_hash == source_hash(cat)
    with pytest.raises(ConfigError, match="dtype"):
        space.points(FAMILY, {}, "int8")
    with pytest.raises(ValueError, match="max_points"):
        space.points(FAMILY, {"BM": range(1, 100), "BN": range(1, 100)}, "float32", max_points=1000)


def test_point_names_are_stable():
    a = space.points(FAMILY, {"BM": [16], "BK": [8]}, "float16", "float32")[0]
    b = space.points(FAMILY, {"BK": [8], "BM": [16]}, "float16", "float32")[0]
    assert a.name == b.name and a.source_hash == b.source_hash
    assert "f16" in a.name and "accf32" in a.name and "/" not in a.name


def test_a_huge_grid_is_counted_not_expanded():
    with pytest.raises(ValueError, match="more than the 1000 allowed"):
        grids.parse_values("1:100000000", limit=1000)
    assert grids.size({"A": range(10**4), "B": range(10**4)}) == 10**8
    with pytest.raises(ValueError, match="10000000000 points"):  # would exhaust memory if expanded
        space.points(FAMILY, {"BM": range(10**5), "BN": range(10**5)}, "float32")

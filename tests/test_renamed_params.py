"""Renamed template parameters: the old names (in users' sweep grids, tuning entries, `--set` and `render`)
still work through each family's `renamed`, and an old name given beside its new one is an error."""
import pytest

import cupy_gemm
from cupy_gemm import ConfigError, cli, registry, tuning
from cupy_gemm.measure import grids, space

RENAMES = {
    "sgemm_simt": {"SWIZZLE": "BLOCK_SWIZZLE", "MINB": "MIN_BLOCKS", "BCF": "A_TRANSPOSED"},
    "hgemm_simt": {"SWIZZLE": "BLOCK_SWIZZLE", "BCF": "A_TRANSPOSED"},
    "wmma": {"SWIZZLE": "BLOCK_SWIZZLE", "WM": "FRAG_M", "WN": "FRAG_N", "WK": "FRAG_K"},
    "wgmma_fp8": {"SWIZZLE": "BLOCK_SWIZZLE", "WN": "INSTR_N"},
}


def _old_names(variant) -> dict:
    """The variant's parameters as they were written before the renames."""
    old_of = {new: old for old, new in variant.family.renamed.items()}
    return {old_of.get(name, name): value for name, value in variant.params.items()}


def test_every_block_swizzle_family_takes_the_old_name():
    for fam in registry.families().values():
        assert ("BLOCK_SWIZZLE" in fam.param_index) == (fam.renamed.get("SWIZZLE") == "BLOCK_SWIZZLE"), fam.name
        assert "SWIZZLE" not in fam.param_index and "MINB" not in fam.param_index and "BCF" not in fam.param_index
        for old, new in fam.renamed.items():
            assert new in fam.param_index and old not in fam.param_index, (fam.name, old)
    for name, renamed in RENAMES.items():
        assert dict(registry.family(name).renamed) == renamed
    assert "SMEM_SWIZZLE" in registry.family("mma").param_index  # the shared-memory layout keeps its name


@pytest.mark.parametrize("family", sorted(RENAMES))
def test_an_old_name_spec_rebuilds_the_catalogue_variant(family):
    for v in (v for v in registry.catalogue().values() if v.family.name == family):
        spec = (family, v.name, v.dtype, v.acc, tuple(_old_names(v).items()))
        assert registry.from_spec(spec) is v
        custom = registry.from_spec((family, "custom", v.dtype, v.acc, tuple(_old_names(v).items())))
        assert custom.name == "custom" and dict(custom.params) == dict(v.params)
        assert list(custom.params) == list(v.params)  # the family's order, new names only


def test_old_names_in_make_variant_and_render():
    fam = registry.family("sgemm_simt")
    old = registry.make_variant(fam, "x", "float32", {"BCF": 1, "MINB": 2, "SWIZZLE": 2048})
    new = registry.make_variant(fam, "x", "float32", {"A_TRANSPOSED": 1, "MIN_BLOCKS": 2, "BLOCK_SWIZZLE": 2048})
    assert old == new
    assert "BLOCK_SWIZZLE = 1024" in cupy_gemm.render("sgemm_naive_f32", SWIZZLE=1024)
    # an old name overrides the catalogue entry's value, as the new name does
    entry = next(v for v in registry.catalogue().values() if v.family.name == "wmma" and v.params["BLOCK_SWIZZLE"])
    assert "BLOCK_SWIZZLE = 0;" in cupy_gemm.render(entry.name, SWIZZLE=0)


@pytest.mark.parametrize("family, params, old", [
    ("naive", {"SWIZZLE": 0, "BLOCK_SWIZZLE": 0}, "SWIZZLE"),
    ("sgemm_simt", {"MINB": 1, "MIN_BLOCKS": 2}, "MINB"),
    ("hgemm_simt", {"A_TRANSPOSED": 1, "BCF": 1}, "BCF"),
    ("wmma", {"WK": 16, "FRAG_K": 16}, "WK"),
    ("wgmma_fp8", {"WN": 128, "INSTR_N": 128}, "WN"),
])
def test_an_old_name_beside_its_new_name_is_an_error(family, params, old):
    fam = registry.family(family)
    dtype = next(iter(fam.dtypes))
    with pytest.raises(ConfigError, match="old name") as err:
        registry.make_variant(fam, "x", dtype, params)
    assert err.value.param == old
    with pytest.raises(ConfigError, match="old name"):
        registry.from_spec((family, "x", dtype, fam.dtypes[dtype][0], tuple(params.items())))
    with pytest.raises(ConfigError, match="old name"):
        grids.expand(fam, {name: [value] for name, value in params.items()})


def test_an_old_name_grid_file_sweeps_the_same_points(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('family = "sgemm_simt"\n[params]\nBCF = [0, 1]\nMINB = 2\nSWIZZLE = [0, 2048]\n')
    spec = grids.load_grid(path)
    old = space.points("sgemm_simt", spec.params, "float32")
    new = space.points("sgemm_simt", {"A_TRANSPOSED": [0, 1], "MIN_BLOCKS": [2], "BLOCK_SWIZZLE": [0, 2048]},
                       "float32")
    assert [(p.name, p.params, p.valid) for p in old] == [(p.name, p.params, p.valid) for p in new]
    assert len(old) == 4 and all(p.params["MIN_BLOCKS"] == 2 for p in old)


def test_the_command_line_takes_old_names(tmp_path, capsys):
    path = tmp_path / "grid.toml"
    path.write_text('[params]\nWN = [32, 8]\nWM = [8, 32]\n')
    assert cli.main(["sweep", "wmma", "--grid", str(path), "--set", "SWIZZLE=0,2048", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "FRAG_N" in out and "BLOCK_SWIZZLE" in out
    assert cli.main(["sweep", "wmma", "--set", "WN=16", "--set", "FRAG_N=16", "--dry-run"]) == 2
    assert "old name of FRAG_N" in capsys.readouterr().err
    assert cli.main(["show", "sgemm_naive_f32", "--set", "SWIZZLE=512", "--source"]) == 0
    assert "BLOCK_SWIZZLE = 512" in capsys.readouterr().out


def test_a_tuning_entry_with_old_names_still_resolves():
    v = next(v for v in registry.catalogue().values() if v.family.name == "sgemm_simt" and v.params["A_TRANSPOSED"])
    entry = {"variant": v.name, "family": v.family.name, "dtype": v.dtype, "acc": v.acc,
             "params": _old_names(v), "source_hash": tuning.source_hash(v)}
    assert "BCF" in entry["params"]
    assert tuning.resolve(entry) is v

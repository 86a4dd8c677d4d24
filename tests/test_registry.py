"""The catalogue loads, validates and renders; malformed entries are refused with clear messages."""
import pytest

import cupy_gemm
from cupy_gemm import launch, registry
from cupy_gemm.errors import CatalogueError, ConfigError, UnknownVariantError
from cupy_gemm.render import render

CATALOGUE = registry.catalogue()


def test_catalogue_is_not_empty_and_names_are_unique():
    assert {"sgemm_naive_f32", "sgemm_sliced_k_f32"} <= set(CATALOGUE)
    assert len(CATALOGUE) == len(set(CATALOGUE))


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_every_variant_renders_self_contained(name):
    v = CATALOGUE[name]
    source = render(v)
    assert 'extern "C" __global__' in source and "gemm_kernel(" in source
    assert "{{" not in source and "{%" not in source
    # shared helpers are inlined: the only includes left are toolkit headers
    for line in source.splitlines():
        if line.strip().startswith("#include"):
            assert "<" in line, f"{name}: non-toolkit include left in the rendered source: {line}"


@pytest.mark.parametrize("name", [n for n, v in CATALOGUE.items() if v.family.pdl])
def test_programmatic_launches_wait_in_the_kernel(name):
    """A family launched with programmatic dependent launch (Family.pdl) may start while the previous
    kernel still runs: every kernel it renders, batched too, must call pdl_wait() in its body."""
    v = CATALOGUE[name]
    for variant in (v, v.with_extras(batched=True)) if v.family.batched else (v,):
        source = render(variant)
        # the body that runs the product: a batched template's per-member function, else the kernel
        body = source.find("void gemm_member(")
        body = body if body >= 0 else source.index("gemm_kernel(", source.index("__global__"))
        # or through the decode kernels' ring_init (common/decode_ring.cuh), which waits before any load
        waits = [source.find(call, body) for call in ("pdl_wait();", "ring_init(bars")]
        assert max(waits) > body, f"{variant.name}: no pdl_wait() in the kernel"
        if waits[0] < body:
            helper = source[source.index("void ring_init("):source.index("void produce(")]
            assert "pdl_wait();" in helper


def test_only_hopper_gpus_launch_programmatically():
    from types import SimpleNamespace
    from cupy_gemm import launch
    wgmma, naive = CATALOGUE["hgemm_wgmma_m64n256k16_stages3_ws2"], CATALOGUE["sgemm_naive_f32"]
    hopper, ampere = SimpleNamespace(compute_capability="90"), SimpleNamespace(compute_capability="80")
    skinny = CATALOGUE["sgemv_skinny_r1"]
    assert launch.uses_pdl(wgmma, hopper) and launch.uses_pdl(skinny, hopper)
    assert not launch.uses_pdl(skinny, ampere) and not launch.uses_pdl(naive, hopper)


def test_programmatic_launch_can_be_turned_off(monkeypatch):
    from types import SimpleNamespace
    from cupy_gemm import launch
    monkeypatch.setenv("CUPY_GEMM_PDL", "0")
    hopper = SimpleNamespace(compute_capability="90")
    assert not launch.uses_pdl(CATALOGUE["hgemm_wgmma_m64n256k16_stages3_ws2"], hopper)


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_launch_config_is_consistent(name):
    v = CATALOGUE[name]
    m = v.max_rows() or 1000  # the rows it serves
    cfg = cupy_gemm.get(name).launch_config(m, 1000, 1000, sm_count=132)
    bm, bn = v.family.tile(v.params)
    assert cfg.tiles == -(-m // bm) * -(-1000 // bn)
    assert 32 <= cfg.block[0] <= 1024 and cfg.block[0] % 32 == 0
    blocks = cfg.tiles * cfg.splits * (cfg.cluster if v.family.cluster_splits_k(v.params) else 1)
    whole = -(-blocks // cfg.cluster) * cfg.cluster  # a grid of clusters rounds up to whole ones
    assert cfg.grid[0] <= whole and cfg.grid[0] * cfg.grid[1] <= whole


CLUSTERED = sorted(n for n, v in CATALOGUE.items() if v.family.cluster(v.params) > 1 and v.family.persistent)


@pytest.mark.parametrize("name", CLUSTERED)
def test_clustered_grids_are_whole_clusters_that_run_at_once(name):
    """Clusters of vertically adjacent tiles (CLUSTER), or of blocks sharing one tile along K (KCLUSTER)."""
    v = CATALOGUE[name]
    bm, bn = v.family.tile(v.params)
    size = v.family.cluster(v.params)
    rows = bm if v.family.cluster_splits_k(v.params) else size * bm
    for m, n, slots in ((5000, 3000, None), (5000, 3000, 60), (3 * bm + 5, bn, None), (1, 1, 7)):
        cfg = launch.launch_config(v, m, n, 1000, sm_count=132, clusters=slots)
        cluster_tiles = -(-m // rows) * -(-n // bn)
        assert cfg.cluster == size and cfg.grid[0] % size == 0
        assert cfg.grid[0] == size * min(cluster_tiles * cfg.splits, 132 // size if slots is None else slots)
    assert launch.launch_config(CATALOGUE["hgemm_wgmma_m64n256k16_stages4_ws2"], 5000, 3000, 1000,
                                sm_count=132).cluster == 1


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_family_must_match_file_name(tmp_path):
    path = _write(tmp_path, "naive.toml", 'family = "sliced_k"\n')
    with pytest.raises(CatalogueError, match="must match the file name"):
        registry._load_file(path)


def test_bad_toml_and_unknown_keys(tmp_path):
    with pytest.raises(CatalogueError, match="not valid TOML"):
        registry._load_file(_write(tmp_path, "naive.toml", "family = "))
    path = _write(tmp_path, "naive.toml", 'family = "naive"\n[[variant]]\nname = "x"\ndtype = "float32"\nbm = 3\n')
    with pytest.raises(CatalogueError, match="needs `name` and `dtype`"):
        registry._load_file(path)


def test_unknown_family_file(tmp_path):
    with pytest.raises(UnknownVariantError, match="unknown family 'naiv'.*naive"):
        registry._load_file(_write(tmp_path, "naiv.toml", 'family = "naiv"\n'))


@pytest.mark.parametrize("params,param,match", [
    ({"BM": "16"}, "BM", "an integer"),  # a parameter is a number, never text pasted into CUDA
    ({"BM": 16.0}, "BM", "an integer"),
    ({"BM": True}, "BM", "an integer"),
    ({"BM": 0}, "BM", ">= 1"),
    ({"BM": 64, "BN": 64}, "threads", "between 32 and 1024"),
    ({"TM": 4}, "TM", "a parameter of family 'naive'"),
    ({"BLOCK_SWIZZLE": -1}, "BLOCK_SWIZZLE", ">= 0"),
])
def test_bad_parameters_are_named(params, param, match):
    with pytest.raises(ConfigError, match=match) as info:
        registry.make_variant(registry.family("naive"), "x", "float32", params)
    assert info.value.param == param


def test_bad_dtype_and_acc():
    fam = registry.family("sliced_k")
    with pytest.raises(ConfigError, match="dtype"):
        registry.make_variant(fam, "x", "float64", {})
    with pytest.raises(ConfigError, match="acc"):
        registry.make_variant(fam, "x", "float32", {}, acc="float16")


def test_static_smem_rule():
    with pytest.raises(ConfigError, match="48 KB"):
        registry.make_variant(registry.family("sliced_k"), "x", "float32", {"BM": 32, "BN": 32, "BK": 256})


def test_unknown_variant_suggests():
    with pytest.raises(UnknownVariantError, match="did you mean 'sgemm_sliced_k_f32'"):
        cupy_gemm.get("sgemm_slicedk_f32")


def test_render_family_and_overrides():
    src = cupy_gemm.render("sliced_k", BK=16, PAD=4)
    assert "BK = 16" in src and "PAD = 4" in src
    assert "BLOCK_SWIZZLE = 2048" in cupy_gemm.render("sgemm_naive_f32", BLOCK_SWIZZLE=2048)
    with pytest.raises(UnknownVariantError):
        cupy_gemm.render("no_such_thing")


def test_variants_filter():
    assert "sgemm_naive_f32" in cupy_gemm.variants("float32")
    assert "sgemm_naive_f32" not in cupy_gemm.variants("float16")
    assert set(cupy_gemm.variants(family="naive")) >= {"sgemm_naive_f32", "hgemm_naive_f16"}
    with pytest.raises(UnknownVariantError):
        cupy_gemm.variants(family="nope")


def test_defaults_exist_for_every_dtype():
    for dtype in ("float32", "float16", "bfloat16"):
        for cc in (80, 90):
            name = cupy_gemm.default_variant(dtype, cc)
            v = CATALOGUE[name]
            assert v.dtype == dtype and v.acc != "float16"
            if dtype == "float32":
                assert v.acc == "float32", "float32 stays exact unless CUPY_TF32=1"


def test_every_listed_default_is_in_the_catalogue():
    from cupy_gemm.api import DEFAULTS
    for key, names in DEFAULTS.items():
        for name in names:
            assert name in CATALOGUE, f"DEFAULTS[{key!r}] names {name!r}, which the catalogue lacks"


def _too_much_smem():
    bad = dict(registry.lookup("hgemm_wgmma_m64n64k16_tile64x64_stages13_ws1").params, BK=128, STAGES=7)
    return registry.make_variant(registry.family("wgmma"), "bad", "float16", bad)


def test_errors_survive_pickling_across_processes():
    """Sweep pools and Dask workers send errors back pickled: the type, message and attributes come back."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor
    with pytest.raises(ConfigError) as made:
        _too_much_smem()
    with pytest.raises(UnknownVariantError) as unknown:
        registry.lookup("sgemm_sliced_k")
    for error in (made.value, unknown.value):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error) and back.__dict__ == error.__dict__
    with ProcessPoolExecutor(1) as pool, pytest.raises(ConfigError, match="smem"):
        pool.submit(_too_much_smem).result(timeout=60)

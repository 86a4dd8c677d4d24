"""On a GPU: a cached image damaged on disk never reaches the driver, an image the driver refuses is evicted
and compiled afresh once, and matmul's answer is right throughout."""
import random

import cupy
import pytest

import cupy_gemm
from cupy_gemm import cache, compile as compile_mod, launch, prepared, registry, verify
from cupy_gemm.errors import CompileError, ModuleLoadError

VARIANT = "sgemm_sliced_k_f32"
M, N, K = 127, 1000, 333


@pytest.fixture
def cold(tmp_path, monkeypatch):
    """A new process as far as the caches go: empty in-memory caches, a private cache folder, and a count
    of NVRTC runs and evictions."""
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    for knob in ("CUPY_GEMM_CACHE_MAX_MB", "CUPY_GEMM_DISK_CACHE"):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.setattr(compile_mod, "_memory", {})
    monkeypatch.setattr(launch, "_loaded", {})
    prepared.clear()  # a prepared call holds its kernel: forget them, as a new process would
    calls = {"nvrtc": 0, "evict": 0}
    real_nvrtc, real_evict = compile_mod._nvrtc, launch.evict

    def nvrtc(*args):
        calls["nvrtc"] += 1
        return real_nvrtc(*args)

    def evict(compiled):
        calls["evict"] += 1
        return real_evict(compiled)
    monkeypatch.setattr(compile_mod, "_nvrtc", nvrtc)
    monkeypatch.setattr(launch, "evict", evict)
    return calls


def assert_matmul_right(seed):
    a = verify.random_operand((M, K), cupy.float32, seed)
    b = verify.random_operand((K, N), cupy.float32, seed + 1)
    out = cupy.full((M, N), cupy.nan, dtype=cupy.float32)
    cupy_gemm.matmul(a, b, variant=VARIANT, out=out)
    ref, scale = verify.reference(a, b)
    verdict = verify.check(out, ref, scale, "float32", "float32", K)
    assert verdict.ok, verdict


def loaded():
    """The Compiled behind the variant as launch holds it."""
    return launch.load(registry.lookup(VARIANT), cupy.cuda.Device())[1]


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def garbage(path):
    path.write_bytes(random.Random(3).randbytes(path.stat().st_size))


@pytest.mark.parametrize("new_process", [False, True], ids=["image-in-memory", "new-process"])
def test_damaged_image_on_disk_is_rebuilt(cold, new_process):
    assert_matmul_right(0)
    compiled = loaded()
    path = cache.image_path(compiled.key)
    assert path.read_bytes() == compiled.image and cold["nvrtc"] == 1
    for seed, damage in enumerate((truncate, garbage), start=1):
        launch._loaded.clear()
        prepared.clear()
        if new_process:
            compile_mod._memory.clear()
        damage(path)
        assert_matmul_right(seed)
        assert cache.read(compiled.key, compiled.arch).image == compiled.image  # rebuilt, stamp and all
        assert path.read_bytes() == compiled.image
    # from memory the verified image is simply rewritten; a new process recompiles what it cannot trust
    assert cold["nvrtc"] == (3 if new_process else 1) and cold["evict"] == 0


def test_damaged_private_copy_is_rewritten_with_the_disk_cache_off(cold, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_DISK_CACHE", "0")
    assert_matmul_right(0)
    compiled = loaded()
    path = compile_mod.image_file(compiled)
    launch._loaded.clear()
    prepared.clear()
    truncate(path)
    assert_matmul_right(1)
    assert path.read_bytes() == compiled.image


def foreign_cubin(compiled):
    """A genuine cubin of the same kernel for an architecture this GPU cannot run: it passes the digest and
    the header check, and the driver refuses it (CUDA_ERROR_NO_BINARY_FOR_GPU) without parsing deeper,
    where a random ELF body could crash the driver instead of failing."""
    cc = launch.compute_capability(cupy.cuda.Device())
    other = "sm_80" if cc // 10 == 9 else "sm_90"
    foreign = compile_mod.compile_variant(registry.lookup(VARIANT), other)
    assert foreign.image[:4] == b"\x7fELF" and foreign.image != compiled.image
    return foreign


def test_image_the_driver_refuses_is_evicted_and_recompiled_once(cold):
    variant = registry.lookup(VARIANT)
    arch = compile_mod.arch_for(variant, launch.compute_capability(cupy.cuda.Device()))
    good = compile_mod.compile_variant(variant, arch)
    foreign = foreign_cubin(good)
    compile_mod._memory.clear()
    cache.write(good.key, VARIANT, arch, foreign.image, foreign.log)  # a valid stamp over the wrong image
    assert cache.read(good.key, arch).image == foreign.image
    cold["nvrtc"] = 0
    assert_matmul_right(0)
    assert cold == {"nvrtc": 1, "evict": 1}
    assert cache.read(good.key, arch).image == good.image and loaded().image == good.image


def test_second_refusal_is_a_module_load_error(cold, monkeypatch):
    variant = registry.lookup(VARIANT)
    arch = compile_mod.arch_for(variant, launch.compute_capability(cupy.cuda.Device()))
    good = compile_mod.compile_variant(variant, arch)
    foreign = foreign_cubin(good)
    compile_mod._memory.clear()
    cache.remove(good.key)  # nothing to fall back on: every image comes from the NVRTC below
    real_nvrtc = compile_mod._nvrtc

    def nvrtc_producing_the_wrong_image(name, what, arch, options, source, key):
        return compile_mod.Compiled(name, arch, tuple(options), foreign.image, foreign.log, key)
    monkeypatch.setattr(compile_mod, "_nvrtc", nvrtc_producing_the_wrong_image)
    a = verify.random_operand((M, K), cupy.float32, 0)
    b = verify.random_operand((K, N), cupy.float32, 1)
    with pytest.raises(ModuleLoadError) as info:
        cupy_gemm.matmul(a, b, variant=VARIANT)
    message = str(info.value)
    assert isinstance(info.value, CompileError) and cold["evict"] == 1
    assert VARIANT in message and arch in message and "CUDA_ERROR_NO_BINARY_FOR_GPU" in message
    path = cache.image_path(good.key)
    assert str(path) in message and path.read_bytes() == foreign.image  # kept for inspection
    monkeypatch.setattr(compile_mod, "_nvrtc", real_nvrtc)  # NVRTC as it is: the GPU and the cache recover
    compile_mod._memory.clear()
    prepared.clear()
    assert_matmul_right(2)
    assert path.read_bytes() == good.image and cold["evict"] == 2

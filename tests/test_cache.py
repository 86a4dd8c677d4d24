"""The compile cache on disk heals itself: damaged entries never come back from a read, they are compiled
afresh and rewritten; a size bound evicts least recently used entries; other processes deleting files
underneath are harmless; `cupy-gemm cache info|clear` report what is there and what went."""
import hashlib
import json
import multiprocessing
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from cupy_gemm import cache, compile as compile_mod, registry
from cupy_gemm.registry import tomllib
from cupy_gemm.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
VARIANT = "sgemm_naive_f32"  # the smallest kernel: compiles in a fraction of a second
ARCH = "sm_80"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CUPY_GEMM_CACHE_MAX_MB", raising=False)
    monkeypatch.delenv("CUPY_GEMM_DISK_CACHE", raising=False)
    monkeypatch.setattr(compile_mod, "_memory", {})  # every compile_variant starts from the disk
    return tmp_path


@pytest.fixture
def nvrtc_calls(monkeypatch):
    """How many times NVRTC ran (the disk cache's misses)."""
    calls = []
    real = compile_mod._nvrtc

    def counting(*args):
        calls.append(args[0])  # the cache entry's name
        return real(*args)
    monkeypatch.setattr(compile_mod, "_nvrtc", counting)
    return calls


def compile_fresh():
    compile_mod._memory.clear()  # a new process: nothing in memory
    return compile_mod.compile_variant(registry.lookup(VARIANT), ARCH)


def entry_files(key):
    return cache.image_path(key), cache.folder() / f"{key}.json"


def assert_entry_valid(key, image):
    image_file, stamp_file = entry_files(key)
    stamp = json.loads(stamp_file.read_text())
    assert image_file.read_bytes() == image
    assert stamp["bytes"] == len(image) and stamp["sha256"] == hashlib.sha256(image).hexdigest()
    assert stamp["variant"] == VARIANT and stamp["arch"] == ARCH


def fake_cubin(size, seed):
    """Bytes that pass the header check (64-bit ELF, e_machine EM_CUDA) but are no kernel."""
    body = bytearray(random.Random(seed).randbytes(size))
    body[:5] = b"\x7fELF\x02"
    body[18:20] = (190).to_bytes(2, "little")
    return bytes(body)


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def empty(path):
    path.write_bytes(b"")


def garbage(path):
    path.write_bytes(random.Random(1).randbytes(path.stat().st_size))


def flip_one_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def old_format(path):
    """What the earlier cache left: a bare image and its ptxas log, no stamp."""
    stamp = path.with_suffix(".json")
    path.with_suffix(".log").write_text(json.loads(stamp.read_text())["log"])
    stamp.unlink()


def stamp_garbage(path):
    path.with_suffix(".json").write_bytes(b"\x00{not json")


def stamp_missing_image(path):
    path.unlink()


DAMAGE = [truncate, empty, garbage, flip_one_byte, old_format, stamp_garbage, stamp_missing_image]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__ for d in DAMAGE])
def test_damaged_entry_is_recompiled_and_rewritten(cache_dir, nvrtc_calls, damage):
    first = compile_fresh()
    assert_entry_valid(first.key, first.image)
    damage(cache.image_path(first.key))
    assert cache.read(first.key, ARCH) is None  # never handed on
    rebuilt = compile_fresh()
    assert nvrtc_calls == [VARIANT, VARIANT]
    assert rebuilt.image == first.image and rebuilt.resources == first.resources
    assert_entry_valid(rebuilt.key, rebuilt.image)
    assert not (cache.folder() / f"{first.key}.log").exists()  # the old format's log goes with it
    assert cache.read(rebuilt.key, ARCH).image == first.image


def test_valid_entry_is_read_and_touched(cache_dir, nvrtc_calls):
    first = compile_fresh()
    _, stamp_file = entry_files(first.key)
    os.utime(stamp_file, (1_000_000, 1_000_000))
    again = compile_fresh()
    assert nvrtc_calls == [VARIANT] and again.image == first.image and again.log == first.log
    assert stamp_file.stat().st_mtime > 1_000_000  # the read counts as a use


def test_entry_of_another_arch_or_wrong_kind_is_refused(cache_dir):
    image = fake_cubin(3000, 0)
    cache.write("k1", VARIANT, ARCH, image, "")
    assert cache.read("k1", "sm_90") is None  # stamped for sm_80: removed, not loaded for sm_90
    assert not any(cache.folder().iterdir())
    garbage_bytes = random.Random(2).randbytes(3000)  # digest and length match, the header does not
    cache.write("k2", VARIANT, ARCH, garbage_bytes, "")
    assert cache.read("k2", ARCH) is None and not cache.image_path("k2").exists()
    cache.write("k3", VARIANT, "compute_80", image, "")  # an ELF is not PTX
    assert cache.read("k3", "compute_80") is None
    ptx = compile_mod.compile_variant(registry.lookup(VARIANT), "compute_80")
    assert cache.plausible(ptx.image, "compute_80") and not cache.plausible(ptx.image, ARCH)
    assert cache.read(ptx.key, "compute_80").image == ptx.image


@pytest.mark.parametrize("disk_cache", ["1", "0"])
def test_image_file_never_hands_out_damaged_bytes(cache_dir, monkeypatch, disk_cache):
    monkeypatch.setenv("CUPY_GEMM_DISK_CACHE", disk_cache)
    compiled = compile_fresh()
    path = compile_mod.image_file(compiled)
    assert path.read_bytes() == compiled.image
    for damage in (truncate, garbage, empty):
        damage(path)
        assert compile_mod.image_file(compiled) == path and path.read_bytes() == compiled.image
    if disk_cache == "1":
        assert path.parent == cache.folder()
        assert_entry_valid(compiled.key, compiled.image)
    else:
        assert not cache.folder().exists()


def test_evict_removes_an_entry_from_memory_and_disk(cache_dir, nvrtc_calls):
    compiled = compile_fresh()
    compile_mod.evict(compiled)
    assert not any(cache.folder().iterdir())
    assert compile_mod.compile_variant(registry.lookup(VARIANT), ARCH).image == compiled.image
    assert nvrtc_calls == [VARIANT, VARIANT]


def folder_bytes():
    return sum(p.stat().st_size for p in cache.folder().iterdir())


def set_last_use(key, seconds):
    for path in cache.folder().glob(f"{key}.*"):
        os.utime(path, (seconds, seconds))


def test_bound_evicts_least_recently_used_first(cache_dir, monkeypatch):
    images = {key: fake_cubin(20_000, i) for i, key in enumerate("abcdef")}
    for t, key in enumerate("abc"):
        cache.write(key, VARIANT, ARCH, images[key], "")
        set_last_use(key, 1_000_000 + t)
    entry_bytes = folder_bytes() // 3
    (cache_dir / "failed").mkdir()
    (cache_dir / "failed" / "x-sm_80.cu").write_text("// kept")
    (cache_dir / "tuning.json").write_text("{}")
    monkeypatch.setenv("CUPY_GEMM_CACHE_MAX_MB", str(3.5 * entry_bytes / 2**20))  # room for three
    assert cache.read("a", ARCH).image == images["a"]
    assert (cache.folder() / "a.json").stat().st_mtime > 1_000_002  # the read made a the most recent
    cache.write("d", VARIANT, ARCH, images["d"], "")
    assert sorted(p.stem for p in cache.folder().glob("*.json")) == ["a", "c", "d"]  # b went
    assert folder_bytes() <= 3.5 * entry_bytes
    cache.write("e", VARIANT, ARCH, images["e"], "")
    assert sorted(p.stem for p in cache.folder().glob("*.json")) == ["a", "d", "e"]  # then c
    for key, seconds in (("a", 1_000_000), ("d", 3_000_000), ("e", 2_000_000)):
        set_last_use(key, seconds)
    cache.read("a", ARCH)  # the oldest, used again
    assert cache.evict(2 * entry_bytes) == ["e"]
    monkeypatch.setenv("CUPY_GEMM_CACHE_MAX_MB", "0")
    cache.write("f", VARIANT, ARCH, images["f"], "")
    assert sorted(p.name for p in cache.folder().iterdir()) == ["f.bin", "f.json"]  # the newest survives
    assert (cache_dir / "failed" / "x-sm_80.cu").exists() and (cache_dir / "tuning.json").exists()


def test_old_format_files_count_and_are_evicted(cache_dir, monkeypatch):
    cache.folder().mkdir(parents=True)
    (cache.folder() / "old.bin").write_bytes(fake_cubin(10_000, 0))
    (cache.folder() / "old.log").write_text("ptxas info")
    set_last_use("old", 1_000_000)
    in_flight = cache.folder() / ".new.bin.k2x9a.tmp"  # another process's write in progress
    in_flight.write_bytes(b"x" * 50_000)
    assert cache.info().entries == 1 and cache.info().bytes == 10_000 + len("ptxas info")
    monkeypatch.setenv("CUPY_GEMM_CACHE_MAX_MB", "0")
    cache.write("new", VARIANT, ARCH, fake_cubin(10_000, 1), "")
    assert not (cache.folder() / "old.bin").exists() and not (cache.folder() / "old.log").exists()
    assert in_flight.exists()  # not ours to remove while its writer may still rename it


def test_bad_bound_is_a_config_error(cache_dir, monkeypatch):
    for value in ("lots", "-1", "nan", "inf"):
        monkeypatch.setenv("CUPY_GEMM_CACHE_MAX_MB", value)
        with pytest.raises(ConfigError, match="CUPY_GEMM_CACHE_MAX_MB"):
            cache.info()
    monkeypatch.setenv("CUPY_GEMM_CACHE_MAX_MB", "0.5")
    assert cache.info().bound == 2**19


def test_files_deleted_between_listing_and_reading_are_harmless(cache_dir, monkeypatch):
    for i, key in enumerate("abc"):
        cache.write(key, VARIANT, ARCH, fake_cubin(5000, i), "")
    real_scandir = os.scandir

    def listing_then_another_process_deletes(path):
        items = list(real_scandir(path))
        for item in items:
            if item.name.startswith(("a.", "b.")):
                os.unlink(item.path)
        return iter(items)
    monkeypatch.setattr(cache.os, "scandir", listing_then_another_process_deletes)
    assert cache.evict(0) == ["c"]  # a and b vanished before they could be stat'ed
    for i, key in enumerate("abc"):
        cache.write(key, VARIANT, ARCH, fake_cubin(5000, i), "")
    assert cache.info().entries == 1
    cleared = cache.clear()
    assert cleared.entries == 1 and not any(cache.folder().iterdir())
    cache.remove("c")  # already gone: nothing to do


def _hammer(cache_root: str, seed: int, errors) -> None:
    os.environ["CUPY_GEMM_CACHE_DIR"] = cache_root
    os.environ["CUPY_GEMM_CACHE_MAX_MB"] = str(30_000 / 2**20)  # a handful of entries: constant eviction
    rng = random.Random(seed)
    try:
        for _ in range(150):
            key = f"k{rng.randrange(12)}"
            image = fake_cubin(4000, int(key[1:]))  # every process writes the same bytes under a key
            if rng.random() < 0.5:
                cache.write(key, VARIANT, ARCH, image, "")
            else:
                entry = cache.read(key, ARCH)
                assert entry is None or entry.image == image
            if rng.random() < 0.1:
                cache.info()
    except BaseException as e:  # reported to the test, which fails on any
        errors.put(f"{type(e).__name__}: {e}")


def test_several_processes_share_a_small_cache(cache_dir):
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    workers = [ctx.Process(target=_hammer, args=(str(cache_dir), seed, errors)) for seed in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert errors.empty(), errors.get()
    for stamp in cache.folder().glob("*.json"):
        key = stamp.stem
        assert cache.read(key, ARCH).image == fake_cubin(4000, int(key[1:]))
    assert folder_bytes() <= 30_000 + 4 * 5000  # the bound, plus each process's entry written last


def cupy_gemm_script(cache_root, *args, **env):
    """The `cupy-gemm` console script's entry point, in a fresh process."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["cupy-gemm"]
    module, func = entry.split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    inherited = {k: v for k, v in os.environ.items() if k not in ("CUPY_GEMM_CACHE_MAX_MB", "CUPY_GEMM_DISK_CACHE")}
    full_env = {**inherited, "PYTHONPATH": str(ROOT), "CUPY_GEMM_CACHE_DIR": str(cache_root), **env}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=full_env,
                          timeout=120)


def test_cache_info_and_clear_commands(tmp_path):
    empty_info = cupy_gemm_script(tmp_path, "cache", "info")
    assert empty_info.returncode == 0 and empty_info.stderr == ""
    assert str(tmp_path / "kernels") in empty_info.stdout and "entries         0" in empty_info.stdout
    assert "512 MB" in empty_info.stdout
    built = cupy_gemm_script(tmp_path, "compile", VARIANT, "--arch", "sm_80,sm_90")
    assert built.returncode == 0, built.stdout + built.stderr
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "x-sm_80.cu").write_text("// a rejected source")
    (tmp_path / "tuning.json").write_text("{}")
    size = sum(p.stat().st_size for p in (tmp_path / "kernels").iterdir())
    info = cupy_gemm_script(tmp_path, "cache", "info", CUPY_GEMM_CACHE_MAX_MB="64")
    assert info.returncode == 0 and info.stderr == ""
    assert "entries         2" in info.stdout and f"{size} bytes" in info.stdout and "64 MB" in info.stdout
    assert "failed sources  1" in info.stdout
    cleared = cupy_gemm_script(tmp_path, "cache", "clear")
    assert cleared.returncode == 0 and cleared.stderr == ""
    assert f"removed 2 kernel entries, {size} bytes" in cleared.stdout
    assert not any((tmp_path / "kernels").iterdir())
    assert (tmp_path / "failed" / "x-sm_80.cu").exists() and (tmp_path / "tuning.json").exists()
    cleared = cupy_gemm_script(tmp_path, "cache", "clear", "--failed")
    assert cleared.returncode == 0 and "removed 0 kernel entries" in cleared.stdout
    assert "removed 1 failed sources" in cleared.stdout
    assert not (tmp_path / "failed" / "x-sm_80.cu").exists() and (tmp_path / "tuning.json").exists()


def test_cache_command_errors(tmp_path):
    bad_bound = cupy_gemm_script(tmp_path, "cache", "info", CUPY_GEMM_CACHE_MAX_MB="lots")
    assert bad_bound.returncode == 2 and bad_bound.stdout == ""
    assert bad_bound.stderr.startswith("error: ") and "CUPY_GEMM_CACHE_MAX_MB='lots'" in bad_bound.stderr
    (tmp_path / "kernels").write_text("a file where the kernel folder should be")
    for action in ("info", "clear"):
        broken = cupy_gemm_script(tmp_path, "cache", action)
        assert broken.returncode == 1 and broken.stdout == ""
        assert broken.stderr.startswith("error: ") and "kernels" in broken.stderr
    usage = cupy_gemm_script(tmp_path, "cache")
    assert usage.returncode == 2 and "info" in usage.stderr

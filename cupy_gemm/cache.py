"""The compiled-kernel cache on disk: entries that prove themselves before they reach the driver, a size
bound with least-recently-used eviction, and what `cupy-gemm cache info|clear` shows and does.

An entry is two files in `<cache dir>/kernels/`: `<key>.bin`, the image exactly as the driver loads it
(CuPy loads modules from files), and `<key>.json`, its stamp: format, variant, arch, length, sha256 and
ptxas's log. The stamp is written after the image, so a stamp means the image was whole when written; a
`.bin` without one (a writer that died, or the earlier format) is no entry. A truncated cubin can crash the
driver outright, so an image is checked against its stamp, and for a plausible ELF or PTX header, on every
read from disk; a bad entry is deleted and the caller compiles it afresh.

The stamp's mtime, set on every read, is the entry's last use: filesystem atime is too often off to trust.
Several processes share the folder, so any file may vanish between a listing and a read; that is a miss,
never an error. Only `kernels/` is evicted: failed sources and the tuning database are not cache.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import config
from .fsutil import write_atomic

FORMAT = 1
IMAGE, STAMP = ".bin", ".json"
_OLD_LOG = ".log"  # the earlier format kept ptxas's log beside a stampless .bin
_ENTRY_SUFFIXES = (IMAGE, STAMP, _OLD_LOG)  # anything else in the folder is a writer's temporary file
_EM_CUDA = 190  # ELF e_machine of a cubin


@dataclass(frozen=True)
class Entry:
    image: bytes
    log: str


@dataclass(frozen=True)
class Info:
    location: Path
    entries: int
    bytes: int
    bound: int
    enabled: bool
    failed_sources: int


@dataclass(frozen=True)
class Cleared:
    entries: int
    bytes: int
    failed_sources: int


def folder() -> Path:
    return config.cache_dir() / "kernels"


def failed_folder() -> Path:
    """Where compile.py saves the rendered source of a kernel NVRTC rejected."""
    return config.cache_dir() / "failed"


def image_path(key: str) -> Path:
    return folder() / f"{key}{IMAGE}"


def _stamp_path(key: str) -> Path:
    return folder() / f"{key}{STAMP}"


def plausible(image: bytes, arch: str) -> bool:
    """A cheap look at the header: a cubin is a 64-bit ELF for the CUDA machine; PTX is text with its
    .version and .target. The digest catches damage; this catches a stamp written over the wrong bytes."""
    if arch.startswith("compute_"):
        head = image[:4096]
        return b".version" in head and b".target" in head and b"\0" not in image.rstrip(b"\0")
    return (len(image) >= 64 and image[:5] == b"\x7fELF\x02"
            and struct.unpack_from("<H", image, 18)[0] == _EM_CUDA)


def read(key: str, arch: str) -> Entry | None:
    """The entry, verified, or None. A damaged entry is deleted on the way out; the read counts as a use."""
    try:
        stamp = json.loads(_stamp_path(key).read_bytes())
        image = image_path(key).read_bytes()
    except FileNotFoundError:  # a miss, an old-format entry, or another process evicting this one
        return None
    except ValueError:  # an unreadable stamp
        _discard(key)
        return None
    except OSError:  # unreadable here (permissions): compile afresh, touch nothing
        return None
    if not _verifies(stamp, image, arch):
        _discard(key)
        return None
    _touch(key)
    return Entry(image, stamp["log"])


def _verifies(stamp, image: bytes, arch: str) -> bool:
    return (isinstance(stamp, dict) and stamp.get("format") == FORMAT and stamp.get("arch") == arch
            and stamp.get("bytes") == len(image) and isinstance(stamp.get("log"), str)
            and stamp.get("sha256") == hashlib.sha256(image).hexdigest() and plausible(image, arch))


def write(key: str, variant: str, arch: str, image: bytes, log: str) -> None:
    """Store an entry, then evict down to the bound (sparing this entry). Raises OSError if the folder
    cannot be written."""
    stamp = {"format": FORMAT, "variant": variant, "arch": arch, "bytes": len(image),
             "sha256": hashlib.sha256(image).hexdigest(), "log": log}
    write_atomic(image_path(key), image)
    write_atomic(_stamp_path(key), json.dumps(stamp).encode())  # last: its presence vouches for the image
    if not image_path(key).exists():  # another process removed it meanwhile (remove: image, then stamp)
        write_atomic(image_path(key), image)
    (folder() / f"{key}{_OLD_LOG}").unlink(missing_ok=True)
    evict(config.cache_max_bytes(), keep=key)


def image_file(key: str, variant: str, arch: str, image: bytes, log: str) -> Path:
    """A file that holds exactly `image` (already verified, or fresh from NVRTC), for the driver: the cache's
    own entry, rewritten if it no longer matches, or a private temporary copy when the disk cache is off or
    cannot be written."""
    if config.disk_cache_enabled():
        entry = read(key, arch)
        if entry is not None and entry.image == image:
            return image_path(key)
        try:
            write(key, variant, arch, image, log)
            return image_path(key)
        except OSError:
            pass
    path = Path(tempfile.gettempdir()) / f"cupy-gemm-{os.getuid()}" / f"{key}{IMAGE}"
    try:
        if path.read_bytes() == image:
            return path
    except OSError:
        pass
    write_atomic(path, image)
    return path


def remove(key: str) -> None:
    """Delete an entry: its image, then its stamp. A write racing the removal either loses its stamp too
    (leaving an image without one: a miss, evicted like any file) or finds its image gone after stamping
    it and writes it again, so no stamp outlives its image (a reader between the two unlinks misses)."""
    for suffix in (IMAGE, STAMP, _OLD_LOG):
        (folder() / f"{key}{suffix}").unlink(missing_ok=True)


def _discard(key: str) -> None:
    try:
        remove(key)
    except OSError:  # a read-only cache: the entry stays, and is recompiled around every time
        pass


def _touch(key: str) -> None:
    try:
        os.utime(_stamp_path(key))
    except OSError:  # evicted meanwhile, or a read-only cache: the entry simply looks older
        pass


def _scan() -> dict[str, tuple[int, float]]:
    """key -> (bytes, last use) for every entry file in the folder, old-format and stampless ones included."""
    entries: dict[str, tuple[int, float]] = {}
    try:
        listing = list(os.scandir(folder()))
    except FileNotFoundError:
        return entries
    for item in listing:
        key, _, suffix = item.name.partition(".")
        if f".{suffix}" not in _ENTRY_SUFFIXES:
            continue
        try:
            st = item.stat()
        except FileNotFoundError:  # removed since the listing
            continue
        size, used = entries.get(key, (0, 0.0))
        entries[key] = (size + st.st_size, max(used, st.st_mtime))
    return entries


def evict(bound: int, keep: str | None = None) -> list[str]:
    """Remove least recently used entries until the folder holds at most `bound` bytes; returns their keys.
    `keep` (the entry just written) is spared, so a bound below one entry keeps exactly that one."""
    entries = _scan()
    total = sum(size for size, _ in entries.values())
    removed = []
    for key, (size, _) in sorted(entries.items(), key=lambda item: item[1][1]):
        if total <= bound:
            break
        if key == keep:
            continue
        remove(key)
        total -= size
        removed.append(key)
    return removed


def _files(where: Path) -> list[Path]:
    try:
        return [Path(item.path) for item in os.scandir(where) if item.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def info() -> Info:
    entries = _scan()
    return Info(location=folder(), entries=len(entries), bytes=sum(size for size, _ in entries.values()),
                bound=config.cache_max_bytes(), enabled=config.disk_cache_enabled(),
                failed_sources=len(_files(failed_folder())))


def clear(failed_sources: bool = False) -> Cleared:
    """Empty `kernels/` (temporary files of dead writers too); with failed_sources, `failed/` as well.
    The tuning database is never touched."""
    keys, removed_bytes = set(), 0
    for path in _files(folder()):
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:  # another process got there first
            continue
        key, _, suffix = path.name.partition(".")
        if f".{suffix}" in _ENTRY_SUFFIXES:
            keys.add(key)
        removed_bytes += size
    failed = 0
    if failed_sources:
        for path in _files(failed_folder()):
            try:
                path.unlink()
                failed += 1
            except FileNotFoundError:
                continue
    return Cleared(entries=len(keys), bytes=removed_bytes, failed_sources=failed)

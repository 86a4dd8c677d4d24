"""`cupy-gemm cache info|clear`: the compiled-kernel cache on disk, in plain text; errors go to stderr."""
from __future__ import annotations

import sys

from . import cache
from .errors import CupyGemmError


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("cache", help="the compiled-kernel cache on disk: info, clear")
    sub = p.add_subparsers(dest="cache_command", required=True)
    sub.add_parser("info", help="location, entries, bytes and size bound of the kernel cache")
    p = sub.add_parser("clear", help="remove every compiled kernel (the tuning database is kept)")
    p.add_argument("--failed", action="store_true", help="also remove the saved sources of kernels NVRTC rejected")


def _size(n: int) -> str:
    return f"{n} bytes ({n / 2**20:.1f} MB)"


def _info() -> str:
    info = cache.info()
    state = "on" if info.enabled else "off (CUPY_GEMM_DISK_CACHE=0)"
    return "\n".join([
        f"location        {info.location}",
        f"entries         {info.entries}",
        f"size            {_size(info.bytes)}",
        f"bound           {info.bound / 2**20:g} MB (CUPY_GEMM_CACHE_MAX_MB): least recently used entries go first",
        f"disk cache      {state}",
        f"failed sources  {info.failed_sources} in {cache.failed_folder()}",
    ])


def _clear(failed_sources: bool) -> str:
    cleared = cache.clear(failed_sources)
    lines = [f"removed {cleared.entries} kernel entries, {_size(cleared.bytes)}, from {cache.folder()}"]
    if failed_sources:
        lines.append(f"removed {cleared.failed_sources} failed sources from {cache.failed_folder()}")
    return "\n".join(lines)


def run(args) -> int:
    try:
        print(_info() if args.cache_command == "info" else _clear(args.failed))
    except CupyGemmError as e:  # a bad environment knob
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a cache folder this user may not change
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0

"""Finding NVRTC and a CUDA header set that matches it, on machines with or without a system toolkit."""
from __future__ import annotations

import glob
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import config
from .errors import CompilerNotFoundError


@lru_cache(maxsize=1)
def nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc as lib
        lib.getVersion()
    except Exception as e:  # missing wheel, missing shared library
        raise CompilerNotFoundError(
            f"NVRTC could not be loaded ({type(e).__name__}: {e}). Install it with "
            "`pip install 'cuda-toolkit[nvrtc]==12.*'` for cupy-cuda12x (13.* for cupy-cuda13x), "
            "or put a CUDA toolkit's lib64 on LD_LIBRARY_PATH") from None
    return lib


def nvrtc_version() -> tuple[int, int]:
    return tuple(nvrtc().getVersion())


def supported_archs() -> tuple[int, ...]:
    return tuple(nvrtc().getSupportedArchs())


@dataclass(frozen=True)
class HeaderSet:
    dirs: tuple[str, ...]
    version: int  # CUDART_VERSION, e.g. 12090
    has_mma: bool

    @property
    def major(self) -> int:
        return self.version // 1000


def _version_of(dirs) -> int | None:
    for d in dirs:
        header = Path(d) / "cuda_runtime_api.h"
        if header.is_file():
            m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", header.read_text(errors="replace"))
            if m:
                return int(m.group(1))
    return None


def _has(dirs, name) -> bool:
    return any((Path(d) / name).is_file() for d in dirs)


def _candidates() -> list[tuple[str, ...]]:
    override = config.cuda_include_override()
    if override is not None:
        return [tuple(override)]
    sets: list[tuple[str, ...]] = []
    sets.extend((os.path.join(root, "include"),) for root in config.cuda_toolkit_roots())
    sets.append(("/usr/local/cuda/include",))
    for site in sys.path:  # pip wheels: CUDA 12 splits the headers over components, CUDA 13 does not
        nv = os.path.join(site, "nvidia")
        if os.path.isdir(nv):
            sets.append(tuple(os.path.join(nv, c, "include") for c in ("cuda_runtime", "cuda_nvcc", "cuda_cccl")
                              if os.path.isdir(os.path.join(nv, c, "include"))))
            sets.extend((d,) for d in sorted(glob.glob(os.path.join(nv, "cu[0-9]*", "include"))))
    return [s for s in sets if s and any(os.path.isdir(d) for d in s)]


@lru_cache(maxsize=4)
def header_set(need_mma: bool) -> HeaderSet:
    """The first header set whose CUDA major version matches NVRTC's and that has what is needed."""
    major = nvrtc_version()[0]
    seen = []
    for dirs in _candidates():
        version = _version_of(dirs)
        ok_fp16 = _has(dirs, "cuda_fp16.h")
        has_mma = _has(dirs, "crt/mma.h")
        seen.append(f"  {os.pathsep.join(dirs)}: CUDA {version and f'{version // 1000}.{version % 1000 // 10}'}"
                    f"{'' if ok_fp16 else ', no cuda_fp16.h'}{'' if has_mma else ', no crt/mma.h'}")
        if version and version // 1000 == major and ok_fp16 and (has_mma or not need_mma):
            return HeaderSet(tuple(dirs), version, has_mma)
    looked = "\n".join(seen) or "  (no CUDA include folder found)"
    raise CompilerNotFoundError(
        f"no CUDA {major}.x header set{' with crt/mma.h (needed by WMMA kernels)' if need_mma else ''} "
        f"matching NVRTC {major}.{nvrtc_version()[1]} was found. Looked at:\n{looked}\n"
        f"Install one with `pip install 'cuda-toolkit[cudart,nvcc]=={major}.*'`, or point "
        f"CUPY_GEMM_CUDA_INCLUDE (or CUDA_PATH) at a CUDA {major} toolkit's include folder.")

"""Environment knobs, read here and nowhere else (the README lists them)."""
from __future__ import annotations

import math
import os
from pathlib import Path

from .errors import ConfigError

DEFAULT_CACHE_MAX_MB = 512


def cache_dir() -> Path:
    """CUPY_GEMM_CACHE_DIR: compiled kernels, failed sources and the tuning database."""
    explicit = os.environ.get("CUPY_GEMM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cupy-gemm"


def cuda_include_override() -> list[str] | None:
    """CUPY_GEMM_CUDA_INCLUDE: header folders (os.pathsep-separated) to use instead of searching."""
    value = os.environ.get("CUPY_GEMM_CUDA_INCLUDE")
    return [p for p in value.split(os.pathsep) if p] if value else None


def cuda_toolkit_roots() -> list[str]:
    """CUDA_PATH, then CUDA_HOME: toolkits whose include/ folder is searched before /usr/local/cuda."""
    return [os.environ[v] for v in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(v)]


def disk_cache_enabled() -> bool:
    """CUPY_GEMM_DISK_CACHE=0 turns the on-disk cubin cache off (the in-memory cache stays)."""
    return os.environ.get("CUPY_GEMM_DISK_CACHE", "1") != "0"


def cache_max_bytes() -> int:
    """CUPY_GEMM_CACHE_MAX_MB: the compiled-kernel cache's size bound; least recently used entries go first."""
    value = os.environ.get("CUPY_GEMM_CACHE_MAX_MB", "").strip()
    if not value:
        return DEFAULT_CACHE_MAX_MB * 2**20
    try:
        megabytes = float(value)
    except ValueError:
        megabytes = -1.0
    if not (math.isfinite(megabytes) and megabytes >= 0):
        raise ConfigError("CUPY_GEMM_CACHE_MAX_MB", value, "a size in megabytes such as 512 (0 keeps only the "
                          "kernel written last)", where="environment")
    return int(megabytes * 2**20)


def default_archs() -> list[str]:
    """CUPY_GEMM_ARCH: architectures `cupy-gemm compile` targets when --arch is not given."""
    return [a for a in os.environ.get("CUPY_GEMM_ARCH", "sm_80,sm_90").split(",") if a]


def allow_tf32() -> bool:
    """CUPY_TF32=1 (CuPy's own switch): float32 defaults may use TF32 tensor cores, as cupy.matmul does."""
    return os.environ.get("CUPY_TF32", "0") == "1"


def programmatic_launch() -> bool:
    """CUPY_GEMM_PDL=0: no programmatic dependent launch (cupy_gemm/driver.py); every kernel then starts after
    the one before it on the stream has ended. Read when a call is first prepared."""
    return os.environ.get("CUPY_GEMM_PDL", "1") != "0"

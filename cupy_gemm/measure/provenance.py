"""Where and with what a result was measured: for a run (GPUs, driver, CUDA runtime, NVRTC, CuPy, git
revision, time) and for each point (host, GPU model, driver), so that results from several machines can be
told apart and never ranked across GPU models."""
from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path
from typing import Iterable

from .. import devices as _devices
from .. import toolkit
from ..version import __version__


def here(device_id: int) -> dict:
    """The provenance of one GPU of this process: host, model, compute capability, driver."""
    return {"host": platform.node(), "name": _devices.device_name(device_id),
            "cc": _devices.compute_capability(device_id), "driver": _devices.driver_version()}


def git_revision() -> str:
    """The checkout's commit (with `-dirty` for local changes), or "" outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if rev.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def metadata(devices: Iterable[int] = (), **extra) -> dict:
    """Where and with what a result was measured: GPUs, driver, CUDA runtime, NVRTC, CuPy, git revision, time.
    `devices` are this process's GPU ids; a cluster run passes its workers' provenance as devices=[dict]."""
    meta = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "python": platform.python_version(), "cupy_gemm": __version__,
            "git": git_revision()}
    try:
        import cupy
        meta["cupy"] = cupy.__version__
    except ImportError:
        meta["cupy"] = ""
    try:
        meta["nvrtc"] = ".".join(map(str, toolkit.nvrtc_version()))
    except Exception:  # no NVRTC: the file still says so rather than failing
        meta["nvrtc"] = ""
    devices = list(devices)
    if devices and isinstance(devices[0], dict):
        meta["devices"] = devices
    elif devices:
        import cupy
        rt = cupy.cuda.runtime
        meta["driver"] = _devices.driver_version()
        meta["cuda_runtime"] = _cuda_version(rt.runtimeGetVersion())
        meta["devices"] = [{"id": d, "name": _devices.device_name(d),
                            "compute_capability": cupy.cuda.Device(d).compute_capability,
                            "sm_count": rt.getDeviceProperties(d)["multiProcessorCount"],
                            "memory_bytes_per_ns": _devices.memory_bytes_per_ns(d)} for d in devices]
    meta.update(extra)
    return meta


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"

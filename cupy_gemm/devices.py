"""Which GPUs there are, asked in one place so that a machine without one gets a DeviceError that says so
(not a CUDA runtime error blaming the driver version).

    device_ids(None)      -> [the current GPU's id]
    device_ids("all")     -> every GPU of this process (CUDA_VISIBLE_DEVICES applies)
    device_ids([0, 1])    -> [0, 1], checked against the GPUs there are
"""
from __future__ import annotations

from typing import Iterable

from .errors import DeviceError


def gpu_count() -> int:
    """How many CUDA GPUs this process sees; DeviceError naming the cause when there are none."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except ImportError as e:
        raise DeviceError(f"no CUDA GPU found (CuPy does not import: {e})") from None
    except Exception as e:  # CUDARuntimeError: no driver, no device, a driver older than the runtime
        raise DeviceError(f"no CUDA GPU found ({cuda_reason(e)})") from None
    if count < 1:
        raise DeviceError("no CUDA GPU found (the driver reports none)")
    return count


def cuda_reason(e: BaseException) -> str:
    """Why CUDA sees no GPU, in words: without any driver the runtime reports an "insufficient" one,
    which blames the wrong thing."""
    try:
        import cupy
        if cupy.cuda.runtime.driverGetVersion() == 0:
            return "no NVIDIA driver is loaded"
    except Exception:
        return "no NVIDIA driver is loaded"
    return str(e).strip() or type(e).__name__


def device_ids(devices: str | Iterable[int] | None = None) -> list[int]:
    """GPU ids from None (the current GPU), "all", or an iterable of ids; DeviceError without a GPU or for
    an id that is not there, ValueError for an empty list."""
    count = gpu_count()
    if devices is None:
        import cupy
        return [cupy.cuda.Device().id]
    if devices == "all":
        return list(range(count))
    ids = list(dict.fromkeys(int(d) for d in devices))
    if not ids:
        raise ValueError("devices: give at least one GPU id")
    missing = [d for d in ids if not 0 <= d < count]
    if missing:
        raise DeviceError(f"no GPU {', '.join(map(str, missing))}: this process sees {count} GPU(s), ids 0 to "
                          f"{count - 1}")
    return ids


_properties: dict[int, dict] = {}


def properties(device_id: int) -> dict:
    """The CUDA runtime's properties of a device (its name, SM count, memory clock, ...), queried once."""
    if device_id not in _properties:
        import cupy
        _properties[device_id] = cupy.cuda.runtime.getDeviceProperties(device_id)
    return _properties[device_id]


def device_name(device_id: int) -> str:
    """The GPU's model name, e.g. 'NVIDIA H100 80GB HBM3'."""
    name = properties(device_id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def compute_capability(device_id: int) -> int:
    import cupy
    return int(cupy.cuda.Device(device_id).compute_capability)


# what a large device-to-device copy sustains of the memory's peak (2 transfers a clock over the bus): H100
# SXM 2994 GB/s of 3352, H200 4219 of 4800
SUSTAINED_SHARE = 0.9


def memory_bytes_per_ns(device_id: int) -> float | None:
    """The device memory's sustained bandwidth in bytes per ns (GB/s), SUSTAINED_SHARE of the peak its clock
    and bus width give; None where the runtime reports neither."""
    props = properties(device_id)
    clock_khz, bus_bits = props.get("memoryClockRate", 0), props.get("memoryBusWidth", 0)
    peak = 2 * clock_khz * bus_bits / 8 / 1e6  # kHz × bits: bytes per ns
    return SUSTAINED_SHARE * peak if peak else None


def driver_version() -> str:
    """The CUDA version the driver supports, e.g. '12.8'."""
    import cupy
    v = cupy.cuda.runtime.driverGetVersion()
    return f"{v // 1000}.{v % 1000 // 10}"

"""A GPU made of fakes for CPU tests of the call path: CuPy arrays over addresses nothing dereferences,
a kernel that records its launches, tensor maps that record their encodings."""
from types import SimpleNamespace

import numpy as np
import pytest

from cupy_gemm import api, devices, dispatch, launch, operands, prepared, tma

cupy = pytest.importorskip("cupy")


class FakeDevice:
    def __init__(self, device_id):
        self.id = device_id
        self.compute_capability = "90"
        self.attributes = {"MultiProcessorCount": 132, "MaxSharedMemoryPerBlockOptin": 227 * 1024}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeKernel:
    def __init__(self, name):
        self.name, self.launches = name, []

    def __call__(self, grid, block, args, shared_mem=0):
        self.launches.append((grid, block, args, shared_mem))


class FakeGpu:
    """Replaces the few CuPy and driver calls the fast path makes; counts decisions and resolutions."""

    def __init__(self, monkeypatch):
        self.device, self.stream, self.next_address = 0, 1, 1 << 32
        self.kernels, self.decisions, self.resolutions, self.encodings = {}, 0, 0, 0
        monkeypatch.setattr(prepared, "current_device", lambda: self.device)
        monkeypatch.setattr(launch, "current_stream", lambda: self.stream)
        monkeypatch.setattr(prepared, "allocate", lambda shape, dtype: self.array(shape, dtype))
        monkeypatch.setattr(prepared, "device_of", FakeDevice)
        unknown = SimpleNamespace(resources=SimpleNamespace(registers=None))  # no ptxas report: the launcher assumes
        monkeypatch.setattr(launch, "load", lambda v, device: (self.kernels.setdefault(v.name, FakeKernel(v.name)), unknown))
        self.info = dispatch.Gpu("Fake GPU", 90, 132)  # what dispatch sees; a test may name a real GPU
        monkeypatch.setattr(dispatch, "gpu_of", lambda device_id: self.info)
        monkeypatch.setattr(devices, "memory_bytes_per_ns", lambda device_id: None)  # the split model's default
        monkeypatch.setattr(tma, "tensor_map_2d", self._tensor_map)
        monkeypatch.setattr(launch, "launchable", lambda args: args)  # keep arguments readable
        monkeypatch.setattr(launch, "launch_kernel", self._launch)
        # prepared launches record the arguments as given: A, B and C as arrays, nothing packed
        monkeypatch.setattr(launch.Launch, "pack", lambda run, args: args)
        monkeypatch.setattr(launch.Launch, "launch", lambda run, args: self._launch_prepared(run, args))
        monkeypatch.setattr(launch.Launch, "launch_pointers", lambda run, A, B, C: self._launch_prepared(
            run, (A, B, C) + run.args[launch.POINTER_SLOTS:]))
        real_resolve, real_decide = operands.resolve, api._resolve_variant

        def resolve(*args, **kw):
            self.resolutions += 1
            return real_resolve(*args, **kw)

        def decide(variant, problem, precision=None, **needs):
            self.decisions += 1
            return real_decide(variant, problem, precision, **needs)
        monkeypatch.setattr(operands, "resolve", resolve)
        monkeypatch.setattr(api, "_resolve_variant", decide)
        monkeypatch.delenv("CUPY_TF32", raising=False)
        prepared.clear()

    def array(self, shape, dtype, order="C", offset=0):
        """A CuPy array at a fresh fake address on the current fake device (never dereferenced)."""
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize + offset
        mem = cupy.cuda.UnownedMemory(self.next_address, size, None, device_id=self.device)
        self.next_address += -(-size // 4096) * 4096 + 4096
        return cupy.ndarray(shape, dtype, memptr=cupy.cuda.MemoryPointer(mem, offset), order=order)

    @staticmethod
    def _launch(kernel, grid, block, smem, args, pdl, cluster=1):
        kernel(grid, block, args, shared_mem=smem)

    @staticmethod
    def _launch_prepared(run, args):
        cfg = run.config
        run.kernel(cfg.grid, cfg.block, args, shared_mem=cfg.smem)

    def _tensor_map(self, ptr, dtype, **kw):
        self.encodings += 1
        return ("map", ptr, dtype, tuple(sorted(kw.items())))

    def last_launch(self, name):
        return self.kernels[name].launches[-1]


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGpu(monkeypatch)
    yield fake
    prepared.clear()



"""Helpers of the GPU tests that run catalogue entries: the entry if this GPU and environment can run it
(else the test skips), and a record of every operands.resolve a call makes."""
import cupy
import pytest

from cupy_gemm import launch, operands, registry

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None


def runnable(name):
    """The catalogue entry `name`; the test skips where bfloat16 arrays need ml_dtypes or the GPU is too old."""
    v = registry.lookup(name)
    if v.dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    if not v.runs_on(launch.compute_capability(cupy.cuda.Device())):
        pytest.skip(f"{name} needs a newer GPU")
    return v


def resolutions(monkeypatch) -> list:
    """The Operands of every operands.resolve from now on (a prepared repeat resolves nothing)."""
    seen = []
    resolve = operands.resolve
    monkeypatch.setattr(operands, "resolve", lambda *args, **kw: seen.append(resolve(*args, **kw)) or seen[-1])
    return seen

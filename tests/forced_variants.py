"""Catalogue variants for the GPU tests, skipped where this GPU or this install cannot run them, optionally
with a fixed split count (SPLIT_K); the family's alignment, and sizes rounded up to it."""
import cupy
import pytest

from cupy_gemm import launch, registry

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None


def variant(name, splits=None):
    v = registry.lookup(name)
    if v.dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    if not v.runs_on(launch.compute_capability(cupy.cuda.Device())):
        pytest.skip(f"{name} needs a newer GPU")
    if splits is None:
        return v
    return registry.make_variant(v.family, f"{name}_split{splits}", v.dtype, {**v.params, "SPLIT_K": splits}, v.acc)


def align(v) -> int:
    return v.family.align(v.params, v.dtype)


def up(x: int, to: int) -> int:
    return -(-x // to) * to

import os
import shutil
import tempfile

import pytest

# CuPy's CUB-backed reductions compile a kernel for each array size, and the checks here reduce at hundreds
# of sizes (count_nonzero, max, norm in verify.check): its plain reductions compile once per dtype. Set
# before CuPy is imported, and only when the user has not chosen.
os.environ.setdefault("CUPY_ACCELERATORS", "")


def _gpu_count() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


GPU_COUNT = _gpu_count()


def pytest_configure(config):
    # The suite compiles hundreds of kernels and writes failing sources on purpose: keep all of it out of
    # the user's ~/.cache. A cache named explicitly (CI names one, to reuse it across runs) is used as is.
    if os.environ.get("CUPY_GEMM_CACHE_DIR"):
        return
    path = tempfile.mkdtemp(prefix="cupy-gemm-test-cache-")
    os.environ["CUPY_GEMM_CACHE_DIR"] = path  # subprocesses (CLI tests, workers) inherit it

    def remove():
        os.environ.pop("CUPY_GEMM_CACHE_DIR", None)
        shutil.rmtree(path, ignore_errors=True)
    config.add_cleanup(remove)


def pytest_collection_modifyitems(config, items):
    if GPU_COUNT:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU: GPU tests run on a GPU machine (see README)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

import pytest


def _gpu_count() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


GPU_COUNT = _gpu_count()


def pytest_collection_modifyitems(config, items):
    if GPU_COUNT:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU: GPU tests run on a GPU machine (see README)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

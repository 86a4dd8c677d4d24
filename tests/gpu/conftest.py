import os

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
    # CUPY_GEMM_GPU_SHARD=i/n (.ci/gpu-check's SHARDS): keep the i-th of n contiguous slices of the tests, so
    # that n processes share the GPU suite test by test, a long file spread over several of them, while a
    # variant's tests stay together (one process compiles its kernels)
    shard = os.environ.get("CUPY_GEMM_GPU_SHARD")
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        if not 0 <= index < count:
            raise pytest.UsageError(f"CUPY_GEMM_GPU_SHARD={shard}: want i/n with 0 <= i < n")
        lo, hi = len(items) * index // count, len(items) * (index + 1) // count
        config.hook.pytest_deselected(items=items[:lo] + items[hi:])
        items[:] = items[lo:hi]

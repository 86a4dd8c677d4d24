import os

import cupy
import pytest

SHARD_RUN = 8  # consecutive tests a shard keeps together


@pytest.fixture(autouse=True, scope="module")
def _memory_back_after_each_module():
    """Shards share one GPU: a module's cached blocks go back to it when the module is done."""
    yield
    cupy.get_default_memory_pool().free_all_blocks()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
    # CUPY_GEMM_GPU_SHARD=i/n (.ci/gpu-check's SHARDS): keep every n-th run of SHARD_RUN consecutive tests, so
    # that n processes share the GPU suite evenly: a variant's few tests stay together (one process compiles
    # its kernels), while the tests that each compile a kernel of their own (fused epilogues, output dtypes:
    # 15-20 s apiece) spread over all of them. Shard i starts its runs i/n of the way into the suite and wraps
    # around, so at any time the shards are in different modules, as contiguous slices would be: run in
    # step, the n processes met the suite's memory-hungry modules together and ran out of GPU memory.
    shard = os.environ.get("CUPY_GEMM_GPU_SHARD")
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        if not 0 <= index < count:
            raise pytest.UsageError(f"CUPY_GEMM_GPU_SHARD={shard}: want i/n with 0 <= i < n")
        runs = [items[at:at + SHARD_RUN] for at in range(0, len(items), SHARD_RUN)]
        mine = runs[index::count]
        start = index * len(mine) // count
        others = [item for at, run in enumerate(runs) if at % count != index for item in run]
        config.hook.pytest_deselected(items=others)
        items[:] = [item for run in mine[start:] + mine[:start] for item in run]

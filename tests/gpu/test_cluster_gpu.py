"""The Dask runner's real worker functions on this machine's GPU: a one-worker LocalCluster measures a small
grid as the local runner does, with each record's provenance."""
import platform

import pytest

distributed = pytest.importorskip("distributed")

from cupy_gemm import devices  # noqa: E402
from cupy_gemm.measure import cluster, space  # noqa: E402
from cupy_gemm.measure.workbench import Settings  # noqa: E402


def test_a_dask_worker_measures_on_the_gpu():
    pts = space.points("sliced_k", {"BM": [16, 32], "BK": [8, 16]}, "float32")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as lc, \
            distributed.Client(lc) as client:
        runner = cluster.DaskRunner(lc.scheduler_address, client=client)
        (model,) = runner.gpu_models()
        result = runner.measure(pts, [(256, 192, 160)], Settings(repeats=5, warmup_ms=2.0))
    assert model.name == devices.device_name(0)
    ok = [r for r in result.kernels() if r.status == "ok"]
    assert len(ok) == 4 and all(r.error <= 1 and r.time_ms > 0 for r in ok)
    assert all((r.host, r.device_name, r.driver) == (platform.node(), model.name, devices.driver_version())
               for r in result.records)
    assert result.baselines()[0].status == "ok" and result.ranked()

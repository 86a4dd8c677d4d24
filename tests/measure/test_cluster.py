"""The Dask runner on a distributed.LocalCluster with stand-in GPU functions (no GPU): scheduling,
provenance, grouping by GPU model, a worker dying mid-sweep, resume, and an unreachable scheduler."""
import time

import pytest

distributed = pytest.importorskip("distributed")

from cupy_gemm.errors import DeviceError  # noqa: E402
from cupy_gemm.measure import cluster, results, space, sweep  # noqa: E402
from cupy_gemm.measure.occupancy import sm_limits  # noqa: E402
from cupy_gemm.measure.workbench import Settings  # noqa: E402

FAMILY = "sliced_k"
GRID = {"BM": [16, 32], "BN": [16], "BK": [4, 8, 16], "PAD": [0]}
SHAPES = [(64, 64, 64), (128, 128, 128)]
killed: list = []  # points that have ended a worker (the workers share this process)


def _models_by_worker(names):
    def probe(dask_worker):
        worker = dask_worker
        return {"host": "node1", "name": names[worker.name % len(names)], "cc": 90, "driver": "12.8",
                "limits": list(sm_limits(90)), "device": worker.name}
    return probe


def fake_measure(spec, shape, settings):
    """Points take BK/10 ms; BK=16 at 64³ ends its worker the first time (with KILL, every time)."""
    worker = distributed.get_worker()
    params = dict(spec[4])
    if params["BK"] == 16 and shape[0] == 64 and (not killed or KILL_EVERY_TIME[0]):
        killed.append(worker.address)
        worker.loop.add_callback(worker.close, executor_wait=False)
        time.sleep(10)  # never answers: the runner sees its worker leave
    ms = params["BK"] / 10
    return {"status": "ok", "time_ms": ms, "time_q1_ms": ms * 0.99, "time_q3_ms": ms * 1.01, "tflops": 1 / ms,
            "error": 0.01, "device": worker.name, "host": "node1", "driver": "12.8",
            "baseline": {"variant": "cublas_f32", "status": "ok", "time_ms": 0.1, "time_q1_ms": 0.1,
                         "time_q3_ms": 0.1, "tflops": 10.0}}


KILL_EVERY_TIME = [False]


@pytest.fixture
def client():
    killed.clear()
    KILL_EVERY_TIME[0] = False
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        with distributed.Client(lc, set_as_default=False) as c:  # as a runner meets it: not the default
            yield c


def _runner(client, models=("Fake GPU",), **kw):
    return cluster.DaskRunner(client.scheduler.address, client=client, probe=_models_by_worker(list(models)),
                              measure_fn=fake_measure, poll=0.05, **kw)


def _points(**grid):
    return space.points(FAMILY, {**GRID, **grid}, "float32")


def test_every_point_is_measured_with_its_provenance(client):
    result = _runner(client).measure(_points(BK=[4, 8]), SHAPES, Settings())
    ok = result.kernels()
    assert len(ok) == 2 * 2 * 2 and all(r.status == "ok" for r in ok)
    assert all((r.host, r.device_name, r.driver) == ("node1", "Fake GPU", "12.8") for r in result.records)
    assert {r.device for r in ok} <= {0, 1, 2} and result.baselines()
    assert len(result.metadata["devices"]) == 3 and all("worker" in d for d in result.metadata["devices"])
    assert [r.variant for r, _ in result.ranked((64, 64, 64))][:2] == \
        [r.variant for r in ok if r.params["BK"] == 4 and r.M == 64]


def test_gpu_models_are_grouped_never_ranked_together(client):
    result = _runner(client, models=("GPU A", "GPU B")).measure(_points(BK=[4, 8]), SHAPES[:1], Settings())
    assert sorted(result.gpu_models()) == ["GPU A", "GPU B"]
    for model in ("GPU A", "GPU B"):  # each model measured every point
        mine = [r for r in result.kernels() if r.device_name == model]
        assert len(mine) == 4 and all(r.status == "ok" for r in mine)
        assert all(r.device_name == model for r, _ in result.ranked(gpu=model))
    with pytest.raises(ValueError, match="GPU models"):
        result.ranked()


def test_a_worker_dying_mid_sweep_loses_nothing(client):
    events = []
    result = _runner(client).measure(_points(), SHAPES, Settings(), emit=lambda k, d: events.append((k, d)))
    assert len(killed) == 1
    recs = {(r.params["BM"], r.params["BK"], r.M): r for r in result.kernels()}
    assert len(recs) == 2 * 3 * 2 and all(r.status == "ok" for r in recs.values())  # re-queued and measured
    assert any(k == "device" and d["state"] == "restarted" for k, d in events)


def test_a_point_that_keeps_killing_workers_is_recorded_failed(client):
    KILL_EVERY_TIME[0] = True
    result = _runner(client).measure(_points(BM=[16]), SHAPES[:1], Settings())
    recs = {r.params["BK"]: r for r in result.kernels()}
    assert len(killed) == cluster.MAX_STRIKES
    assert recs[16].status == "launch_failed" and "ended" in recs[16].reason
    assert recs[4].status == recs[8].status == "ok"


def test_resume_finishes_an_interrupted_sweep(client, tmp_path):
    pts = _points(BK=[4, 8])
    first = _runner(client).measure(pts, SHAPES, Settings())
    path = tmp_path / "sweep.json"
    done = [r for r in first.records if r.is_baseline or r.M == 64]  # as if interrupted after the first shape
    results.write(path, done, first.metadata)
    events = []
    second = _runner(client).measure(pts, SHAPES, Settings(), results.read(path)[1],
                                     lambda k, d: events.append((k, d)))
    start = next(d for k, d in events if k == "start")
    assert start["resumed"] == 4 and start["measurements"] == 4
    assert len(second.kernels()) == 8 and all(r.status == "ok" for r in second.kernels())


def test_the_public_api_takes_a_scheduler(client, monkeypatch):
    monkeypatch.setattr(cluster, "probe_gpu", _models_by_worker(["Fake GPU"]))
    monkeypatch.setattr(cluster, "measure_on_worker", fake_measure)
    result = sweep.run(FAMILY, ["64x64x64"], {"BK": [4, 8]}, "float32", scheduler=client.scheduler.address)
    assert [r.status for r in result.kernels()] == ["ok", "ok"] and result.metadata["scheduler"]
    with pytest.raises(ValueError, match="exclude each other"):
        sweep.run(FAMILY, ["64x64x64"], {"BK": [4]}, "float32", devices=[0], scheduler=client.scheduler.address)


def test_an_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(DeviceError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        cluster.DaskRunner("tcp://127.0.0.1:9", connect_timeout=1).gpu_models()

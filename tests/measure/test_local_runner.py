"""The local runner without a GPU: compile-only runs, and the scheduler driven by a stand-in GPU worker
(crashes, hangs, several devices, resume)."""
import os
import time

import pytest

from cupy_gemm import devices, registry
from cupy_gemm.errors import DeviceError
from cupy_gemm.measure import local, occupancy, provenance, results, space, sweep
from cupy_gemm.measure.schedule import GPUModel
from cupy_gemm.measure.tune import tune

FAMILY = "sliced_k"


def test_compile_only_records_resources():
    pts = space.points(FAMILY, {"BM": [16, 64], "BN": [32], "BK": [16]}, "float32")
    kinds = []
    result = sweep.compile_only(pts, "sm_80", ["256x256x256"], compile_workers=1,
                                on_event=lambda kind, data: kinds.append(kind))
    status = {r.params["BM"]: r for r in result.records}
    assert status[64].status == "invalid" and status[64].registers is None
    ok = status[16]
    assert ok.status == "compiled" and ok.registers > 0 and ok.static_smem == 4 * (16 * 16 + 16 * 32)
    assert ok.threads == 512 and 0 < ok.occupancy <= 1 and ok.arch == "sm_80" and ok.local_bytes == 0
    assert kinds[0] == "start" and kinds.count("compiled") == 1 and kinds.count("record") == 2


def test_compile_timeout_is_recorded_and_sweep_goes_on(monkeypatch):
    # parameters no other test compiles (PAD=5): a compile pool started earlier does not see the variable
    # below, and its workers could find these kernels in a cache
    pts = space.points(FAMILY, {"BM": [8, 16], "BN": [16], "BK": [4], "PAD": [5]}, "float32")
    monkeypatch.setenv("CUPY_GEMM_DISK_CACHE", "0")  # real compiles in the workers, never a cache hit
    result = sweep.compile_only(pts, "sm_80", compile_workers=2, compile_timeout=0.01)
    assert [r.status for r in result.records] == ["compile_failed", "compile_failed"]
    assert all("timed out" in r.reason for r in result.records)


def fake_device_worker(conn, device_id, settings):
    """Plays a GPU worker. Points take BK/10 ms on device 0, 1 µs more on device 1. With PAD=1 some points
    misbehave: BM=32 is wrong, BM=16 BK=16 kills the process at 64x64x64, BM=16 BK=8 hangs at 128x128x128."""
    conn.send(("ready", None, {"device": device_id, "name": "Fake GPU", "pid": os.getpid()}))
    while True:
        message = conn.recv()
        if message is None:
            return
        task_id, (spec, shape) = message
        p = dict(spec[4])
        odd = p.get("PAD") == 1
        if odd and p["BM"] == 16 and p["BK"] == 16 and shape[0] == 64:
            os._exit(3)
        if odd and p["BM"] == 16 and p["BK"] == 8 and shape[0] == 128:
            time.sleep(60)
        ms = p.get("BK", 8) / 10 + 0.001 * device_id
        baseline = {"variant": "cublas_f32", "status": "ok", "time_ms": 0.1, "time_q1_ms": 0.1, "time_q3_ms": 0.1,
                    "tflops": 10.0}
        fields = {"status": "ok", "time_ms": ms, "time_q1_ms": ms * 0.99, "time_q3_ms": ms * 1.01, "tflops": 1 / ms,
                  "cublas": "cublas_f32", "cublas_ms": 0.1, "pct_cublas": 10 / ms, "error": 0.01,
                  "baseline": baseline, "device": device_id}
        if odd and p["BM"] == 32:
            fields.update(status="incorrect", reason="at 64x64x64: WRONG")
        conn.send(("result", task_id, fields))


def _fake_model(monkeypatch, name="Fake GPU"):
    monkeypatch.setattr(devices, "gpu_count", lambda: 2)
    monkeypatch.setattr(local.LocalRunner, "gpu_model", lambda self: GPUModel(name, 90, occupancy.sm_limits(90)))


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(local, "device_worker", fake_device_worker)
    _fake_model(monkeypatch)
    monkeypatch.setattr(provenance, "metadata", lambda devices=(), **extra: {
        "devices": [{"id": d, "name": "Fake GPU"} for d in devices], **extra})


def _grid(**extra):
    grid = {"BM": [16, 64], "BN": [16], "BK": [8, 16], "PAD": [0]}
    grid.update(extra)
    return grid


def test_sweep_records_every_status(fake_gpu):
    grid = _grid(BM=[16, 32, 128], PAD=[1])
    events = []
    result = sweep.run(FAMILY, ["64x64x64", "128x128x128"], grid, "float32", devices=[0], compile_workers=2,
                       gpu_timeout=4, on_event=lambda kind, data: events.append((kind, data)))
    recs = {(r.params["BM"], r.params["BK"], r.M): r for r in result.kernels()}
    assert len(recs) == 3 * 2 * 2
    ok = recs[(16, 8, 64)]
    assert ok.status == "ok" and ok.registers > 0 and ok.threads == 256 and ok.arch == "sm_90"
    assert ok.device_name == "Fake GPU" and ok.cublas_ms == 0.1 and ok.time_ms == 0.8
    assert recs[(32, 8, 64)].status == "incorrect" and "WRONG" in recs[(32, 8, 64)].reason
    assert recs[(128, 8, 64)].status == "invalid" and "threads" in recs[(128, 8, 64)].reason
    crashed, hung = recs[(16, 16, 64)], recs[(16, 8, 128)]
    assert crashed.status == "launch_failed" and "exit code 3" in crashed.reason
    assert hung.status == "launch_failed" and "timed out" in hung.reason
    # the sweep went on after the crash and after the hang
    assert recs[(32, 16, 64)].status == "incorrect" and recs[(16, 16, 128)].status == "ok"
    assert [r.variant for r, _ in result.ranked((128, 128, 128))] == [recs[(16, 16, 128)].variant]
    assert [b.variant for b in result.baselines((128, 128, 128))] == ["cublas_f32"]
    kinds = [k for k, _ in events]
    assert kinds[0] == "start" and kinds.count("record") == len(recs) and "baseline" in kinds
    assert sum(k == "device" and d["state"] == "restarted" for k, d in events) == 2
    assert result.counts() == {"invalid": 4, "ok": 2, "incorrect": 4, "launch_failed": 2}


def test_sweep_on_two_devices_merges(fake_gpu):
    result = sweep.run(FAMILY, ["64x64x64"], {"BM": [8, 16], "BN": [16], "BK": [4, 8, 16]}, "float32",
                       devices=[0, 1], compile_workers=2)
    ok = [r for r in result.kernels() if r.status == "ok"]
    assert len(ok) == 6 and {r.device for r in ok} <= {0, 1}
    assert sorted({b.device for b in result.baselines()}) == sorted({r.device for r in ok})
    assert result.metadata["devices"] == [{"id": 0, "name": "Fake GPU"}, {"id": 1, "name": "Fake GPU"}]


def test_resume_skips_measured_points(fake_gpu, tmp_path):
    out = tmp_path / "sweep.json"
    first = sweep.run(FAMILY, ["64x64x64"], _grid(), "float32", devices=[0], compile_workers=1)
    results.write(out, first.records, first.metadata)
    _, previous = results.read(out)
    # pretend one measurement came from an older template: it must be measured again
    stale = next(r for r in previous if not r.is_baseline and r.params["BK"] == 16)
    stale.source_hash = "0" * 16
    events = []
    second = sweep.run(FAMILY, ["64x64x64", "32x32x32"], _grid(), "float32", devices=[0], compile_workers=1,
                       resume=previous, on_event=lambda kind, data: events.append((kind, data)))
    start = events[0][1]
    assert start["resumed"] == 3 and start["compiles"] == 4 and start["measurements"] == 5
    measured = [d for k, d in events if k == "record"]
    assert sorted((r.params["BM"], r.params["BK"], r.M) for r in measured) == \
        [(16, 8, 32), (16, 16, 32), (16, 16, 64), (64, 8, 32), (64, 16, 32)]
    assert len(second.kernels()) == 2 * 4 and all(r.status == "ok" for r in second.kernels())
    assert all(r.source_hash != "0" * 16 for r in second.records)


def test_no_gpu_worker_raises(monkeypatch):
    _fake_model(monkeypatch)
    monkeypatch.setattr(local, "device_worker", _broken_device_worker)
    with pytest.raises(DeviceError, match="no CUDA device"):
        sweep.run(FAMILY, ["64x64x64"], {"BK": [8]}, "float32", devices=[0], compile_workers=1)


def _broken_device_worker(conn, device_id, settings):
    conn.send(("fatal", None, f"GPU {device_id}: no CUDA device"))


def test_without_a_gpu_the_runner_says_so(monkeypatch):
    import cupy

    def no_driver():
        raise cupy.cuda.runtime.CUDARuntimeError(35)  # cudaErrorInsufficientDriver, what a GPU-less host says
    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", no_driver)
    with pytest.raises(DeviceError, match=r"^no CUDA GPU found \(.*driver"):
        sweep.run(FAMILY, ["64x64x64"], {"BK": [8]}, "float32")
    with pytest.raises(DeviceError, match="no CUDA GPU found"):
        devices.device_ids("all")
    with pytest.raises(DeviceError, match="no CUDA GPU found"):
        tune(["64"], "float32", variants=["sgemm_naive_f32"])

"""Sweeps without a GPU: grids, pruning, dry runs, compile-only runs, result files, resume, and the
scheduler itself driven by a stand-in GPU worker (crashes, hangs and several devices included)."""
import json
import os
import time

import pytest

from cupy_gemm import cli, registry, results, sweep, timing
from cupy_gemm.errors import ConfigError, DeviceError

FAMILY = "sliced_k"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    # one compile cache for the whole session: worker processes inherit it through the environment
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


# ---- shapes and grids ----------------------------------------------------------------------------------

def test_parse_shapes():
    assert sweep.parse_shape("4096x2048x512") == (4096, 2048, 512)
    assert sweep.parse_shape("1024") == (1024, 1024, 1024)
    assert sweep.parse_shapes(["1x2x3,4x5x6", "1x2x3"]) == [(1, 2, 3), (4, 5, 6)]
    assert sweep.parse_shapes("seed", "float16") == sweep.SEED_HGEMM
    assert sweep.parse_shapes("seed", "float32") == sweep.SEED_SGEMM
    assert len(sweep.SEED_SGEMM) == 27 and (16384, 16384, 8192) in sweep.SEED_SGEMM
    for bad in ("4096x4096", "0x1x1", "axbxc"):
        with pytest.raises(ValueError, match="MxNxK"):
            sweep.parse_shape(bad)
    with pytest.raises(ValueError, match="dtype"):
        sweep.parse_shapes("seed")


def test_parse_values():
    assert sweep.parse_values("64,128") == [64, 128]
    assert sweep.parse_values("16:128:*2") == [16, 32, 64, 128]
    assert sweep.parse_values("32:128:32") == [32, 64, 96, 128]
    assert sweep.parse_values("8:10,9,64") == [8, 9, 10, 64]
    assert sweep.parse_set("BK = 8:32:*2") == ("BK", [8, 16, 32])
    for bad in ("x", "1:2:3:4", "4:64:*1", "8:4:0"):
        with pytest.raises(ValueError):
            sweep.parse_values(bad)
    with pytest.raises(ValueError, match="NAME=VALUES"):
        sweep.parse_set("BK")


def test_expand_order_and_defaults():
    fam = registry.family(FAMILY)
    combos = sweep.expand(fam, {"BK": [8, 16], "BM": [16, 32]})
    defaults = {p.name: p.default for p in fam.params}
    assert [(c["BM"], c["BK"]) for c in combos] == [(16, 8), (16, 16), (32, 8), (32, 16)]  # family order, last fastest
    assert all(c["BN"] == defaults["BN"] and c["PAD"] == defaults["PAD"] for c in combos)
    assert sweep.expand(fam, {"BM": [16, 16]}) == [{**defaults, "BM": 16}]
    with pytest.raises(ConfigError, match="BQ"):
        sweep.expand(fam, {"BQ": [1]})


def test_load_grid(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('family = "sliced_k"\ndtype = "float16"\nacc = "float32"\nshapes = ["1024x1024x512", "2048"]\n'
                    '[params]\nBM = [16, 32]\nBK = "8:32:*2"\nPAD = 0\nBN = ["16:32:16", 64]\n')
    spec = sweep.load_grid(path)
    assert (spec.family, spec.dtype, spec.acc) == ("sliced_k", "float16", "float32")
    assert spec.shapes == [(1024, 1024, 512), (2048, 2048, 2048)]
    assert spec.params == {"BM": [16, 32], "BK": [8, 16, 32], "PAD": [0], "BN": [16, 32, 64]}
    path.write_text('[params]\nBM = [1.5]\n')
    with pytest.raises(ValueError, match="params.BM"):
        sweep.load_grid(path)
    path.write_text('familly = "x"\n')
    with pytest.raises(ValueError, match="unknown keys"):
        sweep.load_grid(path)


def test_points_prune_with_reasons():
    pts = sweep.points(FAMILY, {"BM": [16, 64], "BN": [32], "BK": [32, 256]}, "float32")
    by = {(p.params["BM"], p.params["BK"]): p for p in pts}
    assert by[(16, 32)].valid and by[(16, 32)].source_hash
    assert not by[(64, 32)].valid and by[(64, 32)].param == "threads" and "1024" in by[(64, 32)].reason
    smem = sweep.points(FAMILY, {"BM": [32], "BN": [32], "BK": [256]}, "float32")[0]
    assert not smem.valid and smem.param == "BK" and "48 KB" in smem.reason
    # a point equal to a catalogue variant is named after it (so tuning can return a catalogue name)
    cat = registry.lookup("sgemm_sliced_k_f32")
    same = sweep.points(FAMILY, {k: [v] for k, v in cat.params.items()}, "float32")[0]
    assert same.name == same.catalogue == "sgemm_sliced_k_f32"
    assert same.source_hash == sweep.source_hash(cat)
    with pytest.raises(ConfigError, match="dtype"):
        sweep.points(FAMILY, {}, "int8")
    with pytest.raises(ValueError, match="max_points"):
        sweep.points(FAMILY, {"BM": range(1, 100), "BN": range(1, 100)}, "float32", max_points=1000)


def test_point_names_are_stable():
    a = sweep.points(FAMILY, {"BM": [16], "BK": [8]}, "float16", "float32")[0]
    b = sweep.points(FAMILY, {"BK": [8], "BM": [16]}, "float16", "float32")[0]
    assert a.name == b.name and a.source_hash == b.source_hash
    assert "f16" in a.name and "accf32" in a.name and "/" not in a.name


def test_dry_run_cli(capsys):
    assert cli.main(["sweep", FAMILY, "--set", "BM=16,64", "--set", "BN=32", "--set", "BK=8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 points, 1 valid" in out and "threads" in out and "pruned by: threads ×1" in out


def test_cli_rejects_bad_sets(capsys):
    assert cli.main(["sweep", FAMILY, "--set", "BM", "--dry-run"]) == 2
    assert cli.main(["sweep", FAMILY, "--set", "BQ=1", "--dry-run"]) == 2
    assert "BQ" in capsys.readouterr().err  # errors go to stderr


# ---- compile-only runs ---------------------------------------------------------------------------------

def test_compile_only_records_resources():
    pts = sweep.points(FAMILY, {"BM": [16, 64], "BN": [32], "BK": [16]}, "float32")
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
    pts = sweep.points(FAMILY, {"BM": [8, 16], "BN": [16], "BK": [4]}, "float32")
    monkeypatch.setenv("CUPY_GEMM_DISK_CACHE", "0")  # real compiles in the workers, never a cache hit
    result = sweep.compile_only(pts, "sm_80", compile_workers=2, compile_timeout=0.01)
    assert [r.status for r in result.records] == ["compile_failed", "compile_failed"]
    assert all("timed out" in r.reason for r in result.records)


# ---- result files --------------------------------------------------------------------------------------

def _record(**kw):
    base = dict(family=FAMILY, variant="v", dtype="float32", acc="float32", layout="row", M=64, N=64, K=64,
                status="ok", params={"BM": 16, "BK": 8}, time_ms=1.0, time_q1_ms=0.9, time_q3_ms=1.1)
    base.update(kw)
    return results.Record(**base)


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_result_files_round_trip(tmp_path, suffix):
    recs = [_record(), _record(variant="w", status="invalid", reason="threads=2048: too many, see 'x'\nline 2",
                               time_ms=None, time_q1_ms=None, time_q3_ms=None, params={"BM": 64, "BK": 8}),
            _record(family="cublas", variant="cublas_f32", params={}, tflops=12.5, device=1)]
    meta = {"devices": [{"id": 0, "name": "GPU"}], "git": "abc", "time": "now"}
    path = tmp_path / f"r{suffix}"
    results.write(path, recs, meta)
    meta2, recs2 = results.read(path)
    assert meta2 == meta
    assert [r.to_dict() | {"times_ms": []} for r in recs2] == [r.to_dict() for r in recs]
    if suffix == ".csv":
        text = path.read_text()
        assert text.startswith("# devices: ") and "\nfamily,variant,dtype,acc,layout,M,N,K,BM,BK,status," in text
    else:
        assert json.loads(path.read_text())["schema"] == results.SCHEMA
    with pytest.raises(ValueError, match=".csv or .json"):
        results.write(tmp_path / "r.txt", recs, meta)


def test_result_writer_is_atomic_and_throttled(tmp_path):
    path = tmp_path / "out.csv"
    writer = results.ResultWriter(path, {"k": "v"}, [_record(variant="old")], interval=3600)
    writer.add(_record(variant="a"))  # first add writes (nothing written yet)
    writer.add(_record(variant="b"))  # throttled
    assert [r.variant for r in results.read(path)[1]] == ["old", "a"]
    writer.close()
    assert [r.variant for r in results.read(path)[1]] == ["old", "a", "b"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]  # no temporary files left


def test_ranked_marks_overlapping_intervals():
    recs = [_record(variant="slow", time_ms=2.0, time_q1_ms=1.9, time_q3_ms=2.1),
            _record(variant="b", time_ms=1.0, time_q1_ms=0.95, time_q3_ms=1.05),
            _record(variant="a", time_ms=1.02, time_q1_ms=1.0, time_q3_ms=1.04),
            _record(variant="bad", status="incorrect", time_ms=0.1),
            _record(family="cublas", variant="cublas_f32", time_ms=0.5)]
    ranked = results.ranked(recs)
    assert [(r.variant, tied) for r, tied in ranked] == [("b", True), ("a", False), ("slow", False)]


def test_timing_helpers():
    t = timing.Timing((1.0, 2.0, 3.0, 4.0, 100.0), warmup=3)
    assert t.median == 3.0 and t.q1 == 2.0 and t.q3 == 4.0 and t.repeats == 5 and t.minimum == 1.0
    assert t.overlaps(timing.Timing((3.0, 3.5, 6.0), 1)) and not t.overlaps(timing.Timing((4.5, 5.0, 6.0), 1))
    assert timing.tflops(4096, 4096, 4096, 1.0) == pytest.approx(137.44, rel=1e-3)
    assert timing.ragged_neighbour(4096, 4096, 4096) == (4097, 4095, 4097)
    assert timing.ragged_neighbour(1, 1, 1) == (2, 2, 2)
    # 256 threads, 128 registers: 4 blocks of 8 warps = all 64 warps of an sm_90 SM
    assert timing.occupancy(256, 128, 0, timing.sm_limits(90)) == (2, 0.25)
    assert timing.occupancy(256, 32, 0, timing.sm_limits(90)) == (8, 1.0)
    assert timing.occupancy(128, 32, 100 << 10, timing.sm_limits(90))[0] == 2  # shared memory bound
    with pytest.raises(ValueError, match="flush"):
        timing.Settings(flush="sometimes")
    assert timing.BASELINES[("float16", "float16")] == "cublas_f16_acc16"


def test_seed_block_layout():
    from cupy_gemm.cli_sweep import seed_block
    pts = sweep.catalogue_points(["sgemm_naive_f32", "sgemm_sliced_k_f32"])
    recs = [_record(variant="sgemm_naive_f32", family="naive", tflops=2.0, pct_cublas=10.0, spread=0.01),
            _record(variant="sgemm_sliced_k_f32", tflops=4.0, pct_cublas=20.0, spread=0.01)]
    base = [_record(family="cublas", variant="cublas_f32", tflops=20.0, params={})]
    text = seed_block("float32", (64, 64, 64), recs, base, pts, width=24)
    lines = text.splitlines()
    assert "M=64, N=64, K=64" in lines[1]
    assert lines[2].strip("-") == "naive" and lines[4].strip("-") == "sliced_k"
    assert lines[5].endswith("(+100.00%)") and "20.0% of cuBLAS" in lines[5]
    assert "cublas_f32: time:1.000000ms" in text


# ---- the scheduler, with a stand-in GPU worker ---------------------------------------------------------

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


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(sweep, "device_worker", fake_device_worker)
    monkeypatch.setattr(sweep._Run, "_device_info",
                        lambda self: {"name": "Fake GPU", "cc": 90, "limits": timing.sm_limits(90)})
    monkeypatch.setattr(results, "metadata", lambda devices=(), **extra: {
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


def test_resume_cli_refuses_another_gpu(fake_gpu, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep.csv"
    results.write(out, [_record()], {"devices": [{"id": 0, "name": "Other GPU"}]})
    monkeypatch.setattr(results, "device_name", lambda device_id: "Fake GPU")
    code = cli.main(["sweep", FAMILY, "--shape", "64x64x64", "--set", "BK=8", "--out", str(out), "--resume",
                     "--devices", "0"])
    assert code == 2 and "Other GPU" in capsys.readouterr().out


def test_no_gpu_worker_raises(monkeypatch):
    monkeypatch.setattr(sweep._Run, "_device_info",
                        lambda self: {"name": "Fake GPU", "cc": 90, "limits": timing.sm_limits(90)})
    monkeypatch.setattr(sweep, "device_worker", _broken_device_worker)
    with pytest.raises(DeviceError, match="no CUDA device"):
        sweep.run(FAMILY, ["64x64x64"], {"BK": [8]}, "float32", devices=[0], compile_workers=1)


def _broken_device_worker(conn, device_id, settings):
    conn.send(("fatal", None, f"GPU {device_id}: no CUDA device"))


def test_report_markdown_merges_files(tmp_path, capsys):
    from cupy_gemm.cli import main
    rec = lambda variant, family, m, tflops, pct: results.Record(
        family=family, variant=variant, dtype="float32", acc="float32", layout="row", M=m, N=m, K=m, status="ok",
        tflops=tflops, pct_cublas=pct, time_ms=1.0)
    first, second = tmp_path / "a.json", tmp_path / "b.csv"
    results.write(first, [rec("sgemm_naive_f32", "naive", 1024, 6.0, 18.0), rec("cublas_f32", "cublas", 1024, 33.0, None)],
                  {"devices": [{"name": "NVIDIA H200"}]})
    results.write(second, [rec("sgemm_naive_f32", "naive", 4096, 6.4, 12.6)], {"devices": [{"name": "NVIDIA H200"}]})
    assert main(["report", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "Measured on NVIDIA H200" in out and "### naive" in out and "### cuBLAS" in out
    assert "| `sgemm_naive_f32` | float32 / float32 | 6.0 (18%) | 6.4 (13%) |" in out
    assert out.index("### naive") < out.index("### cuBLAS")

"""Records and their files, ranking (never across GPU models), and the timing helpers that need no GPU."""
import json

import pytest

from cupy_gemm.measure import baselines, occupancy, results, timing, workbench

FAMILY = "sliced_k"


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
    assert workbench.ragged_neighbour(4096, 4096, 4096) == (4097, 4095, 4097)
    assert workbench.ragged_neighbour(1, 1, 1) == (2, 2, 2)
    # 256 threads, 128 registers: 4 blocks of 8 warps = all 64 warps of an sm_90 SM
    assert occupancy.occupancy(256, 128, 0, occupancy.sm_limits(90)) == (2, 0.25)
    assert occupancy.occupancy(256, 32, 0, occupancy.sm_limits(90)) == (8, 1.0)
    assert occupancy.occupancy(128, 32, 100 << 10, occupancy.sm_limits(90))[0] == 2  # shared memory bound
    with pytest.raises(ValueError, match="flush"):
        workbench.Settings(flush="sometimes")
    assert baselines.BASELINES[("float16", "float16")] == "cublas_f16_acc16"


def test_records_of_two_gpu_models_are_never_ranked_together():
    recs = [_record(variant="a", device_name="GPU A"), _record(variant="b", device_name="GPU B", time_ms=0.5),
            _record(variant="c", device_name="GPU A", time_ms=2.0, time_q1_ms=1.9, time_q3_ms=2.1)]
    assert results.gpu_models(recs) == ["GPU A", "GPU B"]
    with pytest.raises(ValueError, match="2 GPU models .GPU A, GPU B.*gpu=NAME"):
        results.ranked(recs)
    assert [r.variant for r, _ in results.ranked(recs, gpu="GPU A")] == ["a", "c"]
    assert [r.variant for r, _ in results.ranked(recs, gpu="GPU B")] == ["b"]


def test_provenance_round_trips(tmp_path):
    path = tmp_path / "r.csv"
    results.write(path, [_record(host="node7", device_name="GPU A", driver="12.8", device=1)], {})
    (rec,) = results.read(path)[1]
    assert (rec.host, rec.device_name, rec.driver, rec.device) == ("node7", "GPU A", "12.8", 1)

"""Small real sweeps on the GPU: records, timings, invalid points, cuBLAS in the same run, tuning and auto."""
import cupy
import numpy as np
import pytest

import cupy_gemm
from cupy_gemm import operands, registry, tuning, verify
from cupy_gemm.measure import baselines, results, sweep, tasks, timing, workbench
from cupy_gemm.measure.tune import tune

SHAPE = (256, 192, 160)
QUICK = dict(repeats=5, warmup_ms=2.0, compile_workers=4)


def _gpu_count() -> int:
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def test_bench_times_a_kernel():
    a = cupy.ones((2048, 2048), dtype=cupy.float32)
    t = timing.bench(lambda: a @ a, repeats=7, warmup_ms=5, flush=timing.L2Flush(cupy.cuda.Device().id))
    assert t.repeats == 7 and 0 < t.q1 <= t.median <= t.q3 and all(x > 0 for x in t.times_ms)


@pytest.mark.parametrize("dtype,acc", sorted(baselines.BASELINES))
def test_cublas_baselines_compute_the_product(dtype, acc):
    try:
        np_dtype = workbench.numpy_dtype(dtype)
    except TypeError as e:
        pytest.skip(str(e))
    m, n, k = 130, 70, 260
    a, b = verify.random_operand((m, k), np_dtype, 1), verify.random_operand((k, n), np_dtype, 2)
    for order in ("C", "F"):
        a_, b_ = (cupy.asfortranarray(a), cupy.asfortranarray(b)) if order == "F" else (a, b)
        out = cupy.full((m, n), cupy.nan, dtype=np_dtype, order=order)
        baselines.cublas_call(a_, b_, out, acc)()
        ref, scale = verify.reference(a, b)
        assert verify.check(out, ref, scale, dtype, acc, k).ok, (dtype, acc, order)


def test_small_sweep_records_ok_and_invalid_points():
    grid = {"BM": [16, 32, 64], "BN": [16, 32], "BK": [8, 16]}
    events = []
    result = sweep.run("sliced_k", [SHAPE], grid, "float32", on_event=lambda kind, data: events.append(kind),
                       **QUICK)
    recs = result.kernels()
    assert len(recs) == 12
    invalid = [r for r in recs if r.status == "invalid"]  # BM=64, BN=32: 2048 threads per block
    assert len(invalid) == 2 and all("threads" in r.reason for r in invalid)
    ok = [r for r in recs if r.status == "ok"]
    assert len(ok) == 10, [(r.variant, r.status, r.reason) for r in recs if r.status != "ok"]
    for r in ok:
        assert 0 < r.time_q1_ms <= r.time_ms <= r.time_q3_ms and r.repeats == 5 and r.tflops > 0
        assert r.error <= 1 and r.ragged_error <= 1 and r.ragged_shape == "257x191x161"
        assert r.registers > 0 and r.static_smem > 0 and 0 < r.occupancy <= 1 and r.device == 0
        assert r.host and r.driver and r.device_name  # provenance of every point
        assert r.pct_cublas > 0 and r.cublas == "cublas_f32"
        assert all(isinstance(x, float) for x in r.times_ms)
    (base,) = result.baselines(SHAPE)
    assert base.variant == "cublas_f32" and base.status == "ok" and base.time_ms > 0 and base.error <= 1
    ranked = [r.time_ms for r, _ in result.ranked()]
    assert ranked == sorted(ranked)
    assert events[0] == "start" and events.count("record") == 12 and events.count("baseline") == 1


def test_a_family_reading_b_k_major_is_timed_on_b_as_it_reads_it(monkeypatch):
    """A sweep point of a K-major family gets B column-major (the W of x @ W.T), so it times no copy of B."""
    seen = []
    resolve = operands.resolve
    monkeypatch.setattr(operands, "resolve", lambda *args, **kw: seen.append(resolve(*args, **kw)) or seen[-1])
    v = registry.lookup("sgemm_t_kmajor_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk")
    measurer = tasks.Measurer(workbench.Settings(repeats=5, warmup_ms=2.0, flush="rotate"))
    fields = measurer.measure(v.to_spec(), SHAPE)
    assert fields["status"] == "ok" and fields["error"] <= 1, fields
    assert all(b.flags.f_contiguous and not b.flags.c_contiguous for _, b in measurer.bench.copies)
    timed = [ops for ops in seen if (ops.m, ops.n, ops.k) == SHAPE]  # the ragged neighbour's odd K pads B
    assert timed and not any(ops.arrangement.copy_b for ops in timed), [ops.arrangement for ops in timed]


def test_fp16_sweep_with_rotation_and_files(tmp_path):
    result = sweep.run("sliced_k", ["300x200x100"], {"BK": [8, 16]}, "float16", "float32", flush="rotate",
                       **QUICK)
    assert [r.status for r in result.kernels()] == ["ok", "ok"]
    assert result.baselines()[0].variant == "cublas_f16_acc32"
    for suffix in (".csv", ".json"):
        path = tmp_path / f"out{suffix}"
        results.write(path, result.records, result.metadata)
        meta, recs = results.read(path)
        assert meta["devices"][0]["name"] and meta["cuda_runtime"] and meta["driver"] and meta["nvrtc"]
        assert [r.variant for r in recs] == [r.variant for r in result.records]


def test_tune_then_auto(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    found = tune(["512x512x512"], "float32", variants=["sgemm_naive_f32", "sgemm_sliced_k_f32"], **QUICK)
    (f,) = found
    assert f.winner is not None and f.winner.status == "ok"
    name = tuning.lookup(cupy.cuda.Device(), "float32", None, "row", 512, 512, 512)
    assert name == f.winner.variant
    a, b = verify.random_operand((512, 512), np.float32, 3), verify.random_operand((512, 512), np.float32, 4)
    c = cupy_gemm.matmul(a, b, variant="auto")
    ref, scale = verify.reference(a, b)
    assert verify.check(c, ref, scale, "float32", "float32", 512).ok


@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs")
def test_two_gpus_merge():
    result = sweep.run("sliced_k", [SHAPE], {"BM": [8, 16, 32], "BK": [4, 8, 16, 32]}, "float32", devices=[0, 1],
                       **QUICK)
    ok = [r for r in result.kernels() if r.status == "ok"]
    assert len(ok) == 12 and {r.device for r in ok} == {0, 1}
    assert {b.device for b in result.baselines()} == {0, 1}


def test_tune_the_defaults_candidates_then_auto(tmp_path, monkeypatch):
    """`cupy-gemm tune`'s default mode at a ragged shape with B column-major (x @ W.T): the entry names the
    fastest correct candidate or the default's choice, and matmul(variant="auto") on such a call runs it and
    writes every element of a NaN-poisoned out correctly."""
    from cupy_gemm.measure import corpus, corpus_bench, tune_candidates
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    m, n, k = 200, 1000, 1544
    names = ["hgemm_wgmma_kmajor_m64n64k16_tile64x64_stages8_ws1_splitk",
             "hgemm_wgmma_kmajor_m64n128k16_tile128x128_stages3_ws1",
             "hgemm_wgmma_m64n64k16_tile64x64_stages8_ws1_splitk"]
    (entry,) = tune_candidates.tune([corpus.Shape("ragged", "", "", m, n, k)], ["float16"], b_layout="col", names=names,
                                    settings=corpus_bench.Settings(repeats=3, warmup_ms=2.0, max_seconds=0.5))
    assert entry["layout"] == "col" and entry["default"] and entry["variant"] in names + [entry["default"]]
    a = verify.random_operand((m, k), np.float16, 5)
    w = verify.random_operand((n, k), np.float16, 6)
    assert cupy_gemm.plan(a, w.T, variant="auto").variant.name == entry["variant"]
    out = cupy.full((m, n), cupy.nan, dtype=cupy.float16)
    cupy_gemm.matmul(a, w.T, variant="auto", out=out)
    ref, scale = verify.reference(a, w.T)
    assert verify.check(out, ref, scale, "float16", "float32", k).ok

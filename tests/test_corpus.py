"""The shape corpus and the corpus benchmark's arithmetic without a GPU: shapes, subsets, rotation counts,
records, geometric means and minima, provenance, files, tables."""
import json
import math

import pytest

import cupy_gemm
from cupy_gemm import selection_tables
from cupy_gemm.measure import corpus, corpus_records, corpus_timing
from cupy_gemm.present import corpus_tables

L2_H100 = 50 << 20
BANDWIDTH = 3.0e12  # bytes/s


def test_corpus_shapes_are_valid_and_named_uniquely():
    shapes = corpus.shapes("llm")
    assert all(isinstance(x, int) and x >= 1 for s in shapes for x in s.mnk)
    names = [s.name for s in shapes] + [a for s in shapes for a in s.also]
    assert len(names) == len(set(names))
    assert len({s.mnk for s in shapes}) == len(shapes)  # a duplicate shape would weigh twice
    for s in shapes:
        assert s.name.startswith(f"{s.model}.{s.layer}")
        if s.model not in corpus.GROUPS:
            assert s.name.endswith(f".M{s.m}") and s.m in corpus.TOKENS


def test_corpus_holds_the_model_projections():
    by_name = {s.name: s for s in corpus.shapes("llm")}
    aliases = {a: s for s in by_name.values() for a in s.also}
    expected = {
        "llama3-8b.q/o_proj.M1": (1, 4096, 4096), "llama3-8b.k/v_proj.M16": (16, 1024, 4096),
        "llama3-8b.qkv_proj.M512": (512, 6144, 4096), "llama3-8b.gate/up_proj.M64": (64, 14336, 4096),
        "llama3-8b.down_proj.M8192": (8192, 4096, 14336), "llama3-70b.q/o_proj.M128": (128, 8192, 8192),
        "llama3-70b.k/v_proj.M8": (8, 1024, 8192), "llama3-70b.gate/up_proj.M2048": (2048, 28672, 8192),
        "llama3-70b.down_proj.M1": (1, 8192, 28672), "deepseek-v3.expert.gate/up_proj.M16": (16, 2048, 7168),
        "deepseek-v3.expert.down_proj.M512": (512, 7168, 2048), "deepseek-v3.kv_b_proj.M64": (64, 32768, 512),
        "llama2-7b.down_proj.M128": (128, 4096, 11008), "attention.scores.seq8192.hd64": (8192, 8192, 64),
        "ragged.129x1000x33": (129, 1000, 33), "ragged.4095": (4095, 4095, 4095),
    }
    for name, mnk in expected.items():
        assert by_name[name].mnk == mnk, name
    # Mixtral's attention and experts have Llama-3 8B's shapes: kept once, under both names
    assert aliases["mixtral-8x7b.expert.gate/up_proj.M16"].name == "llama3-8b.gate/up_proj.M16"
    assert aliases["square.8192"].name == "llama3-70b.q/o_proj.M8192"
    for model in ("llama3-8b", "llama3-70b", "deepseek-v3"):
        assert {s.m for s in by_name.values() if s.model == model} == set(corpus.TOKENS)


def test_small_corpus_is_a_subset_with_the_shapes_that_matter():
    full, small = corpus.shapes("llm"), corpus.shapes("llm-small")
    assert 20 <= len(small) <= 30
    assert set(small) <= set(full)
    assert len({s.mnk for s in small}) == len(small)
    for mnk in [(1, 4096, 4096), (16, 4096, 4096), (4096, 128, 4096), (128, 4096, 11008), (512, 512, 512),
                (5000, 3000, 1000), (4096, 4096, 4096), (8192, 8192, 8192)]:
        assert mnk in {s.mnk for s in small}, mnk


def test_the_unseen_corpus_is_off_every_dispatch_table():
    """Other families at other token counts: no shape of it is in the llm corpus or timed in a shipped
    table, so a run over it measures how the default does where its tables only neighbour the shape."""
    unseen, llm = corpus.shapes("unseen"), corpus.shapes("llm")
    assert len(unseen) == len({s.mnk for s in unseen}) >= 150
    assert not {s.mnk for s in unseen} & {s.mnk for s in llm}
    timed = {(e["m"], e["n"], e["k"]) for t in selection_tables.tables() for e in t["entries"]}
    assert not {s.mnk for s in unseen} & timed
    assert {s.m for s in unseen} == set(corpus.UNSEEN_TOKENS) and not set(corpus.UNSEEN_TOKENS) & set(corpus.TOKENS) - {1}
    by_name = {s.name: s for s in unseen}
    assert by_name["qwen2.5-7b.down_proj.M1000"].mnk == (1000, 3584, 18944)
    assert by_name["gemma2-9b.q_proj.M256"].mnk == (256, 4096, 3584)  # 16 heads of 256
    assert by_name["qwen3-30b-a3b.expert.gate/up_proj.M32"].mnk == (32, 768, 2048)
    assert corpus.shapes("unseen:1000x5120x14336")[0].name == "mistral-nemo-12b.down_proj.M1000"


def test_the_dense_corpus_fills_the_token_counts_between_the_llm_corpus_ones():
    dense, llm, unseen = corpus.shapes("llm-dense"), corpus.shapes("llm"), corpus.shapes("unseen")
    assert {s.m for s in dense} == set(corpus.DENSE_TOKENS) and not set(corpus.DENSE_TOKENS) & set(corpus.TOKENS)
    assert {(s.n, s.k) for s in dense} <= {(s.n, s.k) for s in llm}  # the same projections
    assert not {s.mnk for s in dense} & ({s.mnk for s in llm} | {s.mnk for s in unseen})
    assert corpus.shapes("llm-dense:256x4096x4096")[0].name == "llama3-8b.q/o_proj.M256"


def test_unknown_corpus_and_shape():
    with pytest.raises(ValueError, match="llm-small"):
        corpus.shapes("llm-tiny")
    with pytest.raises(KeyError, match="3x5x7"):
        corpus.lookup(corpus.build(), 3, 5, 7)
    with pytest.raises(ValueError, match="3x5x7: not in the llm-small corpus"):
        corpus.shapes("llm-small:1x4096x4096,3x5x7")


def test_a_corpus_subset_keeps_the_order_asked():
    picked = corpus.shapes("llm:8192x576x7168,17x4095x1000")
    assert [s.mnk for s in picked] == [(8192, 576, 7168), (17, 4095, 1000)]
    assert picked[0] in corpus.shapes("llm")


def test_layers_with_one_shape_merge():
    merged = corpus.merge_layers([("q_proj", 8, 8), ("k_proj", 2, 8), ("v_proj", 2, 8), ("o_proj", 8, 8),
                                  ("expert.gate_proj", 4, 8), ("expert.up_proj", 4, 8), ("down_proj", 8, 4)])
    assert merged == [("q/o_proj", 8, 8), ("k/v_proj", 2, 8), ("expert.gate/up_proj", 4, 8), ("down_proj", 8, 4)]


@pytest.mark.parametrize("set_bytes", [1, 4096, 330_000, 12 << 20, 33 << 20, 99 << 20, 768 << 20])
def test_rotation_count_keeps_operands_out_of_l2(set_bytes):
    count = corpus_timing.rotation_count(set_bytes, L2_H100)
    assert count >= 2  # consecutive calls never share operands
    if count < corpus_timing.MOST_SETS:
        # between two uses of one set, the others pass more than twice the L2 through it
        assert (count - 1) * set_bytes >= 2 * L2_H100
        assert (count - 2) * set_bytes < 2 * L2_H100 or count == 2  # and no more sets than that needs
    with pytest.raises(ValueError):
        corpus_timing.rotation_count(0, L2_H100)


def test_calls_per_repeat():
    assert corpus_timing.calls_per_repeat(0.005) == 64  # capped: the launch queue stays short
    assert corpus_timing.calls_per_repeat(0.1) == 20
    assert corpus_timing.calls_per_repeat(5.0) == 1
    assert corpus_timing.calls_per_repeat(0.0) == 64


def test_ridge_point_and_traffic():
    assert corpus_records.min_bytes(2, 3, 4, 2) == (8 + 12 + 6) * 2
    h100 = corpus_records.ridge_point("NVIDIA H100 80GB HBM3", "float16", BANDWIDTH)
    assert h100 == pytest.approx(989.4e12 / BANDWIDTH)
    assert corpus_records.ridge_point("NVIDIA H100 PCIe", "float32", BANDWIDTH) == pytest.approx(51.2e12 / BANDWIDTH)
    assert corpus_records.ridge_point("NVIDIA H200", "tf32", BANDWIDTH) == pytest.approx(494.7e12 / BANDWIDTH)
    assert corpus_records.ridge_point("Some GPU", "float16", BANDWIDTH) is None


def _timing(us, calls=10):
    return {"calls": calls, "times_ms": [us * 1e-3 * f for f in (1.0, 0.98, 1.02, 1.0, 1.05)]}


def _records(mode, shape, ours_us, cupy_us, torch_us, kind="corpus", status="ok", ridge=300.0, variant="v",
             floor_us=None):
    outcomes = {"ours": {"variant": variant, "status": status, "reason": "" if status == "ok" else "why"}}
    times = {"cupy": _timing(cupy_us), "torch": _timing(torch_us)}
    if floor_us is not None:
        times["floor"] = _timing(floor_us)
    if status == "ok":
        times["ours"] = _timing(ours_us)
    return corpus_records.shape_records(shape, mode, kind, outcomes, times, {"ours": 0.1, "cupy": 0.2}, 2, 4,
                                        BANDWIDTH, ridge)


def _shape(m, n, k):
    return corpus.Shape(f"test.{m}x{n}x{k}", "test", f"{m}x{n}x{k}", m, n, k)


def test_shape_record_fields():
    (r,) = _records("float16", _shape(16, 4096, 4096), ours_us=20.0, cupy_us=30.0, torch_us=10.0)
    assert r["ours_us"] == pytest.approx(20.0) and r["cupy_us"] == pytest.approx(30.0)
    assert r["x_cupy"] == pytest.approx(1.5) and r["x_torch"] == pytest.approx(0.5)  # > 1: ours faster
    assert r["ours_tflops"] == pytest.approx(2 * 16 * 4096 * 4096 / 20e-6 / 1e12)
    traffic = (16 * 4096 * 2 + 4096 * 4096) * 2
    assert r["min_bytes"] == traffic
    assert r["ours_hbm_pct"] == pytest.approx(100 * traffic / 20e-6 / BANDWIDTH)
    assert r["memory_bound"] is True  # 2·16·4096² / traffic ≈ 16 FLOP/byte, below the ridge of 300
    assert r["ours_spread"] == pytest.approx(0.035, abs=0.02)
    assert r["error"] == 0.1 and r["cupy_error"] == 0.2 and r["torch_error"] is None
    assert r["floor_us"] is None and r["ours_floor_pct"] is None  # no traffic floor timed
    (floor,) = _records("float16", _shape(16, 4096, 4096), ours_us=20.0, cupy_us=30.0, torch_us=10.0, floor_us=18.0)
    assert floor["floor_us"] == pytest.approx(18.0) and floor["ours_floor_pct"] == pytest.approx(90.0)
    (big,) = _records("float16", _shape(4096, 4096, 4096), 200.0, 210.0, 205.0)
    assert big["memory_bound"] is False
    (unknown,) = _records("float16", _shape(4096, 4096, 4096), 200.0, 210.0, 205.0, ridge=None)
    assert unknown["memory_bound"] is None


def test_candidates_mark_the_fastest_correct_one():
    shape = _shape(64, 4096, 4096)
    outcomes = {"a": {"variant": "a", "status": "ok", "reason": ""},
                "b": {"variant": "b", "status": "ok", "reason": ""},
                "c": {"variant": "c", "status": "incorrect", "reason": "WRONG"},
                "d": {"variant": "d", "status": "invalid", "reason": "ConfigError"}}
    times = {"a": _timing(30.0), "b": _timing(25.0), "c": _timing(1.0), "cupy": _timing(28.0)}
    rows = corpus_records.shape_records(shape, "float16", "candidate", outcomes, times, {}, 2, 3, BANDWIDTH, 300.0)
    assert [r["best"] for r in rows] == [False, True, False, False]
    assert rows[3]["ours_us"] is None and rows[3]["x_cupy"] is None


def test_summary_geomean_and_minimum():
    rows = (_records("float16", _shape(1, 4096, 4096), 10.0, 20.0, 5.0)  # x_cupy 2, x_torch 0.5
            + _records("float16", _shape(16, 4096, 4096), 10.0, 5.0, 20.0)  # 0.5, 2
            + _records("float16", _shape(64, 4096, 4096), 10.0, 10.0, 10.0)  # 1, 1
            + _records("float16", _shape(128, 4096, 4096), 10.0, 1.0, 1.0, status="incorrect")
            + _records("float32", _shape(1, 4096, 4096), 10.0, 8.0, 9.0))
    summary = corpus_records.summarise(rows)
    assert set(summary) == {"float16", "float32"}
    f16 = summary["float16"]
    assert f16["x_cupy"]["geomean"] == pytest.approx(1.0) and f16["x_torch"]["geomean"] == pytest.approx(1.0)
    assert f16["x_cupy"]["min"] == pytest.approx(0.5) and f16["x_cupy"]["min_at"] == "test.16x4096x4096"
    assert f16["x_torch"]["min_at"] == "test.1x4096x4096" and f16["x_cupy"]["count"] == 3
    assert f16["failed"] == ["test.128x4096x4096"] and f16["shapes"] == 4
    assert f16["hbm_pct_m16"]["count"] == 2
    assert f16["floor_pct_m16"]["count"] == 0  # no traffic floor timed
    floor = corpus_records.summarise(
        _records("float16", _shape(1, 4096, 4096), 10.0, 20.0, 5.0, floor_us=9.0)
        + _records("float16", _shape(16, 1024, 4096), 8.0, 9.0, 9.0, floor_us=4.0)
        + _records("float16", _shape(64, 4096, 4096), 10.0, 10.0, 10.0, floor_us=9.0))["float16"]["floor_pct_m16"]
    assert floor["count"] == 2 and floor["geomean"] == pytest.approx(math.sqrt(90.0 * 50.0))
    assert floor["min"] == pytest.approx(50.0) and floor["min_at"] == "test.16x1024x4096"
    assert summary["float32"]["x_cupy"]["geomean"] == pytest.approx(0.8)
    assert corpus_records.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert corpus_records.geomean([None, 0.0, math.inf]) is None


def _host(mode, size, ours, cupy, torch=None):
    r = {"kind": "host", "dtype": mode, "name": f"square.{size}", "M": size, "N": size, "K": size, "variant": "v",
         "status": "ok", "calls": 500, "ours_us": ours, "cupy_us": cupy, "torch_us": torch}
    r.update({f"x_{b}": corpus_records.ratio(r[f"{b}_us"], ours) for b in corpus_records.BASELINES})
    return r


def test_provenance_fields():
    meta = corpus_records.provenance("python -m cupy_gemm.measure.corpus_bench --out x", hbm_bytes_per_s=BANDWIDTH)
    for key in ("time", "cupy", "nvrtc", "python", "git", "torch", "gpu", "command", "hbm_bytes_per_s"):
        assert key in meta, key
    assert meta["command"].endswith("--out x")
    assert meta["time"][:2] == "20"


def test_files_round_trip(tmp_path):
    rows = _records("float16", _shape(1, 4096, 4096), 10.0, 20.0, 5.0) + [_host("float16", 64, 30.0, 20.0)]
    meta = {"gpu": "Fake GPU", "devices": [{"id": 0, "name": "Fake GPU"}], "command": "cmd"}
    paths = corpus_records.write(tmp_path / "out", meta, rows)
    read_meta, read_rows = corpus_records.read(paths["json"])
    assert read_meta == meta and read_rows == rows
    document = json.loads(paths["json"].read_text())
    assert document["summary"]["float16"]["x_cupy"]["geomean"] == pytest.approx(2.0)
    csv_text = paths["csv"].read_text().splitlines()
    assert csv_text[0] == "# gpu: Fake GPU" and csv_text[1].startswith("# devices: [")
    header = csv_text[3].split(",")
    assert "x_cupy" in header and "ours_us" in header and len(csv_text) == 4 + len(rows)


def test_tables_from_records():
    rows = (_records("float16", _shape(16, 4096, 4096), 20.0, 30.0, 10.0, floor_us=15.0)
            + _records("float16", _shape(4096, 4096, 4096), 200.0, 220.0, 250.0)
            + _records("float16", _shape(128, 4096, 4096), 20.0, 30.0, 10.0, status="incorrect")
            + _records("float32", _shape(64, 64, 64), 20.0, 30.0, 10.0)
            + [_host("float16", 64, 30.0, 20.0, 24.0), _host("float16", 256, 30.0, 30.0, 60.0)])
    meta = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "13.0", "cupy": "14.2.0", "nvrtc": "13.0", "torch": "2.11",
            "time": "2026-11-23T01:00:00+00:00", "hbm_bytes_per_s": BANDWIDTH, "command": "cmd"}
    text = corpus_tables.markdown(meta, rows)
    assert "NVIDIA H100 80GB HBM3, driver 13.0, CuPy 14.2.0, NVRTC 13.0, torch 2.11, 2026-11-23, copy bandwidth " \
           "3000 GB/s" in text
    assert "x @ W.T" not in text
    assert "B column-major: x @ W.T" in corpus_tables.markdown({**meta, "settings": {"b_layout": "col"}}, rows)
    lines = text.splitlines()
    assert lines.index("#### float16") < lines.index("#### float32")
    row = next(line for line in lines if line.startswith("| test.16x4096x4096 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == ["16×4096×4096", "`v`", "20.0", "30.0", "10.0", "26.8", "1.50", "0.50",
                         f"{100 * (16 * 4096 * 2 + 4096 * 4096) * 2 / 20e-6 / BANDWIDTH:.0f}", "75"]
    big = [c.strip() for c in next(x for x in lines if x.startswith("| test.4096x4096x4096 ")).strip("|").split("|")]
    assert big[-2:] == ["", ""]  # compute-bound: no share of bandwidth, no floor timed
    assert "Against their traffic floor (A and B read, C written by a plain kernel in the same rounds), ours runs " \
           "at 75% of its speed in geometric mean, 75% at least (test.16x4096x4096)." in text
    wrong = [c.strip() for c in next(x for x in lines if x.startswith("| test.128x4096x4096 ")).strip("|").split("|")]
    assert wrong[3] == "incorrect" and wrong[7] == ""
    geomean = next(x for x in lines if x.startswith("| **geomean** ") and "1.28" in x)
    assert f"{math.sqrt(1.5 * 1.1):.2f}" in geomean and f"{math.sqrt(0.5 * 1.25):.2f}" in geomean
    minimum = next(x for x in lines if x.startswith("| **min** "))
    assert "1.10" in minimum and "0.50" in minimum
    assert "cupy: test.4096x4096x4096, torch: test.16x4096x4096" in minimum
    assert "Not counted in the means (ours failed or was wrong): test.128x4096x4096." in text
    assert "#### Host cost per call" in text
    host_rows = [x for x in lines if x.startswith("| float16 |")]
    assert len(host_rows) == 4 and "0.67" in host_rows[0] and "0.80" in host_rows[0]
    assert "| float16 | **min** |" in text
    share = 100 * (16 * 4096 * 2 + 4096 * 4096) * 2 / 20e-6 / BANDWIDTH
    assert f"Shapes with M ≤ 16: our share of the copy bandwidth has a geometric mean of {share:.0f}% and a " \
           f"minimum of {share:.0f}% (test.16x4096x4096)." in text
    assert "Fastest candidate" not in text


def test_candidate_table():
    shape = _shape(64, 4096, 4096)
    outcomes = {"a": {"variant": "a", "status": "ok", "reason": ""},
                "b": {"variant": "b", "status": "invalid", "reason": "ConfigError"}}
    rows = corpus_records.shape_records(shape, "float16", "candidate", outcomes,
                                        {"a": _timing(30.0), "cupy": _timing(45.0)}, {}, 2, 3, BANDWIDTH, 300.0)
    none = corpus_records.shape_records(_shape(1, 4096, 4096), "float16", "candidate", {"b": outcomes["b"]},
                                        {"cupy": _timing(10.0)}, {}, 2, 3, BANDWIDTH, 300.0)
    text = corpus_tables.markdown({"command": "cmd"}, rows + none)
    assert "#### Fastest candidate per shape" in text and "#### float16" not in text
    assert "| float16 | test.64x4096x4096 | 64×4096×4096 | `a` | 30.0 | 45.0 | 1.50 |  | 1 / 2 |" in text
    assert "| float16 | test.1x4096x4096 | 1×4096×4096 | none |  | 10.0 |  |  | 0 / 1 |" in text


def test_candidate_table_files_entries_under_the_runs_b_layout():
    """--b-layout col --table: the entries answer calls whose B is column-major (x @ W.T)."""
    from cupy_gemm import cli_corpus
    name = "sgemm_t_kmajor_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"
    rows = [{"kind": "candidate", "dtype": "float32", "M": 64, "N": 4096, "K": 4096, "variant": name,
             "ours_us": 50.0, "status": "ok"}]
    meta = {"devices": [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "90", "sm_count": 132}],
            "cupy": "14.2.0", "nvrtc": "13.0"}
    for settings, want in (({}, "row"), ({"b_layout": "row"}, "row"), ({"b_layout": "col"}, "col")):
        table = cli_corpus.candidate_table({**meta, "settings": settings}, rows, "cmd")
        assert [(e["variant"], e.get("b_layout", "row")) for e in table["entries"]] == [(name, want)]


def test_bench_command_rejects_bad_arguments():
    """`cupy-gemm bench --shapes llm…`: a bad dtype is a usage error before anything needs a GPU; without
    a GPU the run is one error line, never a traceback."""
    import subprocess
    import sys

    def bench(*args):
        return subprocess.run([sys.executable, "-m", "cupy_gemm.cli", "bench", *args], capture_output=True, text=True)
    bad = bench("--shapes", "llm-small", "--dtype", "float64", "--out", "x")
    assert bad.returncode == 2 and "float64" in bad.stderr and "Traceback" not in bad.stderr
    bad = bench("--shapes", "llm-small", "--b-layout", "nk")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    from cupy_gemm import devices
    try:
        devices.gpu_count()
    except cupy_gemm.DeviceError:
        none = bench("--shapes", "llm-small", "--dtype", "float16", "--out", "x")
        assert none.returncode == 1 and none.stderr.startswith("error: no CUDA GPU found"), none.stderr


def test_tf32_candidates_include_exact_float32_kernels():
    """Under tf32 the exact float32 kernels compete (TF32 is allowed, not required); exact float32 never
    times a TF32 or 3xTF32 kernel."""
    from cupy_gemm.measure import corpus_bench
    names = ["sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk", "sgemv_skinny_r1",
             "sgemm_wgmma_m64n256k8_tf32_stages4_ws2", "sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2",
             "hgemm_wgmma_m64n256k16_stages4_ws2"]
    pick = lambda mode: [v.name for v in corpus_bench.candidates(mode, names)]
    assert pick("tf32") == names[:3]
    assert pick("float32") == names[:2]
    assert pick("float16") == names[4:]


def test_settings_take_the_two_layouts_of_b():
    from cupy_gemm.measure import corpus_bench
    assert corpus_bench.Settings().b_layout == "row" and corpus_bench.Settings(b_layout="col").b_layout == "col"
    with pytest.raises(ValueError, match="b_layout must be one of row, col"):
        corpus_bench.Settings(b_layout="nk")


def test_host_costs_take_turns_and_keep_each_best_loop(monkeypatch):
    """Every repeat runs each implementation's loop once, in turn, after a warm-up of each; each keeps the
    wall time per call of its fastest loop, so a loop the host disturbed once does not count."""
    from types import SimpleNamespace
    cupy = pytest.importorskip("cupy")
    monkeypatch.setattr(cupy.cuda, "get_current_stream", lambda: SimpleNamespace(synchronize=lambda: None))
    log = []
    clock = {"now": 0.0}
    monkeypatch.setattr(corpus_timing.time, "perf_counter", lambda: clock["now"])
    cost = {"ours": [1.0, 3.0, 2.0], "cupy": [5.0, 4.0, 6.0]}  # seconds a call, one value per repeat

    def call(name):
        def run():
            log.append(name)
            warm = sum(1 for x in log if x == name) <= 4
            clock["now"] += 0.0 if warm else cost[name][(len(log) - 9) // 8]  # 8 calls a repeat after 8 warm
        return run

    best = corpus_timing.host_costs({"ours": call("ours"), "cupy": call("cupy")}, count=4, repeats=3)
    assert log == ["ours"] * 4 + ["cupy"] * 4 + (["ours"] * 4 + ["cupy"] * 4) * 3
    assert best == {"ours": 1.0, "cupy": 4.0}

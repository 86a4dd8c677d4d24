"""The notebook's views, heat maps and the benchmark's plot and seed text, on made-up records (no GPU)."""
import dataclasses
import importlib.util
import math

import pytest

from cupy_gemm import registry
from cupy_gemm.measure import space
from cupy_gemm.measure.results import Record
from cupy_gemm.measure.schedule import SweepResult
from cupy_gemm.present import heatmaps, notebook as views
from cupy_gemm.present.seed import seed_block

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is not installed")


def _tile(p):
    return p["BM"], p["BN"]


def _rec(status="ok", tflops=None, shape=(64, 64, 64), family="fam", variant=None, **params):
    params = {"BM": 64, "BN": 64, "STAGES": 2, **params}
    name = variant or "fam-" + "_".join(f"{k}{v}" for k, v in params.items())
    r = Record(family=family, variant=name, dtype="float16", acc="float32", layout="row", M=shape[0], N=shape[1],
               K=shape[2], status=status, params=params,
               reason="" if status == "ok" else f"BM={params['BM']}: too big")
    if tflops is not None:
        r.tflops, r.time_ms, r.pct_cublas = tflops, 1.0 / tflops, tflops / 2
        r.time_q1_ms = r.time_q3_ms = r.time_ms
    return r


def test_heat_panels():
    records = [_rec(tflops=10, BM=64, BN=64, STAGES=2), _rec(tflops=30, BM=64, BN=128, STAGES=2),
               _rec(tflops=20, BM=64, BN=128, STAGES=2, PAD=8),   # same tile: the faster one is kept
               _rec("invalid", BM=128, BN=64, STAGES=2), _rec(tflops=50, BM=128, BN=128, STAGES=3),
               _rec("incorrect", BM=128, BN=64, STAGES=3),
               Record(family="cublas", variant="cublas_f16_acc32", dtype="float16", acc="float32", layout="row",
                      M=64, N=64, K=64, status="ok", tflops=99.0)]
    panels = heatmaps.heat_panels(records, _tile, "STAGES")
    assert [p.key for p in panels] == [2, 3]
    p2, p3 = panels
    assert p2.rows == p3.rows == [64, 128] and p2.cols == p3.cols == [64, 128]  # the same axes everywhere
    assert p2.values[0] == [10.0, 30.0] and p2.best[0][1].tflops == 30
    assert math.isnan(p2.values[1][0]) and p2.notes[1][0] == "invalid"
    assert math.isnan(p2.values[1][1]) and p2.notes[1][1] == ""  # nothing swept there
    assert p3.values[1][1] == 50.0 and p3.notes[1][0] == "incorrect"
    pct = heatmaps.heat_panels(records, _tile, "STAGES", "pct_cublas")
    assert pct[0].values[0] == [5.0, 15.0]
    assert len(heatmaps.heat_panels(records, _tile)) == 1


@needs_matplotlib
def test_draw_heatmaps_and_detail():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    records = [_rec(tflops=t, BM=bm, BN=bn, STAGES=s) for s, (bm, bn, t) in
               [(2, (64, 64, 10)), (2, (64, 128, 20)), (3, (128, 64, 30)), (3, (128, 128, 40))]]
    records.append(_rec("invalid", BM=128, BN=128, STAGES=2))
    fig = heatmaps.draw_heatmaps(records, _tile, "STAGES", "title")
    assert len(fig.axes) >= 4  # 2 rows x 2 panels, plus colour bars
    fig2 = heatmaps.draw_detail(records, "fam", ["BM", "BN"])
    assert len(fig2.axes[0].patches) == 4  # the pruned point is not a bar
    plt.close("all")


def test_failures_table_groups_shapes_and_escapes_html():
    records = [_rec("invalid", BM=128, shape=(64, 64, 64)), _rec("invalid", BM=128, shape=(128, 128, 128)),
               _rec("compile_failed", BM=256, variant="fam-x<y>"), _rec(tflops=3.0)]
    records[2].reason = "error: <bad> & worse"
    table = views.failures(records, "fam", ["BM"])
    assert len(table) == 2
    assert table.rows[0][0] == "BM=128" and table.rows[0][1] == "64x64x64, 128x128x128"
    assert table.rows[1][0] == "BM=256" and table.rows[1][2] == "compile_failed"
    assert "&lt;bad&gt; &amp; worse" in table._repr_html_() and "<bad>" not in table._repr_html_()
    assert "compile_failed" in repr(table) and "invalid 1" in table.title


def test_ranked_size_and_resource_tables():
    records = [_rec(tflops=10.0, BM=64), _rec(tflops=20.0, BM=128), _rec("incorrect", BM=256)]
    ranked = views.ranked_table(records, "fam", ["BM"])
    assert [row[1] for row in ranked.rows] == ["BM=128", "BM=64"]
    assert views.winner(records).params["BM"] == 128
    with pytest.raises(RuntimeError, match="no point ran correctly"):
        views.winner(records[2:])
    sizes = views.size_table([_rec(tflops=5.0, shape=(2, 2, 2)), _rec(tflops=7.0, shape=(1, 1, 1))])
    assert sizes.columns[2:] == ["1x1x1", "2x2x2"] and sizes.rows[0][2].startswith("7.0")
    r = records[1]
    r.registers, r.static_smem, r.dynamic_smem, r.spill_stores, r.spill_loads = 168, 0, 73728, 0, 0
    text = repr(views.resource_table(r))
    assert "168" in text and "73728 B" in text and "(none)" in text


def test_best_per_family_and_short_names():
    records = [_rec(tflops=5.0, family="a", variant="a1"), _rec(tflops=9.0, family="a", variant="a2"),
               _rec(tflops=7.0, family="b", variant="b1"), _rec("incorrect", family="b", variant="b2")]
    assert [r.variant for r in views.best_per_family(records)] == ["a2", "b1"]
    named = views.short_names([_rec(tflops=1.0, BM=32), dataclasses.replace(_rec(tflops=1.0), catalogue="known")],
                                "fam", ["BM"])
    assert named[0].variant == "swept: BM=32" and named[1].variant != "swept: BM=64"


def test_kernel_excerpt_starts_at_the_template():
    v = next(v for v in registry.catalogue().values() if v.family.name == "mma")
    from cupy_gemm.render import render
    source = render(v)
    excerpt = views.kernel_excerpt(source, v.params, lines=60)
    lines = excerpt.splitlines()
    assert lines[0].startswith("// Rendered variant")
    assert any(line.startswith("constexpr int WARPS_M") for line in lines)
    assert len(lines) <= 60 + 3
    assert views.kernel_excerpt("a\nb\nc", {"X": 1}, lines=2) == "a\nb"


def test_progress_lines(capsys):
    progress = views.Progress("run")
    progress("start", {"points": 8, "valid": 8, "compiles": 8, "measurements": 8, "resumed": 0})
    for _ in range(8):
        progress("record", _rec(tflops=1.0))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("run: 8 points") and len(lines) == 5  # start + each quarter


def _bench_records():
    out = []
    for shape, base in (((1024, 1024, 1024), 2.0), ((4096, 4096, 4096), 1.0), ((2048, 2048, 2048), 1.5)):
        for family, variant, speed in (("mma", "mma_a", 1.0), ("mma", "mma_b", 1.2), ("wmma", "wmma_a", 0.8)):
            out.append(_rec(tflops=100 * speed / base, shape=shape, family=family, variant=variant))
        out.append(_rec("incorrect", shape=shape, family="wmma", variant="wmma_bad"))
        out.append(Record(family="cublas", variant="cublas_f16_acc32", dtype="float16", acc="float32",
                          layout="row", M=shape[0], N=shape[1], K=shape[2], status="ok", tflops=150 / base))
    return out


@needs_matplotlib
def test_draw_tflops_picks_each_familys_fastest():
    from matplotlib.figure import Figure
    from cupy_gemm.present.plots import draw_tflops
    ax = Figure().subplots()
    draw_tflops(ax, _bench_records(), "t")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["mma: mma_b (best of 2)", "wmma: wmma_a (best of 2)", "cublas_f16_acc32"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1024³", "2048³", "4096³"]  # by M·N·K


@needs_matplotlib
def test_bench_plot_writes_a_png(tmp_path):
    from cupy_gemm import cli_sweep
    from cupy_gemm.present import plots
    records = _bench_records() + [dataclasses.replace(r, acc="float16") for r in _bench_records()]
    result = SweepResult(records, [], [], {"devices": [{"id": 0, "name": "Test GPU"}]})
    path = tmp_path / "perf.png"
    plots.bench_plot(result, str(path))
    assert path.read_bytes().startswith(PNG_MAGIC)
    import argparse
    parser = argparse.ArgumentParser()
    cli_sweep.add_bench_arguments(parser)
    assert parser.parse_args(["--plot", "x.png"]).plot == "x.png"


def _record(**kw):
    base = dict(family="sliced_k", variant="v", dtype="float32", acc="float32", layout="row", M=64, N=64, K=64,
                status="ok", params={"BM": 16, "BK": 8}, time_ms=1.0, time_q1_ms=0.9, time_q3_ms=1.1)
    base.update(kw)
    return Record(**base)


def test_seed_block_layout():
    pts = space.catalogue_points(["sgemm_naive_f32", "sgemm_sliced_k_f32"])
    recs = [_record(variant="sgemm_naive_f32", family="naive", tflops=2.0, pct_cublas=10.0, spread=0.01),
            _record(variant="sgemm_sliced_k_f32", tflops=4.0, pct_cublas=20.0, spread=0.01)]
    base = [_record(family="cublas", variant="cublas_f32", tflops=20.0, params={})]
    text = seed_block("float32", (64, 64, 64), recs, base, pts, width=24)
    lines = text.splitlines()
    assert "M=64, N=64, K=64" in lines[1]
    assert lines[2].strip("-") == "naive" and lines[4].strip("-") == "sliced_k"
    assert lines[5].endswith("(+100.00%)") and "20.0% of cuBLAS" in lines[5]
    assert "cublas_f32: time:1.000000ms" in text


def test_tables_fold_long_names_and_print_brackets_as_text():
    from io import StringIO
    from rich.console import Console
    from cupy_gemm.present import tables
    name = "hgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32_[bold]"
    recs = [_record(variant=name, catalogue="")]
    out = StringIO()
    Console(file=out, width=60).print(tables.top_table(recs, 5, [], "top"))
    text = out.getvalue()
    assert "…" not in text and "[bold]" in "".join(line.strip("│ ") for line in text.splitlines())

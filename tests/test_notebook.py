"""The tile explorer notebook, its runner and helpers, and `bench --plot`, checked on the CPU.

No GPU is used: the notebook runs once as it is (its first cell must stop, saying a GPU is needed) and
once with made-up measurements in place of `sweep.measure`, which exercises every other line of it.
"""
import base64
import dataclasses
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOK = EXAMPLES / "tile_explorer.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


runner = _load("run_notebook")
helpers = _load("explorer_helpers")

from cupy_gemm import registry, sweep  # noqa: E402  (after the helpers: they may put the checkout on sys.path)
from cupy_gemm.results import Record  # noqa: E402


def _has_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


needs_matplotlib = pytest.mark.skipif(not _has_matplotlib(), reason="matplotlib is not installed")


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _outputs_text(cell, kind="stream") -> str:
    out = []
    for o in cell["outputs"]:
        if o["output_type"] == kind == "stream":
            out.append("".join(o["text"]))
        elif kind == "data" and "data" in o:
            out.append("".join(o["data"].get("text/html", o["data"].get("text/plain", ""))))
    return "".join(out)


def _run(path: Path, out: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", **(env_extra or {})}
    return subprocess.run([sys.executable, str(EXAMPLES / "run_notebook.py"), str(path), "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)


def _check_nbformat(nb: dict) -> None:
    """nbformat 4.5 as Jupyter and GitHub read it; with the nbformat package, its own validator too."""
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
    ids = [c["id"] for c in nb["cells"]]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("code", "markdown", "raw") and isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], (str, list))
        if cell["cell_type"] == "code":
            assert "outputs" in cell and "execution_count" in cell
            for o in cell["outputs"]:
                assert o["output_type"] in ("stream", "display_data", "execute_result", "error")
                if o["output_type"] == "execute_result":
                    assert o["execution_count"] == cell["execution_count"]
                if "image/png" in o.get("data", {}):
                    assert base64.b64decode(o["data"]["image/png"]).startswith(PNG_MAGIC)
    if importlib.util.find_spec("nbformat") is not None:
        import nbformat
        nbformat.validate(nbformat.from_dict(nb))


# ---- the notebook file ------------------------------------------------------------------------------------

def test_notebook_is_nbformat4_with_the_expected_sections():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    _check_nbformat(nb)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    headings = [line for c in nb["cells"] if c["cell_type"] == "markdown"
                for line in _source(c).splitlines() if line.startswith("#")]
    for wanted in ("Tile-shape explorer", "The grid", "The sweep", "Heat maps", "BK, padding and swizzle",
                   "Every family against cuBLAS", "Failed and pruned", "The winning kernel"):
        assert any(wanted in h for h in headings), wanted
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    first = _source(code[0])
    for name in ("FAMILY = ", "DTYPE = ", "SHAPE = ", "require_gpu()", "describe_gpu"):
        assert name in first
    text = "\n".join(_source(c) for c in code)
    assert "sweep.measure(" in text and "sweep.points(" in text  # the library, not the command line
    assert "subprocess" not in text and not re.search(r"^\s*[!%]", text, re.M)
    # committed with outputs: a clean run from the top that names its device
    if any(c["outputs"] for c in code):
        assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
        assert not any(o["output_type"] == "error" for c in code for o in c["outputs"])
        assert "Running on GPU" in _outputs_text(code[0])


def test_notebook_defaults_are_a_small_sweep():
    s = helpers.SUGGESTIONS["mma"]
    pts = sweep.points("mma", s.grid, "float16")
    valid = [p for p in pts if p.valid]
    detail = sweep.points("mma", helpers.around(valid[0].params, s.detail), "float16")
    catalogue = [v for v in registry.catalogue().values() if v.dtype == "float16" and v.acc == pts[0].acc]
    # about 60 timed points at the heat maps' shape (the winner's own detail point is reused)
    assert len(valid) + sum(p.valid for p in detail) - 1 + len(catalogue) <= 70
    assert s.panel in registry.family("mma").param_index


@pytest.mark.parametrize("family", sorted(helpers.SUGGESTIONS))
def test_suggested_grids_are_valid(family):
    if family not in registry.families():
        pytest.skip(f"no family {family} in this checkout")
    s = helpers.SUGGESTIONS[family]
    pts = sweep.points(family, s.grid)
    valid = [p for p in pts if p.valid]
    assert valid and len(pts) <= 60, (family, len(pts), [p.reason for p in pts if not p.valid][:3])
    assert s.panel is None or s.panel in registry.family(family).param_index
    detail = sweep.points(family, helpers.around(valid[0].params, s.detail), pts[0].dtype)
    assert any(p.valid for p in detail)


def test_resolve_and_unknown_family():
    grid, panel, detail = helpers.resolve("mma")
    assert panel == "STAGES" and "WARP_TILE_M" in grid and "BK" in detail
    assert helpers.resolve("mma", {"BK": [32, 64]}, None, {"STAGES": [2]}) == ({"BK": [32, 64]}, None, {"STAGES": [2]})
    with pytest.raises(ValueError, match="set GRID, PANEL and DETAIL"):
        helpers.resolve("no_such_family")


# ---- helpers on made-up records ---------------------------------------------------------------------------

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
    panels = helpers.heat_panels(records, _tile, "STAGES")
    assert [p.key for p in panels] == [2, 3]
    p2, p3 = panels
    assert p2.rows == p3.rows == [64, 128] and p2.cols == p3.cols == [64, 128]  # the same axes everywhere
    assert p2.values[0] == [10.0, 30.0] and p2.best[0][1].tflops == 30
    assert math.isnan(p2.values[1][0]) and p2.notes[1][0] == "invalid"
    assert math.isnan(p2.values[1][1]) and p2.notes[1][1] == ""  # nothing swept there
    assert p3.values[1][1] == 50.0 and p3.notes[1][0] == "incorrect"
    pct = helpers.heat_panels(records, _tile, "STAGES", "pct_cublas")
    assert pct[0].values[0] == [5.0, 15.0]
    assert len(helpers.heat_panels(records, _tile)) == 1


@needs_matplotlib
def test_draw_heatmaps_and_detail():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    records = [_rec(tflops=t, BM=bm, BN=bn, STAGES=s) for s, (bm, bn, t) in
               [(2, (64, 64, 10)), (2, (64, 128, 20)), (3, (128, 64, 30)), (3, (128, 128, 40))]]
    records.append(_rec("invalid", BM=128, BN=128, STAGES=2))
    fig = helpers.draw_heatmaps(records, _tile, "STAGES", "title")
    assert len(fig.axes) >= 4  # 2 rows x 2 panels, plus colour bars
    fig2 = helpers.draw_detail(records, "fam", ["BM", "BN"])
    assert len(fig2.axes[0].patches) == 4  # the pruned point is not a bar
    plt.close("all")


def test_failures_table_groups_shapes_and_escapes_html():
    records = [_rec("invalid", BM=128, shape=(64, 64, 64)), _rec("invalid", BM=128, shape=(128, 128, 128)),
               _rec("compile_failed", BM=256, variant="fam-x<y>"), _rec(tflops=3.0)]
    records[2].reason = "error: <bad> & worse"
    table = helpers.failures(records, "fam", ["BM"])
    assert len(table) == 2
    assert table.rows[0][0] == "BM=128" and table.rows[0][1] == "64x64x64, 128x128x128"
    assert table.rows[1][0] == "BM=256" and table.rows[1][2] == "compile_failed"
    assert "&lt;bad&gt; &amp; worse" in table._repr_html_() and "<bad>" not in table._repr_html_()
    assert "compile_failed" in repr(table) and "invalid 1" in table.title


def test_ranked_size_and_resource_tables():
    records = [_rec(tflops=10.0, BM=64), _rec(tflops=20.0, BM=128), _rec("incorrect", BM=256)]
    ranked = helpers.ranked_table(records, "fam", ["BM"])
    assert [row[1] for row in ranked.rows] == ["BM=128", "BM=64"]
    assert helpers.winner(records).params["BM"] == 128
    with pytest.raises(RuntimeError, match="no point ran correctly"):
        helpers.winner(records[2:])
    sizes = helpers.size_table([_rec(tflops=5.0, shape=(2, 2, 2)), _rec(tflops=7.0, shape=(1, 1, 1))])
    assert sizes.columns[2:] == ["1x1x1", "2x2x2"] and sizes.rows[0][2].startswith("7.0")
    r = records[1]
    r.registers, r.static_smem, r.dynamic_smem, r.spill_stores, r.spill_loads = 168, 0, 73728, 0, 0
    text = repr(helpers.resource_table(r))
    assert "168" in text and "73728 B" in text and "(none)" in text


def test_best_per_family_and_short_names():
    records = [_rec(tflops=5.0, family="a", variant="a1"), _rec(tflops=9.0, family="a", variant="a2"),
               _rec(tflops=7.0, family="b", variant="b1"), _rec("incorrect", family="b", variant="b2")]
    assert [r.variant for r in helpers.best_per_family(records)] == ["a2", "b1"]
    named = helpers.short_names([_rec(tflops=1.0, BM=32), dataclasses.replace(_rec(tflops=1.0), catalogue="known")],
                                "fam", ["BM"])
    assert named[0].variant == "swept: BM=32" and named[1].variant != "swept: BM=64"


def test_kernel_excerpt_starts_at_the_template():
    v = next(v for v in registry.catalogue().values() if v.family.name == "mma")
    from cupy_gemm.render import render
    source = render(v)
    excerpt = helpers.kernel_excerpt(source, v.params, lines=60)
    lines = excerpt.splitlines()
    assert lines[0].startswith("// Rendered variant")
    assert any(line.startswith("constexpr int WARPS_M") for line in lines)
    assert len(lines) <= 60 + 3
    assert helpers.kernel_excerpt("a\nb\nc", {"X": 1}, lines=2) == "a\nb"


def test_progress_lines(capsys):
    progress = helpers.Progress("run")
    progress("start", {"points": 8, "valid": 8, "compiles": 8, "measurements": 8, "resumed": 0})
    for _ in range(8):
        progress("record", _rec(tflops=1.0))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("run: 8 points") and len(lines) == 5  # start + each quarter


def test_require_gpu_fails_clearly_without_one():
    code = ("import sys; sys.path.insert(0, {!r}); import explorer_helpers as h\n"
            "try:\n    h.require_gpu()\nexcept h.NoGPUError as e:\n    print('ERR', e)\n").format(str(EXAMPLES))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})
    assert "ERR" in out.stdout and "needs a CUDA GPU" in out.stdout, out.stdout + out.stderr


# ---- the runner -------------------------------------------------------------------------------------------

def _synthetic(figure: bool) -> dict:
    def code(cid, src):
        return {"cell_type": "code", "id": cid, "metadata": {}, "source": src, "execution_count": 9,
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "stale\n"}]}
    cells = [{"cell_type": "markdown", "id": "intro", "metadata": {}, "source": "# synthetic"},
             code("printing", "import sys\nprint('one')\nprint('two')\nprint('warn', file=sys.stderr)\nx = 41"),
             code("expression", "x + 1"),
             code("html", "class T:\n    def _repr_html_(self):\n        return '<b>t</b>'\n"
                          "    def __repr__(self):\n        return 'T()'\nT()"),
             code("displayed", "display(T())\n'hidden';")]
    if figure:
        cells.append(code("figure", "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
                                    "ax.plot([1, 2], [3, 4])\nprint('drawn')\nplt.show()\nprint('after')\n"
                                    "fig2 = plt.figure()\nbars = fig2.add_subplot().bar([1], [2])"))
    cells += [code("raising", "def f():\n    raise ValueError('boom')\nprint('before')\nf()"),
              code("skipped", "print('never')")]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}


@pytest.mark.parametrize("figure", [False, pytest.param(True, marks=needs_matplotlib)])
def test_runner_executes_a_synthetic_notebook(tmp_path, figure):
    path, out = tmp_path / "synthetic.ipynb", tmp_path / "executed.ipynb"
    path.write_text(json.dumps(_synthetic(figure)))
    proc = _run(path, out)
    assert proc.returncode == 1 and "ValueError: boom" in proc.stderr
    nb = json.loads(out.read_text(encoding="utf-8"))
    _check_nbformat(nb)
    cells = {c["id"]: c for c in nb["cells"]}
    assert json.loads(path.read_text())["cells"][1]["outputs"][0]["text"] == "stale\n"  # --out: input untouched

    streams = [(o["name"], "".join(o["text"])) for o in cells["printing"]["outputs"]]
    assert streams == [("stdout", "one\ntwo\n"), ("stderr", "warn\n")]
    assert cells["printing"]["execution_count"] == 1

    result = cells["expression"]["outputs"]
    assert [o["output_type"] for o in result] == ["execute_result"] and result[0]["data"]["text/plain"] == ["42"]
    assert result[0]["execution_count"] == 2
    html = cells["html"]["outputs"][0]["data"]
    assert html["text/html"] == ["<b>t</b>"] and html["text/plain"] == ["T()"]
    shown = cells["displayed"]["outputs"]
    assert [o["output_type"] for o in shown] == ["display_data"]  # `;` hides the trailing value

    if figure:
        outs = cells["figure"]["outputs"]
        kinds = [(o["output_type"], o.get("name")) for o in outs]
        # output order is kept: the shown figure between the prints, the open one at the end
        assert kinds == [("stream", "stdout"), ("display_data", None), ("stream", "stdout"), ("display_data", None)]
        for o in (outs[1], outs[3]):
            assert base64.b64decode(o["data"]["image/png"]).startswith(PNG_MAGIC)
            assert o["data"]["text/plain"][0].startswith("<Figure size")

    error = cells["raising"]["outputs"]
    assert [o["output_type"] for o in error] == ["stream", "error"]
    assert error[1]["ename"] == "ValueError" and error[1]["evalue"] == "boom"
    trace = "\n".join(error[1]["traceback"])
    assert '<cell ' in trace and "raise ValueError('boom')" in trace and "run_notebook.py" not in trace
    assert cells["skipped"]["outputs"] == [] and cells["skipped"]["execution_count"] is None


def test_runner_succeeds_in_place(tmp_path):
    nb = _synthetic(False)
    nb["cells"] = [c for c in nb["cells"] if c["id"] not in ("raising", "skipped")]
    del nb["cells"][1]["id"]  # an older notebook without cell ids gets them
    path = tmp_path / "ok.ipynb"
    path.write_text(json.dumps(nb))
    proc = _run(path, path)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(path.read_text(encoding="utf-8"))
    _check_nbformat(done)
    assert [c["execution_count"] for c in done["cells"] if c["cell_type"] == "code"] == [1, 2, 3, 4]
    assert path.read_text(encoding="utf-8").endswith("}\n")


def test_runner_reports_a_syntax_error(tmp_path):
    nb = {"cells": [{"cell_type": "code", "id": "bad", "metadata": {}, "source": "x = (", "outputs": [],
                     "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "bad.ipynb"
    path.write_text(json.dumps(nb))
    assert _run(path, path).returncode == 1
    err = json.loads(path.read_text())["cells"][0]["outputs"][0]
    assert err["ename"] == "SyntaxError" and not any("run_notebook" in line for line in err["traceback"])


# ---- the notebook, run on the CPU ------------------------------------------------------------------------

def test_notebook_stops_at_once_without_a_gpu(tmp_path):
    out = tmp_path / "no_gpu.ipynb"
    proc = _run(NOTEBOOK, out)  # CUDA_VISIBLE_DEVICES="": no GPU even on a GPU machine
    assert proc.returncode == 1
    code = [c for c in json.loads(out.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    error = code[0]["outputs"][-1]
    assert error["output_type"] == "error" and "needs a CUDA GPU" in error["evalue"]
    assert all(c["outputs"] == [] for c in code[1:])


# Replaces the GPU check and the measurements with made-up ones; everything else is the library's.
FAKE_GPU = '''
from cupy_gemm import results as _results, sweep as _sweep
from cupy_gemm.timing import tflops as _tflops

helpers.require_gpu = lambda: {"id": 0, "name": "Test GPU", "cc": 90, "sms": 132, "memory_gib": 141.0,
                               "driver": "12.8", "runtime": "12.9", "cupy": "test", "count": 1}
_metadata = _results.metadata
_results.metadata = lambda devices=(), **kw: _metadata((), **kw)


def _made_up(pts, shapes, *, settings=None, resume=(), on_event=None, **kw):
    pts, emit = list(pts), on_event or (lambda kind, data: None)
    shapes = [_sweep.parse_shape(s) if isinstance(s, str) else tuple(s) for s in shapes]
    old = {r.key(): r for r in resume if not r.is_baseline}
    emit("start", {"points": len(pts), "valid": sum(p.valid for p in pts), "compiles": len(pts),
                   "measurements": len(pts) * len(shapes), "resumed": 0})
    out = []
    for shape in shapes:
        base = _results.Record(family="cublas", variant="cublas_test", dtype=pts[0].dtype, acc=pts[0].acc,
                               layout="row", M=shape[0], N=shape[1], K=shape[2], status="ok", time_ms=1.0,
                               tflops=_tflops(*shape, 1.0), device=0, device_name="Test GPU")
        out.append(base)
        for i, p in enumerate(pts):
            key = (p.family, p.name, p.dtype, p.acc, tuple(sorted(p.params.items())), *shape)
            if key in old:
                out.append(old[key])
                continue
            rec = _sweep._base_record(p, shape, "ok" if p.valid else "invalid", p.reason)
            if p.valid:
                speed = 0.3 + (sum(p.params.values()) * 7919 + 31 * i) % 97 / 100
                rec.time_ms = rec.time_q1_ms = rec.time_q3_ms = 1.0 / speed
                rec.tflops, rec.pct_cublas, rec.cublas = _tflops(*shape, rec.time_ms), 100 * speed, base.variant
                rec.registers, rec.static_smem, rec.dynamic_smem, rec.threads = 128, 0, 4096, 256
                rec.spill_stores = rec.spill_loads = rec.local_bytes = 0
                rec.blocks_per_sm, rec.occupancy = 1, 0.125
                rec.arch = "sm_90a" if p.variant.family.needs_sm90a else "sm_90"
                rec.error = rec.ragged_error = 0.1
            out.append(rec)
            emit("record", rec)
    return _sweep.SweepResult(out, pts, shapes, {"devices": [{"id": 0, "name": "Test GPU"}]})


_sweep.measure = _made_up
'''


@needs_matplotlib
def test_notebook_runs_top_to_bottom_with_made_up_measurements(tmp_path):
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    source = _source(first)
    anchor = next(line for line in source.splitlines(keepends=True) if line.startswith("import explorer_helpers"))
    first["source"] = source.replace(anchor, anchor + FAKE_GPU, 1)
    shutil.copy(EXAMPLES / "explorer_helpers.py", tmp_path / "explorer_helpers.py")
    path = tmp_path / "tile_explorer.ipynb"
    path.write_text(json.dumps(nb))
    proc = _run(path, path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(path.read_text(encoding="utf-8"))
    _check_nbformat(done)
    cells = {c["id"]: c for c in done["cells"] if c["cell_type"] == "code"}
    assert all(c["outputs"] for c in cells.values())

    def pngs(cid):
        return sum("image/png" in o.get("data", {}) for o in cells[cid]["outputs"])
    assert "Running on GPU 0: Test GPU" in _outputs_text(cells["parameters"])
    assert "pruned WARP_TILE_M=8 WARP_TILE_N=8" in _outputs_text(cells["grid"])
    assert "fastest 10 of 24 correct points" in _outputs_text(cells["sweep"], "data")
    assert pngs("heatmaps") == 1 and pngs("detail") == 1 and pngs("families") == 1
    sizes = _outputs_text(cells["families"], "data")
    for family in ("mma", "wmma", "cublas_test", "8192x8192x8192"):
        assert family in sizes
    failures = _outputs_text(cells["failures"], "data")
    assert "<table>" in failures and "smem=" in failures and "SMEM_SWIZZLE=1" in failures
    winner = _outputs_text(cells["winner"])
    assert "constexpr int WARPS_M" in winner and "registers" in winner
    assert "registers per thread" in _outputs_text(cells["winner"], "data")


# ---- cupy-gemm bench --plot -------------------------------------------------------------------------------

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
    from cupy_gemm.cli_sweep import draw_tflops
    ax = Figure().subplots()
    draw_tflops(ax, _bench_records(), "t")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["mma: mma_b (best of 2)", "wmma: wmma_a (best of 2)", "cublas_f16_acc32"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1024³", "2048³", "4096³"]  # by M·N·K


@needs_matplotlib
def test_bench_plot_writes_a_png(tmp_path):
    from cupy_gemm import cli_sweep
    records = _bench_records() + [dataclasses.replace(r, acc="float16") for r in _bench_records()]
    result = sweep.SweepResult(records, [], [], {"devices": [{"id": 0, "name": "Test GPU"}]})
    path = tmp_path / "perf.png"
    cli_sweep.plot(result, str(path))
    assert path.read_bytes().startswith(PNG_MAGIC)
    import argparse
    parser = argparse.ArgumentParser()
    cli_sweep.add_bench_arguments(parser)
    assert parser.parse_args(["--plot", "x.png"]).plot == "x.png"


def test_runner_names_ipython_syntax(tmp_path):
    nb = {"cells": [{"cell_type": "code", "id": "magic", "metadata": {}, "source": "x = 1\n%timeit x",
                     "outputs": [], "execution_count": None}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "magic.ipynb"
    path.write_text(json.dumps(nb))
    assert _run(path, path).returncode == 1
    err = json.loads(path.read_text())["cells"][0]["outputs"][0]
    assert err["ename"] == "SyntaxError" and "IPython syntax" in err["evalue"]

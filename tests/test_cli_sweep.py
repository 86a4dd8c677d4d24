"""`cupy-gemm sweep | bench | tune | report` as a user meets them: the console script run as a subprocess
(exit code, stream, text), and in-process where a stand-in GPU is needed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cupy_gemm import cli, devices
from cupy_gemm.measure import local, occupancy, results
from cupy_gemm.measure.schedule import GPUModel

ROOT = Path(__file__).resolve().parent.parent
FAMILY = "sliced_k"


def _has_gpu() -> bool:
    try:
        devices.gpu_count()
        return True
    except Exception:
        return False


def run(*argv, timeout=120, script=None):
    """The console script (python -m cupy_gemm.cli), or another script, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, *(script or ["-m", "cupy_gemm.cli"]), *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def _one_error_line(proc, code: int, *words) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.skipif(_has_gpu(), reason="checks the message of a machine without a GPU")
@pytest.mark.parametrize("argv", [("sweep", FAMILY, "--shape", "64", "--set", "BK=8"), ("bench", "--quick"),
                                  ("tune", "--shape", "64", "--variant", "sgemm_naive_f32")])
def test_without_a_gpu_commands_end_in_one_line(argv):
    _one_error_line(run(*argv), 1, "no CUDA GPU found (")


@pytest.mark.skipif(_has_gpu(), reason="checks the message of a machine without a GPU")
def test_without_a_gpu_bench_py_ends_in_one_line():
    _one_error_line(run("--quick", script=["bench.py"]), 1, "no CUDA GPU found (")


def test_a_huge_grid_fails_fast():
    _one_error_line(run("sweep", "mma", "--set", "STAGES=1:100000000", "--dry-run", timeout=60), 2,
                    "STAGES", "100000000")


def test_bad_shapes_and_arch_are_usage_errors():
    _one_error_line(run("sweep", FAMILY, "--shape", "foo", "--dry-run"), 2, "'foo'")
    _one_error_line(run("sweep", FAMILY, "--set", "BK=8", "--compile-only", "--arch", "foo"), 2, "arch", "'foo'")


def test_user_text_is_never_read_as_markup():
    _one_error_line(run("sweep", FAMILY, "--set", "[/x]=1", "--dry-run"), 2, "[/x]")
    _one_error_line(run("sweep", FAMILY, "--set", "[red]BK=1", "--dry-run"), 2, "[red]BK")


def test_an_unreachable_scheduler_is_one_line():
    pytest.importorskip("distributed")
    _one_error_line(run("sweep", FAMILY, "--shape", "64", "--set", "BK=8", "--scheduler", "tcp://127.0.0.1:9"), 1,
                    "cannot reach the Dask scheduler at tcp://127.0.0.1:9")


def test_dry_run_names_are_folded_not_cut():
    proc = run("sweep", "sgemm_simt", "--set", "BM=64,128", "--set", "BN=64,128", "--dry-run",
               "--set", "BK=8", "--set", "TM=8", "--set", "TN=8")
    assert proc.returncode == 0 and "…" not in proc.stdout and "points" in proc.stdout


def test_dry_run_cli(capsys):
    assert cli.main(["sweep", FAMILY, "--set", "BM=16,64", "--set", "BN=32", "--set", "BK=8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 points, 1 valid" in out and "threads" in out and "pruned by: threads ×1" in out


def test_cli_rejects_bad_sets(capsys):
    assert cli.main(["sweep", FAMILY, "--set", "BM", "--dry-run"]) == 2
    assert cli.main(["sweep", FAMILY, "--set", "BQ=1", "--dry-run"]) == 2
    assert "BQ" in capsys.readouterr().err


def test_resume_cli_refuses_another_gpu(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep.csv"
    results.write(out, [results.Record(family=FAMILY, variant="v", dtype="float32", acc="float32", layout="row",
                                       M=64, N=64, K=64, status="ok")], {"devices": [{"id": 0, "name": "Other GPU"}]})
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    monkeypatch.setattr(local.LocalRunner, "gpu_model", lambda self: GPUModel("Fake GPU", 90, occupancy.sm_limits(90)))
    code = cli.main(["sweep", FAMILY, "--shape", "64x64x64", "--set", "BK=8", "--out", str(out), "--resume",
                     "--devices", "0"])
    assert code == 2 and "Other GPU" in capsys.readouterr().err


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


def test_sweep_bench_and_tune_take_the_dtype_aliases():
    """--dtype fp16 (half, bf16, fp32, float) means what it means for list and explain: here tune's default
    mode names the canonical dtype in its refusal of an accumulate type it does not serve."""
    _one_error_line(run("tune", "--shape", "64", "--dtype", "fp16", "--acc", "float16"), 2,
                    "--dtype float16 --acc float16")

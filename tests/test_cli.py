"""The `cupy-gemm` command as a user runs it: a subprocess, its exit code, which stream, and the text.

Conventions checked here: results on stdout; errors on stderr as one `error: …` line, exit 2 for usage and
input errors and 1 for failures of the work, never a traceback; text printed as text, never as rich
markup; variant names never cut.
"""
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import cupy_gemm
from cupy_gemm import compile as compile_mod, registry, toolkit
from cupy_gemm.cli import main

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = registry.catalogue()
SMALL = "sgemm_naive_f32"
HOPPER_ONLY = next(n for n, v in CATALOGUE.items() if v.family.needs_sm90a)
LONG_LINES = "hgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32"  # source lines up to ~150 characters


def cli(*args, columns=120, **env):
    """Run the console script's module as a user's shell would, at a given terminal width."""
    environ = {k: v for k, v in os.environ.items() if k != "CUPY_GEMM_ARCH"}  # the user's own default archs
    environ.update(COLUMNS=str(columns), PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")])),
                   **env)
    return subprocess.run([sys.executable, "-m", "cupy_gemm.cli", *args], capture_output=True, text=True,
                          env=environ, cwd=ROOT, timeout=600)


def assert_error(run, code: int, text: str) -> None:
    assert run.returncode == code, run
    assert run.stdout == "", f"an error wrote to stdout: {run.stdout!r}"
    assert "Traceback" not in run.stderr and text in run.stderr, run.stderr
    error_lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, run.stderr


def table_cells(out: str, columns: int) -> list[list[str]]:
    """The rows of a rich table, with cells folded over several lines joined again."""
    rows = []
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        assert len(cells) == columns, f"a row was cut at the terminal's edge: {line!r}"
        if cells[1]:  # the second column is filled only on a row's first line
            rows.append(cells)
        else:
            rows[-1] = [prev + more for prev, more in zip(rows[-1], cells)]
    return rows


def test_version():
    run = cli("--version")
    assert (run.returncode, run.stdout, run.stderr) == (0, f"cupy-gemm {cupy_gemm.__version__}\n", "")


@pytest.mark.parametrize("args,env,text", [
    (["show", SMALL, "--shape", "foo"], {}, "shape 'foo'"),
    (["show", SMALL, "--shape", "0x5x5"], {}, "shape '0x5x5'"),
    (["show", SMALL, "--shape", "5x5"], {}, "shape '5x5'"),
    (["show", SMALL, "--set", "BM=abc"], {}, "BM='abc': parameters are integers"),
    (["show", SMALL, "--set", "BM"], {}, "expected NAME=VALUE"),
    (["show", SMALL, "--set", "BM=0", "--no-source"], {}, "parameter BM=0 is invalid"),
    (["show", "[/red]"], {}, "unknown variant '[/red]'"),
    (["show", SMALL, "--set", "[/x]=1"], {}, "parameter [/x]=1 is invalid"),
    (["show", SMALL, "--source", "--no-source"], {}, "not allowed with"),
    (["list", "--dtype", "float64"], {}, "'float64' inputs; the dtypes are bfloat16, float16, float32"),
    (["list", "--family", "nope"], {}, "unknown family 'nope'"),
    (["compile", SMALL, "--arch", "foo"], {}, "'foo' is not an architecture"),
    (["compile", SMALL, "--arch", "sm_8x"], {}, "'sm_8x' is not an architecture"),
    (["compile", SMALL, "--arch", "sm_10"], {}, "cannot compile for sm_10"),
    (["compile", SMALL], {"CUPY_GEMM_ARCH": "garbage"}, "CUPY_GEMM_ARCH='garbage'"),
    (["compile", HOPPER_ONLY, "--arch", "sm_80"], {}, f"{HOPPER_ONLY!r} needs sm_90a"),
    (["compile", "sgemm_naiv_f32"], {}, "did you mean 'sgemm_naive_f32'"),
    (["compile"], {}, "pass --all"),
    (["frobnicate"], {}, "invalid choice"),
])
def test_usage_and_input_errors(args, env, text):
    assert_error(cli(*args, **env), 2, text)


def test_missing_toolkit_hint_prints_intact(tmp_path):
    """The install hint holds brackets that rich would take for markup and drop."""
    run = cli("compile", SMALL, "--arch", "sm_80", CUPY_GEMM_CUDA_INCLUDE=str(tmp_path / "nothing"),
              CUPY_GEMM_CACHE_DIR=str(tmp_path / "cache"))
    major = toolkit.nvrtc_version()[0]
    assert_error(run, 1, f"pip install 'cuda-toolkit[cudart,nvcc]=={major}.*'")  # once, not once per variant


def test_compile_reports_and_keeps_names_whole():
    run = cli("compile", SMALL, LONG_LINES, "--arch", "sm_80", columns=80)
    assert run.returncode == 0 and run.stderr == "", run
    rows = table_cells(run.stdout, 7)
    assert [(r[0], r[1], r[2]) for r in rows] == [(SMALL, "sm_80", "ok"), (LONG_LINES, "sm_80", "ok")]
    assert "…" not in run.stdout and "all 2 compiles succeeded" in run.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_list_shows_every_name_whole(columns):
    run = cli("list", columns=columns)
    assert run.returncode == 0 and run.stderr == ""
    rows = table_cells(run.stdout, 5)
    assert [r[0] for r in rows] == list(CATALOGUE)
    assert "…" not in run.stdout and max(len(line) for line in run.stdout.splitlines()) <= columns
    assert f"{len(CATALOGUE)} variants" in run.stdout


def test_list_dtype_aliases_and_singular():
    run = cli("list", "--dtype", "fp16", "--family", "naive")
    assert run.returncode == 0 and re.search(r"\b1 variant\b(?!s)", run.stdout), run.stdout
    assert [r[0] for r in table_cells(run.stdout, 5)] == ["hgemm_naive_f16"]
    rows = json.loads(cli("list", "--dtype", "bf16", "--json").stdout)
    assert rows and {r["dtype"] for r in rows} == {"bfloat16"}


def test_show_source_is_the_compiled_text():
    """`show V --source > v.cu` is the source NVRTC compiles, and it compiles as is."""
    run = cli("show", SMALL, "--set", "BM=16", "--source")
    assert run.returncode == 0 and run.stderr == ""
    variant = registry.make_variant(CATALOGUE[SMALL].family, SMALL, "float32", {**CATALOGUE[SMALL].params, "BM": 16})
    assert run.stdout == cupy_gemm.api.Kernel(variant).source
    compiled = compile_mod.compile_variant(variant, "sm_80", source=run.stdout)
    assert compiled.resources.registers > 0


def test_show_folds_long_lines_instead_of_cutting_them():
    source = cupy_gemm.get(LONG_LINES).source
    assert max(len(line) for line in source.splitlines()) > 120
    run = cli("show", LONG_LINES, columns=80)
    assert run.returncode == 0 and run.stderr == ""
    missing = Counter(re.findall(r"\w+", source)) - Counter(re.findall(r"\w+", run.stdout))
    assert not missing, f"source text missing from the display: {list(missing)[:10]}"
    assert "--source" in run.stdout


def test_show_takes_a_single_size_as_a_cube():
    run = cli("show", SMALL, "--shape", "100", "--no-source")
    assert run.returncode == 0 and "launch for 100×100×100" in run.stdout and "gemm_kernel" not in run.stdout


def test_show_with_override():
    run = cli("show", "sgemm_sliced_k_f32", "--set", "BK=16", "--shape", "100x200x300")
    assert run.returncode == 0
    assert "BK=16" in run.stdout and "grid (28, 1, 1)" in run.stdout and "gemm_kernel" in run.stdout


def test_list_json():
    rows = json.loads(cli("list", "--json", "--family", "naive").stdout)
    assert {r["name"] for r in rows} >= {"sgemm_naive_f32"} and all(r["family"] == "naive" for r in rows)


def test_a_reader_that_leaves_early_is_no_error():
    """`cupy-gemm list --json | head -1`: more output than a pipe holds, and the reader goes away."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "cupy_gemm.cli", "list", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=environ, cwd=ROOT)
    proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and stderr == ""


def test_a_failed_compile_is_a_failure_of_the_work(monkeypatch, capsys):
    """Exit 1; the compiler's text (brackets of array indices included) on stderr as it came."""
    log = "v.cu(12): error: identifier \"tile\" is undefined\n>   12 | acc[i][j] += tile[/red][k];"

    def rejected(variant, arch, source=None):
        raise cupy_gemm.CompileError(log)
    monkeypatch.setattr(compile_mod, "compile_variant", rejected)
    assert main(["compile", SMALL, "--arch", "sm_80"]) == 1
    out, err = capsys.readouterr()
    assert err == f"error: {SMALL} (sm_80): {log}\n"
    assert [(r[0], r[2]) for r in table_cells(out, 7)] == [(SMALL, "failed")] and "1 of 1 compile failed" in out


def test_compile_all_skips_variants_no_requested_arch_runs(monkeypatch, capsys):
    """With --all, a variant no --arch can run is skipped and counted (named alone, it is an error)."""
    two = {name: CATALOGUE[name] for name in (SMALL, HOPPER_ONLY)}
    monkeypatch.setattr(registry, "catalogue", lambda: two)
    assert main(["compile", "--all", "--arch", "sm_80"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and [r[0] for r in table_cells(out, 7)] == [SMALL]
    assert "skipped 1 variant that sm_80 cannot run" in out and "all 1 compile succeeded" in out

"""The test suite leaves the user's cache alone: without CUPY_GEMM_CACHE_DIR it compiles into a temporary
folder that is gone afterwards; with it (as CI sets it) it uses that folder."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
from cupy_gemm import compile, config, registry

def test_probe():
    compile.compile_variant(registry.lookup("sgemm_naive_f32"), "sm_80")
    print("CACHE=" + str(config.cache_dir()))
'''


def run_suite(tmp_path: Path, cache_dir: str | None) -> Path:
    """Run a one-test suite under this suite's conftest, with HOME in tmp_path; return its cache folder."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("CUPY_GEMM_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    if cache_dir is not None:
        env["CUPY_GEMM_CACHE_DIR"] = cache_dir
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(suite)],
                         capture_output=True, text=True, env=env, cwd=suite, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return Path(next(line for line in run.stdout.splitlines() if "CACHE=" in line).split("CACHE=", 1)[1])


def test_suite_uses_a_temporary_cache(tmp_path):
    used = run_suite(tmp_path, None)
    assert not (tmp_path / "home" / ".cache").exists(), "the suite wrote to the user's ~/.cache"
    assert not used.exists(), "the temporary cache outlived the session"


def test_an_explicit_cache_is_kept(tmp_path):
    used = run_suite(tmp_path, str(tmp_path / "ci-cache"))
    assert used == tmp_path / "ci-cache" and any((used / "kernels").iterdir())


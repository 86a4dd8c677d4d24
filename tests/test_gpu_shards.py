"""The GPU suite's shards (tests/gpu/conftest.py, CUPY_GEMM_GPU_SHARD=i/n): together they run every test
once, compile-heavy runs of tests spread over all of them, and each starts about i/n of the way into the
suite, so concurrent shards are in different modules. Checked on a synthetic suite, no GPU needed."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = {"test_a.py": 40, "test_b_heavy.py": 96, "test_c.py": 64}  # tests per module, in collection order


def _collect(suite: Path, shard: str) -> list[str]:
    env = {**os.environ, "CUPY_GEMM_GPU_SHARD": shard, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                          str(suite)], env=env, capture_output=True, text=True, cwd=suite)
    assert run.returncode == 0, run.stdout + run.stderr
    return [line.strip() for line in run.stdout.splitlines() if "::" in line]


def test_shards_run_every_test_once_spread_and_staggered(tmp_path):
    suite = tmp_path / "gpu"
    suite.mkdir()
    shutil.copy(ROOT / "tests" / "gpu" / "conftest.py", suite / "conftest.py")
    for name, count in MODULES.items():
        (suite / name).write_text("import pytest\n\n\n@pytest.mark.parametrize('i', range(%d))\n"
                                  "def test_it(i):\n    pass\n" % count)
    everything = [f"{name}::test_it[{i}]" for name, count in MODULES.items() for i in range(count)]
    count = 4
    shards = [[node.split("/")[-1] for node in _collect(suite, f"{i}/{count}")] for i in range(count)]
    assert sorted(sum(shards, [])) == sorted(everything)  # every test once
    for index, tests in enumerate(shards):
        places = [everything.index(t) for t in tests]
        runs = {place // 8 for place in places}
        assert len(places) == 8 * len(runs)  # whole runs of 8 consecutive tests (200 = 25 runs)
        heavy = [t for t in tests if t.startswith("test_b_heavy")]
        assert len(heavy) == MODULES["test_b_heavy.py"] // count  # its 12 runs of 8: 3 in each shard
        assert abs(places[0] - index * len(everything) // count) <= 8 * count  # starts i/n of the way in

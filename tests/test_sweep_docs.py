"""docs/SWEEP.md says only what is true: every `cupy_gemm.…` name it mentions exists, its Python snippets
import what exists, and the defaults it gives are the ones `--help` gives."""
import argparse
import ast
import importlib
import re
from pathlib import Path

import pytest

from cupy_gemm import cli_sweep

DOC = (Path(__file__).resolve().parent.parent / "docs" / "SWEEP.md").read_text()


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)  # AttributeError: the doc names something that does not exist
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("dotted", sorted(set(re.findall(r"`(cupy_gemm(?:\.\w+)+)", DOC))))
def test_named_objects_exist(dotted):
    _resolve(dotted)


def test_python_snippets_import_what_exists():
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.S)
    assert blocks
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    _resolve(f"{node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)


def test_documented_defaults_match_the_help():
    parser = argparse.ArgumentParser()
    cli_sweep.add_commands(parser.add_subparsers(dest="command"))
    sweep = parser._subparsers._group_actions[0].choices["sweep"]
    helps = {a.dest: a.help for a in sweep._actions}
    assert "the CPUs not driving a GPU, at most 32" in helps["compile_workers"]
    assert "`--compile-workers` (default: the CPUs not driving a GPU, at\nmost 32)" in DOC
    for flag, default in (("repeats", 20), ("warmup_ms", 25.0), ("max_seconds", 2.0), ("max_points", 100_000)):
        assert sweep.get_default(flag) == default
    assert "`--repeats` (20), `--warmup-ms` (25)" in DOC and "`--max-seconds` (2)" in DOC
    assert "`--max-points` (100000)" in DOC

"""Generated documentation stays current."""
import re
from pathlib import Path

import pytest

from cupy_gemm.cli import catalogue_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_variants_md_is_current():
    path = ROOT / "docs" / "VARIANTS.md"
    assert path.read_text() == catalogue_markdown(), (
        "docs/VARIANTS.md is out of date: run `cupy-gemm list --markdown > docs/VARIANTS.md`")


# ---- the documented Python snippets run as written ---------------------------------------------------------

GPU_MARK = "# needs a GPU"  # a snippet's first line: it runs only where a GPU is (the test skips it here)
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _snippets():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for m in _FENCE.finditer(text):
            yield pytest.param(m.group(1), id=f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}")


@pytest.mark.parametrize("code", list(_snippets()))
def test_documented_snippet_runs(code, tmp_path, monkeypatch, capsys):
    if code.startswith(GPU_MARK):
        pytest.skip("the snippet needs a GPU (its first line says so)")
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    exec(compile(code, "<snippet>", "exec"), {"__name__": "__snippet__"})


def test_snippets_are_found():
    assert len(list(_snippets())) >= 2, "the README's Python snippets were not found: has the fence changed?"

"""Generated documentation stays current."""
from pathlib import Path

import pytest
from doc_snippets import GPU_MARK, run, snippets

from cupy_gemm.cli import catalogue_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_variants_md_is_current():
    path = ROOT / "docs" / "VARIANTS.md"
    assert path.read_text() == catalogue_markdown(), (
        "docs/VARIANTS.md is out of date: run `cupy-gemm list --markdown > docs/VARIANTS.md`")


# ---- the documented Python snippets run as written ---------------------------------------------------------

@pytest.mark.parametrize("code", snippets())
def test_documented_snippet_runs(code, tmp_path, monkeypatch):
    if code.startswith(GPU_MARK):
        pytest.skip("the snippet needs a GPU (its first line says so)")
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    run(code)


def test_snippets_are_found():
    assert len(snippets()) >= 2, "the README's Python snippets were not found: has the fence changed?"

"""Generated documentation stays current."""
from pathlib import Path

from cupy_gemm.cli import catalogue_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_variants_md_is_current():
    path = ROOT / "docs" / "VARIANTS.md"
    assert path.read_text() == catalogue_markdown(), (
        "docs/VARIANTS.md is out of date: run `cupy-gemm list --markdown > docs/VARIANTS.md`")

"""Measurement tests share one compile cache for the session: worker processes inherit it through the
environment, and the user's own cache is never touched."""
import pytest


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))

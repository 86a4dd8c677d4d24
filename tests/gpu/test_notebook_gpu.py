"""The tile explorer notebook executed with nbclient (a real Jupyter kernel) on the GPU, into a copy: every
cell runs, the figures are drawn and the tables filled."""
import os
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]


def test_notebook_runs_on_the_gpu(tmp_path, monkeypatch):
    for name in ("tile_explorer.ipynb", "explorer_helpers.py"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # ipykernel's inline backend puts the figures in the notebook
    nb = nbformat.read(tmp_path / "tile_explorer.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs for c in code) and not any(o.output_type == "error" for c in code for o in c.outputs)
    pngs = sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert pngs >= 3  # heat maps, the detail bars, TFLOPS by size
    assert "Running on GPU" in "".join(o.get("text", "") for o in code[0].outputs)

"""The tile explorer notebook on the CPU: valid nbformat, code cells that compile, suggested grids that
prune to small sweeps, and the README's command leaving the committed outputs alone without a GPU. It is
executed with nbclient on a GPU machine (tests/gpu/test_notebook_gpu.py)."""
import ast
import base64
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOK = EXAMPLES / "tile_explorer.ipynb"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

sys.path.insert(0, str(EXAMPLES))
import explorer_helpers as helpers  # noqa: E402

from cupy_gemm import registry  # noqa: E402
from cupy_gemm.measure import space  # noqa: E402


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _outputs_text(cell, kind="stream") -> str:
    out = []
    for o in cell["outputs"]:
        if o["output_type"] == kind == "stream":
            out.append("".join(o["text"]))
        elif kind == "data" and "data" in o:
            out.append("".join(o["data"].get("text/html", o["data"].get("text/plain", ""))))
    return "".join(out)


def _check_nbformat(nb: dict) -> None:
    """nbformat 4.5 as Jupyter and GitHub read it; with the nbformat package, its own validator too."""
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
    ids = [c["id"] for c in nb["cells"]]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("code", "markdown", "raw") and isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], (str, list))
        if cell["cell_type"] == "code":
            assert "outputs" in cell and "execution_count" in cell
            for o in cell["outputs"]:
                assert o["output_type"] in ("stream", "display_data", "execute_result", "error")
                if o["output_type"] == "execute_result":
                    assert o["execution_count"] == cell["execution_count"]
                if "image/png" in o.get("data", {}):
                    assert base64.b64decode(o["data"]["image/png"]).startswith(PNG_MAGIC)
    if importlib.util.find_spec("nbformat") is not None:
        import nbformat
        nbformat.validate(nbformat.from_dict(nb))


def test_notebook_is_nbformat4_with_the_expected_sections():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    _check_nbformat(nb)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    headings = [line for c in nb["cells"] if c["cell_type"] == "markdown"
                for line in _source(c).splitlines() if line.startswith("#")]
    for wanted in ("Tile-shape explorer", "The grid", "The sweep", "Heat maps", "BK, padding and swizzle",
                   "Every family against cuBLAS", "Failed and pruned", "The winning kernel"):
        assert any(wanted in h for h in headings), wanted
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    first = _source(code[0])
    for name in ("FAMILY = ", "DTYPE = ", "SHAPE = ", "require_gpu()", "describe_gpu"):
        assert name in first
    text = "\n".join(_source(c) for c in code)
    assert "sweep.measure(" in text and "space.points(" in text  # the library, not the command line
    assert "subprocess" not in text and not re.search(r"^\s*[!%]", text, re.M)
    # committed with outputs: a clean run from the top that names its device
    if any(c["outputs"] for c in code):
        assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1))
        assert not any(o["output_type"] == "error" for c in code for o in c["outputs"])
        assert "Running on GPU" in _outputs_text(code[0])


def test_code_cells_compile_and_import_what_exists():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
        tree = ast.parse(_source(cell))  # SyntaxError here: the notebook would fail on any machine
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("cupy_gemm"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or \
                        importlib.util.find_spec(f"{node.module}.{alias.name}"), (node.module, alias.name)


def test_notebook_defaults_are_a_small_sweep():
    s = helpers.SUGGESTIONS["mma"]
    pts = space.points("mma", s.grid, "float16")
    valid = [p for p in pts if p.valid]
    detail = space.points("mma", helpers.around(valid[0].params, s.detail), "float16")
    # few-rows variants (skinny) are refused at the notebook's square shape before anything is timed, and
    # grouped ones by matmul (they multiply many products: grouped_matmul); the notebook leaves out the
    # families that read B K-major (its B is row-major)
    catalogue = [v for v in registry.catalogue().values() if v.dtype == "float16" and v.acc == pts[0].acc
                 and v.max_rows() is None and v.family.abi != "grouped" and not v.family.b_layout]
    # about 100 timed points at the heat maps' shape (the winner's own detail point is reused)
    assert len(valid) + sum(p.valid for p in detail) - 1 + len(catalogue) <= 103
    assert s.panel in registry.family("mma").param_index


@pytest.mark.parametrize("family", sorted(helpers.SUGGESTIONS))
def test_suggested_grids_are_valid(family):
    if family not in registry.families():
        pytest.skip(f"no family {family} in this checkout")
    s = helpers.SUGGESTIONS[family]
    pts = space.points(family, s.grid)
    valid = [p for p in pts if p.valid]
    assert valid and len(pts) <= 60, (family, len(pts), [p.reason for p in pts if not p.valid][:3])
    assert s.panel is None or s.panel in registry.family(family).param_index
    detail = space.points(family, helpers.around(valid[0].params, s.detail), pts[0].dtype)
    assert any(p.valid for p in detail)


def test_resolve_and_unknown_family():
    grid, panel, detail = helpers.resolve("mma")
    assert panel == "STAGES" and "WARP_TILE_M" in grid and "BK" in detail
    assert helpers.resolve("mma", {"BK": [32, 64]}, None, {"STAGES": [2]}) == ({"BK": [32, 64]}, None, {"STAGES": [2]})
    with pytest.raises(ValueError, match="set GRID, PANEL and DETAIL"):
        helpers.resolve("no_such_family")



def _readme_notebook_command() -> str:
    readme = (ROOT / "README.md").read_text()
    return next(line.split("#")[0].strip() for line in readme.splitlines()
                if "tile_explorer.ipynb" in line and line.lstrip().startswith("jupyter"))


def test_readme_command_keeps_the_committed_outputs_without_a_gpu(tmp_path):
    if shutil.which("jupyter") is None or importlib.util.find_spec("nbclient") is None:
        pytest.skip("needs the notebook extra (jupyter nbconvert)")
    copy = tmp_path / "tile_explorer.ipynb"
    shutil.copy(NOTEBOOK, copy)
    shutil.copy(EXAMPLES / "explorer_helpers.py", tmp_path)
    before = copy.read_bytes()
    command = shlex.split(_readme_notebook_command().replace("examples/tile_explorer.ipynb", str(copy)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    if proc.returncode == 0:
        pytest.skip("a GPU ran the notebook")
    assert "needs a CUDA GPU" in proc.stdout + proc.stderr
    assert copy.read_bytes() == before  # the committed outputs are not replaced by one error

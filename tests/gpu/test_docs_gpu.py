"""On a GPU: the README's GPU snippets run as written, and the API finds the GPU where no arch is given."""
import pytest
from doc_snippets import GPU_MARK, ROOT, run, snippets

import cupy_gemm
from cupy_gemm import compile as compile_mod, launch


@pytest.mark.parametrize("code", [p for p in snippets([ROOT / "README.md"]) if p.values[0].startswith(GPU_MARK)])
def test_readme_gpu_snippet_runs(code, tmp_path, monkeypatch):
    import cupy
    monkeypatch.chdir(tmp_path)
    names = run(code)  # every GPU snippet runs as written
    if "d" not in names:
        return  # not the quick start: what the other snippets compute is checked by the API and fp8 suites
    a, b = names["a"], names["b"]
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
    tol = 4 * a.shape[1] * 2.0 ** -24  # float32 rounding over K products, relative to the largest entry
    scale = float(cupy.abs(ref).max())
    # c = a·b (cuBLAS), then d = 2·a·b + 0.5·c and, in place, c = a·b + c
    assert float(cupy.abs(names["d"] - 2.5 * ref).max()) <= 2.5 * tol * scale
    assert float(cupy.abs(names["c"] - 2 * ref).max()) <= 2 * tol * scale


def test_compile_resources_and_default_variant_use_the_current_gpu():
    import cupy
    cc = launch.compute_capability(cupy.cuda.Device())
    kernel = cupy_gemm.get("sgemm_naive_f32")
    compiled = kernel.compile()
    assert compiled.arch == compile_mod.arch_for(kernel.variant, cc)
    assert kernel.resources().registers == compiled.resources.registers > 0
    for dtype in ("float32", "float16", "bfloat16"):
        assert cupy_gemm.default_variant(dtype) == cupy_gemm.default_variant(dtype, cc)

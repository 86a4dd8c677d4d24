"""Fused epilogue expressions: what is accepted, what is refused before rendering, and that the rendered
function compiles with NVRTC (no GPU needed)."""
import jinja2
import pytest

from cupy_gemm import epilogue, registry, toolkit
from cupy_gemm.epilogue import EpilogueError, build

COMMON = registry.data_dir("templates") / "common"


def _compile(ep):
    context = dict(VARIANT="epilogue_test", FAMILY="test", DTYPE="float16", ACC="float32", LAYOUT="row",
                   T_IN="half", T_OUT="half", T_ACC="float", THREADS=128)
    source = "\n".join(jinja2.Template((COMMON / f).read_text()).render(**context)
                       for f in ("prelude.cuh", "epilogue.cuh"))
    source += "\n" + ep.render() + """
extern "C" __global__ void probe(float* out, int n, EpilogueParams p) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) out[t] = apply_epilogue(out[t], t / 7, t % 7, p);
}
"""
    lib = toolkit.nvrtc()
    headers = toolkit.header_set(False)
    prog = lib.createProgram(source, "epilogue_test.cu", (), ())
    try:
        try:
            lib.compileProgram(prog, ["-arch=sm_80", "-std=c++17", *(f"-I{d}" for d in headers.dirs)])
        except lib.NVRTCError:
            raise AssertionError(lib.getProgramLog(prog) + "\n" + source) from None
    finally:
        lib.destroyProgram(prog)


@pytest.mark.parametrize("name", list(epilogue.BUILTINS))
def test_builtins_compile(name):
    _compile(build(name))


def test_a_user_expression_with_every_kind_of_operand_compiles():
    ep = build("y = x * scale + bias[j]", "gelu_tanh", "y = fminf(x + res[i, j] * rowscale[i], 6.0) ",
               operands={"scale": "scalar", "bias": "col", "res": "full", "rowscale": "row"})
    assert [op.name for op in ep.operands] == ["scale", "bias", "res", "rowscale"]
    assert "6.0f" in ep.steps[2].cuda  # float literals stay single precision
    assert "i * p.op_res_si + j * p.op_res_sj" in ep.steps[2].cuda
    _compile(ep)


def test_the_rendered_text_names_each_step():
    ep = build("relu", "y = x * 2.0f")
    text = ep.render()
    assert "// y = fmaxf(x, 0.0f)" in text and "// y = x * 2.0f" in text
    assert build("relu").render() != build("gelu").render()  # a distinct source, so a distinct cache entry


@pytest.mark.parametrize("step,match", [
    ("y = x; asm(\"trap;\")", "not allowed"),
    ("y = x; y = 0", "not allowed"),
    ("y = x /* comment */", "unknown name|not allowed"),
    ("y = { x }", "not allowed"),
    ("#include <x>", "neither a built-in"),
    ("x = 2 * x", "neither a built-in"),
    ("y = x += 1", "not allowed"),
    ("y == x", "neither a built-in"),
    ("y = __syncthreads()", "unknown name"),
    ("y = printf(x)", "unknown name"),
    ("y = expf", "call it"),
    ("y = (x + 1", "unbalanced"),
    ("y = x + 1)", "unbalanced"),
    ("y = x[0]", "only declared operands"),
    ("y = ", "empty"),
    ("y = x * bais[j]", "did you mean 'bias'"),
    ("gleu", "did you mean 'gelu'"),
    ("y = x + bias[i]", r"bias\[j\]"),
    ("y = x + bias", r"bias\[j\]"),
    ("y = x + s[i]", "is a scalar"),
    ("y = x + res[j, i]", r"res\[i, j\]"),
])
def test_refused_before_rendering(step, match):
    operands = {"bias": "col", "res": "full", "s": "scalar"}
    used = " + bias[j] + res[i, j] + s"
    with pytest.raises(EpilogueError, match=match):
        build(step, "y = x" + used, operands=operands)


@pytest.mark.parametrize("operands,match", [
    ({"x": "row"}, "taken"), ({"expf": "col"}, "taken"), ({"1a": "row"}, "identifier"),
    ({"__b": "row"}, "identifier"), ({"b": "diag"}, "not one of"), ({"b": "row"}, "never read"),
])
def test_bad_operand_declarations(operands, match):
    with pytest.raises(EpilogueError, match=match):
        build("relu", operands=operands)


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        build()


def test_operand_names_cannot_collide_with_cuda():
    _compile(build("y = x + half[j] * int", operands={"half": "col", "int": "scalar"}))

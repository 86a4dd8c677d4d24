"""matmul's epilogue keywords turned into one Epilogue (no GPU needed): the order of bias, activation and
steps, operand kinds read from their use, one parse per text, and the errors before anything runs."""
import numpy as np
import pytest

from cupy_gemm import api
from cupy_gemm.epilogue import EpilogueError, kinds_from_use


def test_bias_then_activation_then_steps():
    ep, values = api.fused_epilogue("y = x * s", {"s": 2.0}, bias="B", activation="silu")
    assert [s.expression for s in ep.steps][0] == "x + bias[j]"
    assert "expf" in ep.steps[1].cuda and ep.steps[2].expression == "x * s"
    assert values == {"s": 2.0, "bias": "B"}
    assert {op.name: op.kind for op in ep.operands} == {"bias": "col", "s": "scalar"}


def test_no_epilogue():
    assert api.fused_epilogue() == (None, None)


def test_the_same_text_parses_once():
    first, _ = api.fused_epilogue(["relu", "y = x + r[i]"], {"r": np.zeros(3, np.float32)})
    second, _ = api.fused_epilogue(["relu", "y = x + r[i]"], {"r": np.zeros(4, np.float32)})
    assert first is second


@pytest.mark.parametrize("steps, operands, match", [
    ("y = x + bias", {"bias": np.zeros(2, np.float32)}, "read it as"),
    ("y = x + r[i] + r[j]", {"r": np.zeros(2, np.float32)}, "one way only"),
    ("y = x", {"r": np.zeros(2, np.float32)}, "never read"),
    (None, {"r": np.zeros(2, np.float32)}, "without an epilogue"),
    ("y = x + bias[j]", {"bias": 1.0}, "is a scalar"),
    ("y = x + bias", {"bias": 1.0, "nope": 2.0}, "never read"),
])
def test_errors(steps, operands, match):
    with pytest.raises(EpilogueError, match=match):
        api.fused_epilogue(steps, operands)


def test_bias_twice_and_unknown_activation():
    with pytest.raises(EpilogueError, match="rename"):
        api.fused_epilogue(None, {"bias": np.zeros(2, np.float32)}, bias=np.zeros(2, np.float32))
    with pytest.raises(EpilogueError, match="one of"):
        api.fused_epilogue(activation="swish")


def test_kinds_from_use():
    kinds = kinds_from_use(["y = x * s[ i ] + t[i, j] + u[j]", "gelu"],
                           {"s": np.zeros(1, np.float32), "t": np.zeros(1, np.float32), "u": np.zeros(1, np.float32), "k": np.float32(2)})
    assert kinds == {"s": "row", "t": "full", "u": "col", "k": "scalar"}


def test_scales_bias_activation_clamp_then_steps():
    rows, cols, bias = np.zeros(3, np.float32), np.zeros(4, np.float16), np.zeros(4, np.float32)
    ep, values = api.fused_epilogue("y = x * s", {"s": 2.0}, bias=bias, activation="relu", row_scale=rows,
                                    col_scale=cols, clamp=(-1, 6.5))
    assert [s.expression for s in ep.steps] == ["x * row_scale[i]", "x * col_scale[j]", "x + bias[j]",
                                                "fmaxf(x, 0.0f)", "fminf(fmaxf(x, clamp_lo), clamp_hi)", "x * s"]
    assert {op.name: (op.kind, op.dtype) for op in ep.operands} == {
        "row_scale": ("row", "float32"), "col_scale": ("col", "float16"), "bias": ("col", "float32"),
        "clamp_lo": ("scalar", "float32"), "clamp_hi": ("scalar", "float32"), "s": ("scalar", "float32")}
    assert values["clamp_lo"] == -1.0 and values["clamp_hi"] == 6.5 and values["row_scale"] is rows


def test_clamp_bounds_are_operands_not_source():
    """Other bounds reuse the Epilogue, and so the compiled kernel; a missing bound drops its side."""
    first, values = api.fused_epilogue(clamp=(0.0, 1.0))
    second, other = api.fused_epilogue(clamp=(np.float32(-3), 3))
    assert first is second and (other["clamp_lo"], other["clamp_hi"]) == (-3.0, 3.0)
    assert "clamp_lo" in first.render() and "3.0" not in first.render()
    low, values = api.fused_epilogue(clamp=(0, None))
    assert [s.expression for s in low.steps] == ["fmaxf(x, clamp_lo)"] and set(values) == {"clamp_lo"}
    high, values = api.fused_epilogue(clamp=(None, 2))
    assert [s.expression for s in high.steps] == ["fminf(x, clamp_hi)"] and set(values) == {"clamp_hi"}
    assert api.fused_epilogue(clamp=(None, None)) == (None, None)


@pytest.mark.parametrize("keywords, name", [
    ({"row_scale": np.zeros(2, np.float32)}, "row_scale"), ({"col_scale": np.zeros(2, np.float32)}, "col_scale"),
    ({"clamp": (0, 1)}, "clamp_lo"), ({"clamp": (None, 1)}, "clamp_hi"), ({"clamp": (0, 1)}, "clamp_hi")])
def test_a_keyword_and_operands_naming_the_same_operand(keywords, name):
    with pytest.raises(EpilogueError, match=f"names '{name}' too: rename one"):
        api.fused_epilogue(f"y = x + {name}", {name: 1.0}, **keywords)


@pytest.mark.parametrize("clamp, match", [
    (1.0, "a pair"), ((0, 1, 2), "a pair"), ("ab", "a pair"), ((np.zeros(2), 1), "lo must be a number"),
    ((0, "1"), "hi must be a number"), ((2, 1), "lo must be at most hi"), ((True, 1), "lo must be a number")])
def test_clamp_errors(clamp, match):
    with pytest.raises(EpilogueError, match=match):
        api.fused_epilogue(clamp=clamp)

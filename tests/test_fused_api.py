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

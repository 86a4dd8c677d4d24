"""Layout decisions that need no GPU."""
import numpy as np
import pytest

from cupy_gemm import operands
from cupy_gemm.errors import DTypeError


@pytest.mark.parametrize("shape,strides,order,expected", [
    ((4, 5), (20, 4), "row", 5),      # C-contiguous float32
    ((4, 5), (40, 4), "row", 10),     # row slice of a wider matrix: zero-copy
    ((4, 5), (4, 16), "row", None),   # Fortran order is not row-major
    ((4, 5), (4, 16), "col", 4),      # ... but is column-major
    ((4, 5), (8, 16), "col", None),   # step 2 along rows
    ((1, 5), (999, 4), "row", 5),     # a single row takes any row stride
    ((4, 1), (4, 4), "row", 1),       # a single column: unit inner stride not needed
    ((4, 5), (-20, 4), "row", None),  # reversed rows
])
def test_leading_dim(shape, strides, order, expected):
    assert operands.leading_dim(shape, strides, 4, order) == expected


def test_numpy_input_says_how_to_convert():
    with pytest.raises(DTypeError, match=r"cupy.asarray\(a\)"):
        operands.check(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), None, None, 0.0)

"""Checks shared by the family tests: a rule names its parameter, and the template repeats it; where a
call's operands lie, for the dispatch's B-layout rule."""
import re

import pytest

from cupy_gemm import registry
from cupy_gemm.arrange import Placement, fresh
from cupy_gemm.compile import compile_variant
from cupy_gemm.errors import CompileError, ConfigError
from cupy_gemm.registry import Variant, make_variant


def template_text(file_name: str) -> str:
    """A template with adjacent string literals joined, so static_assert messages read as one string."""
    return re.sub(r'"\s*\n\s*"', "", (registry.data_dir("templates") / file_name).read_text())


def check_rule(family, dtype, params, param, words, template, acc=None):
    with pytest.raises(ConfigError, match=re.escape(words)) as info:
        make_variant(family, "bad", dtype, params, acc)
    assert info.value.param == param
    assert words in template  # the static_assert repeats the rule's words


def check_template_refuses(family, dtype, acc, params, words, arch="sm_80"):
    bad = Variant("bad", family, dtype, acc, family.complete(params))  # past the Python check
    with pytest.raises(CompileError, match=re.escape(words)):
        compile_variant(bad, arch)


def b_placement(m, n, k, b_order, size=4):
    """Fresh operands of `size`-byte elements, B row-major (K×N) or column-major (the transpose of N×K)."""
    b = fresh((k, n), size) if b_order == "row" else fresh((n, k), size).T
    return Placement(fresh((m, k), size), b, fresh((m, n), size))

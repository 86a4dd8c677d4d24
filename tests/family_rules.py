"""Checks shared by the family tests: a rule names its parameter, and the template repeats it."""
import re

import pytest

from cupy_gemm import registry
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

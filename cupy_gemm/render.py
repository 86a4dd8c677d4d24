"""Jinja2 → one self-contained CUDA source per variant.

Shared device helpers in templates/common/ are pulled in with `{% include %}`, so the rendered text is
everything the kernel depends on besides the toolkit headers: users can `show` it, paste it, compile it,
and the compile cache keys on it.
"""
from __future__ import annotations

from functools import lru_cache

import jinja2

from .families.base import ACC_TYPES, CUDA_TYPES
from .registry import Variant, data_dir

KERNEL_NAME = "gemm_kernel"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,  # a missing parameter is an error, never an empty string
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def context(variant: Variant) -> dict:
    fam = variant.family
    return {
        **variant.params,
        "VARIANT": variant.name,
        "FAMILY": fam.name,
        "DTYPE": variant.dtype,
        "ACC": variant.acc,
        "T_IN": CUDA_TYPES[variant.dtype][0],
        "T_OUT": CUDA_TYPES[variant.out_dtype or variant.dtype][0],  # C's type: T_IN unless the call converts
        "T_ACC": ACC_TYPES[variant.acc],
        "THREADS": fam.threads(variant.params),
        "SMEM_BYTES": fam.smem_bytes(variant.params, variant.dtype, variant.acc),
        "LAYOUT": fam.layout,
        "B_LAYOUT": fam.b_layout or fam.layout,
        "BATCHED": int(variant.batched),  # templates/common/batch.cuh
        "SPLIT_ATOMIC": int(variant.split_atomic),  # templates/common/split_k.cuh
        "UNALIGNED_C": int(variant.unaligned_c),  # C at any leading dimension and address (Family.unaligned_c)
        "EPILOGUE": variant.epilogue.render() if variant.epilogue is not None else "",  # struct + apply_epilogue
    }


def render(variant: Variant) -> str:
    return _environment().get_template(variant.family.template).render(**context(variant))


def render_file(template: str, **values) -> str:
    """A template that is not a GEMM family's (e.g. a helper kernel), with the given values."""
    return _environment().get_template(template).render(**values)

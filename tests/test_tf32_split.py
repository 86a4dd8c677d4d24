"""The 3xTF32 split's integer rounding (templates/common/tf32_split.cuh) on the CPU: a NumPy model of its
two formulas against an independent round-to-nearest, ties-away rounding to tf32 in float64, on random bit
patterns over the whole float32 range; NaN kept by the small part's rounding; and the split's 2^-22 bound.
(tests/gpu/test_3xtf32_gpu.py compares the device's bits with cvt.rna.tf32.f32.)"""
import re

import numpy as np

from family_rules import template_text

SOURCE = template_text("common/tf32_split.cuh")


def _body(name):
    return re.search(rf"unsigned {name}\(float x\) \{{\s*return (.*?);\s*\}}", SOURCE, re.S).group(1)


def round_tf32(bits):  # the template's formula, uint32 arithmetic wrapping as on the device
    return (bits + np.uint32(0x1000)) & np.uint32(0xffffe000)


def round_tf32_keep_nan(bits):
    clamped = np.minimum(bits.view(np.int32), np.int32(0x7fffefff)).view(np.uint32)
    return (clamped + np.uint32(0x1000)) & np.uint32(0xffffe000)


def test_the_model_is_the_templates_formula():
    assert _body("round_tf32") == "(__float_as_uint(x) + 0x1000u) & 0xffffe000u"
    assert _body("round_tf32_keep_nan") == "(unsigned)(min((int)__float_as_uint(x), 0x7fffefff) + 0x1000) & 0xffffe000u"


def reference(x):
    """Round float32 x to 10 stored mantissa bits, to nearest with ties away from zero, in float64."""
    x64 = np.abs(x.astype(np.float64))
    _, e = np.frexp(x64)  # x64 = f · 2^e, f in [0.5, 1)
    unit = np.ldexp(1.0, np.maximum(e - 11, -136))  # a tf32 unit (10 bits below the leading one; subnormals: 2^-136)
    r = np.floor(x64 / unit + 0.5) * unit
    r = np.where(r > np.finfo(np.float32).max, np.inf, r)  # the carry past the largest float
    return (np.copysign(r, x.astype(np.float64))).astype(np.float32)


def test_finite_inputs_round_to_nearest_ties_away():
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    low = rng.integers(0, 2**19, size=4096, dtype=np.uint64).astype(np.uint32) << np.uint32(13)
    bits = np.concatenate([bits, low | np.uint32(0x1000), low | np.uint32(0x0fff), low | np.uint32(0x8000_1000),
                           np.array([0, 0x80000000, 1, 0x1000, 0x7f7fffff, 0xff7fffff, 0x7f7ff000], np.uint32)])
    x = bits.view(np.float32)
    finite = np.isfinite(x)
    ours = round_tf32(bits[finite]).view(np.float32)
    assert np.array_equal(ours, reference(x[finite]))
    assert np.array_equal(round_tf32_keep_nan(bits[finite]), round_tf32(bits[finite]))  # the clamp changes no finite


def test_the_small_part_keeps_nan_and_the_split_holds_x():
    canonical = np.array([0x7fffffff], np.uint32)  # what an fp32 add returns for NaN operands
    assert np.isnan(round_tf32_keep_nan(canonical).view(np.float32)).all()
    assert round_tf32(canonical)[0] == 0x80000000  # unclamped, the carry wraps it into -0
    inf = np.array([0x7f800000, 0xff800000], np.uint32)
    assert np.array_equal(round_tf32(inf), inf)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(1 << 16) * 10.0 ** rng.uniform(-30, 30, 1 << 16)).astype(np.float32)
    big = round_tf32(x.view(np.uint32)).view(np.float32)
    small = round_tf32_keep_nan((x - big).view(np.uint32)).view(np.float32)
    assert not (small.view(np.uint32) & np.uint32(0x1fff)).any()  # both parts are tf32 bit patterns
    err = np.abs(big.astype(np.float64) + small.astype(np.float64) - x.astype(np.float64))
    assert (err <= 2.0 ** -22 * np.abs(x.astype(np.float64))).all()

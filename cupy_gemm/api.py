"""The Python API on CuPy arrays: matmul, gemm, plan, get, variants, render."""
from __future__ import annotations

import numpy as np

from . import compile as _compile
from . import config, launch, operands, registry
from .errors import ConfigError, DeviceError, DTypeError, InputError, UnknownVariantError
from .registry import Variant
from .render import render as _render_variant

CUBLAS = "cublas"
AUTO = "auto"

# Preference order per dtype: the first entry in the catalogue that runs on the current GPU is the
# default. float32 stays exact (CUDA cores) unless CUPY_TF32=1, as with cupy.matmul; float16 and
# bfloat16 accumulate in float32.
DEFAULTS = {
    "float32": ("sgemm_t_16x8_sliced_k8_f32x4_bcf_dbuf_offset_swizzle", "sgemm_t_8x16_sliced_k8_f32x4_bcf_dbuf_swizzle",
                "sgemm_t_8x8_sliced_k16_f32x4_bcf_dbuf", "sgemm_sliced_k_f32"),
    "tf32": ("sgemm_wgmma_m64n256k8_tf32_stages3_ws2", "sgemm_mma_m16n8k8_tf32_mma2x4_warp4x4x4_stages3_swizzle",
             "sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages3_dsmem", "sgemm_sliced_k_f32"),
    "float16": ("hgemm_wgmma_m64n256k16_stages3_ws2", "hgemm_wgmma_m64n256k16_stages4_ws2",
                "hgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32",
                "hgemm_wmma_m16n16k16_mma4x2_warp2x4_stages3_dsmem_acc32", "hgemm_sliced_k_f16_acc32"),
    "bfloat16": ("bgemm_wgmma_m64n256k16_stages4_ws2", "bgemm_mma_m16n8k16_mma2x4_warp4x8x4_stages3_swizzle_acc32",
                 "bgemm_sliced_k_bf16"),
    # precision="3xtf32" only (never a default): fp32 split into two tf32 parts, three tensor-core products
    "3xtf32": ("sgemm_wgmma_3xtf32_m64n128k8_tile128x128_stages4_ws2",),
}
# float32's `precision` argument -> the DEFAULTS key it selects, which is also the `acc` of the variants
# listed there; None keeps the rule above (CUPY_TF32)
PRECISIONS = {"fp32": "float32", "tf32": "tf32", "3xtf32": "3xtf32"}


class Kernel:
    """A catalogue variant (or any valid parameter set of a family), ready to render, compile and run."""

    def __init__(self, variant: Variant):
        self.variant = variant

    name = property(lambda self: self.variant.name)
    family = property(lambda self: self.variant.family.name)
    params = property(lambda self: dict(self.variant.params))
    dtype = property(lambda self: self.variant.dtype)
    acc = property(lambda self: self.variant.acc)
    notes = property(lambda self: self.variant.notes)

    @property
    def source(self) -> str:
        return _render_variant(self.variant)

    def launch_config(self, m: int, n: int, k: int, sm_count: int | None = None) -> launch.LaunchConfig:
        return launch.launch_config(self.variant, m, n, k, sm_count)

    def compile(self, arch: str | None = None) -> _compile.Compiled:
        """Compile for `arch` (no GPU needed), or for the current GPU when arch is None."""
        if arch is None:
            import cupy
            arch = _compile.arch_for(self.variant, launch.compute_capability(cupy.cuda.Device()))
        return _compile.compile_variant(self.variant, arch)

    def resources(self, arch: str | None = None) -> _compile.Resources:
        """Registers, static shared and local (spill) bytes, from ptxas."""
        return self.compile(arch).resources

    def __call__(self, a, b, *, out=None):
        return matmul(a, b, variant=self.variant, out=out)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.variant.params.items())
        return f"<Kernel {self.name} ({self.family}, {self.dtype}/{self.acc}: {params})>"


def get(name: str) -> Kernel:
    return Kernel(registry.lookup(name))


def variants(dtype=None, family: str | None = None) -> list[str]:
    """Names of the catalogue's variants, optionally for one input dtype and/or family."""
    dtype = None if dtype is None else np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if family is not None:
        registry.family(family)  # unknown family: raise with suggestions
    return [v.name for v in registry.catalogue().values()
            if (dtype is None or v.dtype == dtype) and (family is None or v.family.name == family)]


def render(name_or_family: str, dtype: str | None = None, acc: str | None = None, **params) -> str:
    """Rendered CUDA source of a catalogue variant (parameters override its own), or of a family with
    the given parameters (defaults for the rest)."""
    cat = registry.catalogue()
    if name_or_family in cat:
        base = cat[name_or_family]
        variant = registry.make_variant(base.family, base.name, dtype or base.dtype, {**base.params, **params},
                                        acc or (base.acc if dtype in (None, base.dtype) else None))
    elif name_or_family in registry.families():
        fam = registry.family(name_or_family)
        variant = registry.make_variant(fam, f"{fam.name}_custom", dtype or next(iter(fam.dtypes)), params, acc)
    else:
        raise UnknownVariantError(name_or_family, list(cat) + list(registry.families()), kind="variant or family")
    return _render_variant(variant)


def defaults_key(dtype: str, precision: str | None = None) -> str:
    """The DEFAULTS entry for inputs of `dtype` computed at `precision` ("fp32", "tf32", "3xtf32", or None
    for the dtype's own rule). Raises before anything launches when the pair makes no sense."""
    if precision is not None:
        if not isinstance(precision, str) or precision not in PRECISIONS:
            raise ConfigError("precision", precision, f"one of {', '.join(map(repr, PRECISIONS))} or None "
                              f"(the default: exact fp32, or TF32 with CUPY_TF32=1)")
        if dtype != "float32":
            raise DTypeError(f"precision={precision!r} applies to float32 inputs only; got {dtype} (leave "
                             f"precision=None: {dtype} runs on tensor cores with float32 accumulation)")
        return PRECISIONS[precision]
    return "tf32" if dtype == "float32" and config.allow_tf32() else dtype


def default_variant(dtype, cc: int | None = None, precision: str | None = None) -> str:
    """The dtype's default variant at `precision` (see defaults_key) for a GPU of compute capability cc
    (the current GPU when None)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    key = defaults_key(name, precision)
    if key not in DEFAULTS:
        raise DTypeError(f"no kernels for dtype {name}; cupy-gemm multiplies float32, float16 and bfloat16")
    if cc is None:
        import cupy
        cc = launch.compute_capability(cupy.cuda.Device())
    cat = registry.catalogue()
    for candidate in DEFAULTS[key]:
        v = cat.get(candidate)
        if v is not None and _runs_on(v, cc):
            return candidate
    if precision == "3xtf32":
        raise DeviceError(f"precision='3xtf32' needs a Hopper GPU (compute capability 9.0, sm_90a: wgmma); "
                          f"this one is {cc // 10}.{cc % 10}. Use precision='fp32' for exact fp32")
    raise DTypeError(f"no variant in the catalogue serves {name} on compute capability {cc}")


def _runs_on(v: Variant, cc: int) -> bool:
    fam = v.family
    return cc >= fam.min_cc(v.params, v.dtype, v.acc) and (not fam.needs_sm90a or cc == 90)


def _resolve_variant(variant, problem: operands.Problem, precision: str | None = None) -> Variant | str:
    import cupy
    if precision is not None and variant not in (None, AUTO):
        raise InputError(f"give either variant= or precision=, not both (got variant={variant!r}, "
                         f"precision={precision!r}): a variant fixes its own precision")
    if isinstance(variant, Kernel):
        variant = variant.variant
    if variant is None or variant == AUTO:
        cc = launch.compute_capability(cupy.cuda.Device(problem.device_id))
        name = None
        if variant == AUTO:
            from . import tuning
            acc = None if precision is None else PRECISIONS[precision]
            name = tuning.lookup_variant(cupy.cuda.Device(problem.device_id), problem.dtype.name, acc, "row",
                                         problem.m, problem.n, problem.k)
        variant = name or default_variant(problem.dtype, cc, precision)
    if isinstance(variant, str):
        if variant == CUBLAS:
            return CUBLAS
        variant = registry.lookup(variant)
    if not isinstance(variant, Variant):
        raise TypeError(f"variant must be a name, a Kernel, a Variant or None; got {type(variant).__name__}")
    if variant.dtype != problem.dtype.name:
        same = variants(problem.dtype.name)
        raise DTypeError(f"variant {variant.name!r} takes {variant.dtype} inputs, not {problem.dtype.name}; "
                         f"{problem.dtype.name} variants include {', '.join(same[:5])}"
                         f"{', …' if len(same) > 5 else ''} (variant=None picks the default)")
    return variant


class Plan:
    """A checked call with everything decided: calling it launches (and copies where a layout needs it).
    Timing a plan measures the kernel plus only the copies that call really needs."""

    def __init__(self, a, b, c=None, *, alpha=1.0, beta=0.0, variant=None, out=None, precision=None):
        import cupy
        self.problem = operands.check(a, b, c, out, beta)
        if precision is not None:
            defaults_key(self.problem.dtype.name, precision)  # a bad precision raises before anything else
        self.variant = _resolve_variant(variant, self.problem, precision)
        self.device = cupy.cuda.Device(self.problem.device_id)
        m, n = self.problem.m, self.problem.n
        if out is None:
            with self.device:
                out = cupy.empty((m, n), dtype=self.problem.dtype)
        self.a, self.b, self.c, self.out = a, b, c, out
        self.alpha, self.beta = float(alpha), float(beta)
        self._fixed_launch = None  # when no operand needs copying, the prepared launch is reused
        if self.variant != CUBLAS:
            with self.device:  # compile and load now: errors surface here, not in the first timed call
                launch.load(self.variant, self.device)

    def __call__(self):
        a, b, c, out, alpha, beta = self.a, self.b, self.c, self.out, self.alpha, self.beta
        with self.device:
            if beta != 0 and c is not None and c is not out and not operands.same_view(c, out):
                out[...] = c
            elif beta != 0 and c is None:
                beta = 0.0  # BLAS: no C given means C = 0
            if self.problem.k == 0 or self.problem.m == 0 or self.problem.n == 0:
                if beta == 0:
                    out.fill(0)
                else:
                    out *= out.dtype.type(beta)
                return out
            if self.variant == CUBLAS:
                return _cublas(a, b, out, alpha, beta)
            if self._fixed_launch is not None and self._fixed_launch[0] == beta:
                self._fixed_launch[1]()
                return out
            fam = self.variant.family
            ops = operands.resolve(a, b, out, fam.layout, fam.align(self.variant.params, self.variant.dtype),
                                   fam.b_layout)
            run = launch.prepare(self.variant, self.device, ops.A, ops.B, ops.C, ops.m, ops.n, ops.k,
                                 ops.lda, ops.ldb, ops.ldc, alpha, beta)
            run()
            if ops.copy_back is not None:
                dest, src = ops.copy_back
                dest[...] = src
            if ops.zero_copy:
                self._fixed_launch = (beta, run)
        return out


def _cublas(a, b, out, alpha, beta):
    import cupy
    if alpha == 1 and beta == 0:
        return cupy.matmul(a, b, out=out)
    prod = cupy.matmul(a, b)
    if beta == 0:
        cupy.multiply(prod, out.dtype.type(alpha), out=out)
    else:
        out[...] = (prod.astype(np.float32) * alpha + out.astype(np.float32) * beta).astype(out.dtype)
    return out


def plan(a, b, c=None, *, alpha=1.0, beta=0.0, variant=None, out=None, precision=None) -> Plan:
    return Plan(a, b, c, alpha=alpha, beta=beta, variant=variant, out=out, precision=precision)


def matmul(a, b, *, variant=None, out=None, precision=None):
    """a @ b for 2-D CuPy arrays, like cupy.matmul. variant: a catalogue name, "cublas", "auto", a
    Kernel, or None for the dtype's default. precision (float32 inputs, with variant None or "auto"):
    "fp32" exact on CUDA cores, "tf32" TF32 tensor cores, "3xtf32" about fp32 accuracy on tensor cores
    (Hopper); None: "fp32", or "tf32" with CUPY_TF32=1."""
    return Plan(a, b, variant=variant, out=out, precision=precision)()


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, variant=None, out=None, precision=None):
    """BLAS semantics: alpha·a·b + beta·c. The result goes to `out` (c itself for an in-place update,
    out=c), or to a new array; c is read only when beta != 0. precision: as for matmul."""
    return Plan(a, b, c, alpha=alpha, beta=beta, variant=variant, out=out, precision=precision)()

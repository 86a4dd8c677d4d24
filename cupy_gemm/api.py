"""The Python API on CuPy arrays: matmul, gemm, plan, get, variants, render."""
from __future__ import annotations

import numpy as np

from functools import lru_cache, partial

from . import batched, devices, dispatch, launch, operands, prepared, registry, tuning
from . import compile as _compile
from . import epilogue as _epilogue
from .errors import DeviceError, DTypeError, InputError, UnknownVariantError
from .operands import deterministic_flag
from .registry import Variant
from .render import render as _render_variant

CUBLAS = prepared.CUBLAS
AUTO = "auto"

# The big-tile preference order per dtype key (float32, tf32 under CUPY_TF32=1, float16, bfloat16), from
# kernels/dispatch/candidates.toml: the first entry that runs on the GPU serves every shape that neither a
# dispatch table nor another heuristic rule claims (cupy_gemm/dispatch.py). float32 stays exact (CUDA
# cores) unless CUPY_TF32=1, as with cupy.matmul; float16 and bfloat16 accumulate in float32.
DEFAULTS = dispatch.candidates()["default"]
PRECISIONS = dispatch.PRECISIONS  # float32's `precision` argument -> the dispatch key it selects


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
            arch = _compile.arch_for(self.variant, _current_cc("pass arch= (e.g. 'sm_90') to compile without one"))
        return _compile.compile_variant(self.variant, arch)

    def resources(self, arch: str | None = None) -> _compile.Resources:
        """Registers, static shared and local (spill) bytes, from ptxas, for `arch` (no GPU needed) or for
        the current GPU when arch is None."""
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
        params = base.family.canonical(params)  # an old parameter name overrides the entry's value too
        variant = registry.make_variant(base.family, base.name, dtype or base.dtype, {**base.params, **params},
                                        acc or (base.acc if dtype in (None, base.dtype) else None))
    elif name_or_family in registry.families():
        fam = registry.family(name_or_family)
        variant = registry.make_variant(fam, f"{fam.name}_custom", dtype or next(iter(fam.dtypes)), params, acc)
    else:
        raise UnknownVariantError(name_or_family, list(cat) + list(registry.families()), kind="variant or family")
    return _render_variant(variant)


defaults_key = dispatch.defaults_key
_out_dtype_name = operands.out_dtype_name  # gemm's `operands` argument hides the module there


def _check_3xtf32(key: str, cc: int) -> None:
    if key == "3xtf32" and cc != 90:
        raise DeviceError(f"precision='3xtf32' needs a Hopper GPU (compute capability 9.0, sm_90a: wgmma); "
                          f"this one is {cc // 10}.{cc % 10}. Use precision='fp32' for exact fp32")


def default_variant(dtype, cc: int | None = None, precision: str | None = None) -> str:
    """The dtype's big-tile default at `precision` (see defaults_key) on a GPU of compute capability cc
    (the current GPU when None), whatever the shape; `matmul(variant=None)` refines it per shape
    (dispatch.explain says how)."""
    key = defaults_key(dtype if isinstance(dtype, str) else np.dtype(dtype).name, precision)
    if cc is None:
        cc = _current_cc("pass cc= (e.g. 90 for an H100) to choose without one")
    _check_3xtf32(key, cc)
    return dispatch.first_default(key, cc)


def _current_cc(way_out: str) -> int:
    """The current GPU's compute capability, or a DeviceError saying there is none and what to do instead."""
    import cupy
    try:
        return launch.compute_capability(cupy.cuda.Device())
    except cupy.cuda.runtime.CUDARuntimeError as e:
        raise DeviceError(f"no CUDA GPU found ({devices.cuda_reason(e)}); {way_out}") from None


def _tuned_variant(problem: operands.Problem, acc: str | None = None, needs=()) -> Variant | None:
    """The user's tuning database's answer for this problem (variant="auto"), or None: also when its
    family lacks one of `needs` (Family flags), so that the default among those that have them serves.
    Entries tuned with B column-major (x @ W.T) answer calls whose B lies so, the others the rest."""
    import cupy
    layout = problem.placement.b_layout if problem.placement is not None else "row"
    tuned = tuning.lookup_variant(cupy.cuda.Device(problem.device_id), problem.dtype.name, acc, layout,
                                  problem.m, problem.n, problem.k)
    return tuned if tuned is None or all(getattr(tuned.family, need) for need in needs) else None


def _one_of(variant, precision) -> None:
    """A precision chooses among defaults: with a fixed variant it would mean nothing."""
    if precision is not None and variant is not None and not (isinstance(variant, str) and variant == AUTO):
        raise InputError(f"give either variant= or precision=, not both (got variant={variant!r}, "
                         f"precision={precision!r}): a variant fixes its own precision")


def _resolve_variant(variant, problem: operands.Problem, precision: str | None = None, needs=()) -> Variant | str:
    """needs: Family flags ("batched", "epilogue") the call uses, and "convert" when the problem stores C
    in another dtype; the default is chosen among the entries that have them (a variant the caller names
    is checked later, a tuned one that lacks them gives way to the default)."""
    key = defaults_key(problem.dtype.name, precision)
    needs = tuple(needs) + (("convert",) if problem.out_dtype else ())
    if isinstance(variant, Kernel):
        variant = variant.variant
    if isinstance(variant, str) and variant == AUTO:
        variant = _tuned_variant(problem, None if precision is None else PRECISIONS[precision], needs)
    if variant is None:
        gpu = dispatch.gpu_of(problem.device_id)
        _check_3xtf32(key, gpu.cc)
        variant = dispatch.choose(gpu, key, problem.m, problem.n, problem.k, needs=needs,
                                  placement=problem.placement).variant
    if isinstance(variant, str):
        if variant == CUBLAS:
            return CUBLAS
        variant = registry.lookup(variant)
    if not isinstance(variant, Variant):
        raise TypeError(f"variant must be a name, a Kernel, a Variant or None; got {type(variant).__name__}")
    if variant.family.abi == "scaled":
        raise DTypeError(f"variant {variant.name!r} multiplies fp8 operands with scales: call "
                         f"cupy_gemm.scaled_mm, not matmul or gemm")
    if variant.family.abi == "grouped":
        raise InputError(f"variant {variant.name!r} runs many products in one launch: call "
                         f"cupy_gemm.grouped_matmul, not matmul or gemm")
    if variant.dtype != problem.dtype.name:
        same = variants(problem.dtype.name)
        raise DTypeError(f"variant {variant.name!r} takes {variant.dtype} inputs, not {problem.dtype.name}; "
                         f"{problem.dtype.name} variants include {', '.join(same[:5])}"
                         f"{', …' if len(same) > 5 else ''} (variant=None picks the default)")
    if problem.out_dtype and not variant.family.convert:
        converting = sorted(name for name, fam in registry.families().items() if fam.convert)
        raise DTypeError(f"variant {variant.name!r} (family {variant.family.name}) stores C as {variant.dtype}, "
                         f"its inputs' dtype; out_dtype={problem.out_dtype!r} needs a family that converts in "
                         f"its store ({', '.join(converting)}), or variant=None")
    return variant


class Plan:
    """A checked call with everything decided: calling it launches (and copies where a layout needs it).
    Timing a plan measures the kernel plus only the copies that call really needs."""

    def __init__(self, a, b, c=None, *, alpha=1.0, beta=0.0, variant=None, out=None, precision=None,
                 out_dtype=None, deterministic=True):
        _one_of(variant, precision)
        deterministic = deterministic_flag(deterministic)
        self.problem = operands.check(a, b, c, out, beta, operands.out_dtype_name(out_dtype))
        self.variant = _resolve_variant(variant, self.problem, precision)
        self.device = prepared.device_of(self.problem.device_id)
        if out is None:
            with self.device:
                out = prepared.allocate((self.problem.m, self.problem.n), self.problem.out_dtype or self.problem.dtype)
        self.a, self.b, self.c, self.out = a, b, c, out
        self.alpha, self.beta = float(alpha), float(beta)
        self._prepared = prepared.Prepared(self.variant, self.problem, self.device, self.alpha, self.beta,
                                           c is not None, deterministic=deterministic)
        if self.variant != CUBLAS:  # a few-rows kernel refuses a larger product before compiling
            operands.swap_for_rows(self.problem.m, self.problem.n, self.variant.max_rows(), where=self.variant.name)
            with self.device:  # compile and load now: errors surface here, not in the first timed call
                launch.load(self.variant.with_extras(out_dtype=self.problem.out_dtype), self.device)

    def __call__(self):
        with self.device:
            return self._prepared.run(self.a, self.b, self.c, self.out)


def plan(a, b, c=None, *, alpha=1.0, beta=0.0, variant=None, out=None, precision=None, out_dtype=None,
         deterministic=True) -> Plan:
    return Plan(a, b, c, alpha=alpha, beta=beta, variant=variant, out=out, precision=precision, out_dtype=out_dtype,
                deterministic=deterministic)


def _given(variant, a, b, c, out, beta, precision=None, out_dtype=None):
    """A variant argument as the cache of prepared launches takes it: None, a name or a Variant."""
    if isinstance(variant, Kernel):
        return variant.variant
    if isinstance(variant, str) and variant == AUTO:
        # the tuning database may change between calls: ask it every time (it memoises), cache the rest
        problem = operands.check(a, b, c, out, beta, out_dtype)
        return _tuned_variant(problem, None if precision is None else PRECISIONS.get(precision),
                              ("convert",) if problem.out_dtype else ())
    return variant


def matmul(a, b, *, variant=None, out=None, out_dtype=None, precision=None, epilogue=None, operands=None,
           bias=None, activation=None, row_scale=None, col_scale=None, clamp=None, deterministic=True):
    """a @ b for CuPy arrays, like cupy.matmul: 2-D, or N-D with broadcast batch dimensions (and NumPy's
    rules for 1-D operands), a batch running in one launch. variant: a catalogue name, "cublas", "auto", a
    Kernel, or None for the default chosen per GPU and shape (cupy_gemm.dispatch). precision (float32
    inputs, with variant None or "auto"): "fp32" exact on CUDA cores, "tf32" TF32 tensor cores, "3xtf32"
    about fp32 accuracy on tensor cores (Hopper); None: "fp32", or "tf32" with CUPY_TF32=1.

    out_dtype ("float32", "float16", "bfloat16"; None: out's dtype if out is given, else the inputs'):
    the dtype of the result. The fp32 results (after the epilogue) are converted once, in the kernel's
    store; only families that convert serve it (wgmma, wgmma_tf32, wgmma_3xtf32, mma, sgemm_simt and their
    K-major twins: the default picks among them). variant="cublas" computes in the inputs' dtype and
    converts afterwards (a second pass; a 16-bit product is rounded to its dtype first).

    Fused into the kernel's store, in this order: `row_scale` (one value per row, y = x · row_scale[i]),
    `col_scale` (one per column, y = x · col_scale[j]), `bias` (one per column, y = x + bias[j]),
    `activation` ("relu", "gelu", "gelu_tanh", "silu", "sigmoid"), `clamp` ((lo, hi), either None: y =
    fminf(fmaxf(x, lo), hi), the bounds passed as numbers, so other bounds reuse the kernel), then
    `epilogue`: one step or a list, each a built-in name or "y = <expression>" over x (the value so far),
    i, j (row, column) and the arrays or numbers in `operands`, read as name[i] (per row), name[j] (per
    column), name[i, j] (per element) or name (a number); e.g. epilogue="y = x * scale[j] + res[i, j]".
    The expression is checked before anything renders (cupy_gemm/epilogue.py) and compiled into the
    kernel, once per text.

    deterministic (True): a kernel that splits K over several blocks sums their fp32 partials in a fixed
    order, so repeated calls give the same bits. False lets it add them with atomics where that is faster
    (compute capability 9.0, enough splits a tile: cupy_gemm.workspace.atomic_sum): the same accuracy, the
    last bits varying from call to call. Nothing else changes."""
    return gemm(a, b, variant=variant, out=out, out_dtype=out_dtype, precision=precision, epilogue=epilogue,
                operands=operands, bias=bias, activation=activation, row_scale=row_scale, col_scale=col_scale,
                clamp=clamp, deterministic=deterministic)


def gemm(a, b, c=None, *, alpha=1.0, beta=0.0, variant=None, out=None, out_dtype=None, precision=None,
         epilogue=None, operands=None, bias=None, activation=None, row_scale=None, col_scale=None, clamp=None,
         deterministic=True):
    """BLAS semantics: alpha·a·b + beta·c, then the fused epilogue (see matmul). The result goes to `out`
    (c itself for an in-place update, out=c), or to a new array of out_dtype (see matmul); c is read only
    when beta != 0 and has the result's dtype. N-D operands batch as in matmul; c has the result's shape.
    precision and deterministic: as for matmul."""
    ep, values = fused_epilogue(epilogue, operands, bias, activation, row_scale, col_scale, clamp)
    out_dtype = _out_dtype_name(out_dtype)
    if deterministic is not True:
        deterministic = deterministic_flag(deterministic)
    if variant is not None:
        _one_of(variant, precision)
    if getattr(a, "ndim", 2) != 2 or getattr(b, "ndim", 2) != 2:
        decide = partial(_resolve_variant, needs=("batched", "epilogue") if ep else ("batched",))
        return batched.call(a, b, c, out, alpha, beta, variant, decide, precision, ep, values, out_dtype,
                            deterministic)
    if variant is not None:
        variant = _given(variant, a, b, c, out, beta, precision, out_dtype)
    decide = partial(_resolve_variant, needs=("epilogue",)) if ep else _resolve_variant
    return prepared.call(a, b, c, out, alpha, beta, variant, decide, precision, ep, values, out_dtype,
                         deterministic)


def fused_epilogue(steps=None, operands=None, bias=None, activation=None, row_scale=None, col_scale=None,
                   clamp=None):
    """(Epilogue, operand values) for matmul's keyword arguments, or (None, None) without any. The
    built-in keywords become steps in matmul's order, their values operands named after them
    (row_scale, col_scale, bias, clamp_lo, clamp_hi): a name operands= gives too is an EpilogueError."""
    values = dict(operands or {})
    chain = []

    def operand(keyword, name, value):
        if name in values:
            raise _epilogue.EpilogueError(f"{keyword}= is given and operands= names {name!r} too: rename one")
        values[name] = value

    for keyword, value, step in (("row_scale", row_scale, "y = x * row_scale[i]"),
                                 ("col_scale", col_scale, "y = x * col_scale[j]"), ("bias", bias, "y = x + bias[j]")):
        if value is not None:
            operand(keyword, keyword, value)
            chain.append(step)
    if activation is not None:
        if activation not in _epilogue.BUILTINS:
            raise _epilogue.EpilogueError(f"activation {activation!r}: one of {', '.join(_epilogue.BUILTINS)}")
        chain.append(activation)
    lo, hi = _clamp_bounds(clamp)
    if lo is not None or hi is not None:
        for name, value in (("clamp_lo", lo), ("clamp_hi", hi)):
            if value is not None:
                operand("clamp", name, value)
        x = "x" if lo is None else "fmaxf(x, clamp_lo)"
        chain.append(f"y = {x}" if hi is None else f"y = fminf({x}, clamp_hi)")
    if steps is not None:
        chain += [steps] if isinstance(steps, str) else list(steps)
    if not chain:
        if values:
            raise _epilogue.EpilogueError(f"operands= {sorted(values)} given without an epilogue that reads them")
        return None, None
    # what the Epilogue depends on besides the text: which operands are numbers, and the arrays' dtypes
    types = tuple(sorted((name, _epilogue.operand_type(value)) for name, value in values.items()))
    return _built(tuple(chain), types), values


def _clamp_bounds(clamp) -> tuple:
    """clamp= as (lo, hi), each a float or None."""
    if clamp is None:
        return None, None
    if isinstance(clamp, (str, bytes)) or not hasattr(clamp, "__len__") or len(clamp) != 2:
        raise _epilogue.EpilogueError(f"clamp must be a pair (lo, hi), either None; got {clamp!r}")
    for side, value in zip(("lo", "hi"), clamp):
        if value is not None and _epilogue.operand_type(value) != "scalar":
            raise _epilogue.EpilogueError(f"clamp's {side} must be a number or None (passed to the kernel by "
                                          f"value, so other bounds reuse it); got {type(value).__name__}")
    lo, hi = (None if value is None else float(value) for value in clamp)
    if lo is not None and hi is not None and not lo <= hi:
        raise _epilogue.EpilogueError(f"clamp=({lo}, {hi}): lo must be at most hi")
    return lo, hi


@lru_cache(maxsize=256)
def _built(steps: tuple, types: tuple):
    """Parsed once per text and operand types: a repeated call reuses the Epilogue (and so its kernel)."""
    kinds = _epilogue.kinds_from_use(steps, {name: 0.0 if t == "scalar" else None for name, t in types})
    return _epilogue.build(*steps, operands={name: kind if kind == "scalar" else (kind, dict(types)[name])
                                             for name, kind in kinds.items()})

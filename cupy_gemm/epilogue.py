"""Fused epilogues: what happens to each element of C between the accumulator and the store.

An Epilogue is a sequence of steps, each `y = <expression>` in CUDA over
  x        the value so far (alpha·acc + beta·C for the first step, the previous step's y after),
  i, j     the element's row and column in C,
  names    extra operands the caller declares, each read as `name[i]` (one value per row), `name[j]`
           (per column), `name[i, j]` (a whole M×N matrix) or `name` (a scalar, passed by value).
The built-in steps (activations here; bias, row and column scales and clamp, which matmul's keywords
make in api.fused_epilogue) are such expressions too. A user's expression is
checked token by token before anything renders: only x, i, j, the declared names indexed as declared, the
math functions in FUNCTIONS, numbers, operators and parentheses. No statements, no assignment but the
leading `y =`, no comments, strings, braces or preprocessor lines, so nothing escapes the expression.
`render()` gives one __device__ function and the parameter struct it reads; the rendered text is part of
the kernel source, which is the compile cache's key, so each distinct epilogue compiles once.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace

import numpy as np

from .errors import ConfigError

KINDS = ("row", "col", "full", "scalar")  # how an operand is indexed: name[i], name[j], name[i, j], name
FUNCTIONS = frozenset({
    "expf", "logf", "log1pf", "expm1f", "tanhf", "erff", "erfcf", "sqrtf", "rsqrtf", "fabsf", "fminf", "fmaxf",
    "powf", "sinf", "cosf", "floorf", "ceilf", "roundf", "truncf", "copysignf", "fmaf", "normcdff",
    "__fdividef", "one_plus_erff",  # branch-free division (2 ulp) and 1 + erf (templates/common/epilogue.cuh)
})
RESERVED = frozenset({"x", "i", "j", "y"}) | FUNCTIONS

# built-in steps: name -> (expression, operands it needs as {placeholder: kind}). Branch-free on purpose:
# a kernel applies them to many accumulators at once, and erff's, tanhf's and IEEE division's internal
# branches would serialise those elements. gelu_tanh uses 0.5·x·(1 + tanh(u)) = x / (1 + exp(-2u)).
BUILTINS = {
    "relu": ("fmaxf(x, 0.0f)", {}),
    "gelu": ("0.5f * x * one_plus_erff(x * 0.70710678118654752f)", {}),
    "gelu_tanh": ("__fdividef(x, 1.0f + expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)))", {}),
    "silu": ("__fdividef(x, 1.0f + expf(-x))", {}),
    "sigmoid": ("__fdividef(1.0f, 1.0f + expf(-x))", {}),
}

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fF]?)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op>&&|\|\||<=|>=|==|!=|[-+*/%<>!?:(),\[\]])
""", re.X)


class EpilogueError(ConfigError):
    """An epilogue that cannot be rendered: an unknown name, a statement, an operand indexed wrongly."""

    def __init__(self, message: str):
        ValueError.__init__(self, message)


@dataclass(frozen=True)
class Operand:
    name: str
    kind: str  # one of KINDS
    dtype: str = "float32"  # of an array operand: float32, float16 or bfloat16 (part of the source)


@dataclass(frozen=True)
class Step:
    expression: str  # as written by the caller (whitespace normalised)
    cuda: str  # operands rewritten to loads from the parameter struct


@dataclass(frozen=True)
class Epilogue:
    steps: tuple[Step, ...]
    operands: tuple[Operand, ...]
    swapped: bool = False  # the kernel computes Cᵀ = Bᵀ·Aᵀ: its (row, col) is the caller's (j, i)

    def __str__(self) -> str:
        return "; ".join(f"y = {s.expression}" for s in self.steps)

    def transposed(self, swapped: bool = True) -> "Epilogue":
        """The same epilogue for a kernel that computes Cᵀ (the caller's i and j stay as written)."""
        return replace(self, swapped=swapped)

    def fields(self) -> list[tuple[str, str, str]]:
        """(C type, field, NumPy format) of EpilogueParams, in order; render() and pack() share it."""
        out = []
        for op in self.operands:
            if op.kind == "scalar":
                out.append(("float", f"op_{op.name}", "<f4"))
            else:  # an array of op.dtype; strides in elements along i and j
                out += [("const void*", f"op_{op.name}", "<u8"), ("long long", f"op_{op.name}_si", "<i8"),
                        ("long long", f"op_{op.name}_sj", "<i8")]
        # the caller's M and N: a padded kernel's rows and columns past them read the last ones
        return out + [("int", "rows", "<i4"), ("int", "cols", "<i4")]

    def struct_dtype(self) -> np.dtype:
        """EpilogueParams as NumPy lays it out: natural alignment, as the C compiler does."""
        fields = self.fields()
        return np.dtype({"names": [f for _, f, _ in fields], "formats": [t for _, _, t in fields]}, align=True)

    def render(self) -> str:
        """The parameter struct and `apply_epilogue(x, row, col, p)`, for templates/common/epilogue.cuh."""
        fields = [f"    {ctype} {name};" for ctype, name, _ in self.fields()]
        dtype = self.struct_dtype()  # pack() lays the struct out so: the compiler must agree
        # pack() lays the struct out by natural alignment, as the compiler does; the size checks that
        layout = [f"static_assert(sizeof(EpilogueParams) == {self.struct_dtype().itemsize}, "
                  f"\"EpilogueParams as cupy_gemm/epilogue.py packs it\");"]
        i, j = ("col", "row") if self.swapped else ("row", "col")
        body = [f"    x = {s.cuda};  // y = {s.expression}" for s in self.steps]
        return "\n".join(["struct EpilogueParams {", *fields, "};", *layout,
                          "__device__ __forceinline__ float apply_epilogue(float x, int row, int col, "
                          "const EpilogueParams& p) {", f"    const long long i = min({i}, p.rows - 1), j = min({j}, p.cols - 1);", *body,
                          "    return x;", "}"])

    def pack(self, values: dict, m: int, n: int) -> np.ndarray:
        """The EpilogueParams for these operand values (CuPy arrays, or numbers for scalars) of an m×n
        product in the caller's orientation, as a (1,)-array passed by value. Checks shapes and dtypes:
        a row operand has m elements, a column one n, a full one broadcasts to (m, n)."""
        dtype = self.struct_dtype()
        packed = np.zeros(1, dtype)
        packed["rows"], packed["cols"] = max(m, 1), max(n, 1)
        missing = [op.name for op in self.operands if op.name not in values]
        extra = sorted(set(values) - {op.name for op in self.operands})
        if missing or extra:
            raise EpilogueError(f"the epilogue reads {', '.join(op.name for op in self.operands) or 'no operands'}"
                                f"; {'missing ' + ', '.join(missing) if missing else ''}"
                                f"{'; ' if missing and extra else ''}{'not read: ' + ', '.join(extra) if extra else ''}")
        for op in self.operands:
            value = values[op.name]
            if op.kind == "scalar":
                packed[f"op_{op.name}"] = _scalar(op.name, value)
                continue
            si, sj = _strides(op, value, m, n)
            packed[f"op_{op.name}"] = value.data.ptr
            packed[f"op_{op.name}_si"], packed[f"op_{op.name}_sj"] = si, sj
        return packed.view(np.dtype((np.void, dtype.itemsize)))


OPERAND_DTYPES = {"float32": "float", "float16": "half", "bfloat16": "__nv_bfloat16"}  # the CUDA types


def _scalar(name: str, value) -> float:
    if hasattr(value, "shape") and getattr(value, "ndim", 0) == 0 and not isinstance(value, np.generic):
        raise EpilogueError(f"scalar operand {name!r}: pass a Python or NumPy number (a 0-d GPU array would "
                            f"need a synchronising copy)")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise EpilogueError(f"scalar operand {name!r}: a number, not {type(value).__name__}") from None


def _strides(op: Operand, value, m: int, n: int) -> tuple[int, int]:
    """Element strides along the caller's i and j of a row, column or full operand (0: broadcast)."""
    shape = getattr(value, "shape", None)
    dtype = getattr(getattr(value, "dtype", None), "name", None)
    if shape is None or not hasattr(value, "data") or not hasattr(value.data, "ptr"):
        raise EpilogueError(f"operand {op.name!r}: a CuPy array, not {type(value).__name__}")
    if dtype != op.dtype:
        raise EpilogueError(f"operand {op.name!r}: {op.dtype} as declared (the kernel reads that type), not {dtype}")
    step = [s // value.itemsize for s in value.strides]
    if op.kind in ("row", "col"):
        want = m if op.kind == "row" else n
        if len(shape) != 1 or shape[0] not in (want, 1):
            raise EpilogueError(f"{op.kind} operand {op.name!r}: shape ({want},) (one value per "
                                f"{'row' if op.kind == 'row' else 'column'} of the {m}×{n} result), not {shape}")
        stride = 0 if shape[0] == 1 else step[0]
        return (stride, 0) if op.kind == "row" else (0, stride)
    if len(shape) > 2 or any(s not in (w, 1) for s, w in zip(shape[::-1], (n, m))):
        raise EpilogueError(f"full operand {op.name!r}: shape {shape} does not broadcast to the {m}×{n} result")
    full = [1] * (2 - len(shape)) + list(shape)
    step = [0] * (2 - len(step)) + step
    return tuple(0 if size == 1 else st for size, st in zip(full, step))


def build(*steps: str, operands: dict[str, str] | None = None) -> Epilogue:
    """An Epilogue from steps, each a built-in name ("relu", "gelu", …, see BUILTINS) or `y = <expr>`;
    `operands` declares the extra names: {"bias": "col", "res": ("full", "float16"), "scale": "scalar", …}
    (an array's dtype is float32 unless given)."""
    declared = _declare(operands or {})
    parsed = []
    for text in steps:
        if not isinstance(text, str):
            raise EpilogueError(f"an epilogue step is a string, not {type(text).__name__}")
        if text in BUILTINS:
            expression = BUILTINS[text][0]
        else:
            m = re.fullmatch(r"\s*y\s*=(?!=)(.*)", text, re.S)
            if not m:
                hint = difflib.get_close_matches(text, list(BUILTINS), n=1)
                raise EpilogueError(f"epilogue step {text!r}: neither a built-in ({', '.join(BUILTINS)})"
                                    f"{f'; did you mean {hint[0]!r}?' if hint else ''} nor 'y = <expression>'")
            expression = m.group(1)
        parsed.append(Step(" ".join(expression.split()), _translate(expression, declared)))
    if not parsed:
        raise EpilogueError("an epilogue needs at least one step")
    used = {name for s in parsed for name in re.findall(r"\bp\.op_([A-Za-z]\w*?)(?:_si|_sj)?\b", s.cuda)}
    unused = [op.name for op in declared.values() if op.name not in used]
    if unused:
        raise EpilogueError(f"operands declared but never read: {', '.join(unused)}")
    return Epilogue(tuple(parsed), tuple(declared.values()))


def operand_type(value) -> str:
    """"scalar" for a number, else the array's dtype name (float32 for anything without one: pack() then
    says what it should have been)."""
    if isinstance(value, (int, float, np.generic)) and not isinstance(value, bool):
        return "scalar"
    return getattr(getattr(value, "dtype", None), "name", "float32")


def kinds_from_use(steps, values: dict) -> dict[str, str]:
    """Each operand's kind from how the steps read it (name[i]: row, name[j]: col, name[i, j]: full) or,
    for a number, scalar: what `matmul(..., epilogue=..., operands=...)` needs no declaration for."""
    texts = [BUILTINS[s][0] if s in BUILTINS else s for s in steps if isinstance(s, str)]
    kinds = {}
    for name, value in values.items():
        if not isinstance(name, str):
            raise EpilogueError(f"operand names are strings, not {type(name).__name__}")
        if operand_type(value) == "scalar":
            kinds[name] = "scalar"
            continue
        uses = set()
        for text in texts:
            for sub in re.findall(rf"\b{re.escape(name)}\b\s*(\[[^\]]*\])?", text):
                uses.add(_SUBSCRIPTS.get(re.sub(r"\s", "", sub), "bad"))
        if "bad" in uses or len(uses) > 1:
            raise EpilogueError(f"operand {name!r} is an array: read it as {name}[i] (one value per row), "
                                f"{name}[j] (per column) or {name}[i, j] (per element), one way only")
        kinds[name] = uses.pop() if uses else "full"  # unread: build() names it
    return kinds


_SUBSCRIPTS = {"[i]": "row", "[j]": "col", "[i,j]": "full"}


def _declare(operands: dict) -> dict[str, Operand]:
    """{name: kind} or {name: (kind, dtype)} (arrays default to float32) as Operands."""
    out = {}
    for name, kind in operands.items():
        kind, dtype = kind if isinstance(kind, tuple) and len(kind) == 2 else (kind, "float32")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name) or name.startswith("__"):
            raise EpilogueError(f"operand name {name!r}: a C identifier (letters, digits, _), not starting with __")
        if name in RESERVED:
            raise EpilogueError(f"operand name {name!r} is taken (x, i, j, y and the math functions are)")
        if kind not in KINDS:
            raise EpilogueError(f"operand {name!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if dtype not in OPERAND_DTYPES:
            raise EpilogueError(f"operand {name!r}: float32, float16 or bfloat16, not {dtype}")
        out[name] = Operand(name, kind, dtype if kind != "scalar" else "float32")
    return out


def _tokens(expression: str):
    at = 0
    while at < len(expression):
        m = _TOKEN.match(expression, at)
        if not m:
            raise EpilogueError(f"epilogue expression {expression.strip()!r}: {expression[at]!r} at column "
                                f"{at + 1} is not allowed (only names, numbers, operators and parentheses)")
        at = m.end()
        if m.lastgroup != "space":
            yield m.lastgroup, m.group()


def _translate(expression: str, declared: dict[str, Operand]) -> str:
    """The expression with each operand read rewritten as a load; raises on anything outside the grammar."""
    tokens = list(_tokens(expression))
    if not tokens:
        raise EpilogueError("an empty epilogue expression")
    out, depth, k = [], 0, 0
    while k < len(tokens):
        kind, text = tokens[k]
        if kind == "name":
            if text in declared:
                loaded, k = _operand_read(declared[text], tokens, k, expression)
                out.append(loaded)
                continue
            if text in FUNCTIONS:
                if k + 1 >= len(tokens) or tokens[k + 1][1] != "(":
                    raise EpilogueError(f"{text} is a function: call it, {text}(…)")
            elif text not in ("x", "i", "j"):
                known = ["x", "i", "j", *declared, *FUNCTIONS]
                hint = difflib.get_close_matches(text, known, n=1)
                raise EpilogueError(f"epilogue expression {expression.strip()!r}: unknown name {text!r}"
                                    f"{f'; did you mean {hint[0]!r}?' if hint else ''} (declare extra operands "
                                    f"with operands={{name: kind}})")
        elif kind == "number" and not text[-1] in "fF" and re.search(r"[.eE]", text):
            text += "f"  # a float literal: single precision, as the rest of the epilogue
        elif text in ("[", "]"):
            raise EpilogueError(f"epilogue expression {expression.strip()!r}: only declared operands are indexed")
        elif text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth < 0:
                raise EpilogueError(f"epilogue expression {expression.strip()!r}: unbalanced ')'")
        out.append(text)
        k += 1
    if depth:
        raise EpilogueError(f"epilogue expression {expression.strip()!r}: unbalanced parentheses")
    return " ".join(out)


_INDEX = {"row": ["i"], "col": ["j"], "full": ["i", ",", "j"]}
# struct fields carry an op_ prefix, so no operand name can collide with a CUDA keyword, type or helper
# the operand's type is part of the source: a branch on it per element would cost registers in unrolled stores
_LOAD = {"row": "to_float(static_cast<const {t}*>(p.op_{n})[i * p.op_{n}_si])",
         "col": "to_float(static_cast<const {t}*>(p.op_{n})[j * p.op_{n}_sj])",
         "full": "to_float(static_cast<const {t}*>(p.op_{n})[i * p.op_{n}_si + j * p.op_{n}_sj])"}


def _operand_read(op: Operand, tokens, k: int, expression: str) -> tuple[str, int]:
    """The load for `op` at tokens[k], and the index after its subscript."""
    if op.kind == "scalar":
        if k + 1 < len(tokens) and tokens[k + 1][1] == "[":
            raise EpilogueError(f"{op.name} is a scalar: write {op.name}, not {op.name}[…]")
        return f"p.op_{op.name}", k + 1
    want = _INDEX[op.kind]
    end = k + 2 + len(want)  # the closing bracket's place
    if not (k + 1 < len(tokens) and tokens[k + 1][1] == "[" and [t for _, t in tokens[k + 2:end]] == want
            and end < len(tokens) and tokens[end][1] == "]"):
        raise EpilogueError(f"epilogue expression {expression.strip()!r}: {op.name} is a {op.kind} operand, "
                            f"read as {op.name}[{', '.join(w for w in want if w != ',')}]")
    return _LOAD[op.kind].format(n=op.name, t=OPERAND_DTYPES[op.dtype]), k + 3 + len(want)

"""Which catalogue entries the default's rules may draw on: the candidate lists per rule and dtype key
(kernels/dispatch/candidates.toml), why a named entry cannot serve a call, and the Decision every rule
returns (cupy_gemm/dispatch.py decides; cupy_gemm/placement_rules.py revises for where operands lie)."""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import lru_cache

from . import config, registry
from .errors import CatalogueError, DTypeError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DTYPE_KEYS = ("float32", "tf32", "3xtf32", "float16", "bfloat16")
ROLES = ("default", "skinny", "one_wave", "split_k", "small_tile", "unaligned")


@dataclass(frozen=True)
class Decision:
    variant: str
    reason: str  # one line: the table point, or the heuristic rule, that chose it
    notes: tuple[str, ...] = ()  # what was passed over on the way, and why
    # the B layout it was measured for: "col" when a table entry timed with B column-major chose it (copies
    # included), which the B-layout rule then leaves as it is
    b_layout: str = "row"


def dtype_key(dtype) -> str:
    """float32 becomes tf32 under CUPY_TF32=1, as cupy.matmul's own switch does."""
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", str(dtype))
    key = "tf32" if name == "float32" and config.allow_tf32() else name
    if key not in DTYPE_KEYS or key == "3xtf32":
        raise DTypeError(f"no kernels for dtype {name}; cupy-gemm multiplies float32, float16 and bfloat16")
    return key


@lru_cache(maxsize=None)
def _file() -> tuple[str, dict]:
    path = registry.data_dir("kernels") / "dispatch" / "candidates.toml"
    return str(path), tomllib.loads(path.read_text())


@lru_cache(maxsize=None)
def candidates() -> dict[str, dict[str, tuple[str, ...]]]:
    """kernels/dispatch/candidates.toml: {role: {dtype key: names in preference order}}."""
    path, data = _file()
    unknown = set(data) - set(ROLES) - {"tile_cost", "timed"}
    if unknown:
        raise CatalogueError(f"{path}: unknown roles {sorted(unknown)}; the heuristic knows {list(ROLES)}")
    return {role: {key: tuple(data.get(role, {}).get(key, ())) for key in DTYPE_KEYS} for role in ROLES}


@lru_cache(maxsize=None)
def tile_costs() -> dict[str, tuple[float, float]]:
    """candidates.toml's [tile_cost]: {variant: (ns per K block, ns per tile)} of the big tiles it times."""
    path, data = _file()
    costs = {}
    for name, value in data.get("tile_cost", {}).items():
        numbers = isinstance(value, list) and all(isinstance(x, (int, float)) and x > 0 for x in value)
        if not (numbers and len(value) == 2):
            raise CatalogueError(f"{path}: tile_cost {name} = {value!r}; give [ns per K block, ns per tile], both > 0")
        costs[name] = (float(value[0]), float(value[1]))
    return costs


@lru_cache(maxsize=None)
def timed_globs() -> tuple[str, ...]:
    """candidates.toml's [timed] globs: the variants a table's candidate step and `cupy-gemm tune` time."""
    path, data = _file()
    globs = data.get("timed", {}).get("globs")
    if not (isinstance(globs, list) and globs and all(isinstance(g, str) and g for g in globs)):
        raise CatalogueError(f"{path}: [timed] globs = {globs!r}; give a list of name patterns")
    return tuple(globs)


def timed() -> list[str]:
    """The catalogue variants [timed] names, every dtype, in catalogue order."""
    globs = timed_globs()
    return [name for name in registry.catalogue() if any(fnmatch.fnmatchcase(name, g) for g in globs)]


def why_not(name: str, key: str, cc: int, needs=()) -> str | None:
    """None if `name` can serve dtype key `key` on compute capability cc, else the reason it cannot.
    needs: Family flags the call uses ("batched", "epilogue")."""
    v = registry.catalogue().get(name)
    if v is None:
        return "not in the catalogue"
    lacking = [need for need in needs if not getattr(v.family, need)]
    if lacking:
        return f"family {v.family.name} has no {' or '.join(lacking)} support"
    # tf32 and 3xtf32 may fall back to exact float32 (GPUs without TF32 do, as cupy.matmul), never the
    # other way round
    dtype = "float32" if key in ("tf32", "3xtf32") else key
    if v.dtype != dtype or v.acc == "float16" or (v.acc in ("tf32", "3xtf32") and v.acc != key):
        return f"computes {v.dtype}/{v.acc}, not {key} with float32 accumulation"
    if not v.runs_on(cc):
        return f"does not run on sm_{cc}"
    return None

"""Sweep grids: values per template parameter from `--set NAME=VALUES` or a TOML grid file, counted before
they are expanded (a grid of a billion points is refused, not built), and expanded in the family's
parameter order."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ..families.base import Family
from .shapes import parse_shapes

MAX_VALUES = 100_000  # values one parameter may take: more is a typo, not a sweep


def parse_values(text: str, limit: int = MAX_VALUES) -> list[int]:
    """Values of one parameter: '64,128', '16:128:*2' (doubling), '32:128:32' (step 32), '8:12' (step 1).
    Ranges include both ends. A range is counted before it is listed: more than `limit` values raise."""
    values: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            if ":" not in part:
                values.append(int(part))
                continue
            bits = part.split(":")
            if len(bits) not in (2, 3):
                raise ValueError
            lo, hi = int(bits[0]), int(bits[1])
            step = bits[2].strip() if len(bits) == 3 else "1"
        except ValueError:
            raise ValueError(f"{part!r}: expected an integer, lo:hi, lo:hi:step or lo:hi:*factor") from None
        if step.startswith("*"):
            factor = int(step[1:])
            if factor < 2 or lo < 1:
                raise ValueError(f"{part!r}: a geometric range needs lo >= 1 and a factor >= 2")
            v = lo
            while v <= hi:
                values.append(v)
                v *= factor
        else:
            if int(step) < 1:
                raise ValueError(f"{part!r}: the step must be positive")
            span = range(lo, hi + 1, int(step))
            if len(values) + len(span) > limit:
                raise ValueError(f"{part!r} gives {len(span)} values, more than the {limit} allowed; narrow it")
            values += list(span)
    if not values:
        raise ValueError(f"{text!r} gives no values")
    return list(dict.fromkeys(values))


def parse_set(item: str, limit: int = MAX_VALUES) -> tuple[str, list[int]]:
    """'BM=64,128' -> ('BM', [64, 128])."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--set takes NAME=VALUES (e.g. BM=64,128 or BK=8:64:*2), got {item!r}")
    try:
        return name.strip(), parse_values(value, limit)
    except ValueError as e:
        raise ValueError(f"--set {name.strip()}: {e}") from None


@dataclass
class GridSpec:
    """A sweep grid: values per parameter, plus what a grid file may also fix."""
    params: dict[str, list[int]] = field(default_factory=dict)
    family: str | None = None
    dtype: str | None = None
    acc: str | None = None
    shapes: list[tuple[int, int, int]] = field(default_factory=list)


def load_grid(path) -> GridSpec:
    """A TOML grid file (see docs/SWEEP.md):

        family = "sliced_k"                  # optional
        dtype = "float32"                    # optional
        acc = "float32"                      # optional
        shapes = ["4096x4096x4096"]          # optional
        [params]
        BM = [32, 64]                        # a list,
        BK = "8:64:*2"                       # a range string (as for --set),
        PAD = 0                              # or one value
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None
    unknown = set(data) - {"family", "dtype", "acc", "shapes", "params"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; a grid file has family, dtype, acc, shapes "
                         f"and a [params] table")
    spec = GridSpec(family=data.get("family"), dtype=data.get("dtype"), acc=data.get("acc"),
                    shapes=parse_shapes([str(s) for s in data.get("shapes", [])]))
    for name, value in data.get("params", {}).items():
        try:
            if isinstance(value, list):
                values = [v for item in value for v in (parse_values(item) if isinstance(item, str) else [item])]
            else:
                values = parse_values(value) if isinstance(value, str) else [value]
            if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
                raise ValueError("parameters are integers")
        except ValueError as e:
            raise ValueError(f"{path}: params.{name}: {e}") from None
        spec.params[name] = list(dict.fromkeys(values))
    return spec


def size(grid: Mapping[str, Iterable[int]]) -> int:
    """How many points a grid expands to, without expanding it."""
    return math.prod(len(set(values)) or 1 for values in grid.values())


def expand(family: Family, grid: Mapping[str, Iterable[int]]) -> list[dict[str, int]]:
    """Every combination of the grid's values, in the family's parameter order with the last varying
    fastest; parameters the grid leaves out keep their defaults. Old names of renamed parameters are
    taken (Family.renamed); unknown names raise ConfigError."""
    grid = {name: list(values) for name, values in family.canonical(grid).items()}
    family.complete({name: values[0] for name, values in grid.items() if values})  # names check
    axes = [grid.get(p.name, [p.default]) or [p.default] for p in family.params]
    names = [p.name for p in family.params]
    return [dict(zip(names, combo)) for combo in itertools.product(*(list(dict.fromkeys(a)) for a in axes))]

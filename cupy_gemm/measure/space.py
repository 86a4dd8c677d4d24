"""The search space of a sweep: a grid expanded into Points and pruned with the family's own rules (each
invalid point keeps the rule that rejected it), or named catalogue variants as Points."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from .. import registry
from ..errors import ConfigError
from ..families.base import Family
from ..registry import Variant
from ..tuning import source_hash
from . import grids

_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "tf32": "tf32"}


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep: its complete parameters, and either a Variant or why it is invalid."""
    index: int
    family: str
    dtype: str
    acc: str
    params: dict
    name: str
    variant: Variant | None = None
    reason: str = ""  # why the point is invalid ("" when valid)
    param: str = ""  # the parameter the failing rule names
    catalogue: str = ""  # the catalogue variant with the same parameters, if any
    source_hash: str = ""

    @property
    def valid(self) -> bool:
        return self.variant is not None


def point_name(family: str, dtype: str, acc: str, params: Mapping[str, int]) -> str:
    """A stable name for a parameter set (it is part of the rendered source, hence of the compile cache key)."""
    body = "_".join(f"{k}{v}" for k, v in params.items())
    return f"{family}-{_SHORT.get(dtype, dtype)}-acc{_SHORT.get(acc, acc)}-{body}"


def _catalogue_index() -> dict[tuple, str]:
    return {(v.family.name, v.dtype, v.acc, tuple(sorted(v.params.items()))): name
            for name, v in registry.catalogue().items()}


def points(family: str | Family, grid: Mapping[str, Iterable[int]] | None = None, dtype: str | None = None,
           acc: str | None = None, *, max_points: int = 100_000) -> list[Point]:
    """Expand and prune a grid with the family's rules (Family.check, through registry.make_variant). A
    point equal to a catalogue variant takes the catalogue's name."""
    fam = registry.family(family) if isinstance(family, str) else family
    dtype = dtype or next(iter(fam.dtypes))
    if dtype not in fam.dtypes:
        raise ConfigError("dtype", dtype, f"one of {sorted(fam.dtypes)} for family {fam.name!r}")
    acc = acc or fam.dtypes[dtype][0]
    if acc not in fam.dtypes[dtype]:
        raise ConfigError("acc", acc, f"one of {list(fam.dtypes[dtype])} for {dtype} inputs in family {fam.name!r}")
    grid = grid or {}
    count = grids.size(grid)
    if count > max_points:  # counted, not expanded: a typo in a range must not exhaust memory
        raise ValueError(f"the grid has {count} points, more than max_points={max_points}; narrow it")
    combos = grids.expand(fam, grid)
    index = _catalogue_index()
    out = []
    for i, params in enumerate(combos):
        known = index.get((fam.name, dtype, acc, tuple(sorted(params.items()))), "")
        name = known or point_name(fam.name, dtype, acc, params)
        try:
            variant = registry.make_variant(fam, name, dtype, params, acc)
        except ConfigError as e:
            out.append(Point(i, fam.name, dtype, acc, params, name, None, f"{e.param}={e.value!r}: {e.expected}",
                             e.param, known))
            continue
        out.append(Point(i, fam.name, dtype, acc, dict(variant.params), name, variant, "", "", known,
                         source_hash(variant)))
    return out


def catalogue_points(names: Iterable[str | Variant]) -> list[Point]:
    """Points for named catalogue variants (what `bench` and `tune` measure)."""
    out = []
    for i, item in enumerate(names):
        v = registry.lookup(item) if isinstance(item, str) else item
        out.append(Point(i, v.family.name, v.dtype, v.acc, dict(v.params), v.name, v, "", "",
                         v.name if v.name in registry.catalogue() else "", source_hash(v)))
    return out

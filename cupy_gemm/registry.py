"""The catalogue: named variants read from kernels/<family>.toml, validated against their family.

This is the only module that knows the catalogue's file format:

    family = "sliced_k"              # must match the file name and a family in cupy_gemm/families
    [[variant]]
    name = "sgemm_sliced_k_f32"      # unique across the catalogue
    dtype = "float32"                # input (and output) dtype
    acc = "float32"                  # optional: accumulate type (default: the family's first for dtype)
    params = { BM = 32, BN = 32 }    # integers; the family fills the rest with defaults (old names of
                                     # renamed parameters are taken: Family.renamed)
    notes = "..."                    # optional
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Mapping

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from . import families as _families_pkg
from .errors import CatalogueError, ConfigError, UnknownVariantError
from .families.base import OUT_DTYPES, Family

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """kernels/ or templates/: inside the package when installed from a wheel, beside it in a checkout."""
    for candidate in (_PACKAGE / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cupy-gemm's {name}/ folder is missing (looked in {_PACKAGE} and its parent)")


@dataclass(frozen=True)
class Variant:
    """A named, validated point of a family: everything needed to render and launch it."""
    name: str
    family: Family
    dtype: str
    acc: str
    params: Mapping[str, int]
    notes: str = ""
    source_file: str = ""
    # what a call adds to the catalogue entry (render.py puts each into the source, so each is its own
    # compiled kernel): the batch index in the grid or scheduler (templates/common/batch.cuh), a fused
    # epilogue (cupy_gemm/epilogue.py), C's dtype where it differs from the inputs' and the split-K sum
    # by atomics (templates/common/split_k.cuh's SPLIT_ATOMIC). None is part of the name, the spec or a
    # tuning entry.
    batched: bool = False
    epilogue: object = None  # an epilogue.Epilogue, or None
    out_dtype: str | None = None  # C's dtype name when the call converts (Family.convert); None: dtype
    split_atomic: bool = False  # split-K partials added by fp32 atomics: not bitwise repeatable
    unaligned_c: bool = False  # C at any leading dimension and address, N any (Family.unaligned_c)

    @property
    def extras(self) -> dict:
        """What a call added to the catalogue entry, by with_extras's keywords: with_extras(**v.extras) is v
        itself, and the compile cache keys on them (launch.load)."""
        return {"batched": self.batched, "epilogue": self.epilogue, "out_dtype": self.out_dtype,
                "split_atomic": self.split_atomic, "unaligned_c": self.unaligned_c}

    @property
    def sums_atomically(self) -> bool:
        """Whether this variant can sum its split-K partials by atomics (with_extras(split_atomic=True)): its
        family's template can, and SPLIT_K (0: per shape, or > 1) compiles the split-K steps in."""
        return self.family.atomic_sum and self.params.get("SPLIT_K", 1) != 1

    def with_extras(self, *, batched: bool = False, epilogue=None, out_dtype: str | None = None,
                    split_atomic: bool = False, unaligned_c: bool = False) -> "Variant":
        """This variant rendered for a batch, with a fused epilogue, storing C as `out_dtype`, summing its
        split-K partials by atomics and/or storing a C at any leading dimension and address, where its family
        has them. out_dtype equal to the input dtype is no extra: the source stays the entry's."""
        fam = self.family
        if unaligned_c and not fam.unaligned_c:
            raise ConfigError("unaligned_c", True, f"a family that stores C at any leading dimension "
                              f"({', '.join(_with('unaligned_c'))}); family {fam.name!r} does not", where=self.name)
        if split_atomic and not self.sums_atomically:
            raise ConfigError("split_atomic", True, "a variant that splits K through the workspace (SPLIT_K other "
                              f"than 1, in {', '.join(_with('atomic_sum'))})", where=self.name)
        if batched and not fam.batched:
            raise ConfigError("batched", True, f"a family that runs batches ({', '.join(_with('batched'))}); "
                              f"family {fam.name!r} does not", where=self.name)
        if epilogue is not None and not fam.epilogue:
            raise ConfigError("epilogue", str(epilogue), f"a family with fused epilogues "
                              f"({', '.join(_with('epilogue'))}); family {fam.name!r} has none", where=self.name)
        if out_dtype == self.dtype:
            out_dtype = None
        if out_dtype is not None:
            if out_dtype not in OUT_DTYPES:
                raise ConfigError("out_dtype", out_dtype, f"one of {', '.join(OUT_DTYPES)}", where=self.name)
            if not fam.convert:
                raise ConfigError("out_dtype", out_dtype, f"{self.dtype} (C in the inputs' dtype): only families "
                                  f"that convert in their store ({', '.join(_with('convert'))}) write another; "
                                  f"family {fam.name!r} does not", where=self.name)
        extras = {"batched": batched, "epilogue": epilogue, "out_dtype": out_dtype, "split_atomic": split_atomic,
                  "unaligned_c": unaligned_c}
        return self if extras == self.extras else replace(self, **extras)

    def runs_on(self, cc: int) -> bool:
        """Whether a GPU of compute capability `cc` (e.g. 90) can run this variant: new enough for the
        family's instructions, and exactly 9.0 for Hopper-only (sm_90a) families."""
        fam = self.family
        return (cc >= fam.min_cc(self.params, self.dtype, self.acc) and (not fam.needs_sm90a or cc == 90)
                and (not self.split_atomic or cc >= 90))  # float4 atomics

    def max_rows(self) -> int | None:
        """The most rows (or columns) of C the variant serves, for few-rows kernels; None: any."""
        fam = self.family
        return None if fam.max_rows is None else fam.max_rows(self.params)

    def to_spec(self) -> tuple:
        """Plain data that `from_spec` turns back into this variant (what crosses to a worker process or
        host, and what a tuning entry stores)."""
        return (self.family.name, self.name, self.dtype, self.acc, tuple(self.params.items()))


@lru_cache(maxsize=None)
def families() -> dict[str, Family]:
    found: dict[str, Family] = {}
    for info in pkgutil.iter_modules(_families_pkg.__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{_families_pkg.__name__}.{info.name}")
        for fam in getattr(module, "FAMILIES", ()):
            if fam.name in found:
                raise CatalogueError(f"family {fam.name!r} is defined twice")
            found[fam.name] = fam
    return found


def _with(feature: str) -> list[str]:
    return sorted(name for name, fam in families().items() if getattr(fam, feature))


def family(name: str) -> Family:
    fams = families()
    if name not in fams:
        raise UnknownVariantError(name, fams, kind="family")
    return fams[name]


def make_variant(fam: Family, name: str, dtype: str, params: Mapping[str, int] | None = None,
                 acc: str | None = None, notes: str = "", source_file: str = "") -> Variant:
    """Validate a parameter set for a family and return it as a Variant (used for catalogue entries,
    `render(family, **params)`, and every sweep point)."""
    if dtype not in fam.dtypes:
        raise ConfigError("dtype", dtype, f"one of {sorted(fam.dtypes)} for family {fam.name!r}", where=name)
    acc = acc or fam.dtypes[dtype][0]
    full = fam.check(dict(params or {}), dtype, acc, where=name)
    return Variant(name=name, family=fam, dtype=dtype, acc=acc, params=full, notes=notes, source_file=source_file)


def _load_file(path: Path) -> list[Variant]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise CatalogueError(f"{path}: not valid TOML: {e}") from None
    fam_name = data.get("family")
    if fam_name != path.stem:
        raise CatalogueError(f"{path}: `family = {fam_name!r}` must match the file name ({path.stem!r})")
    fam = family(fam_name)
    out = []
    for i, entry in enumerate(data.get("variant", [])):
        where = f"{path.name} variant #{i + 1}"
        unknown = set(entry) - {"name", "dtype", "acc", "params", "notes"}
        if unknown or "name" not in entry or "dtype" not in entry:
            raise CatalogueError(f"{where}: needs `name` and `dtype`, may have `acc`, `params`, `notes`; "
                                 f"got keys {sorted(entry)}")
        out.append(make_variant(fam, entry["name"], entry["dtype"], entry.get("params", {}),
                                entry.get("acc"), entry.get("notes", ""), source_file=path.name))
    return out


@lru_cache(maxsize=None)
def catalogue() -> dict[str, Variant]:
    """Every named variant, in catalogue order (files sorted by name, entries in file order)."""
    result: dict[str, Variant] = {}
    for path in sorted(data_dir("kernels").glob("*.toml")):
        for v in _load_file(path):
            if v.name in result:
                raise CatalogueError(f"variant {v.name!r} is in both {result[v.name].source_file} and {path.name}")
            result[v.name] = v
    return result


def lookup(name: str) -> Variant:
    cat = catalogue()
    if name not in cat:
        raise UnknownVariantError(name, list(cat) + ["cublas"])
    return cat[name]


def from_spec(spec) -> Variant:
    """The Variant of a `Variant.to_spec()` tuple: the catalogue's own entry when the spec names one with
    the same parameters, else the parameter set validated again (ConfigError if it no longer is valid).
    A spec written before a parameter was renamed (a tuning entry, say) may use its old name."""
    family_name, name, dtype, acc, params = spec
    fam = family(family_name)
    params = fam.canonical(dict(params), where=name)
    known = catalogue().get(name)
    if known is not None and (known.family.name, known.dtype, known.acc, dict(known.params)) == \
            (family_name, dtype, acc, params):
        return known
    return make_variant(fam, name, dtype, params, acc)

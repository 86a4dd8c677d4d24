"""Problem sizes: 'MxNxK' strings, one size for a cube, and the named sets (the seed tables' shapes, square,
quick) that sweep, bench and tune accept."""
from __future__ import annotations

from typing import Iterable

# the problem sizes of the seed benchmark tables (HGEMM and SGEMM READMEs)
SEED_HGEMM = [(1024, 1024, 1024), (1024, 2048, 256), (4096, 4096, 256), (4096, 4096, 512), (4096, 4096, 1024)]
SEED_SGEMM = [(m, n, k) for m in (4096, 8192, 16384) for n in (4096, 8192, 16384) for k in (2048, 4096, 8192)]
SHAPE_SETS = {
    "hgemm": SEED_HGEMM,
    "sgemm": SEED_SGEMM,
    "square": [(s, s, s) for s in (512, 1024, 2048, 4096, 8192)],
    "quick": [(1024, 1024, 1024), (4096, 4096, 4096)],
}


def seed_shapes(dtype: str) -> list[tuple[int, int, int]]:
    """The seed table for a dtype: SGEMM's shapes for float32, HGEMM's for the 16-bit types."""
    return list(SEED_SGEMM if dtype == "float32" else SEED_HGEMM)


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4096x4096x1024' -> (4096, 4096, 1024); '2048' -> (2048, 2048, 2048)."""
    parts = text.strip().lower().replace("×", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) == 1:
        dims = dims * 3
    if len(dims) != 3 or min(dims) < 1:
        raise ValueError(f"shape {text!r}: expected MxNxK with positive integers (or one size for a cube)")
    return dims


def parse_shapes(specs: Iterable[str] | str, dtype: str | None = None) -> list[tuple[int, int, int]]:
    """Shapes from strings: MxNxK, comma-separated lists of them, or a named set (seed, hgemm, sgemm, square,
    quick). `seed` needs the dtype."""
    specs = [specs] if isinstance(specs, str) else list(specs)
    out: list[tuple[int, int, int]] = []
    for spec in specs:
        for item in (s for s in spec.split(",") if s.strip()):
            name = item.strip().lower()
            if name == "seed":
                if dtype is None:
                    raise ValueError("the 'seed' shapes depend on the dtype: give one")
                out += seed_shapes(dtype)
            elif name in SHAPE_SETS:
                out += SHAPE_SETS[name]
            else:
                out.append(parse_shape(item))
    return list(dict.fromkeys(out))

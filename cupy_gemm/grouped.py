"""grouped_matmul: many products in one launch on Hopper (mixture-of-experts layers), fp16 and bf16.

Three layouts (one kernel, templates/grouped.cu.j2; fp32 accumulation, output in the input dtype):

- experts: grouped_matmul(a, b, offsets=offs) with a (ΣMᵢ, K) row-major, b (G, K, N) — or (G, N, K) with
  b_layout="nk", each expert's weight as nn.Linear keeps it — and offs an int32 CuPy array of the G
  cumulative row ends (torch._grouped_mm's offs): group g is rows offs[g-1] .. offs[g] of a; empty groups
  are fine. Returns (ΣMᵢ, N). The offsets stay on the device: nothing synchronises with the host, and
  the kernel clamps them to a's rows. Rows past offs[-1] are written with ZEROS (torch leaves them
  undefined), so the whole output is always written. Offsets must not decrease (not checked: they are
  on the device); rows of groups whose offsets decrease are undefined.
- masked: grouped_matmul(a, b, masked_m=counts) with a (G, M_max, K) and counts an int32 CuPy array (G,)
  of the valid rows of each group (decode). Returns (G, M_max, N); rows at or past a group's count are
  written with ZEROS. No host synchronisation.
- list: grouped_matmul([a0, a1, …], [b0, b1, …]) with aᵢ (Mᵢ, Kᵢ) and bᵢ (Kᵢ, Nᵢ) (or (Nᵢ, Kᵢ) with
  b_layout="nk") returns [a0 @ b0, …] from one launch: a small table of per-group tensor maps, pointers
  and sizes is copied to the device first.

K and N must be multiples of 8 (TMA moves rows of whole 16-byte units and the epilogue stores column
pairs): pad K with zeros (exact) and N with zero columns of b otherwise; InputError says so. Operands
that are not C-contiguous with 16-byte aligned rows are copied first. At most MAX_GROUPS groups.
"""
from __future__ import annotations

import numpy as np

from . import arrange, grouping, launch, registry, tma
from .errors import DeviceError, DTypeError, InputError
from .families.grouped import GROUP_DESC_DTYPE, LAYOUTS, MAX_GROUPS
from .operands import require_cupy

FAMILY = "grouped"
DTYPES = ("float16", "bfloat16")
B_LAYOUTS = ("kn", "nk")
ALIGN = 8  # elements of 2 bytes in TMA's 16-byte row unit
BOX_COLS = 64  # elements in one 128-byte swizzled row: every box is that wide


# ---- checks that read only shapes, strides and dtypes (CPU tests pass NumPy stand-ins) ---------------

def common_dtype(arrays, names) -> str:
    dtypes = {np.dtype(x.dtype).name for x in arrays}
    for x, name in zip(arrays, names):
        if np.dtype(x.dtype).name not in DTYPES:
            raise DTypeError(f"{name} must be float16 or bfloat16; got {np.dtype(x.dtype).name}")
    if len(dtypes) != 1:
        raise DTypeError(f"a and b of a grouped product must share one dtype; got {sorted(dtypes)}")
    return dtypes.pop()


def check_b_layout(b_layout: str) -> bool:
    """Whether b is stored K-major ("nk")."""
    if b_layout not in B_LAYOUTS:
        raise InputError(f"b_layout must be 'kn' (b is (G, K, N)) or 'nk' (b is (G, N, K)); got {b_layout!r}")
    return b_layout == "nk"


def check_group_sizes(m: int, n: int, k: int, where: str = "") -> None:
    """Sizes the kernels index (32-bit), with N and K whole 16-byte rows."""
    arrange.check_sizes(where, M=m, N=n, K=k)
    for name, size in (("K", k), ("N", n)):
        if size % ALIGN:
            raise InputError(f"{where}{name} = {size} must be a multiple of {ALIGN} (TMA moves rows of 16-byte "
                             f"units): pad {'a and b with zero columns/rows along K' if name == 'K' else 'b with zero columns'}"
                             f" to {-(-size // ALIGN) * ALIGN}")


def check_groups(g: int) -> None:
    if g > MAX_GROUPS:
        raise InputError(f"at most {MAX_GROUPS} groups per launch (the schedule lives in shared memory); got {g}")


def check_out(out, shape, dtype: str, name: str = "out") -> None:
    if out is None:
        return
    if tuple(out.shape) != tuple(shape) or np.dtype(out.dtype).name != dtype:
        raise InputError(f"{name} must be a {tuple(shape)} {dtype} array; got {tuple(out.shape)} "
                         f"{np.dtype(out.dtype).name}")
    if not out.flags.c_contiguous:
        raise InputError(f"{name} must be C-contiguous (the kernel writes rows of N elements)")


def check_experts(a, b, offsets, b_layout: str, out) -> tuple[str, int, int, int]:
    """(dtype, G, N, K) of an experts-layout call."""
    k_major = check_b_layout(b_layout)
    if offsets is None:
        raise InputError("the experts layout needs offsets: an int32 CuPy array of the G cumulative row ends "
                         "(or masked_m= for a (G, M_max, K) a, or lists of a and b)")
    dtype = common_dtype((a, b), ("a", "b"))
    g, n, k = grouping.expert_problems(a.shape, b.shape, k_major, offsets_shape=offsets.shape,
                                       offsets_dtype=np.dtype(offsets.dtype).name)
    check_groups(g)
    check_group_sizes(a.shape[0], n, k)
    check_out(out, (a.shape[0], n), dtype)
    return dtype, g, n, k


def check_masked(a, b, counts, b_layout: str, out) -> tuple[str, int, int, int, int]:
    """(dtype, G, M_max, N, K) of a masked-layout call."""
    k_major = check_b_layout(b_layout)
    if len(a.shape) != 3 or len(b.shape) != 3:
        raise InputError(f"the masked layout takes a (G, M_max, K) and b (G, K, N) or (G, N, K); got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    dtype = common_dtype((a, b), ("a", "b"))
    g, m_max, k = a.shape
    _, n, _ = grouping.expert_problems((m_max, k), b.shape, k_major)
    if b.shape[0] != g:
        raise InputError(f"a has {g} groups but b has {b.shape[0]}")
    if tuple(counts.shape) != (g,):
        raise InputError(f"masked_m must have shape ({g},), the valid rows of each group; got {tuple(counts.shape)}")
    if np.dtype(counts.dtype).name != "int32":
        raise DTypeError(f"masked_m must be int32; got {np.dtype(counts.dtype).name}")
    check_groups(g)
    check_group_sizes(m_max, n, k)
    check_out(out, (g, m_max, n), dtype)
    return dtype, g, m_max, n, k


def check_list(as_, bs, b_layout: str, outs) -> tuple[str, list[grouping.Group]]:
    k_major = check_b_layout(b_layout)
    as_, bs = list(as_), list(bs)
    b_shapes = [tuple(x.shape)[::-1] if k_major else tuple(x.shape) for x in bs]
    groups = grouping.list_problems([x.shape for x in as_], b_shapes, [np.dtype(x.dtype).name for x in as_],
                                    [np.dtype(x.dtype).name for x in bs])
    dtype = common_dtype(as_ + bs, [f"a[{i}]" for i in range(len(as_))] + [f"b[{i}]" for i in range(len(bs))])
    check_groups(len(groups))
    for i, grp in enumerate(groups):
        check_group_sizes(grp.m, grp.n, grp.k, f"group {i}: ")
    if outs is not None:
        outs = list(outs)
        if len(outs) != len(groups):
            raise InputError(f"out must be a list of {len(groups)} arrays, one per group; got {len(outs)}")
        for i, (o, grp) in enumerate(zip(outs, groups)):
            check_out(o, (grp.m, grp.n), dtype, f"out[{i}]")
    return dtype, groups


# ---- the variant --------------------------------------------------------------------------------------

def default_name(dtype: str, rows_per_group: float, n: int) -> str:
    """128×256 tiles once groups have hundreds of rows and N is wide, else 128×128."""
    prefix = "hgemm" if dtype == "float16" else "bgemm"
    if rows_per_group >= 256 and n >= 256:
        return f"{prefix}_grouped_wgmma_m64n256k16_tile128x256_stages4_ws2"
    return f"{prefix}_grouped_wgmma_m64n128k16_tile128x128_stages6_ws2"


_flipped: dict[tuple, registry.Variant] = {}  # one Variant per derived parameter set: validated once


def _with_b_layout(v: registry.Variant, k_major: bool) -> registry.Variant:
    if v.params["B_KMAJOR"] == int(k_major):
        return v
    key = (v.to_spec(), k_major)
    if key not in _flipped:
        stem = v.name.removesuffix("_nk")
        _flipped[key] = registry.make_variant(v.family, stem + ("_nk" if k_major else ""), v.dtype,
                                              {**v.params, "B_KMAJOR": int(k_major)}, v.acc)
    return _flipped[key]


def choose_variant(variant, dtype: str, k_major: bool, rows_per_group: float, n: int) -> registry.Variant:
    """The named variant (a grouped catalogue name, Kernel or Variant) or the default, with B_KMAJOR set
    to the call's b_layout."""
    if variant is None:
        variant = default_name(dtype, rows_per_group, n)
    variant = getattr(variant, "variant", variant)  # a Kernel
    if isinstance(variant, str):
        variant = registry.lookup(variant)
    if not isinstance(variant, registry.Variant) or variant.family.name != FAMILY:
        raise InputError(f"grouped_matmul runs {FAMILY} variants (cupy-gemm list --family {FAMILY}); "
                         f"got {getattr(variant, 'name', variant)!r}")
    if variant.dtype != dtype:
        raise DTypeError(f"variant {variant.name!r} takes {variant.dtype}; the operands are {dtype}")
    return _with_b_layout(variant, k_major)


# ---- operands in the kernel's layout and the launch ---------------------------------------------------

def _rows_ready(x):
    """x as a C-contiguous array whose base is 16-byte aligned (what the tensor maps need)."""
    import cupy
    if x.flags.c_contiguous and x.data.ptr % 16 == 0:
        return x
    copy = cupy.empty(x.shape, dtype=x.dtype)
    copy[...] = x
    return copy


def _b_map(b, dtype, params, k_major: bool, depth: int, n: int, k: int):
    """One 3-D map over `depth` matrices of B: (N, K) boxes BN × 64 K-major, or (K, N) boxes BK × 64."""
    if k_major:
        return tma.tensor_map_3d(b.data.ptr, dtype, depth=depth, rows=n, cols=k, ld=k, stride=n * k,
                                 box_rows=params["BN"], box_cols=BOX_COLS)
    return tma.tensor_map_3d(b.data.ptr, dtype, depth=depth, rows=k, cols=n, ld=n, stride=k * n,
                             box_rows=params["BK"], box_cols=BOX_COLS)


def _launch(v, device, map_a, map_b, c, ldc, ends, table, layout, groups, rows, n, k, group_rows, bound):
    """gemm_kernel's arguments (families/grouped.py) on a grid of at most one block per SM."""
    kernel, _ = launch.load(v, device)
    fam = v.family
    grid = (max(1, min(bound, launch.sm_count(device))), 1, 1)
    null = np.uintp(0)
    maps_ptr, list_ptr = (table.data.ptr, table.data.ptr + 2 * groups * tma.TENSOR_MAP_BYTES) if table is not None \
        else (0, 0)
    args = (map_a, map_b, null if c is None else c, np.int64(ldc), null if ends is None else ends,
            np.uintp(list_ptr), np.uintp(maps_ptr), np.int32(LAYOUTS[layout]), np.int32(groups), np.int32(rows),
            np.int32(n), np.int32(k), np.int32(group_rows))
    launch.launch_kernel(kernel, grid, (fam.threads(v.params), 1, 1),
                         fam.smem_bytes(v.params, v.dtype, v.acc), args, launch.uses_pdl(v, device))


def _same_device(arrays, names):
    for x, name in zip(arrays, names):
        require_cupy(x, name)
        if name.startswith("out") and x.data.ptr % 16:
            raise InputError(f"{name} must start on a 16-byte boundary (the kernel stores column pairs); "
                             f"got address {x.data.ptr:#x}")
    devices = {x.device.id for x in arrays}
    if len(devices) > 1:
        raise DeviceError(f"{', '.join(names)} must be on one GPU; they are on GPUs {sorted(devices)}")


def _stacked(a, b, ends, out, variant, b_layout, layout):
    """The experts and masked layouts: A as one 2-D map, B as one 3-D map, one C."""
    import cupy
    masked = layout == "masked"
    given = [(x, name) for x, name in ((a, "a"), (b, "b"), (ends, "masked_m" if masked else "offsets"), (out, "out"))
             if x is not None]
    _same_device(*zip(*given))
    if masked:
        dtype, g, m_max, n, k = check_masked(a, b, ends, b_layout, out)
        rows, shape, per_group = g * m_max, (g, m_max, n), m_max
    else:
        dtype, g, n, k = check_experts(a, b, ends, b_layout, out)
        rows, shape, per_group, m_max = a.shape[0], (a.shape[0], n), a.shape[0] / max(g, 1), 0
    k_major = b_layout == "nk"
    v = choose_variant(variant, dtype, k_major, per_group, n)
    device = cupy.cuda.Device(a.device.id)
    with device:
        target = out if out is not None else cupy.empty(shape, dtype=dtype)
        if rows == 0 or n == 0:
            return target
        if k == 0 or g == 0:
            return target.fill(0) or target
        bm, bn = v.params["BM"], v.params["BN"]
        ends = cupy.ascontiguousarray(ends)  # the kernel reads G consecutive ints (a copy on the device if strided)
        a2 = _rows_ready(a).reshape(rows, k)
        b3 = _rows_ready(b)
        map_a = tma.tensor_map_2d(a2.data.ptr, dtype, rows=rows, cols=k, ld=k, box_rows=bm, box_cols=BOX_COLS)
        map_b = _b_map(b3, dtype, v.params, k_major, g, n, k)
        tiles_n = -(-n // bn)
        bound = g * -(-m_max // bm) * tiles_n if masked else (-(-rows // bm) + g) * tiles_n
        _launch(v, device, map_a, map_b, target, n, ends, None, layout, g, rows, n, k, m_max, bound)
    return target


def _listed(as_, bs, outs, variant, b_layout):
    """The list layout: per-group maps, pointers and sizes in one device table."""
    import cupy
    as_, bs = list(as_), list(bs)
    _same_device(as_ + bs + list(outs or []), [f"a[{i}]" for i in range(len(as_))] + [f"b[{i}]" for i in range(len(bs))]
                 + [f"out[{i}]" for i in range(len(outs or []))])
    dtype, groups = check_list(as_, bs, b_layout, outs)
    k_major = b_layout == "nk"
    g = len(groups)
    v = choose_variant(variant, dtype, k_major, sum(x.m for x in groups) / g, max(x.n for x in groups))
    device = cupy.cuda.Device(as_[0].device.id)
    with device:
        targets = list(outs) if outs is not None else [cupy.empty((x.m, x.n), dtype=dtype) for x in groups]
        table = np.zeros(2 * g * tma.TENSOR_MAP_BYTES + g * GROUP_DESC_DTYPE.itemsize, dtype=np.uint8)
        maps = table[:2 * g * tma.TENSOR_MAP_BYTES].reshape(2 * g, tma.TENSOR_MAP_BYTES)
        descs = table[2 * g * tma.TENSOR_MAP_BYTES:].view(GROUP_DESC_DTYPE)
        keep, bound = [], 0
        for i, (grp, a, b, c) in enumerate(zip(groups, as_, bs, targets)):
            descs[i] = (c.data.ptr if c.size else 0, grp.n, grp.m, grp.n, grp.k, 0)
            if grp.m and grp.n:
                bound += -(-grp.m // v.params["BM"]) * -(-grp.n // v.params["BN"])
            if not (grp.m and grp.n and grp.k):
                continue  # no loads: its maps stay zeros (the kernel stores zeros when K = 0)
            a, b = _rows_ready(a), _rows_ready(b)
            keep += [a, b]  # copies live until the launch is queued; the stream orders their reuse
            maps[i] = tma.tensor_map_2d(a.data.ptr, dtype, rows=grp.m, cols=grp.k, ld=grp.k, box_rows=v.params["BM"],
                                        box_cols=BOX_COLS).view(np.uint8)
            maps[g + i] = _b_map(b, dtype, v.params, k_major, 1, grp.n, grp.k).view(np.uint8)
        if bound:
            empty = tma.empty_map()
            _launch(v, device, empty, empty, None, 0, None, cupy.asarray(table), "list", g, 0, 0, 0, 0, bound)
    return targets


def grouped_matmul(a, b, *, offsets=None, masked_m=None, out=None, variant=None, b_layout: str = "kn"):
    """Grouped products in one launch; see the module docstring for the three layouts. variant: a
    `grouped` catalogue name, Kernel or Variant (its tile and pipeline; B_KMAJOR follows b_layout), or None."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)):
            raise InputError("the list layout takes lists (or tuples) of a and of b")
        if offsets is not None or masked_m is not None:
            raise InputError("offsets and masked_m belong to the experts and masked layouts, not to lists")
        return _listed(a, b, out, variant, b_layout)
    if masked_m is not None:
        if offsets is not None:
            raise InputError("give offsets (experts layout) or masked_m (masked layout), not both")
        return _stacked(a, b, masked_m, out, variant, b_layout, "masked")
    return _stacked(a, b, offsets, out, variant, b_layout, "experts")

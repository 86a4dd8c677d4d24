"""What tile_explorer.ipynb explores: a suggested grid per family (about 20-30 points that run in a minute
or two on an H100/H200), and the GPU it runs on. Its tables, progress lines and figures come from
cupy_gemm.present, shared with the command line.
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

_ROOT = Path(__file__).resolve().parent.parent
if importlib.util.find_spec("cupy_gemm") is None and (_ROOT / "cupy_gemm" / "__init__.py").is_file():
    sys.path.insert(0, str(_ROOT))  # a checkout used without `pip install`: import the package beside us


# ---- what to sweep -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Suggestion:
    """A small grid for one family, about 20-30 points that run in a minute or two on an H100/H200.

    grid    values per parameter for the heat maps (parameters left out keep the family's defaults);
    panel   the parameter drawn as one heat map per value (None: one heat map);
    detail  parameters varied around the winning point (BK, padding, swizzle, ...): every other parameter
            keeps the winner's value."""
    grid: Mapping[str, list]
    panel: str | None
    detail: Mapping[str, list]


SUGGESTIONS = {
    # block tile = (WARPS_M * WARP_TILE_M * 16) x (WARPS_N * WARP_TILE_N * 8): 2x4 warps, warp tiles of 2-8
    # m16 by 2-8 n8 mma tiles; swizzled shared memory and register double-buffering as the fastest
    # catalogue kernels use them
    "mma": Suggestion(
        grid={"WARP_TILE_M": [2, 4, 8], "WARP_TILE_N": [2, 4, 8], "STAGES": [2, 3, 4], "BK": [32],
              "A_PAD": [0], "B_PAD": [0], "SMEM_SWIZZLE": [1], "RBUF": [1], "B_X4": [1], "BLOCK_SWIZZLE": [2048]},
        panel="STAGES",
        detail={"BK": [16, 32, 64], "SMEM_SWIZZLE": [0, 1], "A_PAD": [0, 8], "B_PAD": [0, 8]}),
    # block tile = (WARPS_M * FRAGS_M * FRAG_M) x (WARPS_N * FRAGS_N * FRAG_N) with 16x16 fragments and 4x2 warps
    "wmma": Suggestion(
        grid={"FRAGS_M": [1, 2, 4], "FRAGS_N": [2, 4, 8], "STAGES": [2, 3, 4], "BK": [32], "ASYNC": [1],
              "DSMEM": [1]},
        panel="STAGES",
        detail={"BK": [16, 32, 64], "A_PAD": [0, 8], "B_PAD": [0, 8]}),
    "wgmma": Suggestion(
        grid={"BM": [128, 256], "BN": [64, 128, 256], "STAGES": [3, 4, 5]},
        panel="STAGES",
        detail={"CONSUMERS": [1, 2], "TMA_STORE": [0, 1], "BLOCK_SWIZZLE": [0, 2048]}),
    "hgemm_simt": Suggestion(
        grid={"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [8, 16]},
        panel="BK",
        detail={"PAD": [0, 8], "A_TRANSPOSED": [0, 1], "DBUF": [0, 1]}),
    "sgemm_simt": Suggestion(
        grid={"BM": [64, 128, 256], "BN": [64, 128, 256], "BK": [8, 16], "A_TRANSPOSED": [1], "DBUF": [1]},
        panel="BK",
        detail={"PAD": [0, 4], "A_TRANSPOSED": [0, 1], "ASYNC": [0, 1]}),
    "sliced_k": Suggestion(
        grid={"BM": [16, 32, 64], "BN": [16, 32, 64], "BK": [16, 32]},
        panel="BK",
        detail={"PAD": [0, 1, 8], "BLOCK_SWIZZLE": [0, 2048]}),
}


def suggestion(family: str) -> Suggestion:
    if family not in SUGGESTIONS:
        raise ValueError(f"no suggested grid for family {family!r} (there are for {sorted(SUGGESTIONS)}): set "
                         f"GRID, PANEL and DETAIL in the first cell (`cupy-gemm show` lists its parameters)")
    return SUGGESTIONS[family]


def resolve(family: str, grid=None, panel=None, detail=None) -> tuple[dict, str | None, dict]:
    """(grid, panel, detail): what the first cell gives, the family's suggestion for the rest. Old names of
    renamed parameters (e.g. SWIZZLE for BLOCK_SWIZZLE) are mapped to today's."""
    from cupy_gemm import registry
    if grid is None or detail is None:
        s = suggestion(family)
        panel = s.panel if panel is None and grid is None else panel
        grid = dict(s.grid) if grid is None else grid
        detail = dict(s.detail) if detail is None else detail
    fam = registry.family(family)
    return fam.canonical(dict(grid)), fam.renamed.get(panel, panel), fam.canonical(dict(detail))


def cli_command(family: str, grid: Mapping[str, Iterable[int]], dtype: str, acc: str, shape: str) -> str:
    """The `cupy-gemm sweep` command that measures the same grid."""
    sets = " ".join(f"--set {name}={','.join(map(str, values))}" for name, values in grid.items())
    return f"cupy-gemm sweep {family} --dtype {dtype} --acc {acc} --shape {shape} {sets} --out {family}.csv"


def around(params: Mapping[str, int], detail: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    """A grid that keeps every parameter of `params` and varies those of `detail`."""
    grid = {name: [value] for name, value in params.items()}
    grid.update({name: list(values) for name, values in detail.items()})
    return grid


# ---- the GPU ---------------------------------------------------------------------------------------------

def require_gpu() -> dict:
    """The current CUDA device, described; cupy_gemm.DeviceError (never a silent fallback) without one."""
    from cupy_gemm import DeviceError, devices
    try:
        count = devices.gpu_count()
    except DeviceError as e:
        raise DeviceError(f"tile_explorer needs a CUDA GPU: {e}. Run the notebook on a machine with an NVIDIA "
                          f"GPU (compute capability 8.0 or newer for the tensor-core families; 9.0 for "
                          f"wgmma).") from None
    import cupy
    from cupy_gemm.measure import provenance
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    rt = cupy.cuda.runtime.runtimeGetVersion()
    return {"id": dev.id, **provenance.here(dev.id), "sms": int(props["multiProcessorCount"]),
            "memory_gib": props["totalGlobalMem"] / 2**30, "runtime": f"{rt // 1000}.{rt % 1000 // 10}",
            "cupy": cupy.__version__, "count": count}


def describe_gpu(info: Mapping) -> str:
    cc = f"{info['cc'] // 10}.{info['cc'] % 10}"
    return (f"GPU {info['id']}: {info['name']} (compute capability {cc}, {info['sms']} SMs, "
            f"{info['memory_gib']:.0f} GiB), driver {info['driver']}, CUDA runtime {info['runtime']}, "
            f"CuPy {info['cupy']}")

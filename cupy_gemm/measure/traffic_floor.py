"""The floor of a memory-bound product: its operands read and its output written once by a plain kernel
(templates/traffic_floor.cu.j2), timed by the corpus benchmark beside the product on the same operand
sets. A share of the copy bandwidth says how far a call is from the memory's rate; a share of this pass
says how much of that distance one launch moving those bytes cannot close (at 8 MB a plain read runs at
well under half the rate of a large copy)."""
from __future__ import annotations

from typing import Callable

from .. import launch
from ..render import render_file

THREADS = 256
BLOCKS_PER_SM = 16  # enough accesses in flight to cover the memory's latency from every SM


def calls(sets) -> list[Callable[[], object]]:
    """One call per operand set (A, B, out): A and B read once, out written once (with zeros). Arrays
    that are not one contiguous block of memory (in either order) have no such floor: an empty list."""
    import cupy
    import numpy as np
    if not all(_block(x) for s in sets for x in s):
        return []
    device = cupy.cuda.Device()
    kernel = launch.load_helper("traffic_floor", render_file("traffic_floor.cu.j2"), "traffic_floor", device)
    grid = (BLOCKS_PER_SM * device.attributes["MultiProcessorCount"],)
    sink = cupy.empty(1, cupy.float32)
    args = [tuple(v for x in s for v in (x, np.int64(x.nbytes // 16))) + (sink,) for s in sets]
    return [lambda args=a: kernel(grid, (THREADS,), args) for a in args]


def _block(x) -> bool:
    """x covers one contiguous block of memory starting 16-byte aligned (its view's order aside)."""
    return (x.flags.c_contiguous or x.flags.f_contiguous) and x.data.ptr % 16 == 0

"""Tensor cores through the nvcuda::wmma API: float16 / bfloat16 (m16n16k16, m32n8k16, m8n32k16) and tf32
(m16n16k8) with row-major A and B.

A block of WARPS_M x WARPS_N warps (the seed names' "mmaAxB") computes a BM x BN tile of C; each warp owns
FRAGS_M x FRAGS_N accumulator fragments (the seed names' "warpCxD"; a third factor "x2" is BK = 2 * FRAG_K).
K slices are staged in shared memory: STAGES buffers filled by 16-byte cp.async (ASYNC=1), or plain 16-byte
loads with STAGES=1 (ASYNC=0, any GPU with tensor cores). Copies outside the matrix zero-fill, and C goes
back through a per-warp shared-memory fragment tile to a guarded 16-byte epilogue, so every shape is exact.
tf32 rounds fp32 operands inside the fragments: the caller's inputs are never modified.
"""
from __future__ import annotations

from ..errors import ConfigError
from .base import ACC_TYPES, CUDA_TYPES, RENAMED_BLOCK_SWIZZLE, Family, Param, block_swizzle_param, flag

# float16 accumulates in float32 unless asked (the seed-named entries accumulate in float16, as the seed)
_DTYPES = {"float16": ("float32", "float16"), "bfloat16": ("float32",), "float32": ("tf32",)}
_ACC_BYTES = {"float": 4, "half": 2}
_SHAPES_16BIT = ((16, 16, 16), (32, 8, 16), (8, 32, 16))
_SHAPES_TF32 = ((16, 16, 8),)
STATIC_SMEM_LIMIT = 48 * 1024
REG_RESERVE = 24  # registers per thread kept for addresses, loop state and the epilogue


def _esize(dtype: str) -> int:
    return CUDA_TYPES[dtype][1]


def _acc_bytes(acc: str) -> int:
    return _ACC_BYTES[ACC_TYPES[acc]]


def vec(dtype: str) -> int:
    """Elements in one 16-byte copy: cp.async and plain loads along K and N, epilogue stores along N."""
    return 16 // _esize(dtype)


def tile(p) -> tuple[int, int]:
    return p["FRAG_M"] * p["FRAGS_M"] * p["WARPS_M"], p["FRAG_N"] * p["FRAGS_N"] * p["WARPS_N"]


def threads(p) -> int:
    return 32 * p["WARPS_M"] * p["WARPS_N"]


def c_ld(p) -> int:
    """Row stride of the per-warp C fragment tile (the template's C_LD): rows 8 or 24 words apart."""
    return p["FRAG_N"] + (8 if (p["FRAG_N"] + 8) % 16 == 8 else 16)


def shared_bytes(p, dtype: str, acc: str) -> int:
    """Shared memory the block uses: the larger of the pipeline and the epilogue (they share the space)."""
    bm, bn = tile(p)
    pipeline = p["STAGES"] * (bm * (p["BK"] + p["A_PAD"]) + p["BK"] * (bn + p["B_PAD"])) * _esize(dtype)
    epilogue = p["WARPS_M"] * p["WARPS_N"] * p["FRAG_M"] * c_ld(p) * _acc_bytes(acc)
    return max(pipeline, epilogue)


def smem_bytes(p, dtype: str, acc: str) -> int:
    """Dynamic shared memory for the launch: all of it when DSMEM=1, none when it is a static array."""
    return shared_bytes(p, dtype, acc) if p["DSMEM"] else 0


def fragment_registers(p, dtype: str, acc: str) -> int:
    """Registers per thread held by accumulator and operand fragments (the template's FRAG_REGS)."""
    acc_regs = p["FRAG_M"] * p["FRAG_N"] // 32 * _acc_bytes(acc) // 4
    a_regs = p["FRAG_M"] * p["FRAG_K"] // 32 * _esize(dtype) // 4
    b_regs = p["FRAG_K"] * p["FRAG_N"] // 32 * _esize(dtype) // 4
    return (p["FRAGS_M"] * p["FRAGS_N"] * acc_regs
            + (1 + p["RBUF"]) * (p["FRAGS_M"] * a_regs + p["FRAGS_N"] * b_regs))


def register_budget(p) -> int:
    return min(255, 65536 // threads(p)) - REG_RESERVE


def _rules(p, dtype, acc):
    shape = (p["FRAG_M"], p["FRAG_N"], p["FRAG_K"])
    if shape not in (_SHAPES_TF32 if acc == "tf32" else _SHAPES_16BIT):
        yield ConfigError("FRAG_M", p["FRAG_M"], f"(with FRAG_N={p['FRAG_N']}, FRAG_K={p['FRAG_K']}) part of a WMMA "
                          "shape of the input type: m16n16k16, m32n8k16 or m8n32k16 for 16-bit inputs, m16n16k8 "
                          "for tf32")
        return
    if p["BK"] % p["FRAG_K"]:
        yield ConfigError("BK", p["BK"], f"a multiple of FRAG_K={p['FRAG_K']} (whole WMMA k-steps per stage)")
    for pad in ("A_PAD", "B_PAD"):
        if p[pad] * _esize(dtype) % 16:
            yield ConfigError(pad, p[pad], "a multiple of 16 bytes (8 halves, 4 floats): cp.async and WMMA loads "
                              "need 16-byte aligned shared-memory rows")
    if not p["ASYNC"] and p["STAGES"] != 1:
        yield ConfigError("STAGES", p["STAGES"], "1 when ASYNC=0 (only cp.async copies stay in flight across "
                          "stages)")
    if p["RBUF"] and p["BK"] < 2 * p["FRAG_K"]:
        yield ConfigError("RBUF", p["RBUF"], "0 unless BK >= 2 * FRAG_K (register double-buffering alternates "
                          "fragments between the k-steps of a stage)")
    total = shared_bytes(p, dtype, acc)
    if not p["DSMEM"] and total > STATIC_SMEM_LIMIT:
        yield ConfigError("DSMEM", p["DSMEM"], f"1 (dynamic shared memory): static shared memory is limited to "
                          f"48 KB and this tile needs {total} bytes")
    if threads(p) > 1024:
        return  # the block-size check names the problem
    regs, budget = fragment_registers(p, dtype, acc), register_budget(p)
    if regs > budget:
        yield ConfigError("FRAGS_N", p["FRAGS_N"], f"fewer fragments per warp: accumulators and operand fragments "
                          f"take more registers per thread than the block size leaves (the rest would spill): "
                          f"{regs} of {budget} at {threads(p)} threads")


def min_cc(p, dtype: str, acc: str) -> int:
    """fp16 WMMA runs on Volta; cp.async, bf16 and tf32 need Ampere."""
    return 80 if p["ASYNC"] or dtype != "float16" else 70


WMMA = Family(
    name="wmma",
    template="wmma.cu.j2",
    doc="nvcuda::wmma tensor cores: warp tiles of fragments, multi-stage cp.async, padded shared memory",
    params=(
        Param("FRAG_M", 16, "rows of a WMMA fragment", choices=(8, 16, 32)),
        Param("FRAG_N", 16, "columns of a WMMA fragment", choices=(8, 16, 32)),
        Param("FRAG_K", 16, "k depth of a WMMA fragment (8 for tf32)", choices=(8, 16)),
        Param("WARPS_M", 4, "warps along M in a block", lo=1, hi=16),
        Param("WARPS_N", 2, "warps along N in a block", lo=1, hi=16),
        Param("FRAGS_M", 2, "accumulator fragments along M per warp", lo=1, hi=8),
        Param("FRAGS_N", 4, "accumulator fragments along N per warp", lo=1, hi=8),
        Param("BK", 16, "K depth of a shared-memory stage, elements", lo=8, hi=128),
        Param("A_PAD", 8, "elements added to each shared-memory row of A (bank-conflict padding)", lo=0, hi=32),
        Param("B_PAD", 8, "elements added to each shared-memory row of B (bank-conflict padding)", lo=0, hi=32),
        Param("STAGES", 2, "shared-memory buffers in the pipeline (1: load, then compute)", lo=1, hi=5),
        flag("ASYNC", "stage tiles with cp.async (else plain 16-byte loads)", default=1),
        flag("DSMEM", "dynamic shared memory (needed beyond 48 KB)"),
        flag("RBUF", "double-buffer operand fragments in registers across the k-steps of a stage"),
        block_swizzle_param(),
    ),
    dtypes=_DTYPES,
    threads=threads,
    tile=tile,
    smem_bytes=smem_bytes,
    align=lambda p, dtype: vec(dtype),  # 16-byte copies along K and N, 16-byte epilogue accesses along N
    rules=(_rules,),
    min_cc=min_cc,
    needs_mma_headers=True,
    renamed={**RENAMED_BLOCK_SWIZZLE, "WM": "FRAG_M", "WN": "FRAG_N", "WK": "FRAG_K"},
)

FAMILIES = (WMMA,)

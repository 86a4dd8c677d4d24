"""The mma.sync family on the CPU: its rules, their static_assert mirrors, the PTX it emits, spill-free
compiles of its catalogue entries, and a model of its shared-memory addressing (bank conflicts)."""
import re

import pytest

from cupy_gemm import compile as compile_mod, registry
from cupy_gemm.errors import CompileError, ConfigError
from cupy_gemm.families import mma
from cupy_gemm.registry import Variant, make_variant

FAMILY = registry.family("mma")
VARIANTS = {n: v for n, v in registry.catalogue().items() if v.family is FAMILY}
BASE = dict(WARPS_M=2, WARPS_N=4, WARP_TILE_M=4, WARP_TILE_N=4, BK=32, STAGES=3, A_PAD=8, B_PAD=8)

# (parameter overrides, dtype, acc, parameter named by the error, words of the rule)
BROKEN = [
    (dict(BK=24), "float16", "float32", "BK", "multiple of the k depth of one mma.sync"),
    (dict(BK=12), "float32", "tf32", "BK", "multiple of the k depth of one mma.sync"),
    (dict(BK=16, RBUF=1), "float16", "float32", "BK", "even number of mma k steps when RBUF=1"),
    (dict(STAGES=1, RBUF=1, BK=32), "float16", "float32", "RBUF", "0 when STAGES=1"),
    (dict(WARP_TILE_N=3, B_X4=1), "float16", "float32", "WARP_TILE_N", "even when B_X4=1"),
    (dict(A_PAD=4), "float16", "float32", "A_PAD", "multiple of 16 bytes"),
    (dict(B_PAD=2), "float32", "tf32", "B_PAD", "multiple of 16 bytes"),
    (dict(SMEM_SWIZZLE=1), "float16", "float32", "A_PAD", "0 when SMEM_SWIZZLE=1"),
    (dict(SMEM_SWIZZLE=1, A_PAD=0, B_PAD=0, BK=48), "float16", "float32", "BK", "power-of-two number of 16-byte chunks"),
    (dict(SMEM_SWIZZLE=1, A_PAD=0, B_PAD=0, WARPS_N=1, WARP_TILE_N=2, BK=16), "float32", "tf32", "WARP_TILE_N",
     "power-of-two number of 16-byte chunks per row, at least 2 (8 for tf32)"),
    (dict(BK=48), "float16", "float32", "BK", "divides the thread count"),
    (dict(WARP_TILE_N=3), "float16", "float32", "WARP_TILE_N", "divides the thread count"),
    (dict(WARPS_M=1, WARPS_N=1, WARP_TILE_M=8, WARP_TILE_N=8), "float16", "float32", "WARP_TILE_N",
     "at most 128 accumulator registers"),
]


@pytest.mark.parametrize("overrides,dtype,acc,param,words", BROKEN, ids=[b[3] + ":" + b[4][:24] for b in BROKEN])
def test_rules_name_the_parameter(overrides, dtype, acc, param, words):
    with pytest.raises(ConfigError, match=re.escape(words)) as info:
        make_variant(FAMILY, "broken", dtype, {**BASE, **overrides}, acc)
    assert info.value.param == param


@pytest.mark.parametrize("overrides,dtype,acc,param,words", BROKEN, ids=[b[3] + ":" + b[4][:24] for b in BROKEN])
def test_template_repeats_each_rule(overrides, dtype, acc, param, words):
    """Rendered without the Python check, the template refuses the same parameters in the same words."""
    params = FAMILY.complete({**BASE, **overrides})
    variant = Variant(name="unchecked", family=FAMILY, dtype=dtype, acc=acc, params=params)
    with pytest.raises(CompileError, match=re.escape(words)):
        compile_mod.compile_variant(variant, "compute_80")


def test_launch_shape_and_alignment():
    p = FAMILY.complete(dict(BASE, WARP_TILE_N=8, BK=64, STAGES=3, A_PAD=0, B_PAD=0, SMEM_SWIZZLE=1))
    assert FAMILY.tile(p) == (128, 256) and FAMILY.threads(p) == 256
    # three stages of A (128x64) and B (64x256) halves outgrow the staged float32 C tile (128 x 264)
    assert FAMILY.smem_bytes(p, "float16", "float32") == 3 * (128 * 64 + 64 * 256) * 2
    assert FAMILY.smem_bytes(dict(p, STAGES=1), "float16", "float32") == 128 * (256 + mma.C_PAD) * 4
    assert FAMILY.align(p, "float16") == FAMILY.align(p, "bfloat16") == 8 and FAMILY.align(p, "float32") == 4
    assert FAMILY.align(dict(p, UNALIGNED=1), "float16") == FAMILY.align(dict(p, UNALIGNED=1), "float32") == 1
    assert FAMILY.min_cc(p, "float16", "float32") == 80


def test_float16_accumulates_in_float32_by_default():
    assert make_variant(FAMILY, "default_acc", "float16", BASE).acc == "float32"
    with pytest.raises(ConfigError, match="acc"):
        make_variant(FAMILY, "bad_acc", "float32", BASE, "float32")


def _ptx(variant):
    return compile_mod.compile_variant(variant, "compute_80").image.decode(errors="replace")


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_ptx_uses_the_promised_instructions(name):
    v = VARIANTS[name]
    ptx = _ptx(v)
    shape = {"tf32": "m16n8k8.row.col.f32.tf32.tf32.f32", "float16": "m16n8k16.row.col.f16.f16.f16.f16"}.get(
        v.acc, "m16n8k16.row.col.f32.bf16.bf16.f32" if v.dtype == "bfloat16" else "m16n8k16.row.col.f32.f16.f16.f32")
    assert f"mma.sync.aligned.{shape}" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    if v.params["UNALIGNED"]:  # through registers: 16-byte loads where aligned, guarded elements elsewhere
        assert "cp.async.cg.shared.global" not in ptx and "ld.global.nc.v4.u32" in ptx
        assert ("ld.global.nc.u32" if v.acc == "tf32" else "ld.global.nc.u16") in ptx
    else:
        assert "cp.async.cg.shared.global" in ptx
    if v.acc == "tf32":
        assert "cvt.rna.tf32.f32" in ptx
    elif v.params["B_X4"]:
        assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    else:
        assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx


# ---- a model of the template's shared-memory addressing ------------------------------------------

def _swizzle_chunk(chunks, row, chunk):  # templates/common/smem_swizzle.cuh
    if chunks >= 8:
        r = row & 7
        return chunk ^ (((r & 3) << 1) | (r >> 2))
    return chunk ^ ((row // (8 // chunks)) & (chunks - 1))


def _layout(v):
    p, esize = v.params, 2 if v.dtype != "float32" else 4
    vec = 16 // esize
    bm, bn = FAMILY.tile(p)

    def offset(stride, chunks, row, col):  # element offset, as tile_offset in the template
        if p["SMEM_SWIZZLE"]:
            return row * stride + _swizzle_chunk(chunks, row, col // vec) * vec + col % vec
        return row * stride + col

    a_stride, b_stride = p["BK"] + p["A_PAD"], bn + p["B_PAD"]
    a_elems = bm * a_stride
    a = lambda r, c: offset(a_stride, p["BK"] // vec, r, c) * esize
    b = lambda r, c: (a_elems + offset(b_stride, bn // vec, r, c)) * esize
    return p, vec, a, b


def _distinct_groups(addresses):  # one ldmatrix phase: 8 rows of 16 bytes, conflict-free in 8 groups
    return len({(x // 16) % 8 for x in addresses}) == len(addresses)


def _conflict_free_reads(v):
    p, vec, a, b = _layout(v)
    kstep = 8 if v.acc == "tf32" else 16
    for warp in range(p["WARPS_M"] * p["WARPS_N"]):
        wm, wn = warp // p["WARPS_N"], warp % p["WARPS_N"]
        for ks in range(p["BK"] // kstep):
            for i in range(p["WARP_TILE_M"]):
                lanes = [a(wm * p["WARP_TILE_M"] * 16 + i * 16 + (l & 15), (ks * 2 + (l >> 4)) * vec) for l in range(32)]
                if not all(_distinct_groups(lanes[8 * q:8 * q + 8]) for q in range(4)):
                    return f"A ldmatrix, warp {warp} ks {ks} tile {i}"
            for j in range(p["WARP_TILE_N"]):
                n0 = (wn * p["WARP_TILE_N"] + j) * 8
                if v.acc == "tf32":
                    for half in (0, 4):
                        words = [b(ks * 8 + (l & 3) + half, n0 + (l >> 2)) // 4 % 32 for l in range(32)]
                        if len(set(words)) != 32:
                            return f"B ld.shared.b32, warp {warp} ks {ks} tile {j}"
                elif p["B_X4"] and j % 2 == 0 or not p["B_X4"]:
                    span = 32 if p["B_X4"] else 16
                    lanes = [b(ks * 16 + (l & 15), n0 + (l >> 4) * 8) for l in range(span)]
                    if not all(_distinct_groups(lanes[8 * q:8 * q + 8]) for q in range(span // 8)):
                        return f"B ldmatrix.trans, warp {warp} ks {ks} tile {j}"
    return None


PADDED_OR_SWIZZLED = sorted(n for n, v in VARIANTS.items() if v.params["SMEM_SWIZZLE"] or v.params["A_PAD"])


@pytest.mark.parametrize("name", PADDED_OR_SWIZZLED)
def test_fragment_loads_are_bank_conflict_free(name):
    assert _conflict_free_reads(VARIANTS[name]) is None


def test_the_model_sees_conflicts_without_padding_or_swizzle():
    v = make_variant(FAMILY, "unpadded", "float16", dict(BASE, A_PAD=0, B_PAD=0))
    assert _conflict_free_reads(v) is not None


@pytest.mark.parametrize("name", sorted(n for n, v in VARIANTS.items() if v.params["SMEM_SWIZZLE"]))
def test_swizzled_copies_are_bank_conflict_free(name):
    """Each group of 8 threads storing 16-byte cp.async chunks covers all 8 bank groups."""
    v = VARIANTS[name]
    p, vec, a, b = _layout(v)
    bm, bn = FAMILY.tile(p)
    threads = FAMILY.threads(p)
    for store, chunks, rows in ((a, p["BK"] // vec, bm), (b, bn // vec, p["BK"])):
        for first in range(0, min(threads, rows * chunks), 8):
            addrs = [store(t // chunks, (t % chunks) * vec) for t in range(first, first + 8)]
            assert _distinct_groups(addrs), (name, first)


SHAPES = [dict(BASE, WARP_TILE_N=n, BK=bk, A_PAD=pad, B_PAD=pad, SMEM_SWIZZLE=swz, B_X4=x4)
          for n in (1, 2, 4, 8) for bk in (16, 32, 64) for pad, swz in ((8, 0), (0, 1)) for x4 in (0, 1)
          if not (x4 and n % 2)]
# tile widths that are no power of two (padding only): 3 warps along M make the thread count divisible
SHAPES += [dict(BASE, WARPS_M=3, WARPS_N=1, WARP_TILE_N=n, B_X4=x4) for n in (3, 6) for x4 in (0, 1)
           if not (x4 and n % 2)]


@pytest.mark.parametrize("params", SHAPES, ids=lambda p: f"m{p['WARPS_M']}n{p['WARP_TILE_N']}k{p['BK']}s{p.get('SMEM_SWIZZLE', 0)}x{p.get('B_X4', 0)}")
def test_fragment_address_shortcuts(params):
    """load_frags steps from k step 0 and n8 tile 0 by an XOR (swizzle) or an add (padding); both agree
    with the full tile_offset for every lane, k step and tile."""
    v = make_variant(FAMILY, "shortcut", "float16", params)
    p, vec, a, b = _layout(v)
    bm, _ = FAMILY.tile(p)
    a_stride, b_stride = p["BK"] + p["A_PAD"], FAMILY.tile(p)[1] + p["B_PAD"]
    a_elems, n_tiles = bm * a_stride, p["WARP_TILE_N"]
    for warp in range(p["WARPS_M"] * p["WARPS_N"]):
        wm, wn = warp // p["WARPS_N"], warp % p["WARPS_N"]
        for lane in range(32):
            a_row = wm * p["WARP_TILE_M"] * 16 + (lane & 15)
            a0 = a(a_row, (lane >> 4) * vec)
            half = (lane >> 4) if p["B_X4"] else 0
            b0 = b(lane & 15, (wn * n_tiles + half) * 8) - a_elems * 2
            for ks in range(p["BK"] // 16):
                a_ks = a0 ^ (ks * 32) if p["SMEM_SWIZZLE"] else a0 + ks * 32
                for i in range(p["WARP_TILE_M"]):
                    assert a_ks + i * 16 * a_stride * 2 == a(a_row + i * 16, (ks * 2 + (lane >> 4)) * vec)
                for j in range(0, n_tiles, 2 if p["B_X4"] else 1):
                    full = b(ks * 16 + (lane & 15), (wn * n_tiles + j + half) * 8)
                    short = b0 ^ (j * 16) if p["SMEM_SWIZZLE"] else b0 + j * 16
                    assert short + (a_elems + ks * 16 * b_stride) * 2 == full

"""The mma.sync family on the CPU: its rules, their static_assert mirrors, the PTX it emits, spill-free
compiles of its catalogue entries, a model of its shared-memory addressing (bank conflicts), and split-K:
plain entries render as before it, split entries' launches, arguments and compiles."""
import re

import pytest

from cupy_gemm import (candidates, compile as compile_mod, dispatch, epilogue, launch, placement_rules, registry,
                       split_policy)
from cupy_gemm.errors import CompileError, ConfigError
from cupy_gemm.families import mma
from cupy_gemm.registry import Variant, make_variant
from cupy_gemm.render import _environment, context, render
from family_rules import b_placement

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
    (dict(SPLIT_K=2), "float16", "float16", "SPLIT_K", "1 when accumulating in float16"),
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
    if v.params["UNALIGNED"]:  # through registers: 16-byte loads where aligned
        assert "cp.async.cg.shared.global" not in ptx and "ld.global.nc.v4.u32" in ptx
        if v.acc == "tf32":  # a word at a time off 16 bytes
            assert "ld.global.nc.u32" in ptx
        else:  # 16-bit elements: aligned blocks shifted into place, never one element
            assert "shf.r.wrap.b32" in ptx and "ld.global.nc.u16" not in ptx
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


SHAPE_ID = lambda p: f"m{p['WARPS_M']}n{p['WARP_TILE_N']}k{p['BK']}s{p.get('SMEM_SWIZZLE', 0)}x{p.get('B_X4', 0)}"


@pytest.mark.parametrize("params", SHAPES, ids=SHAPE_ID)
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


# ---- split-K -----------------------------------------------------------------------------------------

# (the FEW_ROWS entries run the same kernels, for fewer rows than these tests' shapes)
SPLIT = sorted(n for n, v in VARIANTS.items() if v.params["SPLIT_K"] != 1 and not v.params["FEW_ROWS"])
PLAIN = sorted(n for n, v in VARIANTS.items() if v.params["SPLIT_K"] == 1)
GELU = epilogue.build("y = x + bias[j]", "gelu", operands={"bias": "col"})  # matmul(bias=, activation=)
SMS = 132


def _split(name, splits):
    v = VARIANTS[name]
    return make_variant(FAMILY, f"{name}_split{splits}", v.dtype, {**v.params, "SPLIT_K": splits}, v.acc)


def test_split_k_entries():
    """Named _splitk, the launcher's choice (SPLIT_K = 0), one per input type at least; the default stays 1."""
    assert FAMILY.split_k and FAMILY.split_k_args_optional and FAMILY.param_index["SPLIT_K"].default == 1
    for name, v in VARIANTS.items():
        assert name.endswith("_splitk") == (v.params["SPLIT_K"] != 1), name
    assert all(VARIANTS[n].params["SPLIT_K"] == 0 for n in SPLIT)
    assert {(VARIANTS[n].dtype, VARIANTS[n].acc) for n in SPLIT} == {
        ("float32", "tf32"), ("float16", "float32"), ("bfloat16", "float32")}
    assert {FAMILY.tile(VARIANTS[n].params) for n in SPLIT if VARIANTS[n].acc == "tf32"} == {(32, 64), (64, 64), (64, 128)}


def _without_split_k_blocks(text: str) -> str:
    """The template with each `{% if SPLIT_K != 1 %} ... {% endif %}` removed (nested ifs with it), and the
    newline after it that trim_blocks would drop: what the template was before split-K."""
    tags = re.compile(r"{%\s*(if\b[^%]*|endif\s*)%}")
    out, pos = [], 0
    while (start := text.find("{% if SPLIT_K != 1 %}", pos)) >= 0:
        depth, end = 0, start
        for tag in tags.finditer(text, start):
            depth += 1 if tag.group(1).startswith("if") else -1
            if depth == 0:
                end = tag.end() + (text[tag.end():tag.end() + 1] == "\n")
                break
        out.append(text[pos:start])
        pos = end
    return "".join(out) + text[pos:]


@pytest.mark.parametrize("name", PLAIN)
def test_plain_entries_render_as_before_split_k(name):
    """SPLIT_K = 1 renders the template minus its split-K blocks, byte for byte, batched or with an epilogue
    too: no split-K argument, step or header, so the compile cache and tuning entries (keyed by the source)
    still hold. (When split-K was added, every such source was also compared with the one rendered
    before: identical.)"""
    template = (registry.data_dir("templates") / FAMILY.template).read_text()
    before = _without_split_k_blocks(template)
    assert "SPLIT_K" not in before and "{% if SPLIT_K != 1 %}" in template
    environment = _environment()  # the library's Jinja settings
    v = VARIANTS[name]
    for w in (v, v.with_extras(batched=True), v.with_extras(epilogue=GELU), v.with_extras(batched=True, epilogue=GELU)):
        source = render(w)
        assert source == environment.from_string(before).render(**context(w))
        for text in ("splits", "workspace", "split_k", "SPLIT_K"):
            assert text not in source
    assert not FAMILY.takes_split_k_args(v.params)


@pytest.mark.parametrize("splits", [0, 3])
def test_split_entries_take_the_split_arguments(splits):
    v = _split(SPLIT[0], splits)
    source = render(v)
    assert FAMILY.takes_split_k_args(v.params)
    assert "int splits, void* __restrict__ workspace) {" in source and "split_k_arrive(" in source
    assert '#include' not in source or "split_k_partial(" in source


def test_split_steps_emit_the_counters_atomics():
    """The arrival's atomicAdd is in the split kernel's PTX and nowhere in the plain one's."""
    name = next(n for n in SPLIT if VARIANTS[n].acc == "tf32")
    assert "atom.global.add" in _ptx(VARIANTS[name])
    assert "atom.global" not in _ptx(_split(name, 1))


def test_float16_accumulation_does_not_split():
    v = VARIANTS["hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3"]
    for splits in (0, 2):
        with pytest.raises(ConfigError, match="1 when accumulating in float16") as info:
            make_variant(FAMILY, "half_split", "float16", {**v.params, "SPLIT_K": splits}, "float16")
        assert info.value.param == "SPLIT_K"
    make_variant(FAMILY, "half_plain", "float16", {**v.params, "SPLIT_K": 1}, "float16")


@pytest.mark.parametrize("name", SPLIT)
@pytest.mark.parametrize("splits,batch", [(2, 1), (3, 5), (7, 1)])
def test_split_grid_and_workspace(name, splits, batch):
    """One block per (tile, split, member): the split in blockIdx.y, the member in blockIdx.z; the workspace
    holds a counter and 8 split groups' counters per tile of every member, then splits × tiles fp32 partial
    tiles."""
    v = _split(name, splits).with_extras(batched=batch > 1)
    bm, bn = FAMILY.tile(v.params)
    m, n, k = 100, 1000, 5000
    tiles = -(-m // bm) * -(-n // bn)
    cfg = launch.launch_config(v, m, n, k, SMS, batch=batch)
    assert cfg.grid == (tiles, splits, batch) and cfg.splits == splits and cfg.tiles == tiles * batch
    counters = -(-tiles * batch * 36 // 256) * 256
    assert cfg.workspace == counters + splits * tiles * batch * bm * bn * 4


@pytest.mark.parametrize("name", SPLIT)
def test_split_counts(name):
    """Never more splits than K tiles; per shape (SPLIT_K = 0) small M×N with a deep K splits, big or
    shallow products do not."""
    v, bk = VARIANTS[name], VARIANTS[name].params["BK"]
    for splits in (2, 3, 7, 64):
        assert launch.launch_config(_split(name, splits), 64, 256, bk - 8, SMS).splits == 1
        assert launch.launch_config(_split(name, splits), 64, 256, 3 * bk + 8, SMS).splits == min(splits, 4)
    for m, n, k in [(16, 4096, 4096), (128, 4096, 11008), (64, 2048, 4096)]:
        assert launch.launch_config(v, m, n, k, SMS).splits > 1, (m, n, k)
    assert launch.launch_config(v, 4096, 4096, 4096, SMS).splits == 1
    min_k = split_policy.min_k_per_split(v)
    assert launch.launch_config(v, 16, 4096, 2 * min_k - 1, SMS).splits == 1


def test_plain_entries_launch_without_split_arguments():
    v = VARIANTS[PLAIN[0]]
    cfg = launch.launch_config(v, 16, 4096, 100000, SMS)
    assert cfg.splits == 1 and cfg.workspace == 0 and cfg.grid[1] == 1


def test_the_epilogue_argument_is_found_before_the_split_arguments():
    """Launch.args_epilogue: the EpilogueParams sits before `splits` and the workspace's slot, whatever the
    splits; last in a plain kernel."""
    per_shape = VARIANTS[SPLIT[0]].with_extras(epilogue=GELU)
    cases = [(per_shape, (4096, 4096, 4096), 1, 2),
             (_split(SPLIT[0], 3).with_extras(epilogue=GELU), (64, 512, 4096), 3, 2),
             (VARIANTS[PLAIN[0]].with_extras(epilogue=GELU), (64, 512, 4096), 1, 0)]
    for v, shape, splits, tail in cases:
        cfg = launch.launch_config(v, *shape, SMS)
        assert cfg.splits == splits
        args = tuple(range(11)) + ("epi",) + ("split-K",) * tail
        assert args[launch.Launch(None, cfg, args, v, None, ()).args_epilogue] == "epi"


@pytest.mark.parametrize("name", SPLIT)
def test_split_entries_compile_without_spills(name):
    """sm_80 and sm_90 each hold at least 2 blocks of every split-K entry: registers, shared memory."""
    v = VARIANTS[name]
    threads, smem = FAMILY.threads(v.params), FAMILY.smem_bytes(v.params, v.dtype, v.acc)
    for arch, sm_smem in (("sm_80", 164 * 1024), ("sm_90", 228 * 1024)):
        res = compile_mod.compile_variant(v, arch).resources
        assert (res.local, res.spill_stores, res.spill_loads) == (0, 0, 0), (arch, res)
        assert 2 * threads * (-(-res.registers // 8) * 8) <= 65536 and 2 * (smem + 1024) <= sm_smem, arch


# ---- mma_kmajor: B column-major (x @ W.T), read in place ---------------------------------------------
KMAJOR = registry.family("mma_kmajor")
KMAJOR_VARIANTS = {n: v for n, v in registry.catalogue().items() if v.family is KMAJOR}


def test_every_kmajor_entry_twins_an_entry_of_the_same_parameters():
    assert FAMILY.b_layout is None and KMAJOR.b_layout == "col" and KMAJOR.template == FAMILY.template
    assert set(KMAJOR.dtypes) == {"float16", "bfloat16"}  # the fragments come through ldmatrix: 16-bit
    for name, v in KMAJOR_VARIANTS.items():
        row = VARIANTS[name.replace("_kmajor", "")]
        assert (v.params, v.dtype, v.acc) == (row.params, row.dtype, row.acc), name
    wanted = {n for lists in candidates.candidates().values() for key in ("float16", "bfloat16")
              for n in lists[key] if n in VARIANTS}
    assert {n.replace("gemm_mma_", "gemm_mma_kmajor_") for n in wanted} <= set(KMAJOR_VARIANTS)
    p = KMAJOR_VARIANTS["hgemm_mma_kmajor_m16n8k16_mma2x2_warp2x4x2_stages3_unaligned_acc32"].params
    bm, bn = FAMILY.tile(p)  # B's tile is BN rows of BK + B_PAD
    assert KMAJOR.smem_bytes(p, "float16", "float32") == max(
        3 * (bm * (32 + 8) + bn * (32 + 8)) * 2, bm * (bn + mma.C_PAD) * 4)


@pytest.mark.parametrize("name", sorted(KMAJOR_VARIANTS))
def test_kmajor_fragments_come_through_plain_ldmatrix(name):
    v = KMAJOR_VARIANTS[name]
    assert "constexpr bool B_KMAJOR = 1;" in render(v)
    assert "constexpr bool B_KMAJOR = 0;" in render(VARIANTS[name.replace("_kmajor", "")])
    ptx = _ptx(v)
    assert "ldmatrix" in ptx and ".trans" not in ptx  # A and B alike
    assert ("cp.async.cg.shared.global" in ptx) != bool(v.params["UNALIGNED"])


@pytest.mark.parametrize("params", SHAPES, ids=SHAPE_ID)
def test_kmajor_fragment_addresses(params):
    """A K-major B's fragment addresses as load_frags steps them (an XOR or add per k step, rows 8 apart per
    n8 tile) agree with the full tile_offset, and each ldmatrix phase of 8 rows hits 8 distinct bank groups
    where the rows are padded or swizzled."""
    v = make_variant(KMAJOR, "kmajor", "float16", params)
    p = v.params
    vec, esize = 8, 2
    bm, bn = FAMILY.tile(p)
    stride, chunks, a_elems = p["BK"] + p["B_PAD"], p["BK"] // vec, bm * (p["BK"] + p["A_PAD"])

    def b(row, col):  # element (n = row, k = col) of the stage's B tile, in bytes
        chunk = _swizzle_chunk(chunks, row, col // vec) if p["SMEM_SWIZZLE"] else col // vec
        return (a_elems + row * stride + chunk * vec + col % vec) * esize

    for wn in range(p["WARPS_N"]):
        for ks in range(p["BK"] // 16):
            for j in range(0, p["WARP_TILE_N"], 2 if p["B_X4"] else 1):
                lanes = []
                for lane in range(32 if p["B_X4"] else 16):
                    row = wn * p["WARP_TILE_N"] * 8 + (lane & 7) + (lane >> 4) * 8
                    off0 = b(row, (lane >> 3 & 1) * vec) - a_elems * esize
                    off = off0 ^ (ks * 32) if p["SMEM_SWIZZLE"] else off0 + ks * 32
                    full = b(row + j * 8, ks * 16 + (lane >> 3 & 1) * 8)
                    assert a_elems * esize + off + j * 8 * stride * esize == full, (lane, ks, j)
                    lanes.append(full)
                if p["SMEM_SWIZZLE"] or p["B_PAD"]:
                    assert all(_distinct_groups(lanes[8 * q:8 * q + 8]) for q in range(len(lanes) // 8))


@pytest.mark.parametrize("name", sorted(n for n, v in KMAJOR_VARIANTS.items() if v.acc == "float32"))  # the default's
def test_a_column_major_b_goes_to_the_mma_twin(name):
    row = name.replace("_kmajor", "")
    v = VARIANTS[row]
    gpu = dispatch.Gpu("unknown GPU", 80)
    decision = candidates.Decision(row, "a table said so")
    col = b_placement(*((17 if v.max_rows() else 129), 1000, 33) if v.params["UNALIGNED"] else (512, 4096, 4096), "col", 2)
    chosen = placement_rules.b_layout(gpu, v.dtype, decision, col, ())
    assert chosen.variant == name and "B-layout rule" in chosen.reason
    assert not col.for_variant(KMAJOR_VARIANTS[name]).copies

"""Variants that read unaligned operands in place (UNALIGNED = 1), without a GPU: with the flag off the
templates render the catalogue's sources byte for byte as before; the new entries' rules, alignment and
spill-free compiles; operands used in place by align-1 kernels and the padding the others get, with its
cost; the dispatch rule that takes the unaligned entries, its explanation, and the prepared-call cache
that keys it by the operands' alignment."""
import jinja2
import pytest

from cupy_gemm import api, arrange, batched, batching, cli, dispatch, epilogue, operands, prepared, registry
from cupy_gemm.arrange import Placement, fresh, geometry
from cupy_gemm.compile import compile_variant
from cupy_gemm.dispatch import Gpu
from cupy_gemm.errors import ConfigError
from cupy_gemm.render import _environment, context, render
from fake_gpu import gpu  # noqa: F401  (the fixture)
from unaligned_paths import CATALOGUE, path_variants

FAMILIES = ("mma", "sgemm_simt", "skinny", "skinny_kmajor")  # the last two share one template
EXISTING = sorted(n for n, v in registry.catalogue().items()
                  if v.family.name in FAMILIES and not v.params["UNALIGNED"])
CUSTOM = epilogue.build("y = x * rowscale[i] + bias[j] + res[i, j] * s", "silu",
                        operands={"rowscale": "row", "bias": "col", "res": "full", "s": "scalar"})
H100 = Gpu("NVIDIA H100 80GB HBM3", 90, 132)  # has a dispatch table
KEYS = ("float16", "bfloat16", "float32", "tf32")


# ---- UNALIGNED = 0 adds not a byte -------------------------------------------------------------------------

def without_unaligned(text: str) -> str:
    """A template as UNALIGNED = 0 reads it: every `{% if UNALIGNED %}` block dropped, its `{% else %}` part
    kept, an `{% elif X %}` continuing as `{% if X %}`; block tags stand on lines of their own."""
    out, blocks = [], []  # per open block: "drop" (ours, being dropped), "keep" (ours, its else) or "other"
    for line in text.splitlines(keepends=True):
        tag = line.strip()
        if tag == "{% if UNALIGNED %}":
            blocks.append("drop")
            continue
        if tag.startswith("{% if ") and "{% endif %}" not in tag:
            blocks.append("other")
        elif blocks and blocks[-1] == "drop" and tag.startswith("{% elif "):
            blocks[-1] = "other"
            line = line.replace("{% elif ", "{% if ", 1)
        elif blocks and blocks[-1] == "drop" and tag == "{% else %}":
            blocks[-1] = "keep"
            continue
        elif tag == "{% endif %}" and blocks.pop() != "other":
            continue
        if "drop" not in blocks:
            out.append(line)
    return "".join(out)


def _stripped_environment() -> jinja2.Environment:
    root = registry.data_dir("templates")
    return _environment().overlay(loader=jinja2.FunctionLoader(
        lambda name: without_unaligned((root / name).read_text())))


def test_the_flag_lives_in_blocks_of_its_own():
    root = registry.data_dir("templates")
    for template in {registry.family(family).template for family in FAMILIES}:
        text = (root / template).read_text()
        stripped = without_unaligned(text)
        assert stripped != text and "UNALIGNED" not in stripped and "unaligned" not in stripped.lower()


@pytest.mark.parametrize("extras", ["plain", "batched", "epilogue", "batched+epilogue"])
def test_existing_entries_render_as_without_the_flag(extras):
    """Every catalogue entry of the two families renders exactly as its template without the UNALIGNED blocks:
    their sources (and so their compile caches and measurements) are what they were before the flag."""
    env = _stripped_environment()
    for name in EXISTING:
        v = registry.lookup(name)
        if ("batched" in extras and not v.family.batched) or ("epilogue" in extras and not v.family.epilogue):
            continue
        v = v.with_extras(batched="batched" in extras, epilogue=CUSTOM if "epilogue" in extras else None)
        expected = env.get_template(v.family.template).render(**context(v))
        assert render(v) == expected, name


# ---- the new entries -------------------------------------------------------------------------------------

def test_entries_read_any_alignment():
    assert len(CATALOGUE) >= 7
    for name in CATALOGUE:
        v = registry.lookup(name)
        assert "_unaligned" in name and v.family.template in {registry.family(f).template for f in FAMILIES}
        assert v.family.align(v.params, v.dtype) == 1
        aligned = dict(v.params, UNALIGNED=0)
        assert v.family.align(aligned, v.dtype) == 16 // {"float32": 4}.get(v.dtype, 2)
    assert {(registry.lookup(n).dtype, registry.lookup(n).acc) for n in CATALOGUE} == {
        ("float16", "float32"), ("bfloat16", "float32"), ("float32", "tf32"), ("float32", "float32")}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_flag_is_checked_like_every_parameter(family):
    fam = registry.family(family)
    dtype = next(iter(fam.dtypes))
    with pytest.raises(ConfigError) as info:
        registry.make_variant(fam, "bad", dtype, {"UNALIGNED": 2})
    assert info.value.param == "UNALIGNED"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", CATALOGUE)
def test_entries_compile_without_spills(name, arch):
    res = compile_variant(registry.lookup(name), arch).resources
    assert res.local == 0 and not res.spill_stores and not res.spill_loads, res


@pytest.mark.parametrize("name", sorted(path_variants()))
def test_every_template_path_compiles_batched_with_an_epilogue(name):
    v = path_variants()[name]
    assert compile_variant(v, "sm_80").resources.local == 0
    compile_variant(v.with_extras(batched=v.family.batched, epilogue=CUSTOM if v.family.epilogue else None), "sm_90")


# ---- operands: in place for align 1, padded (at a price) otherwise ---------------------------------------

def _ragged(gpu, what):
    """(a, b, out) of a 129×1000×33 float16 product: fresh, or views off every 16-byte boundary."""
    if what == "fresh":
        return gpu.array((129, 33), "float16"), gpu.array((33, 1000), "float16"), gpu.array((129, 1000), "float16")
    if what == "column slices":  # base pointers one element past a boundary, leading dimensions 34 and 1003
        return (gpu.array((129, 34), "float16")[:, 1:], gpu.array((33, 1003), "float16")[:, 3:],
                gpu.array((129, 1001), "float16")[:, 1:])
    # row slices of odd-length rows: bases an odd number of elements in
    return gpu.array((130, 33), "float16")[1:], gpu.array((34, 1001), "float16")[1:, :1000], \
        gpu.array((131, 1000), "float16")[2:, :]


@pytest.mark.parametrize("what", ["fresh", "column slices", "row slices"])
def test_align_1_takes_operands_where_they_lie(gpu, what):
    a, b, out = _ragged(gpu, what)
    ops = operands.resolve(a, b, out, "row", 1)
    assert ops.zero_copy and (ops.A, ops.B, ops.C) == (a, b, out) and not ops.arrangement.copies
    assert (ops.m, ops.n, ops.k) == (129, 1000, 33)
    assert (ops.lda, ops.ldb, ops.ldc) == tuple(x.strides[0] // 2 for x in (a, b, out))
    padded = arrange.arrange(geometry(a), geometry(b), geometry(out), "row", 8)
    assert padded.padded == (129, 40, 1000) and padded.copies


def test_the_price_of_padding():
    fp16 = lambda *shape: fresh(shape, 2)
    # K = 33: A and B into zero-padded buffers, one copy and one zero fill each; C written in place
    arr = arrange.arrange(fp16(129, 33), fp16(33, 1000), fp16(129, 1000), "row", 8)
    assert (arr.padded, arr.temp_c, arr.copy_launches) == ((129, 40, 1000), False, 4)
    assert arr.copy_bytes == 2 * (129 * 33 + 129 * 40 + 33 * 1000 + 40 * 1000)
    # N = 4095 as well: a padded C, copied back (not filled: beta = 0)
    arr = arrange.arrange(fp16(4095, 33), fp16(33, 4095), fp16(4095, 4095), "row", 8, beta_read=False)
    assert (arr.padded, arr.temp_c, arr.copy_launches) == ((4095, 40, 4096), True, 6)
    # an out no kernel can write (every other column): a temporary C, filled from out (beta != 0), copied back
    every_other = arrange.Geometry((64, 64), (256, 4), 2)
    arr = arrange.arrange(fp16(64, 64), fp16(64, 64), every_other, "row", 1, beta_read=True)
    assert arr.temp_c and not arr.padded and arr.copy_launches == 2 and arr.copy_bytes == 4 * every_other.nbytes
    # Fortran order throughout: the transposed problem is zero-copy (Cᵀ = Bᵀ·Aᵀ), also with K = 33
    fortran = lambda rows, cols: arrange.Geometry((rows, cols), (2, 2 * rows), 2)
    arr = arrange.arrange(fortran(64, 33), fortran(33, 64), fortran(64, 64), "row", 1)
    assert arr.swapped and not arr.copies


def test_a_ragged_n_is_not_padded_for_a_family_that_reads_b_k_major():
    """x @ W.T with W of 32001 rows: a family reading B K-major that takes any N (Family.ragged_n) takes W as
    it lies and writes C into a buffer of its own (its leading dimension aligned), copied back; others pad W."""
    fp16 = lambda *shape: fresh(shape, 2)
    x, w, c = fp16(16, 4096), fp16(32001, 4096), fp16(16, 32001)
    arr = arrange.arrange(x, w.T, c, "row", 8, "col", 16, beta_read=False, ragged_n=True)
    assert (arr.padded, arr.copy_a, arr.copy_b, arr.temp_c) == (None, False, False, True)
    assert (arr.copy_bytes, arr.copy_launches) == (2 * c.nbytes, 1)
    assert arrange.arrange(x, w.T, c, "row", 8, "col", 16, beta_read=False).padded == (16, 4096, 32008)
    # an output view whose leading dimension is aligned is still not written in place: stores of column
    # pairs past an odd N would reach the columns beside it; an aligned N is written in place
    view = arrange.Geometry((16, 32001), (2 * 32008, 2), 2)
    assert arrange.arrange(x, w.T, view, "row", 8, "col", 16, ragged_n=True).temp_c
    view = arrange.Geometry((16, 32000), (2 * 32008, 2), 2)
    assert not arrange.arrange(x, fp16(32000, 4096).T, view, "row", 8, "col", 16, ragged_n=True).copies
    # a kernel storing C element by element (Family.scalar_c) writes it where it lies, whatever its stride
    arr = arrange.arrange(x, w.T, c, "row", 8, "col", 16, ragged_n=True, scalar_c=True)
    assert not arr.copies
    # and whatever its layout: W @ x with x of 8 columns, swapped, writes Cᵀ (column-major) in place
    arr = arrange.arrange(fp16(32001, 4096), fp16(8, 4096).T, fp16(32001, 8), "row", 8, "col", 16,
                          ragged_n=True, scalar_c=True)
    assert arr.swapped and not arr.copies
    assert arrange.arrange(fp16(32001, 4096), fp16(8, 4096).T, fp16(32001, 8), "row", 8, "col", 16,
                           ragged_n=True).temp_c
    # a family that stores C at any stride when rendered for it (Family.unaligned_c) writes it in place, also
    # an output view at a ragged N; an aligned C needs no such rendering
    for given in (c, arrange.Geometry((16, 32001), (2 * 32008, 2), 2, 6)):
        arr = arrange.arrange(x, w.T, given, "row", 8, "col", 16, ragged_n=True, unaligned_c=True)
        assert not arr.copies and arr.unaligned_c, given
    arr = arrange.arrange(x, fp16(32000, 4096).T, view, "row", 8, "col", 16, ragged_n=True, unaligned_c=True)
    assert not arr.copies and not arr.unaligned_c
    # a row-major B is copied into the family's layout, not padded; an odd K still pads
    arr = arrange.arrange(x, fp16(4096, 32001), c, "row", 8, "col", 16, ragged_n=True)
    assert arr.padded is None and arr.copy_b
    assert arrange.arrange(fp16(16, 4095), fp16(32001, 4095).T, c, "row", 8, "col", 16, ragged_n=True).padded



def test_how_c_is_written_in_place():
    """arrange.c_placement, the one rule for C that arrange and the batched path share."""
    place = arrange.c_placement
    c, odd = fresh((16, 32000), 2), fresh((16, 32001), 2)
    off = arrange.Geometry((16, 32000), (2 * 32000, 2), 2, 6)  # rows start 6 bytes off 16
    fortran = arrange.Geometry((16, 32001), (2, 32), 2)
    assert place(c, "row", 8) == "aligned"
    assert place(c, "row", 8, ragged=True) is None  # vector stores would pass a ragged N's end
    assert place(c, "row", 8, ragged=True, unaligned_c=True) == "unaligned"
    assert place(odd, "row", 8) is None and place(odd, "row", 8, unaligned_c=True) == "unaligned"
    assert place(off, "row", 8) is None and place(off, "row", 8, unaligned_c=True) == "unaligned"
    # no kernel of one layout writes the other in place, unless it stores at any strides
    assert place(fortran, "row", 8, unaligned_c=True) is None
    assert place(fortran, "row", 8, scalar_c=True) == place(fortran, "col", 8, scalar_c=True) == "aligned"
    assert place(arrange.Geometry((16, 8), (3, 48), 2), "row", 8, scalar_c=True) is None  # odd byte strides

@pytest.mark.parametrize("key", ("float16", "bfloat16", "tf32"))
def test_an_odd_vocabulary_is_read_in_place_by_the_default(key):
    """x @ W.T with W of 32001 rows (decode and prefill) and A @ x with A of 50257 rows (swapped, A the
    K-major B): the 16-bit and tf32 defaults run on a family that takes any N, reading W (A) in place
    (exact fp32 takes CUDA-core kernels, which align N by padding)."""
    size = 2 if key in ("float16", "bfloat16") else 4
    for m, n, k, col in ((16, 32001, 4096, True), (2048, 32001, 4096, True), (50257, 8, 768, False)):
        b = fresh((n, k), size).T if col else fresh((k, n), size)
        placement = Placement(fresh((m, k), size), b, fresh((m, n), size))
        decision = dispatch.choose(H100, key, m, n, k, placement=placement)
        v = registry.lookup(decision.variant)
        arr = placement.for_variant(v)
        assert not arr.padded and not arr.copy_b and arr.swapped == (not col), (key, m, n, k, decision)
        # C is the caller's: stored element by element (also the swapped product's Cᵀ), or at its odd stride
        # by a rendering for it (Family.unaligned_c)
        assert v.family.ragged_n and not arr.temp_c, (key, m, n, k, decision)
        assert arr.unaligned_c == (not v.family.scalar_c and n % 2 == 1), (key, m, n, k, decision)


@pytest.mark.parametrize("key", KEYS)
def test_a_batch_of_weights_stored_n_by_k_takes_the_k_major_twin(gpu, key, monkeypatch):
    """x @ W.T per member (each expert's or head's own weight, stored N×K): the default batch takes the
    K-major twin of its entry, which reads every member in place; with W stored K×N, the entry itself."""
    if key == "bfloat16":
        pytest.importorskip("ml_dtypes")  # NumPy's bfloat16 dtype, which CuPy's arrays of it need
    choose = lambda w, matrices: batched._choose(None, None, batching.plan(x.shape, x.strides, w.shape, w.strides,
                                                                           itemsize=x.itemsize),
                                                 x.dtype, prepared.device_of(0), None, ("batched",), None, matrices)
    monkeypatch.setenv("CUPY_TF32", "1" if key == "tf32" else "0")
    dtype = "float32" if key == "tf32" else key
    x, out = gpu.array((3, 70, 264), dtype), gpu.array((3, 70, 1001), dtype)
    for w, col in ((gpu.array((3, 1001, 264), dtype).transpose(0, 2, 1), True), (gpu.array((3, 264, 1001), dtype), False)):
        v, plain = choose(w, (x, w, out)), choose(w, None)
        if col:
            placement = Placement(*(geometry(y[0]) for y in (x, w, out)))
            assert v.family.batched and not placement.for_variant(v, align=1).copy_b, (key, v.name)
            assert v == plain or placement.for_variant(plain, align=1).copy_b, (key, plain.name)  # (tf32's reads it)
        else:
            assert v == plain, (key, v.name)


@pytest.mark.parametrize("m,swapped", [(64, True), (512, True), (4096, False)])
def test_x_at_w_transposed_copies_the_lesser_operand(m, swapped):
    """x @ W.T with W stored N×K, for a kernel reading B row-major: either copy W, or multiply Wᵀ's
    transpose (Cᵀ = W·xᵀ) and copy x and C. Whichever moves fewer bytes serves."""
    n, k = 14336, 4096
    x, w, c = fresh((m, k), 4), fresh((n, k), 4), fresh((m, n), 4)
    arr = arrange.arrange(x, w.T, c, "row", 4, beta_read=False)
    assert arr.swapped == swapped
    copy_w = 2 * w.nbytes
    assert arr.copy_bytes == (2 * x.nbytes + 2 * c.nbytes if swapped else copy_w) and arr.copy_bytes <= copy_w
    assert arr.temp_c == swapped and arr.copy_b  # in the swapped product, xᵀ is the B that is copied


# ---- dispatch: the unaligned rule ----------------------------------------------------------------------

def _placement(m, n, k, key, a=None):
    size = 2 if key in ("float16", "bfloat16") else 4
    return Placement(a or fresh((m, k), size), fresh((k, n), size), fresh((m, n), size))


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("where", [H100, Gpu("unknown GPU", 90), Gpu("unknown GPU", 80, 108)],
                         ids=["H100 table", "Hopper", "Ampere"])
def test_small_ragged_products_take_an_unaligned_entry(key, where):
    for m, n, k in [(129, 1000, 33), (64, 64, 63), (300, 300, 301), (4095, 4095, 33), (17, 4096, 4095)]:
        decision = dispatch.choose(where, key, m, n, k, placement=_placement(m, n, k, key))
        v = registry.lookup(decision.variant)
        assert v.params["UNALIGNED"], (m, n, k, decision)
        if not decision.reason.startswith("dispatch table"):  # a table may name an unaligned entry itself
            assert decision.reason.startswith("unaligned operands"), (m, n, k, decision)
            assert decision.variant == _fittest(key, m, n)
        if key == "float32":  # exact fp32 stays on CUDA cores
            assert v.family.name == "sgemm_simt" and v.acc == "float32"


def _fittest(key, m, n):
    """The unaligned entry the rule should take for an m×n C: the first listed of those whose tiles hold m
    (a few-rows entry: the smaller of m and n) with the fewest rows, else the first of the tallest."""
    listed = dispatch.candidates()["unaligned"][key]
    rows = {name: registry.lookup(name).family.tile(registry.lookup(name).params)[0] for name in listed}
    held = {name: m if registry.lookup(name).max_rows() is None else min(m, n) for name in listed}
    holding = [name for name in listed if rows[name] >= held[name]]
    if holding:
        return next(name for name in holding if rows[name] == min(rows[h] for h in holding))
    return next(name for name in listed if rows[name] == max(rows.values()))


@pytest.mark.parametrize("key", KEYS)
def test_the_rule_takes_the_tile_that_fits_m(key):
    """Each list has a 32-row tile: it serves 9 to 32 rows (fewer where a few-rows entry covers them, 1 and
    2 rows in 16 bits, up to 8 in float32 and tf32), a 64-row tile from 33 on."""
    hopper = Gpu("unknown GPU", 90)
    few = {"float16": 2, "bfloat16": 2, "float32": 8, "tf32": 8}[key]
    for m in (1, 2, 3, 8, 9, 17, 32, 33, 64, 129):
        decision = dispatch.choose(hopper, key, m, 1001, 1001, placement=_placement(m, 1001, 1001, key))
        v = registry.lookup(decision.variant)
        rows = v.family.tile(v.params)[0]
        assert v.params["UNALIGNED"] and (rows == 64 if m > 32 else rows >= m), (m, decision)
        assert (v.family.name == "skinny") == (m <= few) and (rows == 32 or m <= few or m > 32), (m, decision)
        assert decision.variant == _fittest(key, m, 1001) and "fits M best" in decision.reason


@pytest.mark.parametrize("key", KEYS)
def test_few_columns_take_a_few_rows_entry_swapped(key):
    """A @ x with x of few columns and an odd K (or M): a few-rows entry, which swaps A and B (the skinny
    kernels; up to 32 columns the 32-row tiles' `_rows32` twins, but for tf32), run by its K-major twin,
    which reads the tall A where it lies. 64-row tiles took these before (4095×1×4095 ran on tiles of 64
    columns with 63 of them empty); they keep the products whose swap would copy x and C for more than
    the product costs."""
    size = 2 if key in ("float16", "bfloat16") else 4
    swapped = [(4095, 1, 4095), (4096, 2, 4095), (50257, 1, 767), (4095, 3, 4095)]
    swapped += [(11008, 8, 4095), (14336, 17, 4095)] if key != "tf32" else []
    kept = [(1001, 8, 1001), (4095, 33, 1001)] + ([(11008, 8, 4095)] if key == "tf32" else [])
    for m, n, k in swapped + kept:
        placement = _placement(m, n, k, key)
        decision = dispatch.choose(H100, key, m, n, k, placement=placement)
        v = registry.lookup(decision.variant)
        arr = placement.for_variant(v)
        assert v.params["UNALIGNED"] and (v.max_rows() is not None) == ((m, n, k) in swapped), (m, n, k, decision)
        if (m, n, k) in swapped:  # the kernel's B is Aᵀ, read in place by the K-major twin; x and C may be copied
            assert arr.swapped and v.family.b_layout == "col" and not arr.padded, (m, n, k, decision)
            assert not arr.copy_b and arr.copy_bytes <= 4 * n * (m + k) * size, (m, n, k, decision)
        else:
            assert not arr.swapped and v.family.tile(v.params)[0] == 64 and not arr.copies, (m, n, k, decision)


@pytest.mark.parametrize("key", KEYS)
def test_large_or_aligned_products_keep_their_choice(key):
    hopper = Gpu("unknown GPU", 90)
    for m, n, k in [(2048, 2048, 2047), (129, 1000, 32), (128, 1024, 64), (4096, 4096, 4096)]:
        plain = dispatch.choose(hopper, key, m, n, k)
        decided = dispatch.choose(hopper, key, m, n, k, placement=_placement(m, n, k, key))
        assert decided.variant == plain.variant and decided.reason == plain.reason, (m, n, k)
    big = dispatch.choose(hopper, key, 2048, 2048, 2047, placement=_placement(2048, 2048, 2047, key))
    assert any("the copies cost less" in note for note in big.notes)


@pytest.mark.parametrize("key", KEYS)
def test_a_column_major_b_of_odd_k_is_read_in_place(key):
    """x @ W.T with W stored N×K and K odd: the layout's twin family reads W in place, and the unaligned rule,
    pricing that family's copies, takes its unaligned entry, so nothing is padded (a decode-sized product
    once padded K through a copy of B, 18× slower than cupy.matmul at 1×4096×4095, float16)."""
    size = 2 if key in ("float16", "bfloat16") else 4
    for m, n, k in [(1, 4096, 4095), (2, 32000, 4095), (4, 11008, 4095), (64, 4096, 4095)]:
        placement = Placement(fresh((m, k), size), fresh((n, k), size).T, fresh((m, n), size))
        decision = dispatch.choose(H100, key, m, n, k, placement=placement)
        v = registry.lookup(decision.variant)
        arr = placement.for_variant(v)
        # W is read where it lies (an arrangement may still swap and copy x, the lesser operand)
        assert v.params.get("UNALIGNED") and not arr.padded and arr.copy_bytes < n * k * size // 4, (m, n, k, decision)


def test_an_unaligned_view_of_an_aligned_shape_is_unaligned():
    """K and N are multiples of 8, but A starts one element past a 16-byte boundary (a[:, 1:])."""
    view = arrange.Geometry((129, 64), (130, 2), 2, 2)
    hopper = Gpu("unknown GPU", 90)  # no table: the heuristic's choice, then the rule
    decision = dispatch.choose(hopper, "float16", 129, 1024, 64, placement=_placement(129, 1024, 64, "float16", view))
    assert registry.lookup(decision.variant).params["UNALIGNED"]
    assert "priced as 1 launch)" in decision.reason  # one copy of A into a contiguous buffer


def test_the_costs():
    assert dispatch.kernel_cost("float16", 129, 1000, 33, 2) == 2 * (129 * 33 + 33 * 1000 + 129 * 1000)
    assert dispatch.kernel_cost("float16", 2048, 2048, 2047, 2) == 2 * 2048 * 2048 * 2047 // 128
    assert arrange.Arrangement(copy_bytes=10, copy_launches=2).traffic == 10 + 2 * arrange.COPY_LAUNCH_BYTES


def test_an_mma_sync_entry_pays_for_its_slower_arithmetic_against_wgmma():
    """A compute-bound ragged product stays on the padded wgmma tile: the unaligned mma.sync entry's slower
    arithmetic counts against it (placement_rules.MMA_SYNC_FLOPS_PER_BYTE). A small ragged product, or one
    whose default is no wgmma entry, still takes the unaligned entry."""
    h200 = dispatch.describe_gpu("NVIDIA H200", 90)
    for key, layout in (("float16", "row"), ("bfloat16", "col"), ("tf32", "col")):
        size = 2 if key != "tf32" else 4
        m, n, k = (1000, 1001, 4095) if key != "tf32" else (257, 8191, 8191)
        b = fresh((k, n), size) if layout == "row" else fresh((n, k), size).T
        placement = Placement(fresh((m, k), size), b, fresh((m, n), size))
        decision = dispatch.choose(h200, key, m, n, k, placement=placement)
        chosen = registry.lookup(decision.variant)
        assert chosen.family.name.startswith("wgmma") and placement.for_variant(chosen).padded, (key, decision)
        assert any("slower arithmetic" in note and "stays" in note for note in decision.notes), decision.notes
    small = dispatch.choose(h200, "float16", 129, 1000, 33, placement=_placement(129, 1000, 33, "float16"))
    assert registry.lookup(small.variant).params.get("UNALIGNED")
    fp32 = dispatch.choose(h200, "float32", 255, 255, 4095, placement=_placement(255, 255, 4095, "float32"))
    assert registry.lookup(fp32.variant).params.get("UNALIGNED")


def test_explain_tells_the_unaligned_rule(capsys):
    text = dispatch.explain("float16", 129, 1000, 33, ("unknown GPU", 90))
    assert "variant: hgemm_mma_" in text and "_unaligned" in text
    assert "why: unaligned operands:" in text and "priced as 4 launches" in text and "was the choice: heuristic" in text
    assert "operands taken as new contiguous arrays" in text
    text = dispatch.explain("float16", 129, 1000, 33, (H100.name, 90))  # the H100's table measured it so
    assert "_unaligned" in text.splitlines()[1] and "dispatch table" in text
    text = dispatch.explain("float16", 2048, 2048, 2047, (H100.name, 90))
    assert "_unaligned" not in text.splitlines()[1] and "the copies cost less" in text
    assert cli.main(["explain", "300x300x301", "--dtype", "float32", "--gpu", "Some GPU", "--cc", "80"]) == 0
    out = capsys.readouterr().out
    assert "variant: sgemm_t_" in out and "_unaligned" in out and "unaligned operands" in out


# ---- the API: decided once per geometry, operands in place -------------------------------------------------

def test_the_default_multiplies_ragged_operands_in_place(gpu):
    for what in ("fresh", "column slices", "fresh"):
        a, b, out = _ragged(gpu, what)
        api.matmul(a, b, out=out)
        (name,) = gpu.kernels
        assert registry.lookup(name).params["UNALIGNED"]
        _, _, args, _ = gpu.last_launch(name)
        assert [x.data.ptr for x in args[:3]] == [a.data.ptr, b.data.ptr, out.data.ptr]
        assert [int(x) for x in args[3:9]] == [129, 1000, 33, *(x.strides[0] // 2 for x in (a, b, out))]
    assert gpu.decisions == 2 and gpu.resolutions == 2  # the third call repeats the first's geometry


def test_alignment_decides_between_the_default_and_the_unaligned_entry(gpu):
    a, b = gpu.array((129, 64), "float16"), gpu.array((64, 1024), "float16")
    api.matmul(a, b)
    aligned = set(gpu.kernels)
    assert not any(registry.lookup(n).params.get("UNALIGNED") for n in aligned)
    view = gpu.array((129, 65), "float16")[:, 1:]  # the same shape, one element off
    for _ in range(2):
        api.matmul(view, b)
    (name,) = set(gpu.kernels) - aligned
    assert registry.lookup(name).params["UNALIGNED"] and len(gpu.kernels[name].launches) == 2
    assert gpu.decisions == 2


def test_unaligned_entries_are_in_the_dispatch_tables_candidates():
    from cupy_gemm import candidates
    timed = candidates.timed()
    for name in CATALOGUE:
        assert name in timed, name

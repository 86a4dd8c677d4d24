"""Split-K kernels on a GPU: every `_splitk` catalogue entry, with the splits the launcher picks and with
forced SPLIT_K, against float64 references on ragged, tall and skinny shapes; beta != 0, Fortran order,
NaN-poisoned outputs; bitwise repeatable results; two streams running split-K products at once."""
import cupy
import pytest

import cupy_gemm
from cupy_gemm import api, launch, registry, verify

try:
    import ml_dtypes  # noqa: F401  (NumPy's bfloat16 dtype, which CuPy uses)
except ImportError:
    ml_dtypes = None


def _runnable():
    if not cupy.cuda.is_available():
        return []
    cc = launch.compute_capability(cupy.cuda.Device())
    return [n for n, v in registry.catalogue().items()
            if v.family.split_k and v.params["SPLIT_K"] != 1 and v.runs_on(cc)
            and v.max_rows() is None  # the skinny families serve few rows: test_skinny_gpu.py
            and not v.family.stream_k(v.params)]  # its own partition, no forced splits: test_shared_tile_gpu.py


NEW = _runnable()
# ragged squares, tall and skinny products (small M or N, long K), K below one BK of every family
SHAPES = [(1, 1, 1), (17, 17, 17), (127, 127, 127), (1000, 1000, 1000), (4095, 4095, 4095),
          (16, 4096, 4096), (4096, 128, 4096), (128, 4096, 11008), (129, 1000, 33), (1, 4095, 4095), (70, 260, 3)]
FORCED_SHAPES = [(129, 1000, 33), (127, 4095, 1000), (16, 2048, 4095)]
SPLITS = [1, 2, 3, 7]


def _variant(name, splits=None):
    v = registry.lookup(name)
    if v.dtype == "bfloat16" and ml_dtypes is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    if splits is None:
        return v
    return registry.make_variant(v.family, f"{name}_split{splits}", v.dtype, {**v.params, "SPLIT_K": splits}, v.acc)


def _operands(v, m, n, k, seed, order="C"):
    return (verify.random_operand((m, k), v.dtype, seed, order), verify.random_operand((k, n), v.dtype, seed + 1, order))


def _check(v, a, b, *, c=None, alpha=1.0, beta=0.0, out=None):
    m, k = a.shape
    n = b.shape[1]
    if out is None:  # poisoned: an element no split wrote stays NaN
        out = c.copy() if beta != 0 else cupy.full((m, n), cupy.nan, dtype=a.dtype)
    ref, scale = verify.reference(a, b, c, alpha, beta)  # before the call: out may be c itself
    cupy_gemm.gemm(a, b, c, alpha=alpha, beta=beta, variant=v, out=out)
    verdict = verify.check(out, ref, scale, v.dtype, v.acc, k)
    assert verdict.ok, f"{v.name} {m}x{n}x{k} alpha={alpha} beta={beta}: {verdict}"
    return out


def _splits(v, m, n, k):
    """The splits the launcher picks for C-ordered operands of this shape, as launch.prepare does."""
    device = cupy.cuda.Device()
    registers = launch.load(v, device)[1].resources.registers
    return launch.launch_config(v, m, n, k, device.attributes["MultiProcessorCount"], registers).splits


@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", NEW)
def test_entries_with_the_launchers_splits(name, m, n, k):
    v = _variant(name)
    _check(v, *_operands(v, m, n, k, seed=m + 3 * n + 7 * k))


def test_skinny_shapes_do_split():
    """The per-shape policy splits the small-M products these entries are for (else this suite tests nothing
    new): at least one entry of each family splits 16×4096×4096."""
    split_families = {registry.lookup(n).family.name for n in NEW if _splits(registry.lookup(n), 16, 4096, 4096) > 1}
    assert split_families == {registry.lookup(n).family.name for n in NEW}


@pytest.mark.parametrize("splits", SPLITS)
@pytest.mark.parametrize("m,n,k", FORCED_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in FORCED_SHAPES])
@pytest.mark.parametrize("name", NEW)
def test_forced_splits(name, m, n, k, splits):
    v = _variant(name, splits)
    _check(v, *_operands(v, m, n, k, seed=splits + m + n + k))


CLUSTERED = [n for n in NEW if registry.lookup(n).family.cluster(registry.lookup(n).params) > 1]


@pytest.mark.parametrize("splits", [None, 2, 5])
@pytest.mark.parametrize("m,n,k", [(150, 1000, 4095), (193, 1536, 7000), (65, 576, 7168)])
@pytest.mark.parametrize("name", CLUSTERED)
def test_clusters_with_a_part_below_m(name, m, n, k, splits):
    """Split-K in clusters along M, where M ends inside a cluster tile: a block wholly below M keeps its own
    workspace tile and counter (cluster tile * CLUSTER + rank), and repeats give the same bytes."""
    v = _variant(name, splits)
    a, b = _operands(v, m, n, k, seed=71 + m)
    assert_repeats(v, a, b, _check(v, a, b), times=2)


@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize("name", NEW)
def test_alpha_beta(name, splits):
    """beta != 0 reads C once, in the last split's epilogue (wgmma: the register path, not TMA stores)."""
    check_alpha_beta(_variant(name, splits))


def check_alpha_beta(v):
    m, n, k = 200, 520, 4000
    a, b = _operands(v, m, n, k, seed=21)
    c = verify.random_operand((m, n), v.dtype, 23)
    _check(v, a, b, c=c, alpha=0.75, beta=-1.25)
    _check(v, a, b, c=c, alpha=-0.5)  # beta = 0 again: C is not read, the TMA-store path where there is one
    inplace = c.copy()
    _check(v, a, b, c=inplace, alpha=2.0, beta=0.5, out=inplace)


@pytest.mark.parametrize("name", NEW)
def test_fortran_order(name):
    """Fortran-ordered operands and output: the API computes Cᵀ = Bᵀ·Aᵀ, so the small M becomes the N."""
    check_fortran_order(_variant(name))


def check_fortran_order(v):
    m, n, k = 16, 1000, 4095
    a, b = _operands(v, m, n, k, seed=31, order="F")
    out = cupy.asfortranarray(cupy.full((m, n), cupy.nan, dtype=a.dtype))
    _check(v, a, b, out=out)
    c = verify.random_operand((m, n), v.dtype, 33, order="F")
    _check(v, a, b, c=c, alpha=1.5, beta=0.25)


@pytest.mark.parametrize("splits", [None, 7, 32])
@pytest.mark.parametrize("name", NEW)
def test_bitwise_repeatable(name, splits):
    """The partials are added in a fixed order whoever arrives last (7 in one level, 32 in two: groups of 6,
    templates/common/split_k.cuh): the same inputs give the same bytes, also after other split-K products have
    used (and reset) the workspace's counters."""
    v = _variant(name, splits)
    m, n, k = 64, 2048, 4096
    assert splits or _splits(v, m, n, k) > 1, "the shape must split"
    a, b = _operands(v, m, n, k, seed=41)
    first = _check(v, a, b)
    other = _variant(name, 2)
    _check(other, *_operands(other, 100, 300, 2000, seed=43))
    assert_repeats(v, a, b, first)


def assert_repeats(v, a, b, first, times=3):
    """The product of a and b by v, `times` more, gives first's bytes each time."""
    for _ in range(times):
        again = cupy_gemm.matmul(a, b, variant=v)
        assert bool((again.view(cupy.uint8) == first.view(cupy.uint8)).all()), f"{v.name}: results differ"


@pytest.mark.parametrize("name", NEW)
def test_two_streams_at_once(name):
    """Each stream has its own workspace: split-K products queued on two streams that run concurrently
    are both right, and so is a prepared plan called on a stream other than the one it was made on."""
    v = _variant(name, 4)
    shapes = [(48, 1024, 4096), (96, 512, 4096)]
    problems = [_operands(v, *shape, seed=51 + i) for i, shape in enumerate(shapes)]
    outs = [[cupy.full((a.shape[0], b.shape[1]), cupy.nan, dtype=a.dtype) for _ in range(4)] for a, b in problems]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in shapes]
    plans = []
    for s, stream in enumerate(streams):
        with stream:
            plans.append(cupy_gemm.plan(*problems[s], variant=v))
            plans[s]()  # the first call prepares the launch that later calls reuse
    cupy.cuda.Device().synchronize()
    for plan in plans:
        plan.out.fill(cupy.nan)
    cupy.cuda.Device().synchronize()
    for round_ in range(4):
        for s in range(2):
            with streams[s]:
                cupy_gemm.matmul(*problems[s], variant=v, out=outs[s][round_])
            with streams[1 - s]:  # plan s on the other stream, while product s runs on this one
                plans[s]()
    cupy.cuda.Device().synchronize()
    for s, (a, b) in enumerate(problems):
        ref, scale = verify.reference(a, b)
        for out in outs[s] + [plans[s].out]:
            verdict = verify.check(out, ref, scale, v.dtype, v.acc, a.shape[1])
            assert verdict.ok, f"{v.name} stream {s}: {verdict}"


def test_workspace_is_per_stream_with_zero_counters():
    device = cupy.cuda.Device()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]  # alive: their handles stay distinct
    buffers = []
    for stream in streams:
        with stream:
            buffers.append(launch.workspace(device, 1 << 20))
    assert buffers[0].data.ptr != buffers[1].data.ptr
    with streams[0]:
        buf = launch.workspace(device, 1 << 10, counter_bytes=256, partials=True)
        assert buf is buffers[0]  # reused, not reallocated
        buf[256:4096] = 7  # what a launch's partial tiles leave after its counters
        again = launch.workspace(device, 1 << 10, counter_bytes=1024)  # a launch with more tiles
        assert again is buf and int(cupy.count_nonzero(buf[:1024])) == 0
        assert int(cupy.count_nonzero(buf[1024:4096])) == 4096 - 1024  # only the counters were cleared
    streams[0].synchronize()


@pytest.mark.parametrize("name", NEW)
def test_more_tiles_after_fewer(name):
    """A split product with few tiles leaves partial tiles where a later one with more tiles keeps its
    counters: the later product must still be right (the launcher zeroes those counters first)."""
    v = _variant(name, 3)
    _check(v, *_operands(v, 64, 256, 3000, seed=61))
    _check(v, *_operands(v, 1000, 2000, 3000, seed=63))
    _check(v, *_operands(v, 64, 256, 3000, seed=65))

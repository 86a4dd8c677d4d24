"""The cache of prepared launches, on the CPU: CuPy arrays over fake addresses, a recording kernel.

A hit must launch with the new arrays' addresses and decide nothing again; anything a decision depends on
(strides, order, dtype, stream, device, out given or not, alpha, beta, variant, CUPY_TF32, alignment)
must miss. Performance is not asserted here; examples/host_overhead.py measures it on a GPU.
"""
import itertools
import time

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")

from cupy_gemm import api, dispatch, padding, prepared, registry  # noqa: E402
from cupy_gemm.errors import DTypeError, InputError  # noqa: E402
from cupy_gemm import launch  # noqa: E402
from fake_gpu import gpu  # noqa: E402,F401  (the fixture)

LAUNCHABLE = launch.launchable  # the fake GPU replaces it to keep arguments readable

ROW_KERNEL = "sgemm_sliced_k_f32"  # row-major pointer ABI, align 1
TMA_KERNEL = "hgemm_wgmma_m64n256k16_stages3_ws2"  # tensor maps: arguments embed addresses


def addresses(args):
    return [x.data.ptr for x in args[:3]]


def test_hit_launches_new_addresses_without_deciding_again(gpu):
    for i in range(3):
        a, b = gpu.array((64, 32), "float32"), gpu.array((32, 48), "float32")
        out = api.matmul(a, b, variant=ROW_KERNEL)
        grid, block, args, smem = gpu.last_launch(ROW_KERNEL)
        assert addresses(args) == [a.data.ptr, b.data.ptr, out.data.ptr]
        assert out.shape == (64, 48) and out.dtype == np.float32
        assert [int(x) for x in args[3:9]] == [64, 48, 32, 32, 48, 48]
    assert gpu.decisions == 1 and gpu.resolutions == 1
    assert len(gpu.kernels[ROW_KERNEL].launches) == 3


def test_fortran_operands_swap_on_hits_too(gpu):
    """Column-major a, b, out: the kernel computes Cᵀ = Bᵀ·Aᵀ, so A's slot holds b's address."""
    for _ in range(2):
        a, b = gpu.array((64, 32), "float32", "F"), gpu.array((32, 48), "float32", "F")
        out = gpu.array((64, 48), "float32", "F")
        api.matmul(a, b, variant=ROW_KERNEL, out=out)
        _, _, args, _ = gpu.last_launch(ROW_KERNEL)
        assert addresses(args) == [b.data.ptr, a.data.ptr, out.data.ptr]
        assert [int(x) for x in args[3:6]] == [48, 64, 32]  # the transposed problem: N×M×K
    assert gpu.decisions == 1 and gpu.resolutions == 1


def _variations(gpu):
    """Calls that each differ from the first in one thing a decision depends on."""
    def make(shape_a=(64, 32), dtype="float32", offset=0):
        return gpu.array(shape_a, dtype, offset=offset), gpu.array((32, 48), dtype)

    def on_stream():
        gpu.stream = 2
        return make()

    def on_device():
        gpu.device = 1
        return make()

    return {"shape": lambda: make((65, 32)), "strides": lambda: (make()[0], gpu.array((32, 64), "float32")[:, :48]), "dtype": lambda: make(dtype="float16"),
            "alignment": lambda: make(offset=4), "stream": on_stream, "device": on_device}


@pytest.mark.parametrize("what", ["shape", "strides", "dtype", "alignment", "stream", "device"])
def test_anything_a_decision_depends_on_misses(gpu, what):
    a, b = gpu.array((64, 32), "float32"), gpu.array((32, 48), "float32")
    api.matmul(a, b)
    assert gpu.decisions == 1
    a2, b2 = _variations(gpu)[what]()
    api.matmul(a2, b2)
    assert gpu.decisions == 2, f"a change of {what} reused a prepared launch"
    api.matmul(a2, b2)
    assert gpu.decisions == 2


def test_out_alpha_beta_variant_and_tf32_miss(gpu, monkeypatch):
    a, b = gpu.array((64, 32), "float32"), gpu.array((32, 48), "float32")
    api.matmul(a, b)
    calls = [lambda: api.matmul(a, b, out=gpu.array((64, 48), "float32")),
             lambda: api.gemm(a, b, alpha=2.0),
             lambda: api.matmul(a, b, variant=ROW_KERNEL),
             lambda: api.matmul(a, b, variant=api.get(ROW_KERNEL))]
    for i, make_call in enumerate(calls, start=2):
        make_call()
        assert gpu.decisions == i
    # a row-major TF32 default, so that this B needs no copy (copies need a GPU), and no small tile for it
    roles = dispatch.candidates()
    tf32 = "sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages3_dsmem"
    monkeypatch.setattr(dispatch, "candidates", lambda: {**roles, "default": {**roles["default"], "tf32": (tf32,)},
                                                         "small_tile": {**roles["small_tile"], "tf32": ()}})
    monkeypatch.setenv("CUPY_TF32", "1")
    api.matmul(a, b)
    assert gpu.decisions == len(calls) + 2
    assert gpu.kernels[tf32].launches, "CUPY_TF32=1 must reach a TF32 variant"


def test_checks_still_raise_on_a_hit(gpu):
    a, b = gpu.array((64, 32), "float32"), gpu.array((32, 48), "float32")
    out = gpu.array((64, 48), "float32")
    api.matmul(a, b, out=out)
    big = gpu.array((64, 48 + 32), "float32")
    with pytest.raises(InputError, match="overlaps a"):  # same key as above, but out aliases a
        api.matmul(big[:, :32], b, out=big[:, 32:])
    api.matmul(a, b, out=out)
    with pytest.raises(InputError, match="overlaps b"):
        api.matmul(a, out[:32, :48], out=out)
    with pytest.raises(DTypeError, match="same dtype"):
        api.matmul(a, gpu.array((32, 48), "float16"))
    with pytest.raises(InputError, match="inner dimensions"):
        api.matmul(a, gpu.array((33, 48), "float32"))
    with pytest.raises(DTypeError, match="cupy.asarray"):
        api.matmul(np.zeros((64, 32), np.float32), b)
    with pytest.raises(DTypeError, match="takes float16 inputs"):
        api.matmul(a, b, variant="hgemm_naive_f16")


def test_tensor_map_families_reuse_arguments_by_address(gpu):
    weights = [gpu.array((256, 512), "float16") for _ in range(3)]
    x = gpu.array((128, 256), "float16")
    outs = [gpu.array((128, 512), "float16") for _ in range(3)]
    for w, out in itertools.product(weights, outs):  # every (weight, output) address once: encodes maps
        api.matmul(x, w, variant=TMA_KERNEL, out=out)
        _, _, args, _ = gpu.last_launch(TMA_KERNEL)
        assert (args[0][1], args[1][1], args[2][1]) == (x.data.ptr, w.data.ptr, out.data.ptr)
    encodings, resolutions = gpu.encodings, gpu.resolutions
    for w, out in itertools.product(weights, outs):  # rotating weights again: every launch is a hit
        api.matmul(x, w, variant=TMA_KERNEL, out=out)
        _, _, args, _ = gpu.last_launch(TMA_KERNEL)
        assert (args[1][1], args[2][1]) == (w.data.ptr, out.data.ptr)
    assert (gpu.encodings, gpu.resolutions, gpu.decisions) == (encodings, resolutions, 1)


@pytest.mark.parametrize("variant", ["hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages3_swizzle_acc32", TMA_KERNEL])
def test_zero_padded_operands_keep_their_launch(gpu, monkeypatch, variant):
    """K = 30 misses the 8-element alignment of these kernels: every call zero-pads A and B to K = 32 again
    (fakes here: copies need a GPU) and launches the kept launch on the new copies; nothing is resolved again."""
    pads = []

    class Padder:  # padding.Padder's interface: made once, called with each call's operands
        def __init__(self, a, b, padded, orders):
            assert orders == ("row", "row")
            self.shapes = (padded[0], padded[1]), (padded[1], padded[2])
            padders.append(self)

        def __call__(self, a, b):
            pads.extend([gpu.array(self.shapes[0], a.dtype), gpu.array(self.shapes[1], b.dtype)])
            return pads[-2], pads[-1]
    padders = []
    monkeypatch.setattr(padding, "Padder", Padder)
    for _ in range(3):
        a, b = gpu.array((64, 30), "float16"), gpu.array((30, 48), "float16")
        out = api.matmul(a, b, variant=variant)
        assert [x.shape for x in pads[-2:]] == [(64, 32), (32, 48)]
        _, _, args, _ = gpu.last_launch(variant)
        if variant == TMA_KERNEL:
            assert (args[0][1], args[1][1], args[3].data.ptr) == (pads[-2].data.ptr, pads[-1].data.ptr, out.data.ptr)
            assert [int(x) for x in args[4:7]] == [64, 48, 32]
        else:
            assert addresses(args) == [pads[-2].data.ptr, pads[-1].data.ptr, out.data.ptr]
            assert [int(x) for x in args[3:6]] == [64, 48, 32]
    assert len(pads) == 6 and len(padders) == 1 and gpu.decisions == 1 and gpu.resolutions == 1
    assert len(gpu.kernels[variant].launches) == 3


def test_plan_reuses_its_launch(gpu):
    a, b = gpu.array((64, 32), "float32"), gpu.array((32, 48), "float32")
    run = api.plan(a, b, variant=ROW_KERNEL)
    for _ in range(3):
        assert run() is run.out
    assert gpu.resolutions == 1 and len(gpu.kernels[ROW_KERNEL].launches) == 3


def test_the_cache_is_bounded(gpu, monkeypatch):
    monkeypatch.setattr(prepared, "ENTRIES", 4)
    for m in range(1, 10):
        api.matmul(gpu.array((m, 8), "float32"), gpu.array((8, 8), "float32"), variant=ROW_KERNEL)
    assert len(prepared._entries) == 4


def test_hit_cost_on_the_host(gpu, monkeypatch):
    """Not an assertion on time: prints what the host side of a hit costs without a GPU (-s to see it)."""
    a, b = gpu.array((1024, 1024), "float16"), gpu.array((1024, 1024), "float16")
    out = gpu.array((1024, 1024), "float16")
    monkeypatch.setattr(prepared, "allocate", lambda shape, dtype: out)  # the pool hands a freed result back
    api.matmul(a, b)
    start, calls = time.perf_counter(), 2000
    for _ in range(calls):
        api.matmul(a, b)
    per_call = (time.perf_counter() - start) / calls * 1e6
    print(f"\nhost cost of a cached matmul, launch stubbed: {per_call:.1f} µs")
    assert gpu.decisions == 1


def test_auto_asks_the_tuning_database_on_every_call(gpu, monkeypatch):
    """A tuning run between two calls must change what the next call launches."""
    answers = [None, api.get(ROW_KERNEL).variant]
    monkeypatch.setattr(api, "_tuned_variant", lambda problem, acc=None, needs=(): answers[0])
    a, b = gpu.array((64, 32), "float32"), gpu.array((32, 48), "float32")
    api.matmul(a, b, variant="auto")
    default = dispatch.choose(gpu.info, "float32", 64, 48, 32).variant  # what variant=None picks here
    assert set(gpu.kernels) == {default}
    answers.pop(0)
    api.matmul(a, b, variant="auto")
    assert set(gpu.kernels) == {default, ROW_KERNEL}
    launches = len(gpu.kernels[ROW_KERNEL].launches)
    api.matmul(a, b, variant="auto")
    assert len(gpu.kernels[ROW_KERNEL].launches) == launches + 1 and gpu.decisions == 2


def test_launch_arguments_are_converted_once(gpu):
    """NumPy scalars, by-value arrays and CuPy arrays reach the launcher already as the ctypes values whose
    bytes the driver copies; anything else is refused by name."""
    import ctypes
    from cupy_gemm import tma
    tensor_map, array = tma.empty_map(), gpu.array((2, 2), "float32")
    args = LAUNCHABLE((np.int32(-3), np.int64(2**40), np.float32(1.5), np.uintp(7), tensor_map, array))
    assert [type(x) for x in args[:4]] == [ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_uint64]
    assert [x.value for x in args[:4]] == [-3, 2**40, 1.5, 7]
    assert bytes(args[4]) == tensor_map.tobytes() and len(bytes(args[4])) == tma.TENSOR_MAP_BYTES
    assert args[5].value == array.data.ptr
    assert LAUNCHABLE(args) == args  # converted values pass through
    with pytest.raises(TypeError, match="kernel argument"):
        LAUNCHABLE(("a string",))


def test_packed_addresses_keep_their_values_alive(gpu):
    """The driver reads the values through the address array after the Packed that made it is gone."""
    import ctypes
    import gc
    from cupy_gemm import driver
    array = gpu.array((2, 2), "float32")
    addresses = driver.Packed((np.int32(-5), np.float32(2.5), array)).addresses
    replaced = driver.Packed((array, np.int64(7), np.uintp(0))).with_pointers((11,), last=44)
    gc.collect()
    [bytes(64) for _ in range(10000)]  # reuse freed memory
    read = lambda a, i, c_type: c_type.from_address(a[i]).value
    assert [read(addresses, 0, ctypes.c_int32), read(addresses, 1, ctypes.c_float)] == [-5, 2.5]
    assert read(addresses, 2, ctypes.c_void_p) == array.data.ptr
    assert [read(replaced, 0, ctypes.c_void_p), read(replaced, 1, ctypes.c_int64), read(replaced, 2, ctypes.c_void_p)] \
        == [11, 7, 44]


@pytest.mark.parametrize("variant", [ROW_KERNEL, TMA_KERNEL])
def test_kept_launches_hold_no_arrays(gpu, monkeypatch, variant):
    """A prepared launch outlives its call: holding the call's arrays would keep their memory (and, with
    a pool that then hands out new addresses, defeat the cache of tensor-map arguments)."""
    from cupy_gemm import tma
    monkeypatch.setattr(launch, "launchable", LAUNCHABLE)
    monkeypatch.setattr(tma, "tensor_map_2d", lambda *args, **kw: tma.empty_map())  # a real map's type
    dtype = "float32" if variant == ROW_KERNEL else "float16"
    for _ in range(2):
        api.matmul(gpu.array((128, 64), dtype), gpu.array((64, 256), dtype), variant=variant)
    (entry,) = prepared._entries.values()
    kept = [entry.direct.run.args, *entry.addresses.values()]
    assert not [x for args in kept for x in args if isinstance(x, cupy.ndarray)]


def test_auto_answers_each_b_layout_from_its_own_entries(gpu, monkeypatch, tmp_path):
    """Entries tuned on a column-major B (x @ W.T) serve such calls, the row-major ones the others."""
    from cupy_gemm import tuning
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(tuning._devices, 0, ("Fake GPU", 90))
    shape, chosen = (256, 512, 1024), {"row": TMA_KERNEL, "col": "hgemm_wgmma_kmajor_m64n256k16_stages3_ws2"}
    for layout, name in chosen.items():
        v = registry.lookup(name)
        tuning.store([{"key": tuning.shape_key("Fake GPU", 90, "float16", "float32", layout, shape),
                       "device": "Fake GPU", "cc": 90, "dtype": "float16", "acc": "float32", "layout": layout,
                       "bucket": list(tuning.bucket(*shape)), "shape": list(shape), "variant": name,
                       "family": v.family.name, "params": dict(v.params), "source_hash": tuning.source_hash(v),
                       "time_ms": 0.01, "default_ms": 0.02}])
    a = gpu.array((256, 1024), "float16")
    api.matmul(a, gpu.array((1024, 512), "float16"), variant="auto")
    api.matmul(a, gpu.array((512, 1024), "float16").T, variant="auto")
    assert set(gpu.kernels) == set(chosen.values())

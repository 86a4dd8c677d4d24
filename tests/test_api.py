"""The API's behaviour that needs no GPU: clear errors where one is missing, numpy integers as
parameters, and a readable Compiled."""
import numpy
import pytest

import cupy_gemm
from cupy_gemm import registry
from cupy_gemm.errors import DeviceError

SMALL = "sgemm_naive_f32"


@pytest.fixture(params=["no driver", "no device"])
def no_gpu(request, monkeypatch):
    """This process sees no GPU: either no driver at all, or a driver and no device (as on a GPU machine
    with CUDA_VISIBLE_DEVICES empty). The test then runs the same on machines with and without one."""
    import cupy
    status = 35 if request.param == "no driver" else 100  # cudaErrorInsufficientDriver, cudaErrorNoDevice

    def no_device(*args):
        raise cupy.cuda.runtime.CUDARuntimeError(status)
    monkeypatch.setattr(cupy.cuda, "Device", no_device)
    monkeypatch.setattr(cupy.cuda.runtime, "driverGetVersion", lambda: 0 if request.param == "no driver" else 12090)
    return request.param


@pytest.mark.parametrize("call,way_out", [
    (lambda: cupy_gemm.get(SMALL).compile(), "pass arch= (e.g. 'sm_90') to compile without one"),
    (lambda: cupy_gemm.get(SMALL).resources(), "pass arch= (e.g. 'sm_90') to compile without one"),
    (lambda: cupy_gemm.default_variant("float32"), "pass cc= (e.g. 90 for an H100)"),
])
def test_no_gpu_is_a_device_error_with_the_way_out(no_gpu, call, way_out):
    with pytest.raises(DeviceError) as info:
        call()
    message = str(info.value)
    assert message.startswith("no CUDA GPU found") and way_out in message
    # a machine without any driver is told so, not that its (absent) driver is too old
    assert ("no NVIDIA driver is loaded" in message) == (no_gpu == "no driver")
    assert "insufficient" not in message


def test_without_a_gpu_an_arch_is_enough():
    kernel = cupy_gemm.get(SMALL)
    assert kernel.resources("sm_80").registers > 0
    assert cupy_gemm.default_variant("float16", cc=90)


@pytest.mark.filterwarnings("error")  # a uint8 parameter must not overflow in the shared-memory rule
@pytest.mark.parametrize("value", [numpy.int64(16), numpy.int32(16), numpy.uint8(16)])
def test_numpy_integers_are_integers(value):
    assert cupy_gemm.render("sliced_k", BK=value) == cupy_gemm.render("sliced_k", BK=16)
    variant = registry.make_variant(registry.family("sliced_k"), "x", "float32", {"BK": value})
    assert type(variant.params["BK"]) is int


@pytest.mark.parametrize("value", [numpy.float64(16), numpy.bool_(True), "16"])
def test_other_numbers_are_still_refused(value):
    with pytest.raises(cupy_gemm.ConfigError, match="an integer"):
        cupy_gemm.render("sliced_k", BK=value)


def test_compiled_repr_names_the_image_without_printing_it():
    compiled = cupy_gemm.get(SMALL).compile("sm_80")
    text = repr(compiled)
    assert len(text) < 200 and SMALL in text and "sm_80" in text and "cubin" in text
    assert f"{len(compiled.image)} bytes" in text and f"{compiled.resources.registers} registers" in text

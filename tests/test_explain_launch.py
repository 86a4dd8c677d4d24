"""What `explain` says of the chosen variant's launch (cupy_gemm/launch_explain.py), for GPUs named off the
device: the grid and split count the launcher's model gives, and how the splits are summed in each mode."""
import re

import pytest

from cupy_gemm import cli, dispatch, launch, launch_explain, registry, workspace
from cupy_gemm.compile import arch_for, compile_variant
from cupy_gemm.errors import CompileError

H200 = ("NVIDIA H200", 90)
A100 = ("NVIDIA A100-SXM4-80GB", 80)


def _explained(dtype, m, n, k, gpu=H200):
    text = dispatch.explain(dtype, m, n, k, gpu)
    variant = registry.lookup(re.search(r"^variant: (\S+)$", text, re.M).group(1))
    return text, variant


def _modelled(variant, m, n, k, gpu=H200):
    """The launcher's config for a GPU not present, as launch.configure would reach it on that GPU."""
    described = dispatch.describe_gpu(*gpu)
    registers = compile_variant(variant, arch_for(variant, gpu[1])).resources.registers
    return launch.launch_config(variant, m, n, k, described.sm_count, registers,
                                memory_bytes_per_ns=described.memory_bytes_per_ns)


def test_a_split_shape_names_the_launchers_split_and_both_sums():
    """128×576×7168 in float16 on an H200: split K through the workspace, in K order by default, by atomics
    under deterministic=False (the twin's workspace holds one slot a tile, so it is smaller)."""
    text, v = _explained("float16", 128, 576, 7168)
    cfg = _modelled(v, 128, 576, 7168)
    assert cfg.splits > 1 and workspace.atomic_sum(v, cfg, 90, deterministic=False), "the shape no longer splits"
    assert f"launch: grid {'×'.join(map(str, cfg.grid))} of " in text
    assert f"K split {cfg.splits} ways" in text and "summed in K order" in text and "bitwise repeatable" in text
    atomic = _modelled(v.with_extras(split_atomic=True), 128, 576, 7168)
    assert atomic.workspace < cfg.workspace
    assert f"deterministic=False adds them by atomics into one slot a tile ({atomic.workspace / 2**20:.2f} MiB)" in text


def test_few_splits_and_old_gpus_keep_the_ordered_sum():
    text, v = _explained("float32", 1000, 1000, 1000)
    cfg = _modelled(v, 1000, 1000, 1000)
    assert 1 < cfg.splits < workspace.ATOMIC_MIN_SPLITS
    assert f"K split {cfg.splits} ways" in text and "deterministic=False changes nothing: atomics win from" in text
    text, v = _explained("float16", 128, 576, 7168, A100)
    assert _modelled(v, 128, 576, 7168, A100).splits >= workspace.ATOMIC_MIN_SPLITS
    assert "atomic sums need compute capability 9.0" in text


def test_on_chip_sums_and_whole_k():
    text, v = _explained("float16", 512, 1024, 8192)  # the H200 table's pick: K split on chip
    assert v.params.get("KCLUSTER", 1) > 1, v.name
    assert f"K split over the {v.params['KCLUSTER']} blocks of each cluster" in text and "summed on chip" in text
    assert f"clusters of {v.params['KCLUSTER'] * v.params['CLUSTER']}" in text
    text, _ = _explained("float16", 4096, 4096, 4096)
    assert "sum: K whole in each block" in text


def test_a_swapped_product_names_the_kernels_own_problem():
    """4096×16×4096: the decode kernel serves 16 rows, so it computes Cᵀ = Bᵀ·Aᵀ, and writes Cᵀ where it lies
    (column-major: the kernel stores C at its own strides)."""
    text, v = _explained("float16", 4096, 16, 4096)
    assert v.max_rows() is not None and v.family.scalar_c
    assert "launch: the kernel's 16×4096×4096 (A and B swapped" in text
    assert "buffer of its own" not in text


def test_without_nvrtc_the_split_model_assumes_registers(monkeypatch):
    def refuse(*_):
        raise CompileError("no NVRTC here")
    monkeypatch.setattr(launch_explain, "compile_variant", refuse)
    text, _ = _explained("float32", 64, 1024, 8192)
    assert "note: registers unknown (CompileError), the split model assumed 128 a thread" in text


def test_the_command_prints_the_launch(capsys):
    assert cli.main(["explain", "128x576x7168", "--dtype", "fp16", "--gpu", H200[0], "--cc", "90"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^launch: grid \d+×\d+×\d+ of \d+ threads", out, re.M) and re.search(r"^sum: ", out, re.M)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "tf32"])
def test_every_precision_explains_a_decode_and_a_deep_shape(dtype):
    for m, n, k in ((1, 4096, 4096), (64, 1024, 8192), (2048, 7168, 16384)):
        text, _ = _explained(dtype, m, n, k)
        assert "\nlaunch: " in text and "\nsum: " in text

"""FP8 on Hopper: our wgmma_fp8 kernels against torch._scaled_mm (cuBLASLt), the host cost of a call, the
accuracy that promotion buys at long K, and the SASS of every catalogue variant.

    python examples/fp8_timing.py                       # the three shapes below, 10 rounds of 20 launches
    python examples/fp8_timing.py --shapes 4096x4096x4096 --rounds 5 --no-sass

Timing: e4m3 operands built in PyTorch and viewed as uint8 for cupy_gemm (the same bytes for both),
per-tensor scales, bf16 out. Each round times every contender in turn (the clock drifts with the card's
temperature, so interleaving keeps the comparison fair): CUDA events around `--launches` back-to-back
launches that rotate over enough operand sets to exceed twice the L2, so no launch finds its inputs
cached. Our calls go through `cupy_gemm.scaled_plan` (checks made once; a call launches the kernel).
"""
import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time

import cupy
import numpy as np
import torch

import cupy_gemm
from cupy_gemm.measure import timing
from cupy_gemm import launch, registry, scaled, scaled_choice, toolkit, verify
from cupy_gemm.compile import options_for
from cupy_gemm.render import render

SHAPES = "4096x4096x4096,8192x8192x8192,4096x7168x16384"
FASTACC_NAME = "fp8gemm_wgmma_m64n256k32_e4m3_tensor_fastacc_bf16"
PROMOTE256_NAME = "fp8gemm_wgmma_m64n128k32_tile128x256_e4m3_tensor_promote256_bf16"


def operand_sets(m, n, k, l2_bytes):
    """Enough (A, Bᵀ) pairs of random e4m3 data that one pass over them overwrites the L2 twice."""
    count = max(2, -(-2 * l2_bytes // ((m + n) * k)) + 1)
    sets = []
    for i in range(count):
        g = torch.Generator(device="cuda").manual_seed(i)
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
        b_t = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)  # (N, K): b column-major
        sets.append((a, b_t))
    return sets


def as_uint8(t):
    return cupy.from_dlpack(t.view(torch.uint8))


def timed_variants():
    """The catalogue's e4m3 × e4m3, bf16-out variants: (per-tensor names, block-scaled names)."""
    chosen = [(n, v.params) for n, v in registry.catalogue().items() if v.family.name == "wgmma_fp8"
              and v.dtype == "bfloat16" and not v.params["FORMAT_A"] and not v.params["FORMAT_B"]]
    return [n for n, p in chosen if p["SCALING"] == 0], [n for n, p in chosen if p["SCALING"] == 2]


def time_shape(m, n, k, args, l2_bytes):
    sets = operand_sets(m, n, k, l2_bytes)
    sa_t = torch.tensor(0.5, device="cuda")
    sb_t = torch.tensor(0.25, device="cuda")
    sa, sb = cupy.from_dlpack(sa_t.reshape(1)), cupy.from_dlpack(sb_t.reshape(1))
    kb, nb = -(-k // 128), -(-n // 128)
    sa_block = cupy.full((kb, m), 0.5, cupy.float32).T  # [K-block][M] in memory, as the kernel reads it
    sb_block = cupy.full((nb, kb), 0.25, cupy.float32)
    out = cupy.empty((m, n), dtype="bfloat16")
    per_tensor, block = timed_variants()
    plans = lambda name, s_a, s_b: [cupy_gemm.scaled_plan(as_uint8(a), as_uint8(b_t).T, s_a, s_b, out=out,
                                                          variant=name) for a, b_t in sets]
    torch_calls = [lambda a=a, b_t=b_t: torch._scaled_mm(a, b_t.t(), scale_a=sa_t, scale_b=sb_t,
                                                         out_dtype=torch.bfloat16) for a, b_t in sets]
    contenders = {"torch._scaled_mm": torch_calls}
    contenders.update({name: plans(name, sa, sb) for name in per_tensor})
    contenders.update({name: plans(name, sa_block, sb_block) for name in block})
    # the same bytes give the same products: check before timing
    ref = cupy.from_dlpack(torch_calls[0]().contiguous()).astype(cupy.float32)
    agree = {name: float(cupy.linalg.norm(calls[0]().astype(cupy.float32) - ref) / cupy.linalg.norm(ref))
             for name, calls in contenders.items() if name in per_tensor}
    medians = timing.interleaved(contenders, args.rounds, args.launches, warmup=3)
    base = medians["torch._scaled_mm"]
    print(f"\n{m}x{n}x{k} ({len(sets)} operand sets)")
    print("| contender | ms | TFLOP/s | vs torch._scaled_mm | relative difference from torch |\n|---|---|---|---|---|")
    for name, ms in medians.items():
        diff = f"{agree[name]:.1e}" if name in agree else ""
        print(f"| {name} | {ms:.4f} | {2 * m * n * k / ms / 1e9:.1f} | {base / ms:.3f} | {diff} |")
    promoted = [name for name in per_tensor if registry.lookup(name).params["PROMOTE"] == 1]  # as torch's
    best_tensor = min(medians[name] for name in promoted)
    for mode in ("tensor", "block"):
        chosen = scaled.variant_for("e4m3", "e4m3", mode, "bfloat16", m, n, k, launch.sm_count(cupy.cuda.Device()))
        print(f"scaled_mm's default, {mode} scales: {chosen.name}, {base / medians[chosen.name]:.3f} × torch._scaled_mm")
    print(f"best block-scaled / best promoted per-tensor speed: {best_tensor / min(medians[b] for b in block):.3f}")


def host_cost(size=256, calls=2000):
    """Wall time per call of `calls` back-to-back calls closed by one synchronisation, at a size whose GPU
    time is shorter than a call's host work: scaled_mm (its plan looked up by call geometry), a
    scaled_plan's call (planned once, arguments packed once) and torch._scaled_mm."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(size, size, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b_t = torch.randn(size, size, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa_t, sb_t = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    a_u, b_u = as_uint8(a), as_uint8(b_t).T
    sa, sb = cupy.from_dlpack(sa_t.reshape(1)), cupy.from_dlpack(sb_t.reshape(1))
    blocks = -(-size // 128)
    sa_block = cupy.full((blocks, size), 0.5, cupy.float32).T  # [K-block][M] in memory, as quantize returns
    sb_block = cupy.full((blocks, blocks), 0.25, cupy.float32)
    out = cupy.empty((size, size), dtype="bfloat16")
    contenders = {
        "torch._scaled_mm": lambda: torch._scaled_mm(a, b_t.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16),
        "cupy_gemm.scaled_mm": lambda: cupy_gemm.scaled_mm(a_u, b_u, sa, sb, out=out),
        "cupy_gemm.scaled_plan(...)()": cupy_gemm.scaled_plan(a_u, b_u, sa, sb, out=out),
        "cupy_gemm.scaled_mm, block scales": lambda: cupy_gemm.scaled_mm(a_u, b_u, sa_block, sb_block, out=out),
        "cupy_gemm.scaled_plan(...)(), block scales": cupy_gemm.scaled_plan(a_u, b_u, sa_block, sb_block, out=out),
    }
    print(f"\nhost cost, {size}³, bf16 out, per-tensor scales unless named (µs a call, {calls} calls, three rounds)")
    for name, call in contenders.items():
        rounds = []
        for _ in range(3):
            for _ in range(50):
                call()
            torch.cuda.synchronize()
            begin = time.perf_counter()
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - begin) / calls * 1e6)
        print(f"| {name} | {' / '.join(f'{x:.1f}' for x in rounds)} |")


def accuracy_vs_k():
    """Relative Frobenius error against float64 of the dequantized operands, fp32 out: promotion every
    128 of K (the default) and every 256 against accumulation in the tensor core (fast) and torch's two modes."""
    print("\n| K | ours | ours, every 256 | ours, fast accumulation | torch | torch use_fast_accum |\n"
          "|---|---|---|---|---|---|")
    for k in (1024, 4096, 16384, 65536):
        g = torch.Generator(device="cuda").manual_seed(k)
        a = torch.randn(256, k, device="cuda", generator=g).abs().to(torch.float8_e4m3fn)  # positive: sums grow
        b_t = torch.randn(256, k, device="cuda", generator=g).abs().to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        s = cupy.ones(1, cupy.float32)
        qa, qb = as_uint8(a), as_uint8(b_t).T
        ref, _ = verify.reference(cupy_gemm.dequantize(qa, s), cupy_gemm.dequantize(qb, s))
        errors = []
        fp32_out = [scaled_choice.with_output(registry.lookup(n), "float32") for n in (PROMOTE256_NAME, FASTACC_NAME)]
        for variant in (scaled.variant_for("e4m3", "e4m3", "tensor", "float32"), *fp32_out):
            out = cupy_gemm.scaled_mm(qa, qb, s, s, out_dtype="float32", variant=variant)
            errors.append(float(cupy.linalg.norm(out - ref) / cupy.linalg.norm(ref)))
        for fast in (False, True):
            t = torch._scaled_mm(a, b_t.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast)
            errors.append(float(cupy.linalg.norm(cupy.from_dlpack(t) - ref) / cupy.linalg.norm(ref)))
        print(f"| {k} | " + " | ".join(f"{e:.2e}" for e in errors) + " |")


def sass_report():
    """Instruction counts in the SASS of every catalogue variant: NVRTC's PTX assembled by the system
    ptxas (this cuobjdump does not read NVRTC's bare cubins), then disassembled."""
    ptxas, cuobjdump = shutil.which("ptxas"), shutil.which("cuobjdump")
    if not (ptxas and cuobjdump):
        print("\nSASS: ptxas or cuobjdump not on PATH")
        return
    print("\n| variant | QGMMA | HGMMA | UTMALDG | UTMASTG | LDL/STL | registers |\n|---|---|---|---|---|---|---|")
    lib = toolkit.nvrtc()
    with tempfile.TemporaryDirectory() as folder:
        for name, v in registry.catalogue().items():
            if v.family.name != "wgmma_fp8":
                continue
            options = [o.replace("-arch=sm_90a", "-arch=compute_90a") for o in options_for(v, "sm_90a")]
            prog = lib.createProgram(render(v), f"{name}.cu", (), ())
            lib.compileProgram(prog, options)
            ptx_path, cubin_path = os.path.join(folder, "k.ptx"), os.path.join(folder, "k.cubin")
            ptx = lib.getPTX(prog)
            with open(ptx_path, "wb") as f:
                f.write(ptx if isinstance(ptx, bytes) else ptx.encode())
            lib.destroyProgram(prog)
            report = subprocess.run([ptxas, "-arch=sm_90a", "-v", ptx_path, "-o", cubin_path],
                                    capture_output=True, text=True).stderr
            sass = subprocess.run([cuobjdump, "--dump-sass", cubin_path], capture_output=True, text=True).stdout
            count = lambda word: sum(word in line for line in sass.splitlines())
            used = re.search(r"Used (\d+) registers", report)  # ptxas -v: "... Used 168 registers, ..."
            regs = used.group(1) if used else "?"
            print(f"| {name} | {count('QGMMA')} | {count('HGMMA')} | {count('UTMALDG')} | {count('UTMASTG')} | "
                  f"{count('LDL') + count('STL')} | {regs} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--no-sass", action="store_true")
    parser.add_argument("--no-accuracy", action="store_true")
    parser.add_argument("--no-host", action="store_true", help="skip the host cost per call")
    args = parser.parse_args()
    device = cupy.cuda.Device()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CuPy {cupy.__version__}, "
          f"NVRTC {'.'.join(map(str, toolkit.nvrtc_version()))}")
    l2 = int(device.attributes.get("L2CacheSize", 50 << 20))
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        time_shape(m, n, k, args, l2)
    if not args.no_host:
        host_cost()
    if not args.no_accuracy:
        accuracy_vs_k()
    if not args.no_sass:
        sass_report()


if __name__ == "__main__":
    main()

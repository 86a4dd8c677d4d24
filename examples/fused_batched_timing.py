"""Batched products and fused epilogues: cupy_gemm.matmul against cupy.matmul and torch.matmul on the same
data, and a fused bias + GELU against the GEMM followed by the same elementwise work.

    PYTHONPATH=. python examples/fused_batched_timing.py                 # both parts, fp16 and bf16
    PYTHONPATH=. python examples/fused_batched_timing.py --part fused --json out.json

GPU time: the median over repeats of `--launches` calls between two CUDA events, the calls rotating over
operand sets that together exceed twice the L2 (timing.bench keeps the host's enqueueing off the clock).
Host cost: wall time per call of 200 back-to-back calls of the smallest case, with one synchronisation.
"""
import argparse
import json
import time

import cupy
import numpy as np

import cupy_gemm
from cupy_gemm import verify
from cupy_gemm.measure import timing

try:
    import torch
except ImportError:
    torch = None

BATCHED = [  # (name, a shape, b shape)
    ("attention 32·32 × 128×128×64", (32 * 32, 128, 64), (32 * 32, 64, 128)),
    ("64 × 1024×1024×128", (64, 1024, 128), (64, 128, 1024)),
    ("8 × 4096×4096×128", (8, 4096, 128), (8, 128, 4096)),
    ("scores 32 heads × 2048×2048×128", (32, 2048, 128), (32, 128, 2048)),
    ("pv 32 heads × 2048×128×2048", (32, 2048, 2048), (32, 2048, 128)),
    ("broadcast weight 16 × 2048×4096 @ 4096×4096", (16, 2048, 4096), (4096, 4096)),
]
FUSED = [(4096, 4096, 1024), (8192, 28672, 4096), (8192, 8192, 8192)]


def gelu_kernel():
    return cupy.ElementwiseKernel(
        "T x, T bias", "T y",
        "float v = (float)x + (float)bias; y = (T)(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)))",
        "bias_gelu")


def sets(shapes, dtype, l2_bytes, out_shape):
    size = sum(int(np.prod(s)) for s in shapes) * cupy.dtype(dtype).itemsize
    count = max(2, min(16, -(-2 * l2_bytes // size)))
    return [tuple(verify.random_operand(s, dtype, 7 * i + j) for j, s in enumerate(shapes))
            + (cupy.empty(out_shape, dtype),) for i in range(count)]


def host_us(call, n=200):
    call()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(n):
        call()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / n * 1e6


def as_torch(x):
    return torch.from_dlpack(x)


def batched_part(dtype, l2, launches, rows):
    print(f"\n#### batched, {dtype}\n")
    print("| case | µs ours | µs cupy | µs torch | TFLOPS ours | ×cupy | ×torch |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, sa, sb in BATCHED:
        out_shape = np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
        data = sets([sa, sb], dtype, l2, out_shape)
        a, b, out = data[0]
        ref = np.matmul(cupy.asnumpy(a[:1].astype(cupy.float32) if len(sa) > 2 else a.astype(cupy.float32)),
                        cupy.asnumpy(b[:1].astype(cupy.float32) if len(sb) > 2 else b.astype(cupy.float32)))
        got = cupy_gemm.matmul(a[:1] if len(sa) > 2 else a, b[:1] if len(sb) > 2 else b)
        err = float(np.abs(cupy.asnumpy(got.astype(cupy.float32)) - ref).max())
        ours = timing.rotated_us([lambda d=d: cupy_gemm.matmul(d[0], d[1], out=d[2]) for d in data], launches)
        try:
            cp = timing.rotated_us([lambda d=d: cupy.matmul(d[0], d[1], out=d[2]) for d in data], launches)
        except (TypeError, NotImplementedError) as e:  # CuPy 14 has no batched bfloat16 matmul
            print(f"<!-- cupy.matmul: {type(e).__name__}: {e} -->")
            cp = None
        th = None
        if torch is not None:
            tdata = [(as_torch(d[0]), as_torch(d[1]), as_torch(d[2])) for d in data]
            th = timing.rotated_us([lambda d=d: torch.matmul(d[0], d[1], out=d[2]) for d in tdata], launches)
        m, k = sa[-2:]
        n = sb[-1]
        count = int(np.prod(out_shape[:-2]))
        flops = 2.0 * count * m * n * k
        row = dict(part="batched", dtype=dtype, case=name, ours_us=ours, cupy_us=cp, torch_us=th,
                   tflops=flops / ours / 1e6, x_cupy=cp / ours if cp else None, x_torch=th / ours if th else None,
                   max_abs_diff=err)
        rows.append(row)
        cell = lambda x, f=".1f": "n/a" if x is None else format(x, f)
        print(f"| {name} | {ours:.1f} | {cell(cp)} | {cell(th)} | {row['tflops']:.0f} | {cell(row['x_cupy'], '.2f')} | "
              f"{cell(row['x_torch'], '.2f')} |")
    small = sets([(4, 64, 64), (4, 64, 64)], dtype, 0, (4, 64, 64))[0]
    ours_h = host_us(lambda: cupy_gemm.matmul(small[0], small[1], out=small[2]))
    try:
        cp_h = host_us(lambda: cupy.matmul(small[0], small[1], out=small[2]))
    except (TypeError, NotImplementedError):
        cp_h = None
    th_h = None
    if torch is not None:
        t = [as_torch(x) for x in small]
        th_h = host_us(lambda: torch.matmul(t[0], t[1], out=t[2]))
    rows.append(dict(part="batched-host", dtype=dtype, ours_us=ours_h, cupy_us=cp_h, torch_us=th_h))
    print(f"\nhost cost per call (wall, 4 × 64×64×64): ours {ours_h:.1f} µs, cupy.matmul "
          f"{'n/a' if cp_h is None else format(cp_h, '.1f')} µs, torch.matmul "
          f"{'n/a' if th_h is None else format(th_h, '.1f')} µs")


def fused_part(dtype, l2, launches, rows):
    print(f"\n#### bias + GELU, {dtype}\n")
    print("| M×N×K | µs fused | µs bare GEMM | µs cupy.matmul + cupy ops | µs cupy.matmul + 1 kernel | µs torch "
          "| fused / bare | ×cupy ops | ×cupy 1 kernel | ×torch |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    from cupyx.scipy.special import erf
    kernel = gelu_kernel()
    for m, n, k in FUSED:
        data = sets([(m, k), (k, n), (n,)], dtype, l2, (m, n))
        a, b, bias, out = data[0]
        fused = cupy_gemm.matmul(a, b, bias=bias, activation="gelu")
        ref = kernel(cupy.matmul(a, b), bias)
        err = float(cupy.abs(fused.astype(cupy.float32) - ref.astype(cupy.float32)).max())

        def ops(d):
            y = cupy.matmul(d[0], d[1], out=d[3])
            y += d[2]
            return 0.5 * y * (1 + erf(y * np.float32(0.7071067811865476)))

        t = dict(
            fused=timing.rotated_us([lambda d=d: cupy_gemm.matmul(d[0], d[1], bias=d[2], activation="gelu", out=d[3])
                          for d in data], launches),
            bare=timing.rotated_us([lambda d=d: cupy_gemm.matmul(d[0], d[1], out=d[3]) for d in data], launches),
            cupy_ops=timing.rotated_us([lambda d=d: ops(d) for d in data], launches),
            cupy_kernel=timing.rotated_us([lambda d=d: kernel(cupy.matmul(d[0], d[1], out=d[3]), d[2], d[3])
                                for d in data], launches))
        t["torch"] = None
        if torch is not None:
            tdata = [tuple(as_torch(x) for x in d) for d in data]
            t["torch"] = timing.rotated_us([lambda d=d: torch.nn.functional.gelu(torch.addmm(d[2], d[0], d[1]))
                                 for d in tdata], launches)
        row = dict(part="fused", dtype=dtype, case=f"{m}x{n}x{k}", max_abs_diff=err,
                   **{f"{key}_us": v for key, v in t.items()})
        rows.append(row)
        tt = t["torch"]
        print(f"| {m}×{n}×{k} | {t['fused']:.1f} | {t['bare']:.1f} | {t['cupy_ops']:.1f} | {t['cupy_kernel']:.1f} | "
              f"{'' if tt is None else format(tt, '.1f')} | {t['fused'] / t['bare']:.3f} | {t['cupy_ops'] / t['fused']:.2f} | "
              f"{t['cupy_kernel'] / t['fused']:.2f} | {'' if tt is None else format(tt / t['fused'], '.2f')} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("batched", "fused", "both"), default="both")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    dev = cupy.cuda.Device()
    l2 = dev.attributes["L2CacheSize"]
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    print(f"{props['name'].decode()}, CuPy {cupy.__version__}, torch {torch.__version__ if torch else 'absent'}")
    rows = []
    for dtype in args.dtypes.split(","):
        if args.part in ("batched", "both"):
            batched_part(dtype, l2, args.launches, rows)
        if args.part in ("fused", "both"):
            fused_part(dtype, l2, args.launches, rows)
    for part in ("batched",):
        for dtype in args.dtypes.split(","):
            sel = [r for r in rows if r["part"] == part and r["dtype"] == dtype]
            if sel:
                gm = lambda key: float(np.exp(np.mean(np.log([r[key] for r in sel if r.get(key)])))) if any(
                    r.get(key) for r in sel) else float("nan")
                mn = lambda key: min((r[key] for r in sel if r.get(key)), default=float("nan"))
                print(f"{part} {dtype}: ×cupy geomean {gm('x_cupy'):.2f} min {mn('x_cupy'):.2f}; "
                      f"×torch geomean {gm('x_torch'):.2f} min {mn('x_torch'):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props["name"].decode(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

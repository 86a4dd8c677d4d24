"""GPU time per call of the split-K and small-tile variants against the dtype's default and cuBLAS, on the
shapes big tiles waste (small M, skinny N, long K) and two squares.

    PYTHONPATH=. python examples/splitk_timing.py                       # all four precisions
    PYTHONPATH=. python examples/splitk_timing.py --dtypes float16 --shapes 16x4096x4096,512x512x512

Each time is the median over repeats of `--launches` calls between two CUDA events, the calls rotating
through copies of the operands that together overflow L2 (so no call finds its inputs in cache), with the
host's enqueueing held off the clock (timing.bench). Every call goes through a prepared plan (row-major
operands, as users pass them: TF32 variants include the copy of B to column-major). "new" is the fastest
`_splitk` entry of the precision, named with the splits the launcher picked.
"""
import argparse

import cupy

import cupy_gemm
from cupy_gemm import api, launch, registry, verify
from cupy_gemm.measure import baselines, shapes, timing

SHAPES = "16x4096x4096,64x4096x4096,4096x128x4096,128x4096x11008,512x512x512,4096x4096x4096"
PRECISIONS = {"float16": ("float16", "float32"), "bfloat16": ("bfloat16", "float32"),
              "float32": ("float32", "float32"), "tf32": ("float32", "tf32")}


def default_for(precision: str, cc: int) -> str:
    key = "tf32" if precision == "tf32" else precision
    cat = registry.catalogue()
    return next(n for n in api.DEFAULTS[key] if n in cat and api._runs_on(cat[n], cc))


def candidates(precision: str, cc: int) -> list[str]:
    dtype, acc = PRECISIONS[precision]
    return [n for n, v in registry.catalogue().items()
            if v.dtype == dtype and v.acc == acc and n.endswith("_splitk") and api._runs_on(v, cc)]


def forced_splits(v, splits: str):
    return registry.make_variant(v.family, f"{v.name}_split{splits}", v.dtype, {**v.params, "SPLIT_K": int(splits)},
                                 v.acc)


def rotated_operands(m, n, k, dtype, l2_bytes):
    """Copies of (a, b, out) whose total is at least twice L2 (at most 64 copies, 6 GB)."""
    size = cupy.dtype(dtype).itemsize * (m * k + k * n + m * n)
    copies = max(2, min(64, -(-2 * l2_bytes // size), (6 << 30) // size))
    return [(verify.random_operand((m, k), dtype, 2 * i), verify.random_operand((k, n), dtype, 2 * i + 1),
             cupy.empty((m, n), dtype=dtype)) for i in range(copies)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="float16,bfloat16,float32,tf32")
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--splits", default="", help="also time every candidate with each of these forced "
                        "SPLIT_K (e.g. 1,2,4,8) and list the fastest five: calibrates the launcher's choice")
    parser.add_argument("--launches", type=int, default=50, help="calls per event pair (a tenth of it from 2^33 "
                        "multiply-adds up, where one call is long enough to time)")
    args = parser.parse_args()
    device = cupy.cuda.Device()
    cc = launch.compute_capability(device)
    sms = device.attributes["MultiProcessorCount"]
    l2 = int(device.attributes.get("L2CacheSize", 0)) or 50 << 20
    print(f"{cupy.cuda.runtime.getDeviceProperties(device.id)['name'].decode()}, {sms} SMs; "
          f"µs per call (GPU time), {args.launches} calls per event pair, operands rotated past L2")
    print("default = the dtype's default variant; cuBLAS/x > 1: x is faster than cuBLAS")
    print(f"{'precision':9} {'M×N×K':>15} {'default':>9} {'new':>9} {'cuBLAS':>9} {'cuBLAS/new':>10} "
          f"{'cuBLAS/default':>14}  new variant (splits)")
    for precision in args.dtypes.split(","):
        dtype, acc = PRECISIONS[precision]
        default = default_for(precision, cc)
        for m, n, k in (shapes.parse_shape(s) for s in args.shapes.split(",")):
            ops = rotated_operands(m, n, k, dtype, l2)
            launches = args.launches if m * n * k < 2**33 else max(2, args.launches // 10)
            base = timing.rotated_us([baselines.cublas_call(a, b, out, acc) for a, b, out in ops], launches)
            old = timing.rotated_us([cupy_gemm.plan(a, b, variant=default, out=out) for a, b, out in ops], launches)
            timed = []  # (µs, variant, splits)
            for name in candidates(precision, cc):
                v = registry.lookup(name)
                forced = [forced_splits(v, s) for s in args.splits.split(",") if s]
                for variant in [v, *forced]:
                    us = timing.rotated_us([cupy_gemm.plan(a, b, variant=variant, out=out) for a, b, out in ops], launches)
                    registers = launch.load(variant, device)[1].resources.registers
                    timed.append((us, variant, launch.launch_config(variant, m, n, k, sms, registers).splits))
            auto = sorted((t for t in timed if t[1].params["SPLIT_K"] == 0), key=lambda t: t[0])
            new_us, new_variant, splits = auto[0] if auto else (float("nan"), None, 0)
            print(f"{precision:9} {f'{m}×{n}×{k}':>15} {old:9.1f} {new_us:9.1f} {base:9.1f} {base / new_us:10.2f} "
                  f"{base / old:14.2f}  {new_variant.name if new_variant else '-'} ({splits})", flush=True)
            if args.splits:
                fastest = sorted(timed, key=lambda t: t[0])[:5]
                print("    fastest: " + "; ".join(f"{v.name.split('_splitk')[0]} s={s} {us:.1f}" for us, v, s in fastest))
            del ops


if __name__ == "__main__":
    main()

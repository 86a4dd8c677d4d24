"""How good is matmul(variant="auto")? After `cupy-gemm tune`, time auto against the tuned shape's best
swept point and against the dtype's default, at the tuned shape and at shapes nobody tuned.

    cupy-gemm tune --dtype float32 --shape 4096x4096x4096 --sweep sgemm_simt --set BM=64,128 ...
    python examples/auto_check.py --dtype float32 --tuned 4096x4096x4096 --untuned 2048x2048x2048,3000x5000x1000
"""
import argparse

import cupy

import cupy_gemm
from cupy_gemm import tuning, verify
from cupy_gemm.measure import timing
from cupy_gemm.measure.shapes import parse_shape


def time_ms(variant, a, b, out, flush) -> float:
    run = cupy_gemm.plan(a, b, variant=variant, out=out)
    return timing.bench(run, repeats=20, warmup_ms=25, flush=flush).median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tuned", required=True, help="the MxNxK that was tuned")
    parser.add_argument("--untuned", default="", help="comma-separated MxNxK nobody tuned")
    args = parser.parse_args()
    device = cupy.cuda.Device()
    flush = timing.L2Flush(device.id)
    default = cupy_gemm.default_variant(args.dtype)
    print(f"{cupy.cuda.runtime.getDeviceProperties(device.id)['name'].decode()}, {args.dtype}, default {default}")
    shapes = [("tuned", parse_shape(args.tuned))]
    shapes += [("untuned", parse_shape(s)) for s in args.untuned.split(",") if s]
    for kind, (m, n, k) in shapes:
        a, b = verify.random_operand((m, k), args.dtype, 1), verify.random_operand((k, n), args.dtype, 2)
        out = cupy.empty((m, n), dtype=args.dtype)
        chosen = tuning.lookup_variant(device, args.dtype, None, "row", m, n, k)
        t_auto, t_default = time_ms("auto", a, b, out, flush), time_ms(default, a, b, out, flush)
        line = (f"{kind:8s} {m}x{n}x{k}: auto -> {chosen.name if chosen else default}: {t_auto:.4f} ms, "
                f"default {t_default:.4f} ms (auto/default {t_auto / t_default:.3f})")
        found = tuning.lookup_entry(device, args.dtype, None, "row", m, n, k)
        if kind == "tuned" and found is not None:
            best_ms = found[0]["time_ms"]
            line += f", best swept point {best_ms:.4f} ms (auto/best {t_auto / best_ms:.3f})"
        print(line)


if __name__ == "__main__":
    main()

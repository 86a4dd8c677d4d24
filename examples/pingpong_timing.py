"""Ping-pong against cooperative wgmma consumers on Hopper: the catalogue's 16-bit wgmma entries side by side
on shapes where a tile's store idles the tensor cores (short K, fused epilogues, small or narrow C), with
cupy.matmul in the same rounds.

    python examples/pingpong_timing.py                     # float16 and bfloat16, bare and bias + GELU
    python examples/pingpong_timing.py --dtype float16 --part bare

Every entry is first checked against a float64 reference (beta != 0, a fused epilogue, ragged shapes;
outputs NaN-poisoned). Timing: timing.interleaved, `--launches` calls between two CUDA events rotating over
operand sets that together exceed twice the L2, the median of `--rounds` rounds, contenders interleaved
round by round. Fused rows give µs and, in brackets, fused / bare of the same entry.
"""
import argparse

import cupy

import cupy_gemm
from cupy_gemm import registry, verify
from cupy_gemm.measure import timing

ENTRIES = ["m64n256k16_stages4_ws2", "m64n192k16_tile128x192_stages4_ws2",
           "m64n128k16_tile128x128_stages5_ws2_pingpong", "m64n192k16_tile64x192_stages6_ws2_pingpong",
           "m64n64k16_tile128x64_stages8_ws2_pingpong"]
BARE = [(512, 6144, 4096), (5000, 3000, 1000), (2048, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192),
        (128, 4096, 4096), (4096, 128, 4096), (1024, 1024, 1024), (128, 28672, 8192)]
FUSED = [(4096, 4096, 1024), (8192, 8192, 8192), (8192, 28672, 4096), (5000, 3000, 1000)]


def variants(dtype):
    prefix = "h" if dtype == "float16" else "b"
    return [registry.lookup(f"{prefix}gemm_wgmma_{entry}") for entry in ENTRIES]


def check(v):
    """Ragged shapes, beta != 0 and bias + relu against float64: wrong numbers stop the run."""
    for m, n, k in [(1, 1, 1), (17, 127, 1000), (777, 1000, 2048)]:
        a, b = verify.random_operand((m, k), v.dtype, 1), verify.random_operand((k, n), v.dtype, 2)
        c, bias = verify.random_operand((m, n), v.dtype, 3), verify.random_operand((n,), v.dtype, 4)
        out = cupy.full((m, n), cupy.nan, v.dtype)
        cupy_gemm.gemm(a, b, c, alpha=1.5, beta=0.5, out=out, variant=v)
        ref, scale = verify.reference(a, b, c, 1.5, 0.5)
        assert verify.check(out, ref, scale, v.dtype, v.acc, k).ok, (v.name, m, n, k, "beta")
        out = cupy.full((m, n), cupy.nan, v.dtype)
        cupy_gemm.matmul(a, b, bias=bias, activation="relu", out=out, variant=v)
        ref, scale = verify.reference(a, b)
        ref = cupy.maximum(ref + bias.astype(cupy.float64), 0)
        # the bias adds a value the product's scale does not cover: its rounding counts too
        assert verify.check(out, ref, scale + cupy.abs(ref), v.dtype, v.acc, k).ok, (v.name, m, n, k, "bias + relu")


def operand_sets(m, n, k, dtype, l2_bytes):
    count = max(2, min(8, -(-2 * l2_bytes // ((m * k + k * n + m * n) * 2))))
    return [(verify.random_operand((m, k), dtype, 11 * i), verify.random_operand((k, n), dtype, 11 * i + 1),
             verify.random_operand((n,), dtype, 11 * i + 2), cupy.empty((m, n), dtype)) for i in range(count)]


def short(v):
    return v.name.split("_wgmma_")[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", action="append", choices=["float16", "bfloat16"])
    parser.add_argument("--part", choices=["bare", "fused", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launches", type=int, default=10)
    args = parser.parse_args()
    l2 = timing.l2_bytes(cupy.cuda.Device().id)
    print(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode())
    for dtype in args.dtype or ["float16", "bfloat16"]:
        vs = variants(dtype)
        for v in vs:
            check(v)
        header = "| M×N×K | " + " | ".join(short(v) for v in vs)
        if args.part in ("bare", "both"):
            print(f"\n#### {dtype}, bare: µs per call (× cupy.matmul)\n\n{header} | cupy |")
            for m, n, k in BARE:
                sets = operand_sets(m, n, k, dtype, l2)
                calls = {"cupy": [lambda x=x: cupy.matmul(x[0], x[1], out=x[3]) for x in sets]}
                for v in vs:
                    calls[v.name] = [lambda x=x, v=v: cupy_gemm.matmul(x[0], x[1], out=x[3], variant=v) for x in sets]
                t = timing.interleaved(calls, rounds=args.rounds, launches=args.launches)
                cells = " | ".join(f"{t[v.name] * 1e3:.1f} ({t['cupy'] / t[v.name]:.2f})" for v in vs)
                print(f"| {m}×{n}×{k} | {cells} | {t['cupy'] * 1e3:.1f} |", flush=True)
        if args.part in ("fused", "both"):
            print(f"\n#### {dtype}, bias + GELU: µs per call (fused / bare of the same entry)\n\n{header} |")
            for m, n, k in FUSED:
                sets = operand_sets(m, n, k, dtype, l2)
                calls = {}
                for v in vs:
                    calls[v.name] = [lambda x=x, v=v: cupy_gemm.matmul(x[0], x[1], out=x[3], variant=v) for x in sets]
                    calls[v.name + "+"] = [lambda x=x, v=v: cupy_gemm.matmul(x[0], x[1], bias=x[2], activation="gelu",
                                                                            out=x[3], variant=v) for x in sets]
                t = timing.interleaved(calls, rounds=max(2, args.rounds // 2), launches=max(2, args.launches // 2))
                cells = " | ".join(f"{t[v.name + '+'] * 1e3:.1f} ({t[v.name + '+'] / t[v.name]:.2f})" for v in vs)
                print(f"| {m}×{n}×{k} | {cells} |", flush=True)


if __name__ == "__main__":
    main()

"""x @ W.T with W stored N×K, as linear layers keep their weights: the default path against the row-major
entry it would otherwise take (which copies W into its layout on every call), cupy.matmul and torch.matmul.

    PYTHONPATH=. python examples/linear_layout_timing.py          # decode shapes, four precisions
    PYTHONPATH=. python examples/linear_layout_timing.py --big    # 16-bit prefill and square shapes

GPU time per call (many calls between two CUDA events, operands rotated through more than twice the L2),
medians of 7 rounds, the four callables of a shape timed in turn in every round; the bytes the default
moves per second as a % of a device-to-device copy measured in the same run.
"""
from __future__ import annotations

import argparse

DECODE = [(1, 4096, 4096), (16, 4096, 4096), (16, 1024, 4096), (8, 1024, 8192), (16, 2048, 7168),
          (16, 4096, 14336), (1, 14336, 4096), (4, 4096, 4096)]
BIG = [(128, 4096, 4096), (2048, 4096, 4096), (512, 6144, 4096), (64, 14336, 4096), (2048, 14336, 4096),
       (128, 28672, 8192), (64, 7168, 2048), (128, 576, 7168), (2048, 24576, 1536), (128, 4096, 11008),
       (4096, 4096, 4096), (8192, 8192, 8192), (5000, 3000, 1000)]


def main() -> None:
    import cupy

    from cupy_gemm import api
    from cupy_gemm.measure import corpus_timing as timing
    from cupy_gemm.measure.corpus_bench import _torch, precision

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", action="store_true", help="16-bit prefill and square shapes")
    args = parser.parse_args()
    shapes, modes = (BIG, ("float16", "bfloat16")) if args.big else (DECODE, ("float16", "bfloat16", "float32", "tf32"))
    torch = _torch()
    bandwidth = timing.copy_bandwidth() / 1e9
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: copy bandwidth {bandwidth:.0f} GB/s")
    for mode in modes:
        dtype = "float32" if mode == "tf32" else mode
        size = cupy.dtype(dtype).itemsize
        with precision(mode):
            for m, n, k in shapes:
                count = timing.rotation_count((m * k + k * n + m * n) * size, timing.l2_bytes(0))
                sets = []
                for i in range(count):  # random normal: never zeros, which would hide a wrong index
                    rng = cupy.random.default_rng(i)
                    x = rng.standard_normal((m, k), dtype=cupy.float32).astype(dtype)
                    w = rng.standard_normal((n, k), dtype=cupy.float32).astype(dtype)
                    sets.append((x, w, cupy.empty((m, n), dtype=dtype)))
                plans = [api.Plan(x, w.T, out=o) for x, w, o in sets]
                chosen = plans[0].variant.name
                calls = {"cupy": [lambda x=x, w=w, o=o: cupy.matmul(x, w.T, out=o) for x, w, o in sets],
                         "default": [p.__call__ for p in plans]}
                if "_kmajor" in chosen:  # the row-major twin, which copies W
                    row = chosen.replace("_kmajor", "")
                    calls["row+copy"] = [api.Plan(x, w.T, out=o, variant=row).__call__ for x, w, o in sets]
                if torch is not None:
                    tw = [(torch.from_dlpack(x), torch.from_dlpack(w)) for x, w, _ in sets]
                    calls["torch"] = [lambda a=a, b=b: torch.matmul(a, b.T) for a, b in tw]
                res = timing.time_rounds({t: timing.Rotation(c) for t, c in calls.items()}, repeats=7)
                us = {t: sorted(r["times_ms"])[len(r["times_ms"]) // 2] * 1e3 for t, r in res.items()}
                moved = (m * k + k * n + m * n) * size / 1e3 / us["default"]
                print(f"{mode} {m}x{n}x{k} {chosen}: " + "  ".join(f"{t} {v:.1f}" for t, v in us.items())
                      + f"  | x cupy {us['cupy'] / us['default']:.2f}"
                      + (f" x torch {us['torch'] / us['default']:.2f}" if "torch" in us else "")
                      + f"  {moved:.0f} GB/s ({100 * moved / bandwidth:.0f}% of copy)", flush=True)


if __name__ == "__main__":
    main()

"""The seed-style benchmark: every catalogue variant over the seed tables' shapes (SGEMM's for float32,
HGEMM's for float16 and bfloat16), each row with its time, TFLOPS and % of cuBLAS, grouped by family.

    python bench.py                                  # everything, seed shapes
    python bench.py --dtype float16 --shapes quick   # same options as `cupy-gemm bench`

It calls the same library functions as `cupy-gemm bench` (cupy_gemm.sweep.measure through cli_sweep).
"""
import argparse
import sys

from cupy_gemm import cli_sweep
from cupy_gemm.errors import CupyGemmError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_sweep.add_bench_arguments(parser)
    args = parser.parse_args(argv)
    args.command = "bench"
    try:
        return cli_sweep.run_command(args)
    except CupyGemmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

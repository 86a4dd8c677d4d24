"""The seed-style benchmark: every catalogue variant over the seed tables' shapes (SGEMM's for float32,
HGEMM's for float16 and bfloat16), each row with its time, TFLOPS and % of cuBLAS, grouped by family.

    python bench.py                                  # everything, seed shapes
    python bench.py --dtype float16 --shapes quick   # same options as `cupy-gemm bench`

It is `cupy-gemm bench` with its own argument parser: the same library functions (cupy_gemm.measure for the
measurements, cupy_gemm.present for the seed tables), the same errors and exit codes.
"""
import argparse
import sys

from cupy_gemm import cli_sweep


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_sweep.add_bench_arguments(parser)
    args = parser.parse_args(argv)
    args.command = "bench"
    return cli_sweep.run_command(args)


if __name__ == "__main__":
    sys.exit(main())

"""`cupy-gemm explain MxNxK`: which variant matmul(variant=None), or scaled_mm's for --dtype e4m3 / e5m2, runs
for a shape, and why.

Works without a GPU when --gpu and --cc name one. Plain text; errors go to stderr as `error: ...`, exit 2.
"""
from __future__ import annotations

import sys

from . import dispatch, fp8, scaled, scaled_choice
from .arrange import B_LAYOUTS
from .cli_output import dtype_name
from .errors import CupyGemmError
from .measure.shapes import parse_shape


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("explain", help="which variant the default picks for a shape, and why")
    p.add_argument("shape", help="MxNxK (or one size for a cube)")
    p.add_argument("--dtype", default="float32",
                   help="float32, float16, bfloat16 (or fp32, float, fp16, half, bf16), or tf32 (float32 under "
                        "CUPY_TF32=1); e4m3 or e5m2: scaled_mm's FP8 product with A in that format (see "
                        "--format-b, --scaling, --out-dtype); default float32")
    p.add_argument("--format-b", choices=fp8.FORMATS, default="e4m3", help="FP8: B's format (default e4m3)")
    p.add_argument("--scaling", choices=tuple(scaled_choice.SCALING_IDS), default="tensor",
                   help="FP8: per-tensor scales, per row of A and column of B, or blocks (default tensor)")
    p.add_argument("--out-dtype", choices=scaled.OUT_DTYPES, default="bfloat16",
                   help="FP8: the output type (default bfloat16)")
    p.add_argument("--precision", choices=("fp32", "tf32", "3xtf32"),
                   help="float32 only: as matmul's precision= (3xtf32: fp32-accurate on Hopper tensor cores)")
    p.add_argument("--gpu", help='the GPU\'s name as CUDA reports it, e.g. "NVIDIA H100 80GB HBM3" (with --cc: '
                                 'no GPU needed); default: the current GPU')
    p.add_argument("--cc", type=int, help="its compute capability, e.g. 90 (with --gpu)")
    p.add_argument("--b-layout", choices=B_LAYOUTS, default="row",
                   help="B row-major (x @ W, W stored K×N; the default) or column-major (x @ W.T, W stored N×K "
                        "as linear layers keep it)")


def run(args) -> int:
    try:
        m, n, k = parse_shape(args.shape)
        if (args.gpu is None) != (args.cc is None):
            raise ValueError("--gpu and --cc go together (both name a GPU that need not be present)")
        device = (args.gpu, args.cc) if args.gpu is not None else None
        if args.dtype in fp8.FORMATS:
            if args.precision is not None or args.b_layout != "row":
                raise ValueError("--precision and --b-layout are matmul's; scaled_mm reads B column-major")
            print(scaled_choice.explain(args.dtype, args.format_b, args.scaling, args.out_dtype, m, n, k, device),
                  end="")
            return 0
        print(dispatch.explain(dtype_name(args.dtype), m, n, k, device, args.precision, args.b_layout), end="")
        return 0
    except (CupyGemmError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

"""Grouped GEMM (mixture of experts) on Hopper: cupy_gemm.grouped_matmul against torch._grouped_mm and a
Python loop of cupy.matmul over the groups, in the experts layout, bf16 (or fp16 with --dtype float16).

    python examples/grouped_timing.py                        # 8 and 64 experts, 128..4096 tokens each
    python examples/grouped_timing.py --experts 8 --tokens 512 --kn 4096x4096 --json out.json

Each case: G experts with the same number of tokens (rows of a), K and N as given; offsets an int32
device array. Timing: CUDA events around `--launches` back-to-back calls that rotate over enough operand
sets to overwrite the L2 twice per pass (no call finds its inputs cached), the median of `--rounds`
rounds, contenders interleaved round by round (clocks drift with temperature). The time includes each
call's host work where it exceeds the GPU's (small cases). torch._grouped_mm is called as
_grouped_mm(a, b, offs=offs) with b (G, K, N); where that layout is refused it is retried with b as the
transpose of a (G, N, K) array; where it fails entirely, its column says why.
"""
import argparse
import json

import cupy
import numpy as np

import cupy_gemm
from cupy_gemm.measure import timing

EXPERTS = "8,64"
TOKENS = "128,512,1024,4096"
KN = "4096x4096,7168x2048"


def operand_sets(g, tokens, k, n, dtype, l2_bytes):
    """(a, b_kn, b_nk, offsets, out) sets: enough of them that one pass moves twice the L2."""
    rows = g * tokens
    size = (rows * k + g * k * n + rows * n) * 2
    count = max(1, -(-2 * l2_bytes // size))
    offsets = cupy.asarray(np.arange(1, g + 1, dtype=np.int32) * tokens)
    sets = []
    for i in range(count):
        rng = cupy.random.default_rng(i)
        a = rng.standard_normal((rows, k), dtype=cupy.float32).astype(dtype)
        b_nk = (rng.standard_normal((g, n, k), dtype=cupy.float32) / np.sqrt(k)).astype(dtype)
        b_kn = cupy.ascontiguousarray(b_nk.transpose(0, 2, 1))
        sets.append((a, b_kn, b_nk, offsets, cupy.empty((rows, n), dtype=dtype)))
    return sets


def ours(sets, b_layout):
    def call(s):
        a, b_kn, b_nk, offsets, out = s
        return lambda: cupy_gemm.grouped_matmul(a, b_nk if b_layout == "nk" else b_kn, offsets=offsets, out=out,
                                                b_layout=b_layout)
    return [call(s) for s in sets]


def loop(sets, tokens):
    def call(s):
        a, b_kn, _, _, out = s
        g = b_kn.shape[0]

        def run():
            for i in range(g):
                rows = slice(i * tokens, (i + 1) * tokens)
                cupy.matmul(a[rows], b_kn[i], out=out[rows])
        return run
    return [call(s) for s in sets]


def torch_grouped(sets):
    """Calls of torch._grouped_mm on the same memory, or the reason there are none."""
    try:
        import torch
        fn = torch._grouped_mm
    except (ImportError, AttributeError) as e:
        return None, f"no torch._grouped_mm ({e})"
    wrapped = [tuple(torch.from_dlpack(x) for x in s) for s in sets]
    reasons = []
    for layout in ("kn", "nk"):
        def call(w, layout=layout):
            a, b_kn, b_nk, offsets, _ = w
            b = b_kn if layout == "kn" else b_nk.transpose(-2, -1)
            return lambda: fn(a, b, offs=offsets)
        calls = [call(w) for w in wrapped]
        try:
            calls[0]()
            torch.cuda.synchronize()
            return calls, f"b {layout}"
        except Exception as e:  # noqa: BLE001  (its refusals are RuntimeErrors of many kinds)
            reasons.append(f"b {layout}: {str(e).splitlines()[0][:80]}")
    return None, "; ".join(reasons)


def accurate(sets, tokens):
    """The largest |ours − loop| relative to max |loop| on the first set (a guard, not the GPU tests)."""
    a, b_kn, b_nk, offsets, out = sets[0]
    ref = cupy.empty_like(out)
    loop([(a, b_kn, b_nk, offsets, ref)], tokens)[0]()
    got = cupy_gemm.grouped_matmul(a, b_nk, offsets=offsets, b_layout="nk").astype(cupy.float32)
    ref = ref.astype(cupy.float32)
    return float(cupy.abs(got - ref).max() / cupy.abs(ref).max())


def time_case(g, tokens, k, n, args, l2_bytes):
    sets = operand_sets(g, tokens, k, n, args.dtype, l2_bytes)
    contenders = {"ours_kn": ours(sets, "kn"), "ours_nk": ours(sets, "nk")}
    try:  # CuPy's bf16 matmul needs a cuBLAS that takes it
        loop(sets, tokens)[0]()
        contenders["loop"] = loop(sets, tokens)
    except Exception as e:  # noqa: BLE001
        print(f"cupy.matmul loop left out: {e}")
    torch_calls, torch_note = torch_grouped(sets) if args.dtype == "bfloat16" else (None, "bf16 only")
    if torch_calls is not None:
        contenders["torch"] = torch_calls
    ms = timing.interleaved(contenders, args.rounds, args.launches, warmup=2)
    flops = 2.0 * g * tokens * k * n
    row = {"experts": g, "tokens": tokens, "k": k, "n": n, "dtype": args.dtype, "torch": torch_note,
           "ms": ms, "tflops": {name: flops / t / 1e9 for name, t in ms.items()},
           "max_rel_diff_vs_loop": accurate(sets, tokens) if "loop" in contenders else float("nan")}
    del sets
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def markdown(rows):
    names = ["ours_kn", "ours_nk", "torch", "loop"]
    head = ("| experts | tokens | K | N | " + " | ".join(f"{x} ms" for x in names) + " | "
            + " | ".join(f"{x} TFLOPS" for x in names) + " | torch / ours | loop / ours | max rel diff |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    fmt = lambda d, x, spec: format(d[x], spec) if x in d else "—"
    for r in rows:
        best = min(r["ms"]["ours_kn"], r["ms"]["ours_nk"])
        ratio = lambda x: f"{r['ms'][x] / best:.2f}" if x in r["ms"] else "—"
        lines.append(f"| {r['experts']} | {r['tokens']} | {r['k']} | {r['n']} | "
                     + " | ".join(fmt(r["ms"], x, ".3f") for x in names) + " | "
                     + " | ".join(fmt(r["tflops"], x, ".0f") for x in names)
                     + f" | {ratio('torch')} | {ratio('loop')} | {r['max_rel_diff_vs_loop']:.1e} |")
    notes = sorted({r["torch"] for r in rows})
    return "\n".join(lines + ["", "torch._grouped_mm: " + "; ".join(notes)])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experts", default=EXPERTS, help="comma-separated expert counts")
    parser.add_argument("--tokens", default=TOKENS, help="comma-separated tokens (rows) per expert")
    parser.add_argument("--kn", default=KN, help="comma-separated KxN")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--json", help="write the rows as JSON to this file")
    args = parser.parse_args()
    if args.dtype == "bfloat16":
        import ml_dtypes  # noqa: F401  (NumPy's bfloat16, which CuPy uses)
    l2_bytes = cupy.cuda.Device().attributes["L2CacheSize"]
    rows = []
    for kn in args.kn.split(","):
        k, n = map(int, kn.split("x"))
        for g in map(int, args.experts.split(",")):
            for tokens in map(int, args.tokens.split(",")):
                rows.append(time_case(g, tokens, k, n, args, l2_bytes))
                print(markdown(rows[-1:]).splitlines()[2], flush=True)
    print()
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
